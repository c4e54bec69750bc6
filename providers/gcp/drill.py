"""`forewarn drill gcp`: ask Compute Engine to simulate a host maintenance event on a VM.

`instances.simulateMaintenanceEvent` makes the real metadata server go through its notice
path: a live-migratable VM's `maintenance-event` goes MIGRATE_ON_HOST_MAINTENANCE → NONE;
a Spot or GPU VM is stopped or preempted according to its scheduling policy. The drill
prints the request and sends it only with `--yes`, then follows the zonal operation until
it is DONE, printing each status change. google-auth is imported here and nowhere else.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx
from forewarn.protocol.errors import DrillError, UsageError
from forewarn.protocol.timefmt import duration_arg, format_time, utcnow

from ..drillargs import check_url, name_arg

COMPUTE_API = "https://compute.googleapis.com"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--project", required=True, type=name_arg, help="project id of the VM")
    parser.add_argument(
        "--zone", required=True, type=name_arg, help="zone of the VM, e.g. us-central1-a"
    )
    parser.add_argument("--instance", required=True, type=name_arg, help="name of the VM")
    parser.add_argument("--yes", action="store_true", help="send the request (else only print it)")
    parser.add_argument(
        "--with-extended-notifications",
        action="store_true",
        help="pass withExtendedNotifications=true (extended maintenance notifications)",
    )
    parser.add_argument(
        "--poll-interval",
        type=_above_zero,
        default=2.0,
        metavar="S",
        help="seconds between reads of the operation (default 2s)",
    )
    parser.add_argument(
        "--timeout",
        type=_above_zero,
        default=600.0,
        metavar="S",
        help="give up following the operation after this long (default 10m)",
    )
    parser.add_argument(
        "--api",
        type=_api_root,
        default=COMPUTE_API,
        help=f"Compute Engine API root (default {COMPUTE_API})",
    )


# Checked before any credential is fetched: `--project "$PROJECT"` with the variable unset
# printed a request to projects//zones/..., and `--api ftp://x` failed only after --yes had
# fetched a token, with httpx's UnsupportedProtocol (exit 1).
def _api_root(text: str) -> str:
    try:
        return check_url(text, ("http", "https"), bare_host=False)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _above_zero(text: str) -> float:
    """A duration of more than 0 seconds (0 would read the operation in a tight loop)."""
    seconds = duration_arg(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return seconds


def instance_path(project: str, zone: str, instance: str) -> str:
    return "/compute/v1/projects/{}/zones/{}/instances/{}".format(
        *(quote(part, safe="") for part in (project, zone, instance))
    )


def operation_path(project: str, zone: str, operation: str) -> str:
    return "/compute/v1/projects/{}/zones/{}/operations/{}".format(
        *(quote(part, safe="") for part in (project, zone, operation))
    )


def request_url(args: argparse.Namespace) -> str:
    root = args.api.rstrip("/")
    return f"{root}{instance_path(args.project, args.zone, args.instance)}/simulateMaintenanceEvent"


def request_params(args: argparse.Namespace, request_id: str) -> dict[str, str]:
    params = {"requestId": request_id}
    if args.with_extended_notifications:
        params["withExtendedNotifications"] = "true"
    return params


def access_token() -> tuple[str, str]:
    """An OAuth token with the cloud-platform scope from Application Default Credentials,
    and a description of those credentials (never the token) to print."""
    try:
        import google.auth
        import google.auth.exceptions
        import google.auth.transport.requests
    except ImportError:
        from forewarn.protocol.install import extra_hint

        # Bad input, exit 2, as the other clouds' drills say a missing library or credentials.
        raise UsageError(f"google-auth is missing: {extra_hint('gcp')}") from None
    try:
        credentials, _ = google.auth.default(scopes=[SCOPE])
        credentials.refresh(google.auth.transport.requests.Request())
    except google.auth.exceptions.DefaultCredentialsError as error:
        raise UsageError(f"no usable Google credentials: {error}") from None
    except google.auth.exceptions.GoogleAuthError as error:
        # Credentials found but refused or not refreshed (a revoked key, no network): exit 1.
        raise DrillError(f"no usable Google credentials: {error}") from None
    token = getattr(credentials, "token", None)
    if not token:
        raise DrillError("Google credentials gave no access token")
    who = getattr(credentials, "service_account_email", None)
    described = type(credentials).__name__ + (f" ({who})" if isinstance(who, str) else "")
    return str(token), described


def _say(message: str) -> None:
    print(f"{format_time(utcnow())} {message}", flush=True)


def _api_error(response: httpx.Response) -> str:
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.text[:300]
    return f"HTTP {response.status_code}: {message}"


def follow(client: httpx.Client, args: argparse.Namespace, operation: dict[str, Any]) -> int:
    """Read the zonal operation until DONE, printing each status change."""
    name = operation.get("name")
    if not isinstance(name, str) or not name:
        raise DrillError(f"the answer names no operation: {operation!r}")
    url = args.api.rstrip("/") + operation_path(args.project, args.zone, name)
    deadline = time.monotonic() + args.timeout
    last_status = None
    while True:
        status = operation.get("status")
        if status != last_status:
            progress = operation.get("progress")
            shown = f" ({progress}%)" if progress is not None else ""
            _say(f"operation {name}: {status}{shown}")
            last_status = status
        if status == "DONE":
            error = operation.get("error") or {}
            errors = error.get("errors") if isinstance(error, dict) else None
            if not isinstance(errors, list):
                if error:
                    raise DrillError(f"operation {name} failed: {str(error)[:300]}")
                errors = []
            for item in errors:
                if isinstance(item, dict):
                    _say(f"error {item.get('code')}: {item.get('message')}")
                else:
                    _say(f"error: {str(item)[:300]}")
            return 1 if errors else 0
        if time.monotonic() >= deadline:
            raise DrillError(f"operation {name} not DONE after {args.timeout:g}s")
        time.sleep(args.poll_interval)
        response = client.get(url)
        if response.status_code != 200:
            raise DrillError(f"reading operation {name}: {_api_error(response)}")
        operation = _operation(response)


def _operation(response: httpx.Response) -> dict[str, Any]:
    """The Operation object an answer holds; DrillError for JSON of another shape (ValueError
    for an answer that is not JSON)."""
    payload = response.json()
    if not isinstance(payload, dict):
        raise DrillError(
            "unreadable answer from the Compute Engine API: expected an Operation object, "
            f"got {str(payload)[:200]!r}"
        )
    return payload


def run(args: argparse.Namespace) -> int:
    url = request_url(args)
    request_id = str(uuid.uuid4())
    params = request_params(args, request_id)
    query = "&".join(f"{key}={value}" for key, value in params.items())
    print(f"POST {url}?{query}")
    print(f"  instance {args.instance} in project {args.project}, zone {args.zone}")
    print(
        "  effect: a live-migratable VM migrates (maintenance-event MIGRATE_ON_HOST_MAINTENANCE"
        " then NONE); a Spot or GPU VM is stopped or preempted per its scheduling policy"
    )
    if not args.yes:
        print("nothing sent: add --yes to send it")
        return 0
    try:
        token, credentials = access_token()
        _say(f"credentials: {credentials}")
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30.0) as client:
            response = client.post(url, params=params)
            if response.status_code != 200:
                raise DrillError(f"simulateMaintenanceEvent refused: {_api_error(response)}")
            _say("simulateMaintenanceEvent accepted")
            return follow(client, args, _operation(response))
    except UsageError as error:  # before ValueError, which it is
        print(f"forewarn: drill gcp: {error}", file=sys.stderr)
        return 2
    except DrillError as error:
        print(f"forewarn: drill gcp: {error}", file=sys.stderr)
        return 1
    except httpx.HTTPError as error:
        print(f"forewarn: drill gcp: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except ValueError as error:  # an answer that is not JSON
        print(
            f"forewarn: drill gcp: unreadable answer from the Compute Engine API: {error}",
            file=sys.stderr,
        )
        return 1


__all__ = ["COMPUTE_API", "SCOPE", "add_arguments", "request_url", "run"]
