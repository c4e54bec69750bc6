"""The IMDS contract: its paths and headers, and pure parsers from its answers to `Report`s.

Every parser takes a response body (bytes or text) and returns a list of reports, or raises
`ParseError` naming the path and what was wrong; nothing else escapes. "No notice" answers
(404) never reach a parser: the watcher handles status codes.
"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from forewarn.protocol.fields import stable_id
from forewarn.protocol.timefmt import format_time, parse_time, utcnow

from ..base import ParseError
from ..httpdate import format_short_http_date, parse_http_date

if TYPE_CHECKING:
    from forewarn.providers.report import Report

PROVIDER = "aws"

TOKEN_PATH = "/latest/api/token"
SPOT_PATH = "/latest/meta-data/spot/instance-action"
TERMINATION_TIME_PATH = "/latest/meta-data/spot/termination-time"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
SCHEDULED_PATH = "/latest/meta-data/events/maintenance/scheduled"
HISTORY_PATH = "/latest/meta-data/events/maintenance/history"
ASG_PATH = "/latest/meta-data/autoscaling/target-lifecycle-state"
IDENTITY_PATH = "/latest/dynamic/instance-identity/document"
# Where a report states the provider's own notice time (docs/operations.md, detection delay).
NOTICE_TIME = "notice_time"

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"

SPOT_ACTIONS = ("terminate", "stop", "hibernate")
SCHEDULED_CODES = (
    "instance-reboot",
    "system-reboot",
    "system-maintenance",
    "instance-retirement",
    "instance-stop",
)
SCHEDULED_STATES = ("active", "completed", "canceled")
# States an instance's Auto Scaling target lifecycle can take (AWS documents these).
LIFECYCLE_STATES = (
    "InService",
    "Terminated",
    "Detached",
    "Standby",
    "Warmed:Hibernated",
    "Warmed:Running",
    "Warmed:Stopped",
    "Warmed:Terminated",
)
# States that end the job on this instance: terminated, or sent back to a warm pool stopped or
# hibernated (a group that reuses instances on scale in). Warmed:Running, Standby and Detached
# leave it running, out of service.
TERMINATING_STATES = ("Terminated", "Warmed:Terminated", "Warmed:Stopped", "Warmed:Hibernated")

_EVENT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z")
_STATE_WORD = re.compile(r"^[A-Za-z]+(?::[A-Za-z]+)?\Z")


def parse_aws_date(text: str) -> datetime:
    """A scheduled-event date ("21 Jan 2019 09:00:43 GMT"), or RFC 3339; ValueError otherwise."""
    try:
        return parse_http_date(text)
    except ValueError:
        return _rfc3339(text)


def format_aws_date(moment: datetime) -> str:
    """The scheduled-event date format, locale-independent (used by the simulator)."""
    return format_short_http_date(moment)


def _rfc3339(text: str) -> datetime:
    try:
        return parse_time(text)
    except OverflowError:  # an offset pushing year 1 or 9999 out of range
        raise ValueError(f"time out of range: {text!r}") from None


def _text(body: bytes | str, path: str) -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ParseError(f"{path}: body is not UTF-8 ({error.reason})") from None


def _json(body: bytes | str, path: str) -> Any:
    text = _text(body, path)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ParseError(f"{path}: body is not JSON ({_short(error)}): {_excerpt(text)}") from None


def _object(body: bytes | str, path: str) -> dict[str, Any]:
    payload = _json(body, path)
    if not isinstance(payload, dict):
        raise ParseError(f"{path}: expected a JSON object, got {type(payload).__name__}")
    return payload


def _string_field(payload: dict[str, Any], key: str, path: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        shown = "missing" if key not in payload else f"a {type(value).__name__}"
        raise ParseError(f"{path}: field {key!r} must be a string, it is {shown}")
    return value


def _time_field(payload: dict[str, Any], key: str, path: str, aws_format: bool = False) -> datetime:
    text = _string_field(payload, key, path)
    try:
        return parse_aws_date(text) if aws_format else _rfc3339(text)
    except ValueError as error:
        raise ParseError(f"{path}: field {key!r}: {error}") from None


def _report(**fields: Any) -> Report:
    # The report model (pydantic) loads with the first report: the simulator uses this
    # module's paths, headers and dates, and `forewarn simulate aws` never builds a report.
    from forewarn.providers.report import Report
    from pydantic import ValidationError

    try:
        return Report(provider=PROVIDER, **fields)
    except ValidationError as error:
        raise ParseError(f"cannot build a notice: {_short(error)}") from None


def _short(error: Exception) -> str:
    return str(error).splitlines()[0][:200]


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def parse_instance_action(body: bytes | str, now: datetime | None = None) -> list[Report]:
    """`spot/instance-action` (200): a terminate notice with the action time as deadline.

    Hibernation starts at once, without the two-minute lead, so its deadline is now. The
    `time` is read in every form IMDS writes times in: RFC 3339 with a zone (as documented,
    fractional seconds and `+00:00` included) and the scheduled events' `21 Jan 2019 09:00:43
    GMT`. A `time` that is missing or cannot be read unambiguously (no zone, not a time)
    still means the instance is being taken: the notice is published as terminate without a
    deadline (the safer side: clients exit now), never dropped, and the value is said
    (`PartialParse`): read only as RFC 3339, an IMDS-form time went out as "now" with nothing
    in the log. So is an answer whose `action` is missing or none of the three documented:
    the path answers 200 only for an interruption, so it is published as terminate at its
    `time` and the odd action is said, as for a scheduled event's unknown State.
    """
    payload = _object(body, SPOT_PATH)
    action = payload.get("action")
    problems = []
    when: datetime | None = None
    if "time" not in payload:
        problems.append("field 'time' is missing")
    else:
        try:
            when = _time_field(payload, "time", SPOT_PATH, aws_format=True)
        except ParseError:
            problems.append(
                f"field 'time' {_excerpt(str(payload['time']), 60)} is not a time IMDS writes "
                "(RFC 3339 with a zone, or 21 Jan 2019 09:00:43 GMT)"
            )
    deadline = (now or utcnow()) if action == "hibernate" else when
    notice_id = stable_id(PROVIDER, "spot-itn", {"action": action, "time": payload.get("time")})
    report = _report(
        id=notice_id,
        action="terminate",
        reason="spot-interruption",
        deadline=deadline,
        detail=payload,
    )
    if action not in SPOT_ACTIONS:
        shown = (
            f"{action[:40]!r} is not one of {', '.join(SPOT_ACTIONS)}"
            if isinstance(action, str)
            else "is missing"
            if "action" not in payload
            else f"must be a string, it is a {type(action).__name__}"
        )
        problems.insert(0, f"field 'action' {shown}")
    if problems:
        timed = "" if deadline is not None else " without a deadline"
        raise PartialParse(
            f"{SPOT_PATH}: {'; '.join(problems)} (published as a terminate{timed} all the same)",
            [report],
        )
    return [report]


class PartialParse(ParseError):
    """Some items of an answer could not be fully read. `reports` holds every item as well
    as it could be read (an odd one included, so that it is neither lost nor taken for
    withdrawn); the message names what was wrong."""

    def __init__(self, message: str, reports: list[Report]) -> None:
        super().__init__(message)
        self.reports = reports


def parse_rebalance(body: bytes | str) -> list[Report]:
    """`events/recommendations/rebalance` (200): a drain; `noticeTime` is when it was sent,
    not a deadline."""
    payload = _object(body, REBALANCE_PATH)
    notice_id = stable_id(PROVIDER, "rebalance", {"noticeTime": payload.get("noticeTime")})
    try:
        # In every form IMDS writes times in, as the spot time (the events' date form was a
        # bad-rebalance error, and the detection-delay metric lost the notice).
        sent = _time_field(payload, "noticeTime", REBALANCE_PATH, aws_format=True)
    except ParseError as error:
        # The answer is the recommendation; noticeTime only says when it was sent. Dropped
        # for a time without a zone or none, the drain never came: it is published without
        # `notice_time`, and the odd field is said (PartialParse), as for a NotBefore.
        report = _report(
            id=notice_id, action="drain", reason="rebalance-recommendation", detail=payload
        )
        raise PartialParse(f"{error} (published as a drain all the same)", [report]) from None
    # The provider's own notice time, where the detection-delay metric reads it.
    detail = {**payload, NOTICE_TIME: format_time(sent)}
    return [_report(id=notice_id, action="drain", reason="rebalance-recommendation", detail=detail)]


def parse_scheduled(body: bytes | str) -> list[Report]:
    """`events/maintenance/scheduled`: a JSON array of events. Active ones drain with
    NotBefore as deadline; canceled or completed ones clear. An empty body is no events.

    An active event whose `NotBefore` cannot be read still drains, without a deadline, and
    raises `PartialParse` with every report: one odd event must not hide the others (an
    instance-stop listed beside it) nor clear those already reported."""
    text = _text(body, SCHEDULED_PATH)
    if not text.strip():
        return []
    payload = _json(text, SCHEDULED_PATH)
    if not isinstance(payload, list):
        raise ParseError(f"{SCHEDULED_PATH}: expected a JSON array, got {type(payload).__name__}")
    reports = []
    problems = []
    for index, event in enumerate(payload):
        if not isinstance(event, dict):
            raise ParseError(
                f"{SCHEDULED_PATH}: item {index} must be an object, it is a {type(event).__name__}"
            )
        report, problem = _scheduled_event(event)
        reports.append(report)
        if problem is not None:
            problems.append(f"item {index}: {problem}")
    if problems:
        raise PartialParse(
            f"{SCHEDULED_PATH}: {'; '.join(problems)} (published as a drain without deadline)",
            reports,
        )
    return reports


def _scheduled_event(event: dict[str, Any]) -> tuple[Report, str | None]:
    """The report for one event, and what could not be read of it (or None)."""
    event_id = event.get("EventId")
    if isinstance(event_id, str) and _EVENT_ID.match(event_id):
        notice_id = f"{PROVIDER}/scheduled/{event_id}"
    else:
        notice_id = stable_id(
            PROVIDER, "scheduled", {key: event.get(key) for key in ("Code", "NotBefore")}
        )
    state = event.get("State")
    description = event.get("Description")
    finished = isinstance(state, str) and state.lower() in ("canceled", "cancelled", "completed")
    if state is None and isinstance(description, str):
        finished = description.startswith(("[Canceled]", "[Completed]"))
    if finished:
        report = _report(id=notice_id, action="clear", reason="scheduled-maintenance", detail=event)
        return report, None
    # Unknown states count as active: a drain is the safe side of a contract change.
    # NotBefore is the deadline; NotAfter ends the window in which the event may still come,
    # which keeps the notice active that long (NotBeforeDeadline stays in detail, unread).
    problem: str | None = None
    not_before: datetime | None
    try:
        not_before = _time_field(event, "NotBefore", SCHEDULED_PATH, aws_format=True)
    except ParseError as error:
        not_before, problem = None, str(error).removeprefix(f"{SCHEDULED_PATH}: ")
    not_after: datetime | None = None
    # Unread, the notice is retired past NotBefore plus the grace, as without a NotAfter.
    with contextlib.suppress(ParseError):
        if not_before is not None and event.get("NotAfter") is not None:
            not_after = _time_field(event, "NotAfter", SCHEDULED_PATH, aws_format=True)
    report = _report(
        id=notice_id,
        action="drain",
        reason="scheduled-maintenance",
        deadline=not_before,
        until=not_after,
        detail=event,
    )
    return report, problem


def parse_lifecycle_state(body: bytes | str) -> list[Report]:
    """`autoscaling/target-lifecycle-state`: plain text; `Terminated` means the group is
    about to terminate this instance, `Warmed:Stopped` or `Warmed:Hibernated` to stop it
    into its warm pool (the job ends either way)."""
    state = _text(body, ASG_PATH).strip()
    if not _STATE_WORD.match(state) or len(state) > 64:
        raise ParseError(f"{ASG_PATH}: not a lifecycle state: {_excerpt(state)}")
    if state not in TERMINATING_STATES:
        return []
    return [
        _report(
            id=f"{PROVIDER}/asg-lifecycle/{state.replace(':', '-').lower()}",
            action="terminate",
            reason="eviction",
            detail={"target-lifecycle-state": state},
        )
    ]


def parse_identity(body: bytes | str) -> dict[str, Any]:
    """The instance identity document; ParseError unless it names an EC2 instance."""
    payload = _object(body, IDENTITY_PATH)
    instance_id = _string_field(payload, "instanceId", IDENTITY_PATH)
    if not instance_id.startswith("i-"):
        raise ParseError(f"{IDENTITY_PATH}: instanceId {instance_id[:40]!r} is not an instance")
    return payload


__all__ = [
    "ASG_PATH",
    "HISTORY_PATH",
    "IDENTITY_PATH",
    "LIFECYCLE_STATES",
    "PROVIDER",
    "REBALANCE_PATH",
    "SCHEDULED_CODES",
    "SCHEDULED_PATH",
    "SCHEDULED_STATES",
    "SPOT_ACTIONS",
    "SPOT_PATH",
    "TERMINATING_STATES",
    "TERMINATION_TIME_PATH",
    "TOKEN_HEADER",
    "TOKEN_PATH",
    "TTL_HEADER",
    "PartialParse",
    "format_aws_date",
    "parse_aws_date",
    "parse_identity",
    "parse_instance_action",
    "parse_lifecycle_state",
    "parse_rebalance",
    "parse_scheduled",
]
