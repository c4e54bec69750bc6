"""A faithful Azure IMDS Scheduled Events simulator on loopback (`forewarn simulate azure`).

What it copies from the real service: `GET`/`POST /metadata/scheduledevents` with the
`Metadata: true` header and a supported `api-version` (400 otherwise, also for an
`X-Forwarded-For` header or a repeated query parameter), events with the fields of the
api-version asked (an older one lacks Description, EventSource, DurationInSeconds), 429 above
five requests a second
(counted as they arrive, before a fault holds them),
`DocumentIncarnation` bumped on every change, Scheduled → Started on approval (or
`approval_start_after` seconds later, as Azure may wait for other tenants) or at NotBefore
(NotBefore then becomes ""), removal some seconds after Started, events that name several
Resources, and `/metadata/instance[/compute]` for the VM's name. The first call can be made
slow, as it is on a VM that has not used Scheduled Events for a day.

Control API (shared by every simulator): `POST /_sim/notices {"kind": "Preempt", ...}` with
kinds Preempt, Terminate, Reboot, Redeploy, Freeze and fields `resources` (a list, or one
text of names split by ";" as `--notice` writes it),
`not_before_seconds`, `status`, `event_id`, `description`, `event_source`,
`duration_seconds`; `PATCH`/`DELETE /_sim/notices/<EventId>`; `GET /_sim/state` (events,
approvals received, 429s). Faults are the shared vocabulary (`POST /_sim/faults`), with IMDS's
JSON error bodies; e.g. `{"kind": "status", "status": 500, "path":
"/metadata/scheduledevents", "count": 1}` fails the next Scheduled Events request.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from http import HTTPStatus
from typing import Any

from forewarn.protocol.timefmt import duration_arg
from forewarn.protocol.wholenumber import whole_number

from ..sim_cli import Scripted, SimulatorCommand
from ..simulator import (
    MAX_AFTER,
    SimError,
    SimRequest,
    SimResponse,
    Simulator,
    as_seconds,
    seconds_field,
    written_seconds,
)
from .events import EVENT_TYPES, format_not_before

EVENTS_PATH = "/metadata/scheduledevents"
# Microsoft's table of Scheduled Events versions, 2017-03-01 (its preview, still listed)
# included: refused, a client written against it was told its request was wrong.
EVENTS_API_VERSIONS = (
    "2017-03-01",
    "2017-08-01",
    "2017-11-01",
    "2019-01-01",
    "2019-04-01",
    "2019-08-01",
    "2020-07-01",
)
# Fields an event gained in a later api-version (Microsoft's versions table): a client that
# asks for an older version is answered without them, as it is on Azure.
FIELDS_SINCE = {
    "Description": "2019-04-01",
    "EventSource": "2019-08-01",
    "DurationInSeconds": "2020-07-01",
}
INSTANCE_API_VERSIONS = (
    "2017-04-02", "2017-08-01", "2017-12-01", "2018-02-01", "2018-04-02", "2018-10-01",
    "2019-02-01", "2019-03-11", "2019-04-30", "2019-06-01", "2019-06-04", "2019-08-01",
    "2019-08-15", "2019-11-01", "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01",
    "2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01", "2021-05-01", "2021-08-01",
    "2021-10-01", "2021-11-01", "2021-11-15", "2021-12-13", "2023-07-01", "2023-11-15",
    "2024-03-15", "2024-07-17", "2025-04-07",
)  # fmt: skip
# Minimum notice per event type (Microsoft's table), the default lead of a raised event.
MIN_NOTICE = {
    "Freeze": 900.0,
    "Reboot": 900.0,
    "Redeploy": 600.0,
    "Preempt": 30.0,
    "Terminate": 300.0,
}
DESCRIPTIONS = {
    "Freeze": "Virtual machine is being paused because of a memory-preserving Live Migration "
    "operation.",
    "Reboot": "Virtual machine is going to be restarted as requested by authorized user.",
    "Redeploy": "Host server is undergoing maintenance.",
    "Preempt": "Virtual machine is being evicted.",
    "Terminate": "Virtual machine is being deleted.",
}
DURATIONS = {"Freeze": 5, "Reboot": -1, "Redeploy": -1, "Preempt": -1, "Terminate": -1}
FIELDS = (
    "resources",
    "not_before_seconds",
    "status",
    "event_id",
    "description",
    "event_source",
    "duration_seconds",
)
CHANGEABLE = ("resources", "not_before_seconds", "status", "description", "duration_seconds")
DEFAULT_VM_NAME = "forewarn-vm"
# "rfc1123" as IMDS sends NotBefore; "iso8601" as Microsoft's mock server does.
NOT_BEFORE_FORMATS = ("rfc1123", "iso8601")


class AzureSimulator(Simulator):
    name = "azure"
    notice_kinds = EVENT_TYPES
    # Microsoft's documented limit: five requests a second (the simulator always applies it,
    # see `rate_limit`; the `throttle` fault lets the same through by default).
    throttle_rate = 5.0

    def __init__(
        self,
        vm_name: str | None = None,
        vmss_name: str | None = None,
        instance_id: str | None = None,
        removal_after: float = 5.0,
        rate_limit: int = 5,
        first_call_delay: float = 0.0,
        not_before_format: str = "rfc1123",
        approval_start_after: float = 0.0,
    ) -> None:
        super().__init__()
        if not_before_format not in NOT_BEFORE_FORMATS:
            raise SimError(
                f"not_before_format must be one of {', '.join(NOT_BEFORE_FORMATS)}, "
                f"got {not_before_format!r}"
            )
        self.not_before_format = not_before_format
        for flag, value in (
            ("--vm-name", vm_name),
            ("--vmss-name", vmss_name),
            ("--instance-id", instance_id),
        ):
            if value is not None and not value.strip():
                # An unset shell variable: a VM named " " (or, for the scale set, a plain
                # VM) that no agent configured the same way could ever match.
                raise SimError(f"{flag} is empty: give a name, or leave the flag out")
        if (vmss_name is None) != (instance_id is None):
            raise SimError(
                "a scale-set instance needs both vmss_name and instance_id "
                "(--vmss-name and --instance-id)"
            )
        self.vmss_name = vmss_name
        self.instance_id = instance_id
        if vm_name is None:
            vm_name = f"{vmss_name}_{instance_id}" if vmss_name else DEFAULT_VM_NAME
        self.vm_name = vm_name
        for flag, delay in (
            ("--removal-after", removal_after),
            ("--approval-start-after", approval_start_after),
        ):
            # Beyond it, threading.Timer's thread died with OverflowError: the event was
            # never removed, or an approved one never started.
            if not 0 <= delay <= MAX_AFTER:
                raise SimError(
                    f"{flag} must be from 0 up to {written_seconds(MAX_AFTER)}, got {delay!r} s"
                )
        self.removal_after = removal_after
        # Seconds an approved event stays Scheduled: approval lets Azure start it early, but
        # it may still wait for other tenants, listed as Scheduled until it starts.
        self.approval_start_after = approval_start_after
        self.rate_limit = rate_limit
        self.first_call_delay = first_call_delay
        self.incarnation = 1
        self.events: dict[str, dict[str, Any]] = {}
        self.approvals: list[dict[str, Any]] = []
        self.rate_limited = 0
        self._first_call_served = False
        self._recent: deque[float] = deque()

    # The real endpoint.

    def handle(self, request: SimRequest) -> SimResponse:
        if request.path == EVENTS_PATH:
            if not _version_ok(request, EVENTS_API_VERSIONS):
                return _bad_version(EVENTS_API_VERSIONS)
            if request.method == "GET":
                return self._get_events(request.param("api-version") or EVENTS_API_VERSIONS[-1])
            if request.method == "POST":
                return self._post_events(request.body)
            return _bad_request("method not allowed", 405)
        if request.path in ("/metadata/instance", "/metadata/instance/compute"):
            if request.method != "GET":
                return _bad_request("method not allowed", 405)
            if not _version_ok(request, INSTANCE_API_VERSIONS):
                return _bad_version(INSTANCE_API_VERSIONS)
            instance = self.instance()
            body = instance if request.path == "/metadata/instance" else instance["compute"]
            return SimResponse.json(body)
        if request.path == "/metadata/versions":
            return SimResponse.json({"apiVersions": list(INSTANCE_API_VERSIONS)})
        return SimResponse.json({"error": "Not found"}, 404)

    def admit(self, request: SimRequest) -> SimResponse | None:
        """IMDS's refusals as a request arrives: a bad header or query (400), or the sixth
        request within a second (429), counted as it comes, not when a fault lets it go."""
        if request.header("X-Forwarded-For") is not None:
            return _bad_request("Bad request. X-Forwarded-For header is not allowed")
        if (request.header("Metadata") or "").lower() != "true":
            return _bad_request("Bad request. Required metadata header not specified")
        if any(len(values) > 1 for values in request.query.values()):
            return _bad_request("Bad request. Query parameters must not be repeated")
        now = time.monotonic()
        with self.lock:
            while self._recent and now - self._recent[0] >= 1.0:
                self._recent.popleft()
            if len(self._recent) >= self.rate_limit:
                self.rate_limited += 1
                return SimResponse(429, "Too many requests", "text/plain")
            self._recent.append(now)
        return None

    def _get_events(self, version: str) -> SimResponse:
        with self.lock:
            first = not self._first_call_served
            self._first_call_served = True
        if first and self.first_call_delay > 0:
            time.sleep(self.first_call_delay)
        document = self.document()
        for event in document["Events"]:
            for key, since in FIELDS_SINCE.items():
                if version < since:  # ISO dates: their order is the text's
                    event.pop(key, None)
        return SimResponse.json(document)

    def _post_events(self, body: bytes) -> SimResponse:
        arrived = time.monotonic()
        try:
            payload = json.loads(body or b"null")
            requests = payload["StartRequests"]
            ids = [item["EventId"] for item in requests]
            if not requests or not all(isinstance(i, str) for i in ids):
                raise TypeError
        # RecursionError: JSON nested past json's recursion was a 500 and a traceback.
        except (ValueError, KeyError, TypeError, RecursionError):
            return _bad_request('Bad request. Expected {"StartRequests": [{"EventId": ...}]}')
        with self.lock:
            unknown = [event_id for event_id in ids if event_id not in self.events]
            if unknown:
                return _bad_request(f"Bad request. Unknown EventId {', '.join(unknown)}")
            for event_id in ids:
                self.approvals.append(
                    {"EventId": event_id, "at": time.time(), "monotonic": arrived}
                )
        for event_id in ids:
            if self.approval_start_after > 0:
                self._later(self.approval_start_after, functools.partial(self._start, event_id))
            else:
                self._start(event_id)
        return SimResponse(200, "", "application/json")

    def document(self) -> dict[str, Any]:
        with self.lock:
            return {
                "DocumentIncarnation": self.incarnation,
                "Events": [dict(event) for event in self.events.values()],
            }

    def instance(self) -> dict[str, Any]:
        base = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/forewarn-sim"
        if self.vmss_name:
            resource_id = (
                f"{base}/providers/Microsoft.Compute/virtualMachineScaleSets/"
                f"{self.vmss_name}/virtualMachines/{self.instance_id}"
            )
        else:
            resource_id = f"{base}/providers/Microsoft.Compute/virtualMachines/{self.vm_name}"
        compute = {
            "azEnvironment": "AzurePublicCloud",
            "location": "westeurope",
            "name": self.vm_name,
            "osType": "Linux",
            "priority": "Spot",
            "resourceGroupName": "forewarn-sim",
            "resourceId": resource_id,
            "subscriptionId": "00000000-0000-0000-0000-000000000000",
            "vmId": "02aab8a4-74ef-476e-8182-f6d2ba4166a6",
            "vmScaleSetName": self.vmss_name or "",
            "vmSize": "Standard_NC24ads_A100_v4",
            "zone": "",
        }
        return {"compute": compute, "network": {"interface": []}}

    # Event lifecycle.

    def _bump(self) -> None:
        self.incarnation += 1
        self.notify_change()

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        self.later(delay, action)

    def _start(self, event_id: str) -> None:
        """Scheduled → Started (on approval or at NotBefore), then removal later."""
        with self.lock:
            event = self.events.get(event_id)
            if event is None or event["EventStatus"] != "Scheduled":
                return
            event["EventStatus"] = "Started"
            event["NotBefore"] = ""
            self._bump()
        self._later(self.removal_after, lambda: self._remove(event_id))

    def _remove(self, event_id: str) -> None:
        with self.lock:
            if self.events.pop(event_id, None) is not None:
                self._bump()

    # Control API hooks.

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        event_type = _event_type(kind)
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise SimError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS)}")
        event_id = fields.get("event_id") or str(uuid.uuid4()).upper()
        if not isinstance(event_id, str):
            raise SimError('"event_id" must be a string')
        source = fields.get("event_source", "Platform")
        if source not in ("Platform", "User"):
            raise SimError('"event_source" must be "Platform" or "User"')
        with self.lock:
            if event_id in self.events:
                raise SimError(f"an event {event_id!r} exists already", 409)
            event: dict[str, Any] = {
                "EventId": event_id,
                "EventStatus": "Scheduled",
                "EventType": event_type,
                "ResourceType": "VirtualMachine",
                "Resources": [self.vm_name],
                "NotBefore": "",
                "Description": DESCRIPTIONS[event_type],
                "EventSource": source,
                "DurationInSeconds": DURATIONS[event_type],
            }
            lead = self._apply(event, {"not_before_seconds": MIN_NOTICE[event_type], **fields})
            self.events[event_id] = event
            self._bump()
        self._schedule_start(event_id, event, lead)
        return event_id

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        unknown = sorted(set(fields) - set(CHANGEABLE))
        if unknown:
            raise SimError(
                f"cannot change {', '.join(unknown)}; changeable: {', '.join(CHANGEABLE)}"
            )
        with self.lock:
            event = self.events.get(notice_id)
            if event is None:
                raise SimError(f"no event {notice_id!r}", 404)
            rescheduled = "not_before_seconds" in fields or fields.get("status") == "Scheduled"
            if event["EventStatus"] == "Started" and rescheduled:
                # Azure never schedules a Started event again: it only removes it.
                raise SimError(
                    f"event {notice_id} has Started: it cannot be Scheduled again or get a "
                    "NotBefore (withdraw it and raise a new one)",
                    409,
                )
            # On a copy: a field refused after others were applied leaves the event as it was.
            changed = dict(event)
            lead = self._apply(changed, fields)
            event.update(changed)
            self._bump()
        self._schedule_start(notice_id, event, lead)

    def _apply(self, event: dict[str, Any], fields: dict[str, Any]) -> float | None:
        """Copy control-API fields onto an event; returns the new NotBefore lead, if any."""
        if "resources" in fields:
            resources = fields["resources"]
            if isinstance(resources, str):
                # What `--notice KIND,resources=a;b` can write: its `,` ends the field, and an
                # Azure VM name never holds a `;` (letters, digits, `-`, `_`, `.`).
                written, resources = resources, [n.strip() for n in resources.split(";")]
                if not all(resources):
                    # `resources=` or `a;;b`: an unset shell variable, not a VM of no name.
                    raise SimError(f'"resources" names an empty VM name: {written!r}')
            if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
                raise SimError(
                    '"resources" must be a list of VM names (or one text of names split by ";")'
                )
            event["Resources"] = list(resources)
        if "description" in fields:
            event["Description"] = str(fields["description"])
        if "duration_seconds" in fields:
            written = fields["duration_seconds"]
            duration = as_seconds(written)
            if isinstance(duration, float) and duration.is_integer():
                duration = int(duration)  # `1m` is 60.0
            if isinstance(duration, bool) or not isinstance(duration, int) or duration < -1:
                raise SimError(
                    "duration_seconds: expected a duration (90s, 15m, 2h) or a whole number "
                    f"of seconds, from 0 up, or -1 for unknown; got {written!r}"
                )
            event["DurationInSeconds"] = duration
        status = fields.get("status", event["EventStatus"])
        if status not in ("Scheduled", "Started"):
            raise SimError('"status" must be "Scheduled" or "Started"')
        lead: float | None = None
        if status == "Started":
            event["EventStatus"] = "Started"
            event["NotBefore"] = ""
        elif "not_before_seconds" in fields:
            # Larger (or Infinity, NaN) overflowed the NotBefore date or the start timer.
            lead = seconds_field(fields["not_before_seconds"], "not_before_seconds", MAX_AFTER)
            event["EventStatus"] = "Scheduled"
            moment = _utc_after(self.now(), lead)
            event["NotBefore"] = (
                format_not_before(moment)
                if self.not_before_format == "rfc1123"
                # Microsoft's own mock server (and some proxies) send RFC 3339.
                else moment.strftime("%Y-%m-%dT%H:%M:%S.%f0Z")
            )
        return lead

    def _schedule_start(self, event_id: str, event: dict[str, Any], lead: float | None) -> None:
        if event["EventStatus"] == "Started":
            self._later(self.removal_after, lambda: self._remove(event_id))
        elif lead is not None:
            expected = event["NotBefore"]

            def at_not_before() -> None:
                # A later PATCH may have moved NotBefore; only the current timer starts it.
                with self.lock:
                    current = self.events.get(event_id)
                    if current is None or current["NotBefore"] != expected:
                        return
                self._start(event_id)

            self._later(lead, at_not_before)

    def withdraw(self, notice_id: str) -> bool:
        with self.lock:
            if self.events.pop(notice_id, None) is None:
                return False
            self._bump()
            return True

    def state(self) -> dict[str, Any]:
        with self.lock:
            approved: dict[str, int] = {}
            for approval in self.approvals:
                approved[approval["EventId"]] = approved.get(approval["EventId"], 0) + 1
            return {
                "vm_name": self.vm_name,
                "incarnation": self.incarnation,
                "events": [dict(event) for event in self.events.values()],
                "approvals": [dict(a) for a in self.approvals],
                "approved": approved,
                "rate_limited": self.rate_limited,
            }

    def error_page(self, status: int) -> SimResponse:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        return SimResponse.json({"error": phrase}, status)


def _event_type(kind: str) -> str:
    for event_type in EVENT_TYPES:
        if kind.lower() == event_type.lower():
            return event_type
    raise SimError(f"unknown kind {kind!r}; use one of {', '.join(EVENT_TYPES)}")


def _utc_after(now: datetime, seconds: float) -> datetime:
    # NotBefore has whole seconds; round up so the event never starts before it says.
    return now + timedelta(seconds=seconds + 0.999)


def _version_ok(request: SimRequest, versions: tuple[str, ...]) -> bool:
    return request.param("api-version") in versions


def _bad_version(versions: tuple[str, ...]) -> SimResponse:
    return SimResponse.json(
        {
            "error": "Bad request. api-version is invalid or was not specified in the request. "
            "For more information refer to aka.ms/azureimds",
            "newest-versions": list(reversed(versions[-3:])),
        },
        400,
    )


def _bad_request(message: str, status: int = 400) -> SimResponse:
    return SimResponse.json({"error": message}, status)


# The command line.


def make_simulator(**options: Any) -> AzureSimulator:
    return AzureSimulator(**options)


SCRIPTED = ("preempt", "terminate", "reboot", "redeploy", "freeze")


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vm-name", help=f"this VM's name (default {DEFAULT_VM_NAME})")
    parser.add_argument("--vmss-name", help="serve a scale-set instance of this scale set")
    parser.add_argument("--instance-id", help="the scale-set instance id (with --vmss-name)")
    parser.add_argument(
        "--not-before",
        type=duration_arg,
        metavar="S",
        help="NotBefore lead of scripted events, seconds (default: the type's minimum notice)",
    )
    parser.add_argument(
        "--not-before-format",
        choices=NOT_BEFORE_FORMATS,
        default="rfc1123",
        help="NotBefore as IMDS sends it (rfc1123, the default: 'Mon, 19 Sep 2016 18:29:47 "
        "GMT') or as Microsoft's mock server does (iso8601: '2016-09-19T18:29:47.0000000Z')",
    )
    parser.add_argument(
        "--resources",
        help="comma-separated VM names of scripted events (default: this VM's name)",
    )
    parser.add_argument(
        "--removal-after",
        type=duration_arg,
        default=5.0,
        metavar="S",
        help="seconds an event stays Started before it disappears (default 5)",
    )
    parser.add_argument(
        "--approval-start-after",
        type=duration_arg,
        default=0.0,
        metavar="S",
        help="seconds an approved event stays Scheduled before it starts (default 0: at "
        "once; Azure may wait for other tenants)",
    )
    parser.add_argument(
        "--first-call-delay",
        type=duration_arg,
        default=0.0,
        metavar="S",
        help="make the first Scheduled Events answer take S seconds (real IMDS: up to 120)",
    )
    parser.add_argument(
        "--rate-limit",
        type=whole_number(minimum=1),
        default=5,
        metavar="N",
        help="requests per second before 429 (default 5)",
    )


def _event_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.resources is not None:
        fields["resources"] = [name.strip() for name in args.resources.split(",") if name.strip()]
        if not fields["resources"]:
            # Events that name no VM concern no agent: they were raised and never reported.
            raise SimError(f"--resources names no VM: {args.resources!r}")
    if args.not_before is not None:
        fields["not_before_seconds"] = args.not_before
    return fields


def _hints(sim: Simulator, url: str, args: argparse.Namespace) -> list[str]:
    assert isinstance(sim, AzureSimulator)
    return [
        f"VM name {sim.vm_name}",
        f"point the agent at it: FOREWARN_AZURE_URL={url} FOREWARN_AZURE_VM_NAME={sim.vm_name}",
    ]


COMMAND = SimulatorCommand(
    name="azure",
    build=make_simulator,
    passes=(
        *("vm_name", "vmss_name", "instance_id"),
        *("removal_after", "rate_limit", "first_call_delay", "not_before_format"),
        "approval_start_after",
    ),
    options=_options,
    scripted=tuple(
        Scripted(
            kind,
            kind.capitalize(),
            f"raise a {kind.capitalize()} event S seconds after start",
            _event_fields,
        )
        for kind in SCRIPTED
    ),
    hints=_hints,
)
add_arguments = COMMAND.add_arguments
run = COMMAND.run


DRILL_VM_NAME = "forewarn-drill-vm"


def drill_script() -> dict[str, Any]:
    """How `forewarn drill local --provider azure` raises a drain and a terminate."""
    resources = [DRILL_VM_NAME]
    return {
        "drain": ("Reboot", {"resources": resources, "not_before_seconds": 600}),
        "terminate": ("Preempt", {"resources": resources, "not_before_seconds": 30}),
        "env": {"FOREWARN_AZURE_VM_NAME": DRILL_VM_NAME},
    }


__all__ = [
    "EVENTS_API_VERSIONS",
    "INSTANCE_API_VERSIONS",
    "MIN_NOTICE",
    "AzureSimulator",
    "add_arguments",
    "drill_script",
    "make_simulator",
    "run",
]
