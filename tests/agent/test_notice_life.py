"""A notice's life over real processes: escalation that follows the deadline both ways,
changes re-sent with the same id, notices that come back after a clear, expiry, refused
deadlines and state that belongs to one runtime directory."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.boot import machine_started
from forewarn.providers.simulator import SimServer
from other_user import ForkedAgent, other_user, shared_tmp
from slow_state_disk import slow_state_disk
from support import (
    DEAD_LOOPBACK,
    AgentProcess,
    Subscriber,
    agent_env,
    control,
    eventually,
    run_forewarn,
    running_agent,
)

# About sixty agents, each forked from a launcher that loaded the agent once
# (`forked_agents`, tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

FAST_AWS = {
    "FOREWARN_AWS_SCHEDULED_INTERVAL": "0.2",
    "FOREWARN_AWS_SPOT_INTERVAL": "0.2",
    "FOREWARN_AWS_REBALANCE_INTERVAL": "0.2",
    "FOREWARN_AWS_ASG_INTERVAL": "0",
}


def later(seconds: float) -> str:
    return format_time(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def next_notice(sub: Subscriber, timeout: float = 10, **match: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        try:
            notice = sub.notice(timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            break
        seen.append(notice)
        if all(notice.get(key) == value for key, value in match.items()):
            return notice
    raise AssertionError(f"no notice matching {match}; saw {seen}")


class _Guarded:
    """A started agent with a `Notices` on it (its listener `seen` records each action, added
    before the subscription starts: a drain delivered first was missed, seen []) and a
    `CheckpointGuard` over those notices. A test that restarts the agent sets `agent`: the
    one stopped at the end is the last."""

    def __init__(self, agent: AgentProcess, **guard_options: Any) -> None:
        self.agent = agent.start()
        self.notices = Notices(agent.events, agent.control_endpoint, start=False)
        self.seen: list[str] = []
        self.notices.add_listener(lambda event: self.seen.append(event.action))
        self.notices.start()
        self.guard = CheckpointGuard(notices=self.notices, flag_file=None, **guard_options)

    def __enter__(self) -> _Guarded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.guard.close()
        self.notices.close()
        self.agent.stop()

    def flushed_drain(self) -> tuple[str, str]:
        """The drain the guard was told of, saved for: its id, and the id of the agent that
        sent it (from its first heartbeat)."""
        eventually(lambda: self.guard.due(1), 10, "the drain")
        (notice_id,) = self.guard.saved(1, 0.1).notices
        # The notice's replay can come before the first heartbeat.
        eventually(lambda: self.notices.agent is not None, 10, "the first heartbeat")
        assert self.notices.agent is not None
        return notice_id, self.notices.agent["agent"]

    def hears_nothing(self) -> None:
        """The agent lists no notice, and the guard, once it has heard the agent, has neither
        a save nor an exit due."""
        assert self.agent.control({"op": "status"})["active"] == []
        eventually(lambda: self.notices.agent is not None, 10, "the agent's heartbeat")
        assert not self.guard.due(1) and not self.guard.should_exit


@pytest.fixture
def imds() -> Iterator[tuple[ImdsSimulator, SimServer]]:
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        yield sim, server


def aws_agent(tmp_path: Path, server: SimServer, *args: str) -> AgentProcess:
    env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, **FAST_AWS)
    return AgentProcess(tmp_path, providers=("aws",), args=args, env=env)


def test_an_escalated_scheduled_event_moved_a_day_out_is_a_drain_again(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    sim, server = imds
    with aws_agent(tmp_path, server, "--exit-margin", "5s") as agent, agent.subscriber() as sub:
        event_id = sim.raise_notice("scheduled", {"code": "system-reboot", "not_before": 7})
        drain = next_notice(sub, action="drain")
        terminate = next_notice(sub, action="terminate", id=drain["id"])
        sim.change_notice(event_id, {"not_before": 86400})
        again = next_notice(sub, id=drain["id"])
        assert again["action"] == "drain" and again["seq"] > terminate["seq"]
        (active,) = agent.control({"op": "status"})["active"]
        assert active["action"] == "drain" and active["id"] == f"aws/scheduled/{event_id}"


def test_a_manual_drain_escalated_and_moved_out_is_a_drain_again(tmp_path: Path) -> None:
    with AgentProcess(tmp_path, args=("--exit-margin", "60s")) as agent, agent.subscriber() as sub:
        request = {"op": "notify", "action": "drain", "id": "local/move", "deadline": later(30)}
        assert agent.control(request)["notice"]["action"] == "terminate"
        next_notice(sub, action="terminate")
        moved = agent.control({**request, "deadline": later(3600)})
        assert moved["notice"]["action"] == "drain"
        assert next_notice(sub, id="local/move")["action"] == "drain"


def test_a_drain_escalated_while_its_save_is_under_way_is_answered_by_that_save_once(
    tmp_path: Path,
) -> None:
    """The terminate comes while the drain's save is being written: that save says exit, and
    no second save is asked for; the agent counts the ack for the terminate."""
    with _Guarded(
        AgentProcess(tmp_path, args=("--exit-margin", "60s")), handle_signals=False
    ) as held:
        agent = held.agent
        request = {"op": "notify", "action": "drain", "id": "local/up", "deadline": later(3600)}
        assert agent.control(request)["notice"]["action"] == "drain"
        eventually(lambda: held.guard.due(1), 10, "the drain")
        escalated = agent.control({**request, "deadline": later(30)})
        assert escalated["notice"]["action"] == "terminate"
        eventually(lambda: held.guard.should_exit, 10, "the terminate")
        result = held.guard.saved(1, 0.1)
        assert result.exit and result.notices == ("local/up",)
        assert not held.guard.due(2)
        # Listed acked only for an ack of its action now (a drain's acks are no terminate's).
        eventually(
            lambda: "local/up" in (held.notices.agent or {}).get("acked", ()),
            10,
            "a heartbeat listing the terminate acked",
        )
        assert held.seen == ["drain", "terminate"]


def test_a_spot_action_changed_from_terminate_to_stop_is_resent(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    sim, server = imds
    with aws_agent(tmp_path, server) as agent, agent.subscriber() as sub:
        when = later(120)
        sim.raise_notice("spot", {"action": "terminate", "time": when})
        first = next_notice(sub, reason="spot-interruption")
        assert first["detail"]["action"] == "terminate"
        sim.raise_notice("spot", {"action": "stop", "time": when})
        second = next_notice(sub, reason="spot-interruption")
        assert second["id"] == first["id"] and second["detail"]["action"] == "stop"
        assert second["deadline"] == first["deadline"] and second["seq"] > first["seq"]


def test_a_subscriber_sees_the_spot_action_change_from_terminate_to_stop(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """The agent re-sent the change, but `Notices` took it for a repeat (same action, same
    deadline): `active` kept `terminate` and no listener was told."""
    sim, server = imds
    with aws_agent(tmp_path, server) as agent:
        notices = Notices(agent.events, agent.control_endpoint)
        told: list[str] = []
        notices.add_listener(lambda event: told.append(event.detail.get("action", "")))
        try:
            eventually(lambda: notices.alive, 10, "the agent's heartbeat")
            when = later(120)
            sim.raise_notice("spot", {"action": "terminate", "time": when})
            eventually(lambda: told == ["terminate"], 10, "the terminate")
            sim.raise_notice("spot", {"action": "stop", "time": when})
            eventually(lambda: told == ["terminate", "stop"], 10, "the change to stop")
            (event,) = notices.active.values()
            assert event.action == "terminate" and event.detail["action"] == "stop"
        finally:
            notices.close()


REBALANCE = {"noticeTime": "2026-11-30T03:00:00Z"}


@contextlib.contextmanager
def rebalance_due(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> Iterator[tuple[ImdsSimulator, Subscriber, CheckpointGuard, dict[str, Any]]]:
    """An AWS agent, a subscriber and a guard (no signal handlers), a rebalance raised and
    its drain due at step 1: the simulator, the subscriber, the guard and the drain's event."""
    sim, server = imds
    with aws_agent(tmp_path, server) as agent, agent.subscriber() as sub:
        guard = CheckpointGuard(
            events=agent.events,
            control=agent.control_endpoint,
            flag_file=None,
            handle_signals=False,
        )
        try:
            eventually(lambda: guard.notices is not None and guard.notices.alive, 10)
            sim.raise_notice("rebalance", REBALANCE)
            first = next_notice(sub, action="drain")
            eventually(lambda: guard.due(1), 10)
            yield sim, sub, guard, first
        finally:
            guard.close()


