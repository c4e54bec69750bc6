"""A notice as the training process sees it: a small frozen record parsed with `json`.

The contract is defined once, in `forewarn.protocol` (stdlib only); this is a read-only view of
a notice's fields that avoids importing pydantic into the training process. A test pins its
fields to `forewarn.protocol.NOTICE_FIELDS`, the agent's models and the JSON Schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forewarn.protocol import jsontext
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.protocol.wire import PROTOCOL_VERSION


def load_json(payload: bytes | str, what: str) -> Any:
    """`payload` decoded, or ValueError naming `what` and the problem: never the
    RecursionError that deeply nested JSON raises, which would end a subscriber's thread. An
    object with a duplicated key is refused, naming it: readers differ on which one counts."""
    try:
        return jsontext.loads(payload)
    except RecursionError:
        raise ValueError(f"{what} is JSON nested too deeply") from None
    except jsontext.DuplicateKeyError as error:
        raise ValueError(f"{what} refused: {error}") from None
    except ValueError as error:  # not UTF-8, or not JSON
        raise ValueError(f"{what} is not JSON: {error}") from None


@dataclass(frozen=True)
class Event:
    id: str
    seq: int
    action: str  # drain | terminate | clear
    reason: str
    provider: str
    deadline: datetime | None
    noticed_at: datetime
    sent_at: datetime
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, payload: bytes | str) -> Event:
        """Parse one notice. Whatever the payload, a malformed one raises ValueError naming
        what is wrong and nothing else: the subscriber drops it and goes on listening."""
        raw = load_json(payload, "notice")
        if not isinstance(raw, dict):
            raise ValueError("not a protocol v1 notice: not a JSON object")
        check_version(raw, "notice")
        seq = _field(raw, "seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise ValueError(f"notice field 'seq' is not an integer: {type(seq).__name__}")
        deadline = raw.get("deadline")
        detail = raw.get("detail")
        if detail is not None and not isinstance(detail, dict):
            raise ValueError(f"notice field 'detail' is not an object: {type(detail).__name__}")
        return cls(
            id=_text(raw, "id"),
            seq=seq,
            action=_text(raw, "action"),
            reason=_text(raw, "reason"),
            provider=_text(raw, "provider"),
            deadline=None if deadline is None else _time(raw, "deadline"),
            noticed_at=_time(raw, "noticed_at"),
            sent_at=_time(raw, "sent_at"),
            detail=dict(detail or {}),
        )

    @property
    def seconds_left(self) -> float | None:
        """Seconds until the deadline (negative when past), None when there is none."""
        if self.deadline is None:
            return None
        return (self.deadline - utcnow()).total_seconds()


def check_version(raw: dict[str, Any], what: str) -> None:
    """ValueError naming field 'v' unless it is the integer 1. `true == 1` and `1.0 == 1` in
    Python, so comparing alone took either for protocol v1. `what` (`notice`, `heartbeat`)
    names the message in the error."""
    version = raw.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:
        shown = "missing" if "v" not in raw else f"{version!r:.40} ({type(version).__name__})"
        raise ValueError(
            f"not a protocol v1 {what}: field 'v' must be the integer {PROTOCOL_VERSION}, "
            f"got {shown}"
        )


def _field(raw: dict[str, Any], name: str) -> Any:
    if name not in raw:
        raise ValueError(f"notice has no {name!r}")
    return raw[name]


def _text(raw: dict[str, Any], name: str) -> str:
    value = _field(raw, name)
    if not isinstance(value, str):
        raise ValueError(f"notice field {name!r} is not a string: {type(value).__name__}")
    return value


def _time(raw: dict[str, Any], name: str) -> datetime:
    text = _text(raw, name)
    try:
        return parse_time(text)
    except ValueError as error:
        raise ValueError(f"notice field {name!r}: {error}") from None


__all__ = ["Event"]
