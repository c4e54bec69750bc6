"""`forewarn drill kubernetes --node NAME [--yes]`: cordon a real node, as `kubectl cordon` does.

The agent on that node sees `spec.unschedulable` and raises a drain; `--uncordon` undoes it
(a clear). Cordoning stops new pods from being scheduled there and evicts nothing. The patch
needs `patch` on nodes, which the agent's own service account deliberately lacks: run the
drill with an operator's kubeconfig. The request goes through the official Kubernetes client
library (`forewarn[k8s]`), so kubeconfigs work as they do for kubectl, exec credential
plugins (EKS, GKE, AKS) included.
"""

from __future__ import annotations

import argparse
import json
import os
import string
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from forewarn.protocol.errors import ConfigError, DrillError, UsageError

from ..drillargs import check_url

if TYPE_CHECKING:
    from kubernetes.client import Configuration

# What `kubectl cordon` sends; the client library would otherwise pick a JSON patch.
PATCH_TYPE = "application/strategic-merge-patch+json"
REQUEST_TIMEOUT = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node",
        default=None,
        help="node to cordon (default $FOREWARN_KUBERNETES_NODE_NAME, else $NODE_NAME)",
        metavar="NAME",
    )
    parser.add_argument(
        "--uncordon", action="store_true", help="undo a cordon (the watcher sends a clear)"
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="kubeconfig; default $FOREWARN_KUBERNETES_KUBECONFIG, else $KUBECONFIG, else "
        "~/.kube/config, else the in-cluster service account",
    )
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument(
        "--url", default=None, help="API server URL (default from the kubeconfig or in-cluster)"
    )
    parser.add_argument("--yes", action="store_true", help="really send the patch")


def _no_credentials() -> UsageError:
    return UsageError(
        "drill kubernetes: no credentials: --kubeconfig not given, $KUBECONFIG unset, "
        "~/.kube/config absent and not in a pod (KUBERNETES_SERVICE_HOST unset); pass "
        "--kubeconfig FILE (and --context NAME), or --url URL for an API server that needs "
        "no kubeconfig"
    )


def _given(value: str | None) -> str | None:
    """A flag's or a variable's text without the space around it, None when blank: as the
    agent reads the same setting (`NODE_NAME` from a ConfigMap block ends with a newline, and
    the drill patched `nodes/drill-node%0A`, which does not exist)."""
    text = (value or "").strip(string.whitespace)
    return text or None


def credentials(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Configuration, str]:
    """The client configuration and where it came from, in kubectl's order: --kubeconfig,
    $FOREWARN_KUBERNETES_KUBECONFIG, $KUBECONFIG, ~/.kube/config, then the pod's service
    account; --url overrides the server."""
    # Here, not at the module's top: the client's helpers bring the settings model
    # (pydantic), httpx and ctypes, which `forewarn drill kubernetes --help` never uses.
    from . import kubeconfig
    from .config import in_cluster
    from .kubeconfig import install_hint
    from .settings import Settings

    try:
        from kubernetes.client import Configuration
    except ImportError:
        raise UsageError(f"drill kubernetes: {install_hint()}") from None
    url = _given(args.url) or _given(env.get("FOREWARN_KUBERNETES_URL"))
    if url is not None:
        # `--url ftp://x` (or `--url host:6443`) ended in "unexpected ValidationError" and
        # pydantic's dump, exit 1; with a kubeconfig it was taken as the server unchecked.
        try:
            url = check_url(url, ("http", "https"), bare_host=False)
        except ValueError as error:
            flag = "--url" if args.url else "FOREWARN_KUBERNETES_URL"
            raise UsageError(f"drill kubernetes: {flag}: {error}") from None
    context = _given(args.context) or _given(env.get("FOREWARN_KUBERNETES_CONTEXT"))
    explicit = args.kubeconfig or _given(env.get("FOREWARN_KUBERNETES_KUBECONFIG"))
    paths = str(explicit) if explicit else kubeconfig.default_paths(env)
    if paths is not None:
        try:
            configuration, name = kubeconfig.load(paths, context)
        except ConfigError as error:
            raise UsageError(f"drill kubernetes: {error}") from None
        source = f"kubeconfig {paths} (context {name})"
    elif url is not None or env.get("KUBERNETES_SERVICE_HOST", "").strip():
        fields: dict[str, object] = {"url": url}
        for key in ("token_file", "ca_file"):
            value = env.get(f"FOREWARN_KUBERNETES_{key.upper()}")
            if value:
                fields[key] = Path(value)
        settings = Settings.model_validate(fields)
        try:
            cluster = in_cluster(
                settings, env, url_from="--url" if _given(args.url) else "FOREWARN_KUBERNETES_URL"
            )
            token = cluster.token()
        except ConfigError as error:
            raise UsageError(f"drill kubernetes: {error}") from None
        configuration = Configuration()
        configuration.host = cluster.server
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"
        if settings.ca_file.is_file():
            configuration.ssl_ca_cert = str(settings.ca_file)
        source = cluster.source
    else:
        raise _no_credentials()
    if url is not None:
        configuration.host = url.rstrip("/")
        _keep_host(configuration)
        if paths is not None:
            # The server is the URL, the credentials the kubeconfig's (as the agent says it).
            flag = "--url" if _given(args.url) else "FOREWARN_KUBERNETES_URL"
            source = (
                f"{flag} {configuration.host} (credentials from kubeconfig {paths}, context {name})"
            )
    return configuration, source