def test_a_rebalance_back_after_a_clear_keeps_its_id_and_the_guard_flushes_again(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    with rebalance_due(tmp_path, imds) as (sim, sub, guard, first):
        assert not guard.saved(1, 0.1).exit
        sim.withdraw("rebalance")
        next_notice(sub, action="clear", id=first["id"])
        # The guard's subscriber thread takes the clear (its listeners run before it
        # reads the next notice, the drain raised again).
        eventually(
            lambda: guard.notices is not None and first["id"] not in guard.notices.active, 10
        )
        sim.raise_notice("rebalance", REBALANCE)
        second = next_notice(sub, action="drain")
        assert second["id"] == first["id"]
        eventually(lambda: guard.due(2), 10)
        result = guard.saved(2, 0.1)
        assert result.notices == (first["id"],) and not result.exit


def test_a_rebalance_cleared_mid_flush_and_back_is_flushed_for_again(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """The clear came while the job was saving for the drain: the save, once done, marked the
    drain handled again, and the rebalance raised again (same id) asked the job for nothing:
    its new occurrence went unsaved."""
    with rebalance_due(tmp_path, imds) as (sim, sub, guard, first):
        # The save is under way: the rebalance is withdrawn before it ends.
        sim.withdraw("rebalance")
        next_notice(sub, action="clear", id=first["id"])
        eventually(
            lambda: guard.notices is not None and first["id"] not in guard.notices.active, 10
        )
        result = guard.saved(1, 0.1)
        assert not result.exit
        sim.raise_notice("rebalance", REBALANCE)
        assert next_notice(sub, action="drain")["id"] == first["id"]
        eventually(lambda: guard.due(2), 10, "a save for the drain raised again")
        again = guard.saved(2, 0.1)
        assert again.notices == (first["id"],) and not again.exit
        assert not guard.due(3)


def test_a_drain_still_shown_across_an_agent_restart_is_not_cleared_nor_flushed_again(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """A restarted agent's first heartbeats list only what its watchers have reported so far:
    the client took them at their word, cleared the rebalance drain, and the guard flushed
    for it again when the new agent reported it a moment later."""
    sim, server = imds
    sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:00:00Z"})
    with _Guarded(aws_agent(tmp_path, server), handle_signals=False) as held:
        notice_id, first_agent = held.flushed_drain()
        held.agent.stop()
        # The new agent's first look at the rebalance path takes a second.
        path = "/latest/meta-data/events/recommendations/rebalance"
        sim.add_fault("hang", seconds=1, count=1, path=path)
        held.agent = aws_agent(tmp_path, server).start()

        def listed_by_the_new_agent() -> bool:
            beat = held.notices.agent or {}
            return beat.get("agent") != first_agent and beat.get("active") == [notice_id]

        eventually(listed_by_the_new_agent, 15, "the new agent to report the drain")
        assert held.seen == ["drain"] and not held.guard.due(2)


def test_a_scheduled_event_inside_its_window_is_not_cleared_by_an_agent_restart(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """An AWS scheduled event stays one terminate until NotAfter, but the end of its window
    was not in the state file: an agent restarted inside the window retired it at once (a
    clear) and raised it again at the watcher's first poll."""
    sim, server = imds
    sim.raise_notice(
        "scheduled", {"event_id": "instance-event-0c", "not_before": 2, "not_after": 3600}
    )
    args = ("--exit-margin", "1s", "--set", "notice_grace=1")
    notice_id = "aws/scheduled/instance-event-0c"
    path = "GET /latest/meta-data/events/maintenance/scheduled"
    with aws_agent(tmp_path, server, *args) as agent, agent.subscriber() as sub:
        next_notice(sub, 15, id=notice_id, action="terminate")
        # Past NotBefore plus the grace while it is still listed.
        polls = sim.requests[path]
        eventually(lambda: sim.requests[path] >= polls + 10, 15, "more polls")
    with aws_agent(tmp_path, server, *args) as again:
        polls = sim.requests[path]
        eventually(lambda: sim.requests[path] >= polls + 5, 15, "the new agent's polls")
        active = again.control({"op": "status"})["active"]
        assert [(n["id"], n["action"]) for n in active] == [(notice_id, "terminate")]
        assert f"clear {notice_id}" not in again.output(), again.output()


def test_a_notice_past_deadline_and_grace_is_retired_with_a_clear(tmp_path: Path) -> None:
    args = ("--exit-margin", "1s", "--set", "notice_grace=1")
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, args=args, env=env) as agent, agent.subscriber() as sub:
        raised = agent.control({"op": "notify", "action": "terminate", "deadline": later(1)})
        notice_id = raised["notice"]["id"]
        cleared = next_notice(sub, timeout=6, action="clear", id=notice_id)
        assert "grace" in cleared["detail"]["expired"]
        assert agent.control({"op": "status"})["active"] == []
        assert f"notice {notice_id} expired" in agent.output()
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        assert state["manual"] == []
        with urllib.request.urlopen(agent.metrics_url() + "/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
        expected = 'forewarn_notices_expired_total{provider="local",reason="manual"} 1.0'
        assert expected in metrics


def test_a_manual_notice_that_ended_while_the_agent_was_down_is_retired_not_resent(
    tmp_path: Path,
) -> None:
    args = ("--set", "notice_grace=1")
    first = AgentProcess(tmp_path, args=args).start()
    try:
        deadline = datetime.now(timezone.utc) + timedelta(seconds=2)
        request = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
        notice_id = first.control(request)["notice"]["id"]
    finally:
        assert first.stop() == 0
    state = tmp_path / "state" / "state.json"
    saved = [notice["id"] for notice in json.loads(state.read_text())["manual"]]
    assert saved == [notice_id], "the first agent stopped before the notice ended"
    ended = deadline + timedelta(seconds=1)
    eventually(lambda: datetime.now(timezone.utc) > ended, 10, "the notice's deadline plus grace")
    # An AWS metadata endpoint that accepts and never answers holds `auto` in detection for a
    # second after the sockets are bound: the training process's client, reconnecting while the
    # agent restarts, is subscribed before the agent sends what it restored.
    with socket.socket() as hanging:
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)
        dead = f"http://{DEAD_LOOPBACK}"
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=f"http://127.0.0.1:{hanging.getsockname()[1]}",
            FOREWARN_GCP_URL=dead,
            FOREWARN_AZURE_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
            FOREWARN_KUBERNETES_URL=dead,
            FOREWARN_METRICS_ADDRESS="127.0.0.1:0",
        )
        again = AgentProcess(tmp_path, providers=("auto",), args=args, env=env)
        with Subscriber(again.events) as sub, again:
            seen = []
            while not seen or seen[-1]["action"] != "clear":
                notice = sub.notice(timeout=10)
                if notice["id"] == notice_id:
                    seen.append(notice)
            assert [notice["action"] for notice in seen] == ["clear"], seen
            assert "grace" in seen[0]["detail"]["expired"]
            assert again.control({"op": "status"})["active"] == []
            assert f"notice {notice_id} expired" in again.output()
            assert json.loads(state.read_text())["manual"] == []
            with urllib.request.urlopen(again.metrics_url() + "/metrics", timeout=5) as answer:
                metrics = answer.read().decode()
    assert 'forewarn_notices_expired_total{provider="local",reason="manual"} 1.0' in metrics


@pytest.mark.slow(5)
def test_what_a_restarted_agent_sends_at_start_is_numbered_in_order(tmp_path: Path) -> None:
    """`seq` strictly increases over every message the agent sends. A restarted agent sent
    the clear of a notice that ended while it was down, then the notices it restored, which
    were numbered before that clear: a client that drops what is numbered below what it has
    seen (a replay it holds already) lost the restored notices."""
    args = ("--set", "notice_grace=1")
    first = AgentProcess(tmp_path, args=args).start()
    try:
        deadline = datetime.now(timezone.utc) + timedelta(seconds=1)
        ending = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
        ended_id = first.control(ending)["notice"]["id"]
        kept_id = first.control({"op": "notify", "action": "drain"})["notice"]["id"]
    finally:
        assert first.stop() == 0
    ended = deadline + timedelta(seconds=1)
    eventually(lambda: datetime.now(timezone.utc) > ended, 10, "the notice's deadline plus grace")
    # As above: `auto` held in detection, the client is subscribed before the agent sends
    # what it restored.
    with socket.socket() as hanging:
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(8)
        dead = f"http://{DEAD_LOOPBACK}"
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=f"http://127.0.0.1:{hanging.getsockname()[1]}",
            FOREWARN_GCP_URL=dead,
            FOREWARN_AZURE_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
            FOREWARN_KUBERNETES_URL=dead,
        )
        again = AgentProcess(tmp_path, providers=("auto",), args=args, env=env)
        with Subscriber(again.events, ("notice", "heartbeat")) as sub, again:
            seen: list[tuple[str, dict[str, Any]]] = []
            while not any(topic == "heartbeat" for topic, _ in seen):
                seen.append(sub.recv(timeout=10))
    notices = [(body["id"], body["action"]) for topic, body in seen if topic == "notice"]
    assert notices[:2] in (
        [(ended_id, "clear"), (kept_id, "drain")],
        [(kept_id, "drain"), (ended_id, "clear")],
    ), seen
    numbers = [body["seq"] for _, body in seen]
    assert numbers == sorted(set(numbers)), seen


def test_a_manual_notice_without_deadline_ends_after_its_lifetime(tmp_path: Path) -> None:
    with (
        AgentProcess(tmp_path, args=("--set", "manual_lifetime=1")) as agent,
        agent.subscriber() as sub,
    ):
        raised = agent.control({"op": "notify", "action": "drain"})
        cleared = next_notice(sub, timeout=6, action="clear", id=raised["notice"]["id"])
        assert "no deadline" in cleared["detail"]["expired"]


def test_a_flag_file_still_there_after_expiry_is_raised_again(tmp_path: Path) -> None:
    args = ("--set", "manual_lifetime=1", "--set", "local.flag_interval=0.05")
    with AgentProcess(tmp_path, args=args) as agent, agent.subscriber() as sub:
        (tmp_path / "run" / "checkpoint-now").write_text("")
        first = next_notice(sub, action="drain")
        next_notice(sub, timeout=6, action="clear", id=first["id"])
        again = next_notice(sub, timeout=6, action="drain", id=first["id"])
        assert again["seq"] > first["seq"]


@pytest.mark.slow(5)
def test_a_flag_notice_raised_again_after_expiry_is_not_retired_by_an_agent_restart(
    tmp_path: Path,
) -> None:
    """A notice raised again after it expired has a fresh lifetime. A restarted agent counted
    it from when it was first noticed: it retired it at start (a clear to every client, the
    drain again at its watcher's next look) although the flag file had not been touched."""
    lifetime = 3.0
    args = (
        *("--set", f"manual_lifetime={lifetime:g}", "--set", "local.flag_interval=0.05"),
        *("--log-format", "json"),
    )
    with AgentProcess(tmp_path, args=args) as agent, agent.subscriber() as sub:
        (tmp_path / "run" / "checkpoint-now").write_text("")
        first = next_notice(sub, action="drain")
        next_notice(sub, timeout=8, action="clear", id=first["id"])
        again = next_notice(sub, timeout=8, action="drain", id=first["id"])
    ends = parse_time(again["sent_at"]) + timedelta(seconds=lifetime)
    with AgentProcess(tmp_path, args=args) as restarted:
        active = [n["id"] for n in restarted.control({"op": "status"})["active"]]
        log = restarted.output()
    expired = [
        line
        for line in map(json.loads, filter(None, log.splitlines()))
        if line.get("lifecycle") == "expired"
    ]
    assert all(parse_time(line["ts"]) >= ends for line in expired), (ends, expired)
    if not expired:
        assert active == [first["id"]]


@pytest.mark.slow(6)
def test_a_flag_acked_by_one_job_between_two_quick_restarts_waits_for_the_other(
    tmp_path: Path,
) -> None:
    """Two jobs hold the flag's drain. After a restart, while the agent waits for the jobs
    to reconnect, one acks; the agent restarts again at once. The second restart counted
    the drain flushed by every job already (the jobs of the first were only the one that had
    acked), without a word: the flag watcher, told before its first look, let it pass, and
    when the other job saved nothing was left to complete. The flag file stayed, and a script
    waiting for it to go waited forever. (Azure's watcher, told so, approves the event
    before the other job has saved.)"""
    flag = tmp_path / "run" / "checkpoint-now"
    args = ("--set", "local.flag_interval=0.05")
    first = Subscriber(AgentProcess(tmp_path).events, ("notice", "client/job-a"))
    second = Subscriber(AgentProcess(tmp_path).events, ("notice", "client/job-b"))
    try:
        with AgentProcess(tmp_path, args=args) as agent:
            first.ready()
            second.ready()
            eventually(lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 2, 10)
            flag.write_text("")
            notice_id = next_notice(first, action="drain")["id"]
            second.close()  # job-b is still reconnecting when the next agent hears job-a
        with AgentProcess(tmp_path, args=args) as agent:
            ack = {"op": "ack", "notice_id": notice_id, "client": "job-a", "flush_seconds": 0.1}
            assert agent.control(ack)["ok"]
        # Stopped within its wait for the jobs to reconnect (3 s from its start): past it,
        # job-b, not back by then, was rightly not waited for.
        assert "flushed by every client" not in agent.output(), "the second agent was slow"
        second = Subscriber(AgentProcess(tmp_path).events, ("notice", "client/job-b"))
        # Both jobs come back (new sockets, as a Notices whose agent went away reconnects).
        first.close()
        first = Subscriber(AgentProcess(tmp_path).events, ("notice", "client/job-a"))
        with AgentProcess(tmp_path, args=args) as agent:
            eventually(lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 2, 10)
            # The flag watcher was told at its start of the drain flushed (and removed the
            # file), or has looked at the file since.
            eventually(lambda: "found: drain" in agent.output() or not flag.exists(), 10)
            assert flag.exists(), agent.output()
            assert [n["id"] for n in agent.control({"op": "status"})["active"]] == [notice_id]
            ack["client"] = "job-b"
            assert agent.control(ack)["ok"]
            eventually(lambda: not flag.exists(), 10, "the flag handled once both jobs saved")
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [
        ("0001-01-01T00:00:00Z", "in the past"),
        ("0001-01-01T00:30:00+01:00", "not an RFC 3339 time"),
        ("2001-01-01T00:00:00Z", "in the past"),
        ("9999-12-31T23:59:59Z", "days ahead"),
        (1, "expected an RFC 3339 time"),
        (1.5e300, "expected an RFC 3339 time"),
        ([], "expected an RFC 3339 time"),
        ("tomorrow", "not an RFC 3339 time"),
    ],
)
def test_unusable_deadlines_are_refused_with_a_clear_error(
    tmp_path: Path, deadline: object, expected: str
) -> None:
    with AgentProcess(tmp_path) as agent:
        reply = agent.control({"op": "notify", "action": "drain", "deadline": deadline})
        assert reply["ok"] is False and expected in reply["error"], reply
        assert "internal error" not in reply["error"]
        assert agent.control({"op": "status"})["active"] == []


