"""Each provider's notice changed after it was sent, through the real agent subprocess and
its provider's simulator (`forewarn.testing`): one message per real change (same id, the new
deadline), a `clear` when withdrawn, a new message when it comes back, and no duplicates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.testing import RunningAgent, start_agent
from support import eventually

# The path each provider's notices come from, as the simulator counts its requests. The
# long-poll (GCP) and the watch (Kubernetes) answer at once on a change and otherwise hold for
# `timeout_sec` and `watch_timeout`: 1 s here (ENV), so they too answer the unchanged state
# after the change, every second, as the pollers do (AWS 0.5 s, Azure 0.25 s in the harness).
PATHS = {
    "aws": "GET /latest/meta-data/",
    "azure": "GET /metadata/scheduledevents",
    "gcp": "GET /computeMetadata/v1/instance/maintenance-event",
    "kubernetes": "GET /api/v1/nodes",
}
ENV = {
    "gcp": {"FOREWARN_GCP_TIMEOUT_SEC": "1"},
    "kubernetes": {"FOREWARN_KUBERNETES_WATCH_TIMEOUT": "1"},
}
# Asked this many times more after the last notice came: the answer to the first ask after it
# (the unchanged state a duplicate would come from) was read and handed on before the second
# was asked, a whole poll before the third.
ASKS_AFTER = 3


def _sent(agent: RunningAgent, notice_id: str) -> list[tuple[str, Any]]:
    """(action, deadline) of every message `agent` sent for `notice_id`, in order."""
    return [(n["action"], n["deadline"]) for n in agent.events if n["id"] == notice_id]


def _asked(agent: RunningAgent) -> int:
    """How many times the watcher asked for its notices' path (every path under it)."""
    prefix = PATHS[agent.provider]
    requests = agent.sim.state()["requests"]
    return sum(int(count) for key, count in requests.items() if key.startswith(prefix))


def _settled(agent: RunningAgent, count: int) -> list[dict[str, Any]]:
    """The notices once `count` have come (15 s at most) and the watcher has read the state
    after them ASKS_AFTER times with none more: what a duplicate would have joined. A wait
    for `count` alone does between the steps of a walk: a duplicate there is one notice too
    many in what the last step's wait returns."""
    _came(agent, count)
    while True:
        seen, asked = len(agent.events), _asked(agent)

        def more(seen: int = seen, asked: int = asked) -> bool:
            return len(agent.events) != seen or _asked(agent) >= asked + ASKS_AFTER

        # A tenth of a second between looks: the harness's fastest poll is 0.25 s.
        what = f"the {agent.provider} watcher asking again after {count} notices"
        eventually(more, timeout=15, what=what, interval=0.1)
        if len(agent.events) == seen:
            return agent.events


def _came(agent: RunningAgent, count: int) -> None:
    """`count` notices came (15 s at most): a step of a walk done, the next may begin."""
    eventually(lambda: len(agent.events) >= count, timeout=15, what=f"{count} notices")


def _start(provider: str) -> Any:
    return start_agent(provider, env=ENV.get(provider))


def _near(deadline: str | None, seconds: float) -> bool:
    return deadline is not None and abs(
        parse_time(deadline) - (utcnow() + timedelta(seconds=seconds))
    ) < timedelta(seconds=15)


def test_aws_instance_action_time_moved_is_one_terminate_per_move() -> None:
    with _start("aws") as agent:
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
    with _start("aws") as agent:
        at = (utcnow() + timedelta(minutes=10)).replace(microsecond=0)
        agent.aws.raise_notice("spot", action="stop", time=at.isoformat())
        first = agent.wait_for_event(action="terminate", timeout=15)
        agent.aws.change("spot", action="terminate")
        _settled(agent, 2)
        sent = [n for n in agent.events if n["id"] == first["id"]]
        assert [n["detail"]["action"] for n in sent] == ["stop", "terminate"], sent
        assert [parse_time(n["deadline"]) for n in sent] == [at, at], sent


def test_aws_scheduled_not_before_moved_then_canceled() -> None:
    with _start("aws") as agent:
        event_id = agent.aws.scheduled(in_="1h")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.aws.change(event_id, not_before=7200)
        _came(agent, 2)
        agent.aws.withdraw(event_id)
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "drain", "clear"], sent
        assert _near(sent[0][1], 3600) and _near(sent[1][1], 7200), sent


def test_azure_not_before_moved_then_withdrawn() -> None:
    with _start("azure") as agent:
        event_id = agent.azure.event("Reboot", in_="15m")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.azure.change(event_id, not_before_seconds=1800)
        _came(agent, 2)
        agent.azure.withdraw(event_id)
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "drain", "clear"], sent
        assert _near(sent[0][1], 900) and _near(sent[1][1], 1800), sent


def test_gcp_maintenance_terminate_none_terminate() -> None:
    with _start("gcp") as agent:
        agent.gcp.maintenance("TERMINATE")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.gcp.end_maintenance()
        _came(agent, 2)
        agent.gcp.maintenance("TERMINATE")
        events = _settled(agent, 3)
        # A maintenance event after NONE is another event: its own id.
        sent = [(n["action"], n["id"] == drain["id"]) for n in events]
        assert sent == [("drain", True), ("clear", True), ("drain", False)], events
        assert _near(events[2]["deadline"], 3600), events


@pytest.mark.parametrize("key", ["karpenter.sh/disrupted", "node.kubernetes.io/unschedulable"])
def test_kubernetes_taint_removed_and_added_again(key: str) -> None:
    with _start("kubernetes") as agent:
        agent.kubernetes.taint(key, effect="NoSchedule")
        drain = agent.wait_for_event(action="drain", timeout=15)
        agent.kubernetes.withdraw(f"taint/{key}")
        _came(agent, 2)
        agent.kubernetes.taint(key, effect="NoSchedule")
        _settled(agent, 3)
        sent = _sent(agent, drain["id"])
        assert [action for action, _ in sent] == ["drain", "clear", "drain"], sent