def _keep_host(configuration: Configuration) -> None:
    """Keep `configuration.host` through the kubeconfig's credential refresh: the client
    library's hook (a token user's, an exec plugin's) sets the kubeconfig's own server again
    before each request, and `--url` over a kubeconfig printed the URL and patched the
    kubeconfig's cluster (a node of another cluster cordoned, or its server unreachable)."""
    hook = configuration.refresh_api_key_hook
    if hook is None:
        return
    host = configuration.host

    def refresh(client_configuration: Configuration) -> None:
        hook(client_configuration)
        client_configuration.host = host

    configuration.refresh_api_key_hook = refresh


def _patch(configuration: Configuration, source: str, node: str, unschedulable: bool) -> bool:
    """PATCH the node through the client library; its spec.unschedulable afterwards."""
    from kubernetes.client import ApiClient, CoreV1Api
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from .api import error_for, status_message

    body = {"spec": {"unschedulable": unschedulable}}
    try:
        with ApiClient(configuration) as client:
            patched = CoreV1Api(client).patch_node(
                node, body, _content_type=PATCH_TYPE, _request_timeout=REQUEST_TIMEOUT
            )
    except ApiException as error:
        status = int(error.status or 0)
        answer = str(error.body or "").encode()
        if status == 401:
            raise DrillError(
                f"drill kubernetes: 401 {status_message(answer)}: the API server refused the "
                f"credentials of {source}"
            ) from None
        problem = error_for(status, answer, "patch", source)
        if status == 403:
            raise DrillError(
                "drill kubernetes: 403: this identity may not patch nodes (the agent's own "
                f"service account should not); use an operator kubeconfig. {problem}"
            ) from None
        raise DrillError(f"drill kubernetes: {problem}") from None
    except HTTPError as error:
        raise DrillError(
            f"drill kubernetes: cannot reach {configuration.host}: {type(error).__name__}: {error}"
        ) from None
    return bool(patched.spec and patched.spec.unschedulable)


def run(args: argparse.Namespace) -> int:
    # The agent's node, as it reads it (config.node_name): kubernetes.node_name before NODE_NAME
    # (with both set, the drill cordoned NODE_NAME's node, which the agent does not watch), in
    # lower case (a Node's name is a DNS subdomain: `--node $(hostname)` printing `GPU-1`
    # patched a node that cannot exist).
    node = (
        _given(args.node)
        or _given(os.environ.get("FOREWARN_KUBERNETES_NODE_NAME"))
        or _given(os.environ.get("NODE_NAME"))
        or ""
    ).lower()
    if not node:
        raise UsageError(
            "drill kubernetes: --node: name the node to cordon (or set NODE_NAME or "
            "FOREWARN_KUBERNETES_NODE_NAME)"
        )
    configuration, source = credentials(args, os.environ)
    unschedulable = not args.uncordon
    body = {"spec": {"unschedulable": unschedulable}}
    verb = "cordon" if unschedulable else "uncordon"
    print(f"{'Will' if args.yes else 'Would'} {verb} node {node} through {source}:")
    print(f"  PATCH {configuration.host}/api/v1/nodes/{quote(node, safe='')}")
    print(f"  Content-Type: {PATCH_TYPE}")
    print(f"  {json.dumps(body)}")
    print(f"  (the same as `kubectl {verb} {node}`)")
    if unschedulable:
        print("  The agent on that node then sends a drain (kubernetes/<node>/cordon);")
        print("  nothing is evicted. Undo with --uncordon --yes.")
    if not args.yes:
        print("Nothing sent: add --yes to do it.")
        return 0
    now = _patch(configuration, source, node, unschedulable)
    print(f"done: node {node} spec.unschedulable={str(now).lower()}")
    return 0


__all__ = ["add_arguments", "credentials", "run"]
