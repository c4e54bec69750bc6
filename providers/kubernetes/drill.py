"""`forewarn drill kubernetes --node NAME [--yes]`: cordon a real node, as `kubectl cordon` does.

The agent on that node sees `spec.unschedulable` and raises a drain; `--uncordon` undoes it
(a clear). Cordoning stops new pods from being scheduled there and evicts nothing. The patch
needs `patch` on nodes, which the agent's own service account deliberately lacks: run the
drill with an operator's kubeconfig.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from .api import cordon_request, error_for
from .config import ConfigError, resolve
from .settings import Settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node", default=None, help="node to cordon (default $NODE_NAME)", metavar="NAME"
    )
    parser.add_argument(
        "--uncordon", action="store_true", help="undo a cordon (the watcher sends a clear)"
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="kubeconfig (JSON, or YAML with PyYAML); default $FOREWARN_KUBERNETES_KUBECONFIG, "
        "else $KUBECONFIG, else the in-cluster service account",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument(
        "--url", default=None, help="API server URL (default from the kubeconfig or in-cluster)"
    )
    parser.add_argument("--yes", action="store_true", help="really send the patch")


def _settings(args: argparse.Namespace) -> Settings:
    env = os.environ
    kubeconfig = args.kubeconfig or env.get("FOREWARN_KUBERNETES_KUBECONFIG") or None
    if kubeconfig is None and env.get("KUBECONFIG"):
        kubeconfig = env["KUBECONFIG"].split(os.pathsep)[0]
    fields: dict[str, object] = {
        "url": args.url or env.get("FOREWARN_KUBERNETES_URL") or None,
        "kubeconfig": Path(kubeconfig) if kubeconfig else None,
        "context": args.context or env.get("FOREWARN_KUBERNETES_CONTEXT") or None,
    }
    if env.get("FOREWARN_KUBERNETES_TOKEN_FILE"):
        fields["token_file"] = Path(env["FOREWARN_KUBERNETES_TOKEN_FILE"])
    return Settings.model_validate(fields)


def run(args: argparse.Namespace) -> int:
    import httpx

    node = args.node or os.environ.get("NODE_NAME") or ""
    if not node:
        print("forewarn: drill kubernetes: --node: name the node to cordon (or set NODE_NAME)")
        return 2
    try:
        cluster = resolve(_settings(args))
    except ConfigError as error:
        print(f"forewarn: drill kubernetes: {error}")
        return 2
    unschedulable = not args.uncordon
    req = cordon_request(cluster, node, unschedulable)
    verb = "cordon" if unschedulable else "uncordon"
    print(f"{'Will' if args.yes else 'Would'} {verb} node {node} through {cluster.source}:")
    print(f"  {req['method']} {req['url']}")
    print(f"  Content-Type: {req['headers']['Content-Type']}")
    print(f"  {json.dumps(req['body'])}")
    print(f"  (the same as `kubectl {verb} {node}`)")
    if unschedulable:
        print("  The agent on that node then sends a drain (kubernetes/<node>/cordon);")
        print("  nothing is evicted. Undo with --uncordon --yes.")
    if not args.yes:
        print("Nothing sent: add --yes to do it.")
        return 0
    try:
        token = cluster.token()
    except ConfigError as error:
        print(f"forewarn: drill kubernetes: {error}")
        return 2
    headers = dict(req["headers"])
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with httpx.Client(verify=cluster.verify, trust_env=False, timeout=10.0) as client:
            response = client.request(
                req["method"], req["url"], headers=headers, content=json.dumps(req["body"])
            )
    except httpx.HTTPError as error:
        print(f"forewarn: drill kubernetes: {type(error).__name__}: {error}")
        return 1
    if response.status_code != 200:
        problem = error_for(response.status_code, response.content, "patch", cluster.source)
        if response.status_code == 403:
            print(
                f"forewarn: drill kubernetes: 403: this identity may not patch nodes (the agent's "
                f"own service account should not); use an operator kubeconfig. {problem}"
            )
        else:
            print(f"forewarn: drill kubernetes: {problem}")
        return 1
    body = response.json()
    now = bool(body.get("spec", {}).get("unschedulable"))
    print(f"done: node {node} spec.unschedulable={str(now).lower()}")
    return 0


__all__ = ["add_arguments", "run"]
