"""Pure parsing of Azure Scheduled Events and instance metadata, and their mapping to reports.

Nothing here does I/O: each function turns what IMDS answered into values or `Report`s, or
raises `ParseError` naming what was wrong, so every rule can be tested on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from forewarn.protocol.fields import Action, Reason
from forewarn.protocol.oneline import quoted
from forewarn.protocol.timefmt import parse_time

from ..base import ParseError
from ..httpdate import format_http_date, parse_http_date
from ..skew import sent_skew
from .kinds import EVENT_TYPES

if TYPE_CHECKING:
    from forewarn.providers.report import Report

PROVIDER = "azure"
ID_PREFIX = "azure/"
# The key of `Report.detail` beside the event's own fields.
INCARNATION = "DocumentIncarnation"

# What each event type means for a training process, and why:
# - Preempt: a Spot eviction, 30 s or more ahead. Flush and exit.
# - Terminate: the scale set deletes this VM (scale-in or a user delete); it does not come
#   back, so it is an eviction rather than maintenance. Flush and exit.
# - Reboot, Redeploy: the host is serviced; there is time (10-15 min) to flush and keep going,
#   and the board re-sends the drain as terminate near NotBefore.
# - Freeze: a pause of seconds with memory kept; only published when configured, and without
#   a deadline, so the board never turns a pause into an exit.
MAPPING: dict[str, tuple[Action, Reason]] = {
    "Preempt": ("terminate", "eviction"),
    "Terminate": ("terminate", "eviction"),
    "Reboot": ("drain", "host-maintenance"),
    "Redeploy": ("drain", "host-maintenance"),
    "Freeze": ("drain", "host-maintenance"),
}
# A type this code does not know yet: checkpoint and keep going, never exit on a guess.
UNKNOWN_MAPPING: tuple[Action, Reason] = ("drain", "host-maintenance")

_VMSS_RESOURCE = re.compile(
    r"/virtualMachineScaleSets/([^/]+)/virtualMachines/([^/]+)/?$", re.IGNORECASE
)


@dataclass(frozen=True)
class ScheduledEvent:
    event_id: str
    event_type: str
    status: str
    resources: tuple[str, ...]
    not_before: datetime | None
    raw: dict[str, Any] = field(compare=False, hash=False)
    # NotBefore that is not an RFC 1123 time: kept as a problem of this event alone, so one
    # odd field cannot hide the other events of the document.
    not_before_error: str | None = None

    @property
    def notice_id(self) -> str:
        return ID_PREFIX + self.event_id

    @property
    def scheduled(self) -> bool:
        return self.status == "Scheduled"


@dataclass(frozen=True)
class Malformed:
    """An event of the document that could not be read: skipped, the others are read."""

    index: int
    event_id: str | None  # its EventId when that much is readable
    problem: str
    raw: Any = field(compare=False, hash=False)

    @property
    def name(self) -> str:
        return f"event {self.event_id}" if self.event_id else f"Events[{self.index}]"


@dataclass(frozen=True)
class EventsDocument:
    incarnation: int
    events: tuple[ScheduledEvent, ...]
    # Events skipped as unreadable: one bad event must not hide a Preempt beside it.
    malformed: tuple[Malformed, ...] = ()


def parse_not_before(text: str) -> datetime | None:
    """NotBefore as an aware UTC time; None when empty (the event has Started).

    RFC 1123 as IMDS writes it (the weekday is not checked, since Microsoft's own example
    "Mon, 11 Apr 2026" names the wrong one), or ISO 8601 / RFC 3339 as Microsoft's own mock
    server sends it (a time without a zone is UTC, as IMDS means every time)."""
    text = text.strip()
    if not text:
        return None
    try:
        return parse_http_date(text)
    except ValueError:
        pass
    for candidate in (text, text + "Z"):
        try:
            return parse_time(candidate)
        except ValueError:
            continue
    raise ParseError(f"NotBefore is neither an RFC 1123 nor an ISO 8601 time: {quoted(text)}")


def format_not_before(moment: datetime) -> str:
    """The RFC 1123 form IMDS uses (English names, whatever the locale)."""
    return format_http_date(moment)


def _decode(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    # RecursionError: an answer nested deeper than json recurses (1 MiB of `[` is far past it)
    # escaped every caller, and the watcher crashed at each poll.
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        preview = body[:80] if isinstance(body, str) else body[:80].decode("utf-8", "replace")
        raise ParseError(f"not JSON ({error}): {preview!r}") from None


def _string(event: Mapping[str, Any], key: str, index: int) -> str:
    value = event.get(key)
    if not isinstance(value, str):
        raise ParseError(f"Events[{index}].{key} must be a string, got {quoted(value)}")
    return value


def parse_event(event: Any, index: int = 0) -> ScheduledEvent:
    if not isinstance(event, dict):
        raise ParseError(f"Events[{index}] must be an object, got {type(event).__name__}")
    event_id = _string(event, "EventId", index).strip()
    if not event_id or len(event_id) > 190:
        raise ParseError(
            f"Events[{index}].EventId must be 1-190 characters, got {quoted(event_id)}"
        )
    event_type = _string(event, "EventType", index)
    status = _string(event, "EventStatus", index)
    resources = event.get("Resources", [])
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ParseError(
            f"Events[{index}].Resources must be a list of names, got {quoted(resources)}"
        )
    text = event.get("NotBefore")
    try:
        if text is not None and not isinstance(text, str):
            raise ParseError(f"NotBefore is not a string: {quoted(text)}")
        not_before, problem = parse_not_before(text or ""), None
    except ParseError as error:
        not_before, problem = None, str(error)
    return ScheduledEvent(
        event_id, event_type, status, tuple(resources), not_before, event, problem
    )


def _is_number(text: str) -> bool:
    # str.isdigit() is true for superscripts ('²') that int() refuses: a ValueError escaped
    # the parser (found by the property test).
    return text.isascii() and text.isdigit()


def parse_events(payload: Any) -> EventsDocument:
    """A decoded Scheduled Events answer as an `EventsDocument`."""
    if not isinstance(payload, dict):
        raise ParseError(f"the answer must be a JSON object, got {type(payload).__name__}")
    incarnation = payload.get("DocumentIncarnation")
    if isinstance(incarnation, str) and _is_number(incarnation.strip()):
        incarnation = int(incarnation)
    if not isinstance(incarnation, int) or isinstance(incarnation, bool):
        raise ParseError(f"DocumentIncarnation must be an integer, got {quoted(incarnation)}")
    events = payload.get("Events")
    if not isinstance(events, list):
        raise ParseError(f"Events must be a list, got {quoted(events)}")
    good: list[ScheduledEvent] = []
    bad: list[Malformed] = []
    for index, event in enumerate(events):
        try:
            good.append(parse_event(event, index))
        except ParseError as error:
            bad.append(Malformed(index, _readable_id(event), str(error), event))
    return EventsDocument(incarnation, tuple(good), tuple(bad))


def _readable_id(event: Any) -> str | None:
    """The EventId of an event that is otherwise unreadable, if it has a usable one."""
    if not isinstance(event, dict):
        return None
    value = event.get("EventId")
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > 190:
        return None
    return value.strip()


def parse_document(body: bytes | str) -> EventsDocument:
    """The body of `GET /metadata/scheduledevents` as an `EventsDocument`."""
    return parse_events(_decode(body))


def vm_names(compute: Any) -> frozenset[str]:
    """The names this VM can have in an event's Resources, lower-cased, from the
    `/metadata/instance/compute` answer: its `name`, and for a scale-set instance
    `<vmScaleSetName>_<instanceId>` with the instance id taken from `resourceId`."""
    if isinstance(compute, dict) and isinstance(compute.get("compute"), dict):
        compute = compute["compute"]
    if not isinstance(compute, dict):
        raise ParseError(f"instance metadata must be a JSON object, got {type(compute).__name__}")
    names: set[str] = set()
    name = compute.get("name")
    if isinstance(name, str) and name.strip():
        names.add(name.strip())
    scale_set = compute.get("vmScaleSetName")
    resource_id = compute.get("resourceId")
    if isinstance(scale_set, str) and scale_set and isinstance(resource_id, str):
        match = _VMSS_RESOURCE.search(resource_id)
        if match:
            names.add(f"{match.group(1)}_{match.group(2)}")
    if not names:
        raise ParseError("instance metadata has neither `name` nor a scale-set resourceId")
    return frozenset(n.lower() for n in names)


def parse_compute(body: bytes | str) -> frozenset[str]:
    return vm_names(_decode(body))


def concerns(event: ScheduledEvent, names: Iterable[str]) -> bool:
    """Whether the event names this VM (Azure resource names are case-insensitive)."""
    wanted = {name.lower() for name in names}
    return any(resource.lower() in wanted for resource in event.resources)


def report_for(
    event: ScheduledEvent,
    *,
    freeze: bool,
    previous_deadline: datetime | None,
    now: datetime,
    incarnation: int | None = None,
) -> Report | None:
    """The report for one of this VM's events, or None when it is not published (a Freeze
    without `azure.freeze`)."""
    if event.event_type == "Freeze" and not freeze:
        return None
    action, reason = MAPPING.get(event.event_type, UNKNOWN_MAPPING)
    deadline: datetime | None
    if event.event_type == "Freeze" or event.event_type not in MAPPING:
        deadline = None
    elif event.status == "Started":
        # Started means now, whatever NotBefore said before (an event approved by us or by a
        # neighbour VM starts long before it): the deadline is the earliest of now, the one
        # already published and a NotBefore still shown (Microsoft's mock keeps it).
        known = [d for d in (previous_deadline, event.not_before) if d is not None]
        deadline = min([now, *known])
    elif event.not_before is not None:
        deadline = event.not_before
    else:
        # A Scheduled event without a readable NotBefore: its time is unknown, not "now".
        deadline = previous_deadline
    detail = dict(event.raw)
    if incarnation is not None:
        detail[INCARNATION] = incarnation
    # The report model (pydantic) loads with the first report: `forewarn simulate azure`
    # formats events with this module and never builds one.
    from forewarn.providers.report import Report

    return Report(
        id=event.notice_id,
        action=action,
        reason=reason,
        provider=PROVIDER,
        deadline=deadline,
        noticed_at=now,
        detail=detail,
    )


def reports_for(
    document: EventsDocument,
    names: Iterable[str],
    *,
    freeze: bool,
    previous: Mapping[str, Report],
    now: datetime,
    ahead: timedelta = timedelta(0),
) -> dict[str, Report]:
    """This VM's published events in `document`, by notice id. `previous` holds the reports
    made from the last document (their deadlines survive NotBefore going empty). `ahead`: how
    far this VM's clock is ahead of Azure's, which the document's NotBefore times were moved
    by (`watch._on_this_clock`); a deadline carried over from `previous` is moved onto it too."""
    names = frozenset(names)
    current: dict[str, Report] = {}
    for event in document.events:
        if not concerns(event, names):
            continue
        before = previous.get(event.notice_id)
        report = report_for(
            event,
            freeze=freeze,
            previous_deadline=_deadline_on_clock(before, ahead),
            now=now,
            incarnation=_incarnation(event, before, document.incarnation),
        )
        if report is not None and ahead and report.deadline is not None:
            # Moved by a skew, the deadline is one this watcher moves with a step of the VM's
            # clock (at its next poll, when a `Date` shows the new skew): the board holds it on
            # the boot clock until then, rather than as a moment a step may put hours past.
            report = report.model_copy(update={"deadline_on_boot_clock": True})
        if report is not None:
            current[report.id] = report
    return current


def _deadline_on_clock(before: Report | None, ahead: timedelta) -> datetime | None:
    """The deadline of `before` on a clock `ahead` of Azure's: it was put on the clock its
    own skew (`CLOCK_AHEAD` in its detail; none: zero) gave. A Started event keeps the
    earliest deadline published for it; kept as it was, NTP's step 2 h forward left it 2 h
    past, and the board retired the terminate with a `clear` while Azure still listed it."""
    if before is None or before.deadline is None:
        return None
    move = ahead - (sent_skew(before) or timedelta(0))
    try:
        return before.deadline + move
    except OverflowError:
        return before.deadline


def _incarnation(event: ScheduledEvent, before: Report | None, incarnation: int) -> int:
    """The DocumentIncarnation an event's report carries: the one it was last reported with
    while the event itself is unchanged. Every event of the availability set (a neighbour's
    too) bumps the document's; carried along, it re-sent each of this VM's notices, and the
    agent's webhook, Kubernetes Events and escalation count with it."""
    if before is None:
        return incarnation
    kept = before.detail.get(INCARNATION)
    rest = {key: value for key, value in before.detail.items() if key != INCARNATION}
    return kept if isinstance(kept, int) and rest == event.raw else incarnation


def cleared(
    previous: Mapping[str, Report], current: Mapping[str, Report], now: datetime
) -> list[Report]:
    """A `clear` for each previously published event that is gone (done, or cancelled)."""
    return [
        report.model_copy(update={"action": "clear", "deadline": None, "noticed_at": now})
        for notice_id, report in previous.items()
        if notice_id not in current
    ]


def event_id_of(notice_id: str) -> str | None:
    return notice_id[len(ID_PREFIX) :] if notice_id.startswith(ID_PREFIX) else None


__all__ = [
    "EVENT_TYPES",
    "ID_PREFIX",
    "MAPPING",
    "EventsDocument",
    "Malformed",
    "ScheduledEvent",
    "cleared",
    "concerns",
    "event_id_of",
    "format_not_before",
    "parse_compute",
    "parse_document",
    "parse_event",
    "parse_events",
    "parse_not_before",
    "report_for",
    "reports_for",
    "vm_names",
]
