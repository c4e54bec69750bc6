"""A notify request's deadline as the agent keeps it across a step of the wall clock.

A deadline given as a duration (`15m`) goes as `deadline_in`, seconds the agent counts on the
boot clock, so NTP stepping the wall clock afterwards moves the deadline with it; `deadline`
beside it, the same moment as a time, is for agents older than `deadline_in`, which refuse the
field (`NO_DEADLINE_IN`): the request then goes again without it. One place for
`forewarn notify`, `forewarn.testing`'s `notify()` and the reclaim drill: the last two sent a
fixed time, which a step of the clock moved away from the machine's end.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from .timefmt import format_time, parse_deadline, parse_duration, parse_time, utcnow

# What an agent older than `deadline_in` answers a notify that carries it.
NO_DEADLINE_IN = "deadline_in: not a field of a notify request"


def is_duration(text: str) -> bool:
    """Whether a deadline that parses (`parse_deadline`) is a duration, not an RFC 3339 time."""
    try:
        parse_time(text)
    except ValueError:
        return True
    return False


def deadline_fields(text: str, now: datetime | None = None) -> dict[str, Any]:
    """The notify fields for a deadline written as an RFC 3339 time or a duration from `now`:
    `deadline`, and for a duration `deadline_in` too. ValueError as `parse_deadline`."""
    deadline = parse_deadline(text, now)
    fields: dict[str, Any] = {"deadline": format_time(deadline)}
    if is_duration(text):
        fields["deadline_in"] = parse_duration(text)
    return fields


def seconds_fields(seconds: float, now: datetime | None = None) -> dict[str, Any]:
    """The notify fields for a deadline `seconds` (above 0) from `now`."""
    moment = (now or utcnow()) + timedelta(seconds=seconds)
    return {"deadline": format_time(moment), "deadline_in": float(seconds)}


def for_an_older_agent(
    payload: Mapping[str, Any], reply: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The notify to send again when `reply` is an older agent's refusal of the
    `deadline_in` in `payload`: without it, the deadline as a time (the same id, so no second
    notice); None otherwise."""
    if "deadline_in" not in payload or reply.get("ok") is True:
        return None
    if not str(reply.get("error")).startswith(NO_DEADLINE_IN):
        return None
    return {key: value for key, value in payload.items() if key != "deadline_in"}


__all__ = [
    "NO_DEADLINE_IN",
    "deadline_fields",
    "for_an_older_agent",
    "is_duration",
    "seconds_fields",
]
