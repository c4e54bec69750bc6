"""What a watcher tells the agent: one provider notice, or its withdrawal.

It lives with the providers, not the agent, so that no provider imports the agent runtime.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any

from forewarn.protocol.fields import Action, Reason
from forewarn.protocol.timefmt import format_time, utcnow
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
)


def _usable_time(moment: datetime) -> datetime:
    """A time the agent can compare and send: with its UTC offset, and one whose UTC a date
    holds. pydantic takes `2026-12-07T06:00:00` (naive) and `9999-12-31T23:59:59-01:00`: from a
    hand-edited state file, the first stopped every start of the agent (TypeError comparing it
    with the clock), the other its first publish (format_time's OverflowError)."""
    if moment.utcoffset() is None:
        raise ValueError("a time without its UTC offset: write Z, or one such as +01:00")
    try:
        moment.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("a time whose UTC is past the range of dates (years 1 to 9999)") from None
    return moment


# How deep a notice's detail nests at most (a provider's answer is its detail: AWS's spot
# answer, GCP's maintenance document). JSON reads about 1,000 levels, pydantic serializes
# about 255: a field nested 300 deep made a notice whose publish raised in its watcher, which
# crashed at every answer, and the terminate never went out. Deeper parts are cut.
MAX_DETAIL_DEPTH = 32
DETAIL_CUT = f"(nested deeper than {MAX_DETAIL_DEPTH} levels: cut)"


def bounded_detail(value: Any, depth: int = 0) -> Any:
    """`value` with every object or array nested deeper than MAX_DETAIL_DEPTH made
    DETAIL_CUT."""
    if isinstance(value, dict):
        if depth >= MAX_DETAIL_DEPTH:
            return DETAIL_CUT
        return {key: bounded_detail(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if depth >= MAX_DETAIL_DEPTH:
            return DETAIL_CUT
        return type(value)(bounded_detail(item, depth + 1) for item in value)
    return value


# Times travel as RFC 3339 in UTC with a `Z` (see `format_time`).
Timestamp = Annotated[
    datetime,
    AfterValidator(_usable_time),
    PlainSerializer(format_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


class Report(BaseModel):
    """One provider notice, or its withdrawal (`clear`).

    The agent's board turns reports into `Notice` messages: it drops repeats, stamps `seq`
    and `sent_at`, and escalates drains.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    action: Action
    reason: Reason
    provider: str = Field(min_length=1, max_length=40)
    deadline: Timestamp | None = None
    noticed_at: Timestamp = Field(default_factory=utcnow)
    detail: dict[str, Any] = Field(default_factory=dict)
    # The end of the window in which the action may come, when the provider gives one (AWS
    # scheduled maintenance: NotAfter). The agent keeps the notice active until then plus its
    # grace, rather than retiring it after the deadline and raising it again while the
    # provider still lists it. Not sent to clients.
    until: Timestamp | None = None
    # The deadline was given as a duration from when the notice was given (`5m` in the flag
    # file), not as a moment: the agent keeps it on the boot clock from when it takes the
    # report, so that a step of the wall clock (NTP's first sync) moves the deadline with it,
    # as it does a `forewarn notify --deadline 15m`. Not sent to clients.
    deadline_is_duration: bool = False
    # The watcher keeps the deadline on the boot clock itself (a GCP stop: the metadata server
    # gives it no time, so it is counted from when the watcher read it) and moves it with a
    # step of the wall clock, as `deadline_is_duration`'s is moved. The agent takes each such
    # report's deadline as it is given (the watcher's wins, unlike a flag file's) and keeps
    # it on its boot clock until the next report: a step between two reports moves it there
    # too, rather than bringing an absolute time nearer (past, a clear; within the exit
    # margin, a terminate an hour early). Not sent to clients.
    deadline_on_boot_clock: bool = False

    @field_validator("detail")
    @classmethod
    def _bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        bounded: dict[str, Any] = bounded_detail(value)
        return bounded


def saved_report(item: object) -> Report:
    """A report as a watcher's state file holds it, written by this version of the agent or
    another. Keys this version does not know are left out: a newer agent's file has them (as
    every file has had `until` since it was added), and an agent rolled back past a new key
    refused each saved report for it, losing the notices its watcher had raised.
    ValidationError when it is no report."""
    if isinstance(item, dict):
        item = {key: value for key, value in item.items() if key in Report.model_fields}
    return Report.model_validate(item)


__all__ = [
    "DETAIL_CUT",
    "MAX_DETAIL_DEPTH",
    "Report",
    "Timestamp",
    "bounded_detail",
    "saved_report",
]
