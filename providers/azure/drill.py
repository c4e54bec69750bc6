"""`forewarn drill azure`: ask Azure to evict a Spot VM (or scale-set instance) for real.

It POSTs `simulateEviction` to Azure Resource Manager with a bearer token from azure-identity's
`DefaultAzureCredential` (scope `https://management.azure.com/.default`). Without `--yes` it
only prints the request. azure-identity is imported here, inside `run`, and nowhere else.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from forewarn.protocol.timefmt import duration_arg

from ..drillargs import name_arg

ARM_URL = "https://management.azure.com"
SCOPE = "https://management.azure.com/.default"
DEFAULT_API_VERSION = "2024-07-01"


class TokenCredential(Protocol):
    """What the drill needs of an azure-identity credential."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any: ...


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Each part of the request URL is refused empty (an unset shell variable): it made a
    # request to subscriptions//... or .../virtualMachines//simulateEviction.
    parser.add_argument("--subscription", required=True, type=name_arg, help="subscription id")
    parser.add_argument(
        "--resource-group", required=True, type=name_arg, help="resource group of the VM"
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--vm", type=name_arg, help="name of the Spot VM to evict")
    target.add_argument(
        "--vmss", type=name_arg, help="name of the Spot scale set (with --instance-id)"
    )
    parser.add_argument(
        "--instance-id", type=name_arg, help="scale-set instance id to evict (with --vmss)"
    )
    parser.add_argument(
        "--api-version",
        type=name_arg,
        default=DEFAULT_API_VERSION,
        help=f"Microsoft.Compute api-version (default {DEFAULT_API_VERSION})",
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=30.0,
        metavar="S",
        help="seconds or a duration to wait for Azure's answer (default 30s)",
    )
    parser.add_argument("--yes", action="store_true", help="really send it (default: print only)")


def _timeout(text: str) -> float:
    seconds = duration_arg(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return seconds


def eviction_url(
    subscription: str,
    resource_group: str,
    *,
    vm: str | None = None,
    vmss: str | None = None,
    instance_id: str | None = None,
    api_version: str = DEFAULT_API_VERSION,
) -> str:
    def part(value: str) -> str:
        return quote(value, safe="")

    base = (
        f"{ARM_URL}/subscriptions/{part(subscription)}/resourceGroups/{part(resource_group)}"
        "/providers/Microsoft.Compute"
    )
    if vm is not None:
        path = f"/virtualMachines/{part(vm)}"
    elif vmss is not None and instance_id is not None:
        path = f"/virtualMachineScaleSets/{part(vmss)}/virtualMachines/{part(instance_id)}"
    else:
        raise ValueError("give --vm NAME, or --vmss NAME with --instance-id N")
    return f"{base}{path}/simulateEviction?api-version={quote(api_version, safe='')}"


def _fail(message: str, code: int) -> int:
    print(f"forewarn: drill azure: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace, credential: TokenCredential | None = None) -> int:
    if args.vmss and not args.instance_id:
        return _fail("--vmss needs --instance-id", 2)
    if args.vm and args.instance_id:
        return _fail("--instance-id goes with --vmss, not --vm", 2)
    url = eviction_url(
        args.subscription,
        args.resource_group,
        vm=args.vm,
        vmss=args.vmss,
        instance_id=args.instance_id,
        api_version=args.api_version,
    )
    target = args.vm or f"{args.vmss}_{args.instance_id}"
    print(f"POST {url}")
    print(
        f"  Authorization: Bearer <token from azure-identity DefaultAzureCredential, scope {SCOPE}>"
    )
    print("  (empty body; Azure answers 204 No Content when it accepts)")
    if not args.yes:
        print(f"dry run: nothing sent. Add --yes to evict {target} for real.")
        return 0
    if credential is None:
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            from forewarn.protocol.install import extra_hint

            return _fail(f"needs azure-identity: {extra_hint('azure')}", 2)
        # The chain logs its whole failure (a paragraph per credential source) as a warning
        # before raising it; the one `forewarn:` line below says it instead.
        logging.getLogger("azure.identity").setLevel(logging.ERROR)
        credential = DefaultAzureCredential()
    try:
        token = credential.get_token(SCOPE).token
    except Exception as error:  # azure-identity raises its own hierarchy
        # Its message is the whole credential chain, one paragraph per source: keep the
        # first line, and say how to get credentials.
        first = (str(error).strip().splitlines() or [""])[0]
        return _fail(
            f"no Azure credentials ({type(error).__name__}: {first}); sign in with `az login`, "
            "or set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, or run on a VM "
            "with a managed identity",
            2,
        )
    try:
        with httpx.Client(timeout=args.timeout) as client:
            response = client.post(url, headers={"Authorization": f"Bearer {token}"}, content=b"")
    except httpx.HTTPError as error:
        return _fail(f"request failed: {type(error).__name__}: {error}", 1)
    if response.status_code != 204:
        return _fail(
            f"Azure answered {response.status_code}, expected 204: {response.text[:500]}", 1
        )
    print(f"accepted (204): Azure will evict {target}.")
    print(
        "What the watcher should see next: a Preempt scheduled event naming "
        f"{target} with NotBefore about 30 s ahead (best effort), published by forewarn as "
        "terminate, reason eviction, id azure/<EventId>; then the VM is evicted."
    )
    return 0


__all__ = ["ARM_URL", "DEFAULT_API_VERSION", "SCOPE", "add_arguments", "eviction_url", "run"]
