"""The event's vocabulary: its fields, actions and reasons, and how an id without a provider
id is made.

Standard library only: the agent's pydantic models (`forewarn.agent.protocol`), the watchers'
`Report` and the client's light `Event` are all pinned to these names by a test.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

Action = Literal["drain", "terminate", "clear"]
Reason = Literal[
    "spot-interruption",
    "rebalance-recommendation",
    "scheduled-maintenance",
    "preemption",
    "host-maintenance",
    "eviction",
    "node-drain",
    "reclaim",
    "manual",
    "drill",
]
ACTIONS: tuple[str, ...] = Action.__args__  # type: ignore[attr-defined]
REASONS: tuple[str, ...] = Reason.__args__  # type: ignore[attr-defined]

# Every field of a published notice, in wire order.
NOTICE_FIELDS: tuple[str, ...] = (
    "v",
    "id",
    "seq",
    "action",
    "reason",
    "provider",
    "deadline",
    "noticed_at",
    "sent_at",
    "detail",
)
HEARTBEAT_FIELDS: tuple[str, ...] = (
    "v",
    "seq",
    "agent",
    "version",
    "providers",
    "active",
    "sent_at",
    "acked",
    "exit_margin",
    "acked_by",
    "replay_for",
    "takes",
)
# In a heartbeat's (and status's `agent`) `takes`: the agent takes an ack's `action`, the
# action the client saved for, and counts a drain's save for no terminate. A client sends it
# only to an agent that lists this (an older one ignores it, and counts the ack for the
# notice's action as it is when the ack arrives).
TAKES_ACK_ACTION = "ack.action"
# The detail key of a notice whose provider times were moved onto this machine's clock (the
# watchers' `providers.skew`): by how many seconds that clock was ahead of the provider's.
# The agent sends nothing when only it changes, and keeps the new one for replays and
# `status`; so a replay may differ from what was sent in it alone, and that is no news.
CLOCK_AHEAD = "clock_ahead_seconds"


def stable_id(provider: str, kind: str, payload: Any) -> str:
    """An id for a notice the provider gives no id to: stable over repeated polls."""
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return f"{provider}/{kind}/{hashlib.sha256(blob).hexdigest()[:12]}"


__all__ = [
    "ACTIONS",
    "CLOCK_AHEAD",
    "HEARTBEAT_FIELDS",
    "NOTICE_FIELDS",
    "REASONS",
    "TAKES_ACK_ACTION",
    "Action",
    "Reason",
    "stable_id",
]
