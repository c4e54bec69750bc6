"""A notice as the training process sees it: a small frozen record parsed with `json`.

The contract is defined once, in `forewarn.protocol` (stdlib only); this is a read-only view of
a notice's fields that avoids importing pydantic into the training process. A test pins its
fields to `forewarn.protocol.NOTICE_FIELDS`, the agent's models and the JSON Schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forewarn.protocol.timefmt import parse_time, utcnow


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
        """Parse one notice; ValueError when it is not a protocol v1 notice."""
        raw = json.loads(payload)
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise ValueError("not a protocol v1 notice")
        try:
            deadline = raw.get("deadline")
            return cls(
                id=str(raw["id"]),
                seq=int(raw["seq"]),
                action=str(raw["action"]),
                reason=str(raw["reason"]),
                provider=str(raw["provider"]),
                deadline=parse_time(deadline) if deadline else None,
                noticed_at=parse_time(raw["noticed_at"]),
                sent_at=parse_time(raw["sent_at"]),
                detail=dict(raw.get("detail") or {}),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"notice is missing or mistypes a field: {error}") from None

    @property
    def seconds_left(self) -> float | None:
        """Seconds until the deadline (negative when past), None when there is none."""
        if self.deadline is None:
            return None
        return (self.deadline - utcnow()).total_seconds()


__all__ = ["Event"]
