"""Each provider's notice changed after it was sent, through the real agent subprocess and
its provider's simulator (`forewarn.testing`): one message per real change (same id, the new
deadline), a `clear` when withdrawn, a new message when it comes back, and no duplicates."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.testing import RunningAgent, start_agent
from support import eventually

# Past every watcher's next poll at the harness's intervals (AWS scheduled 0.5 s, Azure
# 0.25 s, long-polls at once): a duplicate would have come by then.
QUIET = 2.0


def _sent(agent: RunningAgent, notice_id: str) -> list[tuple[str, Any]]:
    """(action, deadline) of every message `agent` sent for `notice_id`, in order."""
    return [(n["action"], n["deadline"]) for n in agent.events if n["id"] == notice_id]


def _settled(agent: RunningAgent, count: int) -> list[dict[str, Any]]:
    """The notices once `count` have come (15 s at most) and QUIET seconds passed with none
    more: what a duplicate would have joined."""
    eventually(lambda: len(agent.events) >= count, timeout=15, what=f"{count} notices")
    seen, quiet_from = len(agent.events), time.monotonic()
    while time.monotonic() - quiet_from < QUIET:
        time.sleep(0.05)
        if len(agent.events) != seen:
            seen, quiet_from = len(agent.events), time.monotonic()
    return agent.events


def _near(deadline: str | None, seconds: float) -> bool:
    return deadline is not None and abs(
        parse_time(deadline) - (utcnow() + timedelta(seconds=seconds))
    ) < timedelta(seconds=15)


def test_aws_instance_action_time_moved_is_one_terminate_per_move() -> None:
    with start_agent("aws") as agent:
        agent.aws.spot_interruption(in_="2m")
        first = agent.wait_for_event(action="terminate", timeout=15)
        agent.aws.change("spot", lead=300)
        _settled(agent, 2)
        sent = _sent(agent, first["id"])
        assert [action for action, _ in sent] == ["terminate", "terminate"], sent
        assert _near(sent[0][1], 120) and _near(sent[1][1], 300), sent


def test_aws_instance_action_stop_to_terminate_keeps_its_time() -> None:
    # found: the simulator's PATCH of the spot notice's action alone reset its time to two
    # minutes from the PATCH, so the agent sent a terminate 8 minutes early that AWS never
    # moved (a spot `stop` 10 minutes ahead became a `terminate` 2 minutes ahead).
    with start_agent("aws") as agent:
        at = (utcnow() + timedelta(minutes=10)).replace(microsecond=0)
        agent.aws.raise_notice("spot", action="stop", time=at.isoformat())
        first = agent.wait_for_event(action="terminate", timeout=15)
        agent.aws.change("spot", action="terminate")
        _settled(agent, 2)
        sent = [n for n in agent.events if n["id"] == first["id"]]
        assert [n["detail"]["action"] for n in sent] == ["stop", "terminate"], sent
        assert [parse_time(n["deadline"]) for n in sent] == [at, at], sent


def test_aws_scheduled_not_before_moved_then_canceled() -> None:
    with start_agent("aws") as agent:
        event_id = agent.aws.scheduled(in_="1h")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.aws.change(event_id, not_before=7200)
        _settled(agent, 2)
        agent.aws.withdraw(event_id)
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "drain", "clear"], sent
        assert _near(sent[0][1], 3600) and _near(sent[1][1], 7200), sent


def test_azure_not_before_moved_then_withdrawn() -> None:
    with start_agent("azure") as agent:
        event_id = agent.azure.event("Reboot", in_="15m")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.azure.change(event_id, not_before_seconds=1800)
        _settled(agent, 2)
        agent.azure.withdraw(event_id)
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "drain", "clear"], sent
        assert _near(sent[0][1], 900) and _near(sent[1][1], 1800), sent


def test_gcp_maintenance_terminate_none_terminate() -> None:
    with start_agent("gcp") as agent:
        agent.gcp.maintenance("TERMINATE")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.gcp.end_maintenance()
        _settled(agent, 2)
        agent.gcp.maintenance("TERMINATE")
        events = _settled(agent, 3)
        # A maintenance event after NONE is another event: its own id.
        sent = [(n["action"], n["id"] == drain["id"]) for n in events]
        assert sent == [("drain", True), ("clear", True), ("drain", False)], events
        assert _near(events[2]["deadline"], 3600), events


@pytest.mark.parametrize("key", ["karpenter.sh/disrupted", "node.kubernetes.io/unschedulable"])
def test_kubernetes_taint_removed_and_added_again(key: str) -> None:
    with start_agent("kubernetes") as agent:
        agent.kubernetes.taint(key, effect="NoSchedule")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.kubernetes.withdraw(f"taint/{key}")
        _settled(agent, 2)
        agent.kubernetes.taint(key, effect="NoSchedule")
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "clear", "drain"], sent