def test_notify_with_a_past_deadline_exits_2_naming_the_flag(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        for value in ("2001-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "99999999999d"):
            done = run_forewarn("notify", "terminate", "--deadline", value, env=agent.env)
            assert done.returncode == 2, done
            assert done.stderr.startswith("forewarn") and "--deadline" in done.stderr, done.stderr
            assert len(done.stderr.strip().splitlines()) == 1
        assert agent.control({"op": "status"})["active"] == []


def test_a_saved_deadline_at_year_one_does_not_stop_the_next_start(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path, args=("--exit-margin", "60s"))
    state = tmp_path / "state" / "state.json"
    notice = {
        "v": 1,
        "id": "local/ancient",
        "seq": 5,
        "action": "drain",
        "reason": "manual",
        "provider": "local",
        "deadline": "0001-01-01T00:00:45Z",
        "noticed_at": "0001-01-01T00:00:00Z",
        "sent_at": "0001-01-01T00:00:00Z",
        "detail": {},
    }
    state.write_text(json.dumps({"version": 1, "seq": 5, "manual": [notice]}))
    with agent:
        eventually(lambda: "notice local/ancient expired" in agent.output(), 5)
        assert agent.control({"op": "status"})["active"] == []


def test_heartbeats_say_which_notices_a_client_already_saved_for(tmp_path: Path) -> None:
    agent = AgentProcess(tmp_path).start()
    try:
        raised = agent.control({"op": "notify", "action": "terminate", "deadline": later(600)})
        notice_id = raised["notice"]["id"]
        ack = {"op": "ack", "notice_id": notice_id, "client": "c1", "step": 3, "flush_seconds": 0.5}
        assert agent.control(ack)["ok"]
        with agent.subscriber(("heartbeat",)) as sub:
            _, beat = sub.recv(timeout=3)
        assert beat["acked"] == [notice_id]
    finally:
        agent.kill()
    # A restart still knows the terminate was acted on.
    again = AgentProcess(tmp_path, env=agent.env).start()
    try:
        with again.subscriber(("heartbeat",)) as sub:
            _, beat = sub.recv(timeout=3)
        assert beat["acked"] == [notice_id] and beat["active"] == [notice_id]
    finally:
        again.stop()


def test_a_provider_terminate_acted_on_before_an_agent_restart_is_still_acked_after(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """The state file kept the ack of a provider's notice, but a restarted agent used it for
    manual notices only: a job started after the restart, on a machine whose spot interruption
    an earlier job had saved and exited for, took it for one nobody acted on and exited."""
    sim, server = imds
    sim.raise_notice("spot", {"time": later(600)})
    agent = aws_agent(tmp_path, server).start()
    try:
        with agent.subscriber() as sub:
            notice_id = next_notice(sub, action="terminate")["id"]
        ack = {"op": "ack", "notice_id": notice_id, "client": "c1", "flush_seconds": 0.5}
        assert agent.control(ack)["ok"]
    finally:
        agent.kill()
    again = aws_agent(tmp_path, server).start()
    try:
        with again.subscriber(("heartbeat",)) as sub:

            def listed() -> dict[str, Any] | None:
                _, beat = sub.recv(timeout=3)
                return beat if beat["active"] == [notice_id] else None

            beat = eventually(listed, 10, "a heartbeat listing the re-reported terminate")
        assert beat["acked"] == [notice_id]
    finally:
        again.stop()


def test_agents_with_different_runtime_dirs_never_share_state(tmp_path: Path) -> None:
    # Run as an ordinary user: root would use /var/lib/forewarn, which tests never touch.
    uid, gid = other_user()
    base = shared_tmp(uid, gid)
    try:
        env = agent_env(tmp_path)
        for key in ("FOREWARN_RUNTIME_DIR", "FOREWARN_STATE_DIR"):
            env.pop(key)
        env.update(HOME=str(base), XDG_STATE_HOME=str(base / "state"))

        def agent(name: str) -> tuple[ForkedAgent, str]:
            runtime = base / name
            args = ["--provider", "local", "--runtime-dir", str(runtime)]
            forked = ForkedAgent(uid, gid, env, args, tmp_path / f"{name}.log").start()
            control = f"ipc://{runtime}/control"
            eventually(lambda: _answers(control), 15)
            return forked, control

        first, control_a = agent("a")
        raised = control(control_a, {"op": "notify", "action": "terminate", "note": "a's"})
        assert first.stop() == 0
        second, control_b = agent("b")
        try:
            assert control(control_b, {"op": "status"})["active"] == []
        finally:
            second.stop()
        again, control_a = agent("a")
        try:
            active = control(control_a, {"op": "status"})["active"]
            assert [n["id"] for n in active] == [raised["notice"]["id"]]
        finally:
            again.stop()
        states = sorted(p.parent.name for p in (base / "state").rglob("state.json"))
        assert len(states) == 2 and all(name.startswith("run-") for name in states), states
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _answers(endpoint: str) -> bool:
    try:
        return bool(control(endpoint, {"op": "status"}, timeout=0.3).get("ok"))
    except TimeoutError:
        return False


def test_a_drain_across_an_agent_restart_outlasts_a_first_answer_slower_than_the_clients_wait(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """The restarted agent listed a provider's notice only once its watcher reported it again:
    with an IMDS that answered the rebalance path 503 for 15 s after the restart, the client
    gave up after its 5 s wait and cleared the drain, and the guard flushed for it again when
    the path answered. The agent now keeps the notice it had until the watcher has answered."""
    sim, server = imds
    sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:00:00Z"})
    with _Guarded(aws_agent(tmp_path, server), handle_signals=False) as held:
        notice_id, first_agent = held.flushed_drain()
        # On disk a moment after it went out (the publish does not wait for the fsync).
        state = tmp_path / "state" / "state.json"
        eventually(lambda: state.exists() and notice_id in state.read_text(), 10, "the state")
        held.agent.kill()
        path = "/latest/meta-data/events/recommendations/rebalance"
        sim.add_fault("status", status=503, duration=15, path=path)
        agent = held.agent = aws_agent(tmp_path, server).start()
        assert agent.control({"op": "status"})["active"][0]["id"] == notice_id

        def answered_by_the_new_agent() -> bool:
            beat = held.notices.agent or {}
            health = agent.control({"op": "status"})["health"][0]
            return beat.get("agent") != first_agent and health["state"] == "healthy"

        eventually(answered_by_the_new_agent, 20, "the new agent's rebalance path to answer")
        eventually(lambda: held.notices.agent and held.notices.agent["active"] == [notice_id], 5)
        assert held.seen == ["drain"] and not held.guard.due(2)


def test_a_notice_withdrawn_while_the_agent_was_down_is_cleared_once_its_watcher_answered(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    sim, server = imds
    sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:00:00Z"})
    agent = aws_agent(tmp_path, server).start()
    try:
        notice_id = eventually(lambda: agent.control({"op": "status"})["active"], 10)[0]["id"]
        state = tmp_path / "state" / "state.json"
        eventually(lambda: state.exists() and notice_id in state.read_text(), 10, "the state")
    finally:
        agent.kill()
    sim.withdraw("rebalance")
    path = "/latest/meta-data/events/recommendations/rebalance"
    fault = sim.add_fault("hang", path=path)
    agent = aws_agent(tmp_path, server).start()
    try:
        with agent.subscriber() as sub:
            # Kept while the path that reported it has not answered.
            assert [n["id"] for n in agent.control({"op": "status"})["active"]] == [notice_id]
            sim.remove_fault(fault)
            cleared = next_notice(sub, 10, id=notice_id, action="clear")
            assert "since the agent restarted" in cleared["detail"]["withdrawn"]
        assert agent.control({"op": "status"})["active"] == []
        eventually(lambda: notice_id not in state.read_text(), 10, "the state without it")
    finally:
        agent.stop()


@pytest.mark.parametrize("withdrawal", ["clear", "drain"])
def test_a_terminate_withdrawn_before_the_save_is_flushed_and_the_job_trains_on(
    tmp_path: Path, withdrawal: str
) -> None:
    """The machine is not going away: the guard that was about to save for the terminate
    still saves, but the save no longer ends the job. It did, since an exit once asked for
    was never taken back."""
    with _Guarded(AgentProcess(tmp_path), handle_signals=False) as held:
        agent, notices, guard = held.agent, held.notices, held.guard
        agent.control({"op": "notify", "action": "terminate", "id": "local/t"})
        eventually(lambda: guard.due(1), 10, "the terminate")
        assert guard.should_exit
        if withdrawal == "clear":
            agent.control({"op": "clear", "id": "local/t"})
            eventually(lambda: "local/t" not in notices.active, 10, "the clear")
        else:
            agent.control({"op": "notify", "action": "drain", "id": "local/t"})
            eventually(lambda: notices.active["local/t"].action == "drain", 10, "the drain")
        assert not guard.should_exit
        result = guard.saved(1, 0.1)
        assert result.notices == ("local/t",) and not result.exit
        assert not guard.due(2)


def test_a_sigterm_still_ends_the_job_when_the_terminate_is_withdrawn(tmp_path: Path) -> None:
    with _Guarded(AgentProcess(tmp_path)) as held:
        agent, notices, guard = held.agent, held.notices, held.guard
        agent.control({"op": "notify", "action": "terminate", "id": "local/t"})
        eventually(lambda: guard.due(1), 10, "the terminate")
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next line
        agent.control({"op": "clear", "id": "local/t"})
        eventually(lambda: "local/t" not in notices.active, 10, "the clear")
        assert guard.should_exit and guard.saved(1, 0.1).exit


def test_a_provider_clear_is_on_disk_before_clients_hear_it(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """Published first and saved after, a clear followed by a SIGKILL brought the notice back
    as active after the restart: the clients that had heard the clear took it for a new
    notice and flushed (or exited) for it again."""
    sim, server = imds
    sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:00:00Z"})
    state = tmp_path / "state" / "state.json"
    with aws_agent(tmp_path, server) as agent, agent.subscriber() as sub:
        notice_id = next_notice(sub, action="drain")["id"]
        eventually(lambda: state.exists() and notice_id in state.read_text(), 10, "the state")
        sim.withdraw("rebalance")
        next_notice(sub, id=notice_id, action="clear")
        assert notice_id not in state.read_text()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_drain_escalated_for_slow_flushes_is_still_terminate_after_a_restart(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """A restarted agent had forgotten the flushes that widened the exit margin: the drain
    it had sent as terminate went out as a drain again, and a client in its final save for
    that terminate was told the machine was not going away."""
    agent = AgentProcess(tmp_path).start()
    try:
        request = {"op": "notify", "action": "drain", "id": "local/d", "deadline": later(100)}
        assert agent.control(request)["notice"]["action"] == "drain"
        ack = {"op": "ack", "client": "c", "notice_id": "local/d", "flush_seconds": 60.0}
        assert agent.control(ack)["ok"]
        eventually(
            lambda: agent.control({"op": "status"})["active"][0]["action"] == "terminate",
            10,
            "the escalation (margin 120 s)",
        )
    finally:
        agent.stop(stop)
    agent = AgentProcess(tmp_path).start()
    try:
        with agent.subscriber() as sub:
            assert next_notice(sub, id="local/d")["action"] == "terminate"
        assert agent.control({"op": "status"})["active"][0]["action"] == "terminate"
    finally:
        agent.stop()


def test_provider_notices_from_before_a_reboot_are_not_restored(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """A stopped and started VM keeps its disk, state file included: the ASG terminate of its
    last boot came back as active, and a job resumed after the boot, taking it for a terminate
    nobody had acted on, saved and exited before the watcher could say it was gone."""
    sim, server = imds
    sim.raise_notice("asg", {})
    env = agent_env(
        tmp_path, FOREWARN_AWS_URL=server.url, **{**FAST_AWS, "FOREWARN_AWS_ASG_INTERVAL": "0.2"}
    )
    agent = AgentProcess(tmp_path, providers=("aws",), env=env).start()
    try:
        eventually(lambda: agent.control({"op": "status"})["active"], 10, "the terminate")
    finally:
        agent.stop()
    state = tmp_path / "state" / "state.json"
    saved = json.loads(state.read_text())
    assert saved["provider"][0]["action"] == "terminate"
    state.write_text(json.dumps({**saved, "boot_id": "the-boot-before"}))
    sim.withdraw("asg")
    sim.add_fault("hang", path="/latest/meta-data/autoscaling")  # IMDS slow after the boot
    with _Guarded(
        AgentProcess(tmp_path, providers=("aws",), env=env), handle_signals=False
    ) as held:
        held.hears_nothing()


@pytest.mark.parametrize(
    ("action", "deadline"), [("terminate", "60s"), ("drain", "60s"), ("terminate", None)]
)
def test_a_manual_notice_whose_deadline_passed_before_this_boot_is_not_sent_again(
    tmp_path: Path, action: str, deadline: str | None
) -> None:
    """`forewarn notify terminate --deadline 60s`, and the machine stopped and started a
    minute after the deadline (a planned stop, a reboot). Manual notices outlive a reboot,
    and this one, kept until 300 s past its deadline, came back active: the job started after
    the boot took it for a terminate nobody had acted on (a drain: escalated past its
    deadline) and exited at its first step, and each restart under a restart policy again.
    A deadline that passed before this machine started described the machine the boot
    ended: the restarted agent retires it at once, saying why. So does a terminate without a
    deadline raised before (`forewarn notify terminate; sudo reboot`): it asked the jobs of
    the boot before to exit, and stood for the rest of `manual_lifetime` (an hour) after."""
    env = agent_env(tmp_path)
    with running_agent(tmp_path, env=env):
        when = ["--deadline", deadline] if deadline else []
        raised = run_forewarn("notify", action, *when, "--json", env=env)
    assert raised.returncode == 0, raised.stderr
    state = tmp_path / "state" / "state.json"
    saved = json.loads(state.read_text())
    [notice] = saved["manual"]
    booted = machine_started()
    assert booted is not None
    # The boot before: the deadline 60 s before this machine started, as a reboot a minute
    # after it finds the file (every time of the notice moved back as far).
    back = parse_time(notice["deadline" if deadline else "noticed_at"]) - (
        booted - timedelta(seconds=60)
    )
    for key in ("deadline", "noticed_at", "sent_at") if deadline else ("noticed_at", "sent_at"):
        notice[key] = format_time(parse_time(notice[key]) - back)
    raised = {key: format_time(parse_time(at) - back) for key, at in saved["raised"].items()}
    moved = {"manual": [notice], "raised": raised, "boot_id": "the-boot-before"}
    state.write_text(json.dumps({**saved, **moved}))
    # A grace and a lifetime past this machine's uptime: as after a reboot within the
    # defaults (300 s, 1 h).
    env = agent_env(tmp_path, FOREWARN_NOTICE_GRACE="86400", FOREWARN_MANUAL_LIFETIME="604800")
    with _Guarded(AgentProcess(tmp_path, env=env), handle_signals=False) as held:
        held.hears_nothing()
    assert "before this machine started" in held.agent.output(), held.agent.output()


def test_a_notify_duration_of_an_earlier_boot_stands_as_the_moment_it_named(
    tmp_path: Path,
) -> None:
    """`forewarn notify drain --deadline 30m`, and a reboot a few minutes later: the duration
    was counted on that boot's clock, which has gone, but the moment it named (the command
    plus 30 min, the deadline saved) is still ahead: the restarted agent sends the drain with
    that deadline, as a flag file's `30m` kept beside it stands after a reboot too (one rule:
    a deadline of an earlier boot stands unless it passed before this boot began)."""
    env = agent_env(tmp_path)
    with running_agent(tmp_path, env=env):
        raised = run_forewarn("notify", "drain", "--deadline", "30m", "--json", env=env)
    assert raised.returncode == 0, raised.stderr
    state = tmp_path / "state" / "state.json"
    saved = json.loads(state.read_text())
    [notice] = saved["manual"]
    assert saved["deadline_clock"], "a duration is held on the boot clock in its boot"
    state.write_text(json.dumps({**saved, "boot_id": "the-boot-before"}))
    agent = AgentProcess(tmp_path, env=env).start()
    try:
        [active] = agent.control({"op": "status"})["active"]
    finally:
        agent.stop()
    assert active["id"] == notice["id"] and active["action"] == "drain"
    assert active["deadline"] == notice["deadline"]


@pytest.mark.parametrize("before_this_boot", [True, False])
def test_provider_notices_saved_without_a_boot_id_are_restored_only_if_of_this_boot(
    tmp_path: Path, before_this_boot: bool
) -> None:
    """A state file written by an agent from before boot ids were kept has no `boot_id`:
    restored across a reboot (an upgrade, then the VM stopped and started), the spot
    terminate of the boot before came back as active, and the job resumed after the boot
    took it for one nobody had acted on and exited. Without the id, the notice's time against
    when this machine started tells, as for the providers' own saved notices (GCP's)."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    offset = -since_boot - 3600 if before_this_boot else -min(since_boot / 2, 60)
    noticed = format_time(datetime.now(timezone.utc) + timedelta(seconds=offset))
    notice = {
        "v": 1,
        "id": "aws/spot-itn/old",
        "seq": 5,
        "action": "terminate",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": later(600),
        "noticed_at": noticed,
        "sent_at": noticed,
        "detail": {},
    }
    state = tmp_path / "state" / "state.json"
    env = agent_env(tmp_path, FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}")
    state.write_text(json.dumps({"version": 1, "seq": 5, "provider": [notice]}))
    with running_agent(tmp_path, providers=("aws",), env=env) as agent:
        active = [n["id"] for n in agent.control({"op": "status"})["active"]]
    assert active == ([] if before_this_boot else ["aws/spot-itn/old"])


def test_a_notice_of_this_boot_by_the_boot_time_is_restored_whatever_its_noticed_at(
    tmp_path: Path,
) -> None:
    """An agent in a container that cannot read /proc/sys/kernel/random/boot_id saved a spot
    terminate it noticed before NTP's first sync stepped the clock forward an hour (a VM whose
    RTC was behind), and its state since with the boot time the clock gives now. The next
    start read the file's boot time as this boot's, and then still dropped the terminate as
    "noticed before this machine started" (the rule for a file that says no boot at all): the
    job, told of its terminate, heard it cleared by silence, and the acks and holds on it
    were lost. A file that says its boot is trusted for its notices."""
    booted = machine_started()
    assert booted is not None
    noticed = format_time(booted - timedelta(minutes=30))  # on the clock before the step
    notice = {
        "v": 1,
        "id": "aws/spot-itn/this-boot",
        "seq": 5,
        "action": "terminate",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": later(600),
        "noticed_at": noticed,
        "sent_at": noticed,
        "detail": {},
    }
    saved = {"version": 1, "seq": 5, "provider": [notice], "booted": format_time(booted)}
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(json.dumps({**saved, "boot_id": None}))
    env = agent_env(tmp_path, FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}")
    with running_agent(tmp_path, providers=("aws",), env=env) as agent:
        active = [n["id"] for n in agent.control({"op": "status"})["active"]]
    assert active == ["aws/spot-itn/this-boot"]


def test_a_state_of_this_boot_by_the_boot_time_keeps_its_notices_ages(tmp_path: Path) -> None:
    """An agent in a container that cannot read /proc/sys/kernel/random/boot_id saved, with
    its boot time, when each notice was raised on the boot clock. Restarted in the same boot,
    it dropped those readings (kept only under a boot id): a loop's `ack --client ID
    --flush-seconds` and each `wait` were judged by `noticed_at` again, which the clock
    steps this case is about (NTP's first sync) make wrong. A boot time of this boot keeps
    them, as a boot id does."""
    booted = machine_started()
    assert booted is not None
    raised = time.clock_gettime(time.CLOCK_BOOTTIME) - 100.0
    noticed = format_time(datetime.now(timezone.utc) - timedelta(seconds=100))
    notice = {
        "v": 1,
        "id": "local/m",
        "seq": 5,
        "action": "drain",
        "reason": "manual",
        "provider": "local",
        "deadline": None,
        "noticed_at": noticed,
        "sent_at": noticed,
        "detail": {},
    }
    saved = {
        "version": 1,
        "seq": 5,
        "manual": [notice],
        "boot_id": None,
        "booted": format_time(booted),
        "raised_clock": {"local/m": raised},
    }
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text(json.dumps(saved))
    with running_agent(tmp_path) as agent:
        ages = agent.control({"op": "status"})["ages"]
    assert 100.0 <= ages.get("local/m", 0.0) < 130.0, ages


@pytest.mark.parametrize("hours_before", [2.0, 0.0])
def test_without_a_boot_id_the_boot_time_tells_notices_from_before_a_reboot(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer], hours_before: float
) -> None:
    """An agent in a container that cannot read /proc/sys/kernel/random/boot_id saved its
    state with no boot id, and the agent after the reboot restored its provider notices as
    if of this boot: a Preempt's or an ASG's terminate came back active, and the job resumed
    after the reboot saved and exited before the watcher could say it was gone. The boot time
    (now less the clock since boot) tells the boots apart there; one within seconds of this
    boot's is this boot's, and its notices are restored as before."""
    sim, server = imds
    sim.raise_notice("asg", {})
    env = agent_env(
        tmp_path, FOREWARN_AWS_URL=server.url, **{**FAST_AWS, "FOREWARN_AWS_ASG_INTERVAL": "0.2"}
    )
    agent = AgentProcess(tmp_path, providers=("aws",), env=env).start()
    try:
        eventually(lambda: agent.control({"op": "status"})["active"], 10, "the terminate")
    finally:
        agent.stop()
    state = tmp_path / "state" / "state.json"
    saved = json.loads(state.read_text())
    booted = machine_started()
    assert saved["provider"][0]["action"] == "terminate" and booted is not None
    booted -= timedelta(hours=hours_before)
    state.write_text(json.dumps({**saved, "boot_id": None, "booted": format_time(booted)}))
    sim.withdraw("asg")
    sim.add_fault("hang", path="/latest/meta-data/autoscaling")  # IMDS slow after the boot
    agent = AgentProcess(tmp_path, providers=("aws",), env=env).start()
    try:
        active = agent.control({"op": "status"})["active"]
        assert [n["action"] for n in active] == ([] if hours_before else ["terminate"])
    finally:
        agent.stop()


def test_auto_keeps_a_provider_whose_notices_were_restored_when_its_probe_times_out(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """With `--provider auto`, an IMDS slow to answer the detection probe at the restart
    dropped AWS: its restored spot terminate was cleared as no longer watched, and the agent
    never watched AWS again, although the interruption still stood."""
    sim, server = imds
    sim.raise_notice("spot", {"time": later(600)})
    dead = f"http://{DEAD_LOOPBACK}"
    env = agent_env(
        tmp_path,
        FOREWARN_AWS_URL=server.url,
        FOREWARN_GCP_URL=dead,
        FOREWARN_AZURE_URL=dead,
        FOREWARN_DIGITALOCEAN_URL=dead,
        FOREWARN_KUBERNETES_URL=dead,
        **FAST_AWS,
    )
    # The first agent watches AWS by name: under a loaded machine its own `auto` probe can
    # take longer than the detection timeout, and this test is about the restart's probe.
    agent = AgentProcess(tmp_path, providers=("aws",), env=env).start()
    try:
        active = eventually(lambda: agent.control({"op": "status"})["active"], what="the spot")
        notice_id = active[0]["id"]
        state = tmp_path / "state" / "state.json"
        eventually(lambda: state.exists() and notice_id in state.read_text(), what="the state")
    finally:
        agent.kill()
    sim.add_fault("hang", path="/latest/dynamic/instance-identity/document")  # the probe's
    with AgentProcess(tmp_path, providers=("auto",), env=env) as again:
        status = again.control({"op": "status"})
        assert "aws" in status["agent"]["providers"], again.output()

        def answered() -> dict[str, Any] | None:
            status = again.control({"op": "status"})
            aws = [part for part in status["health"] if part["name"] == "aws"]
            return status if aws and aws[0]["polls"] > 0 else None

        status = eventually(answered, 10, "the AWS watcher's first answer")
        assert [notice["id"] for notice in status["active"]] == [notice_id]
        assert "auto: aws picked: notices from it were restored" in again.output()


def test_a_spot_notice_overdue_past_its_grace_is_flushed_by_every_client_once(
    tmp_path: Path, imds: tuple[ImdsSimulator, SimServer]
) -> None:
    """The spot notice AWS still shows past its time plus the grace stays the one notice,
    overdue. Retired and raised again, it forgot who had acked it: acked again by its one
    client, it was "flushed by every client" a second time, and a provider acting on that
    (Azure's approval, the flag file's removal) acted twice for one notice. (A re-raise after
    a retirement keeps them too: tests/agent/test_board.py.)"""
    sim, server = imds
    agent = aws_agent(tmp_path, server, "--set", "notice_grace=1")
    with agent, Subscriber(agent.events, ("notice", "client/job")).ready() as job:
        # 3 s ahead, not 1: a spot notice whose time has passed when the agent first sees it
        # is kept retired (AWS's stale-notice rule), and on the loaded machine of check 29b
        # the first poll came more than a second after the raise.
        sim.raise_notice("spot", {"action": "terminate", "time": later(3)})
        first = next_notice(job, reason="spot-interruption")
        ack = {"op": "ack", "notice_id": first["id"], "client": "job", "step": 1}
        assert agent.control(ack)["ok"]
        flushed = f"notice {first['id']} flushed by every client"
        eventually(lambda: flushed in agent.output(), 5, "the flush")
        eventually(lambda: f"notice {first['id']} is overdue" in agent.output(), 15, "it overdue")
        # A second save for it (a shell loop's, a job started again): not the same ack sent
        # again, which the agent counts once anyway.
        assert agent.control({**ack, "step": 2})["ok"]
        eventually(lambda: "from job: step=2" in agent.output(), 5, "the second ack")
        assert agent.output().count(flushed) == 1, agent.output()


def _control_quietly(agent: AgentProcess, request: dict[str, Any]) -> None:
    with contextlib.suppress(TimeoutError, OSError):
        agent.control(request, timeout=10)


def test_a_manual_terminate_back_to_a_drain_is_on_disk_before_clients_hear_it(
    tmp_path: Path,
) -> None:
    """Seen before: `notify` moved an escalated drain's deadline 2 h out; the drain went out
    first and the state was written after it. An agent SIGKILLed between the two (0.5 s on a
    state disk busy with a checkpoint) restored the terminate, and no watcher corrects a
    manual notice: clients that had been told to go on were told to exit, for good."""
    slow, trigger = slow_state_disk(tmp_path)
    env = agent_env(tmp_path, **slow)
    state = tmp_path / "state" / "state.json"
    args = ("--exit-margin", "300s")
    first = AgentProcess(tmp_path, args=args, env=env).start()
    try:
        with first.subscriber() as sub:
            request = {"op": "notify", "action": "drain", "id": "local/m", "deadline": later(100)}
            assert first.control(request)["notice"]["action"] == "terminate"
            next_notice(sub, id="local/m", action="terminate")
            eventually(
                lambda: state.exists() and "local/m" in state.read_text(), 10, "the terminate saved"
            )
            trigger.touch()
            # The reply waits for the state on disk: sent from a thread, lost with the agent.
            moved = threading.Thread(
                target=_control_quietly, args=(first, {**request, "deadline": later(7200)})
            )
            moved.start()
            next_notice(sub, id="local/m", action="drain")
            first.kill()  # at once on the subscriber's receipt
            moved.join()
    finally:
        first.kill()
    trigger.unlink()
    with AgentProcess(tmp_path, args=args, env=env) as second, second.subscriber() as sub:
        assert next_notice(sub, id="local/m")["action"] == "drain", second.output()
