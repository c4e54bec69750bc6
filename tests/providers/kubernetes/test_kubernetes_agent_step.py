"""A step of this node's wall clock while the agent runs, through the real agent subprocess on
the node API simulator: the agent runs on a wall clock moved by a sitecustomize
(`shifted_wall_clock`: `datetime.now` and `time.time`, as a node's clock is before NTP's first
sync); the simulator's `Date` is the machine's own clock, as the API server's is right."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.clients import Notices
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.httpdate import format_http_date
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from forewarn.testing.events import EventRecorder
from support import AgentProcess, Subscriber, eventually, forewarn_cmd, shifted_wall_clock
from test_kubernetes_agent import _kubernetes_env, control, wait_for_watch

NODE = "agent-node"


def _clock_condition(agent: AgentProcess, side: str = "behind") -> bool:
    [health] = agent.control({"op": "status"})["health"]
    return f"{side} the Kubernetes API server" in str(health["conditions"])


def test_karpenters_deadline_follows_ntps_step_with_no_clear_and_no_terminate(
    tmp_path: Path,
) -> None:
    """This node's clock 2 h behind the cluster's, Karpenter's termination 30 min away: the
    drains go out with their deadline 30 min from the node's now. NTP then steps the clock
    2 h forward. The board held the deadline as a moment, now 90 min past: within a second it
    retired both notices with a `clear` (a job trains on), and the watcher, at its next look
    at the clock (CLOCK_CHECK, 5 s), raised them again. Held on the boot clock, the deadline
    follows the step at once: each drain goes out again with its deadline where the step puts
    it, and the watcher's own move finds it so. No clear, no terminate."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            termination = (utcnow() + timedelta(minutes=30)).replace(microsecond=0)
            control(server, "karpenter", termination=termination.isoformat())
            before: dict[str, dict[str, Any]] = {}
            while len(before) < 2 or not all(n.get("deadline") for n in before.values()):
                notice = sub.notice(timeout=10)
                before[str(notice["id"])] = notice
            for notice in before.values():
                assert notice["action"] == "drain", notice
                left = parse_time(str(notice["deadline"])) - utcnow()
                assert abs(left - timedelta(hours=-1, minutes=-30)) < timedelta(minutes=1)
            eventually(lambda: _clock_condition(agent), what="the clock condition")
            offset.write_text("0")  # NTP's step: the agent's wall clock is 2 h on
            stepped = time.monotonic()
            eventually(
                lambda: not _clock_condition(agent), timeout=20, what="the watcher's new skew"
            )
            # The watcher looks at the clock every 5 s: past its next look, what it moved
            # has reached the board.
            after = sub.drain(max(0.5, 6.0 - (time.monotonic() - stepped)))
            after += sub.drain(1.0)
            status = agent.control({"op": "status"})["active"]
        actions = [(n["action"], n["id"]) for n in after]
        assert all(action == "drain" for action, _ in actions), actions
        # Once each: the watcher's report of the new skew, with the deadline the board had
        # moved already, sent each a second time for its `clock_ahead_seconds`.
        assert sorted(notice_id for _, notice_id in actions) == sorted(before), actions
        assert {n["id"] for n in status} == set(before), status
        for notice in status:
            left = parse_time(str(notice["deadline"])) - utcnow()
            assert abs(left - timedelta(minutes=30)) < timedelta(minutes=1), notice
    assert "expired" not in agent.output(), agent.output()


@pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")
def test_a_restart_after_ntps_step_replays_karpenters_deadline_where_the_step_put_it(
    tmp_path: Path,
) -> None:
    """Karpenter's deadline sent on a node clock 2 h behind; the agent restarted (an upgrade)
    after NTP's step forward, in the same boot, and the API server does not answer it for a
    while. A job subscribing then is sent the restored notice before any watcher reports:
    its deadline was the one from before the step, 90 min past by the clock now. Held on the
    boot clock (saved as such), it comes back where the step put it: 30 min out."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    taint = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as first:
            wait_for_watch(server)
            termination = (utcnow() + timedelta(minutes=30)).replace(microsecond=0)
            control(server, "karpenter", termination=termination.isoformat())
            eventually(
                lambda: any(
                    n["id"] == taint and n["deadline"]
                    for n in first.control({"op": "status"})["active"]
                ),
                what="the taint's drain with Karpenter's deadline",
            )
        offset.write_text("0")  # NTP's step while the agent was down
        hold = {"kind": "hang", "path": "/api/v1/nodes", "seconds": 15}
        httpx.post(f"{server.url}/_sim/faults", json=hold, trust_env=False, timeout=5)
        with (
            AgentProcess(tmp_path, providers=("kubernetes",), env=env) as second,
            second.subscriber() as sub,
        ):
            replayed = {n["id"]: n for n in (sub.notice(timeout=10), sub.notice(timeout=10))}
            assert sub.drain(0.5) == [], "more than the two restored notices"
        assert taint in replayed, replayed
        for notice in replayed.values():
            assert notice["action"] == "drain", notice
            left = parse_time(str(notice["deadline"])) - utcnow()
            assert abs(left - timedelta(minutes=30)) < timedelta(minutes=1), notice


def test_a_step_that_makes_a_right_clock_wrong_sends_karpenters_drains_once_and_no_clear(
    tmp_path: Path,
) -> None:
    """This node's clock right (the cluster's `Date`), Karpenter's termination 30 min away:
    the drains go out with the deadline as written. A step then puts the node's clock 2 h
    ahead (a bad NTP source, a wrong RTC read at a resume). The board held the deadline as a
    moment, 90 min past by the stepped clock: it retired both drains with a `clear` at once (a
    job trains on) and the watcher raised them again up to 5 s later (CLOCK_CHECK), moved by
    the skew it then read, and sent each a third time when its detail's `clock_ahead_seconds`
    changed. Held on the boot clock from the first report, each drain goes out again once,
    its deadline where the step puts it: no clear, no terminate, no second re-send."""
    shifted, offset = shifted_wall_clock(tmp_path, 0.0)
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            termination = (utcnow() + timedelta(minutes=30)).replace(microsecond=0)
            control(server, "karpenter", termination=termination.isoformat())
            before: dict[str, dict[str, Any]] = {}
            while len(before) < 2 or not all(n.get("deadline") for n in before.values()):
                notice = sub.notice(timeout=10)
                before[str(notice["id"])] = notice
            offset.write_text(str(timedelta(hours=2).total_seconds()))  # the bad step
            stepped = time.monotonic()
            eventually(lambda: _clock_condition(agent, "ahead of"), timeout=20, what="the skew")
            after = sub.drain(max(0.5, 6.0 - (time.monotonic() - stepped)))
            after += sub.drain(1.0)
            status = agent.control({"op": "status"})["active"]
        sent = [(n["action"], n["id"]) for n in after]
        assert all(action == "drain" for action, _ in sent), sent
        assert sorted(notice_id for _, notice_id in sent) == sorted(before), sent
        assert {n["id"] for n in status} == set(before), status
        for notice in status:
            left = parse_time(str(notice["deadline"])) - utcnow() - timedelta(hours=2)
            assert abs(left - timedelta(minutes=30)) < timedelta(minutes=1), notice
    assert "expired" not in agent.output(), agent.output()


def _karpenters_drains_through_ntps_step(
    agent: AgentProcess, server: SimServer, offset: Path
) -> None:
    """Karpenter's two drains raised on a node clock 2 h behind the API server's (each with
    its `clock_ahead_seconds`), then NTP's step of the agent's clock to right, until the
    watcher's report of the new skew has reached the board (no skew in `status`)."""
    wait_for_watch(server)
    termination = (utcnow() + timedelta(minutes=30)).replace(microsecond=0)
    control(server, "karpenter", termination=termination.isoformat())

    def skewed() -> bool:
        active = agent.control({"op": "status"})["active"]
        return len(active) == 2 and all(
            n["deadline"] and "clock_ahead_seconds" in n["detail"] for n in active
        )

    eventually(skewed, what="Karpenter's drains on the node's clock")
    offset.write_text("0")  # NTP's step: the agent's wall clock is 2 h on
    eventually(
        lambda: all(
            "clock_ahead_seconds" not in n["detail"]
            for n in agent.control({"op": "status"})["active"]
        ),
        timeout=20,
        what="the watcher's report of the new skew",
    )


def _live_notices(sub: Subscriber, quiet: float) -> tuple[list[dict[str, Any]], int]:
    """The notices `sub` (taking heartbeats too) receives until `quiet` seconds pass with none,
    less those of a replay (each notice listed by a heartbeat naming a replay token, at the
    seq after it), and the seq of the last heartbeat read."""
    live: list[dict[str, Any]] = []
    replayed: list[str] = []
    next_seq = -1
    last_beat = -1
    until = time.monotonic() + quiet  # heartbeats come every second: they do not count
    while True:
        try:
            topic, message = sub.recv(max(0.0, until - time.monotonic()))
        except TimeoutError:
            return live, last_beat
        if topic == "notice":
            until = time.monotonic() + quiet
        if topic == "heartbeat":
            last_beat = message["seq"]
            if message.get("replay_for"):
                replayed, next_seq = list(message["active"]), message["seq"] + 1
            continue
        if replayed and (message["id"], message["seq"]) == (replayed[0], next_seq):
            replayed.pop(0)
            next_seq += 1
            continue
        live.append(message)


def test_a_replay_after_ntps_step_is_no_second_event_to_the_recorder(tmp_path: Path) -> None:
    """forewarn.testing's recorder (`agent.events`) beside a reconnecting subscriber, after
    NTP's step: the watcher's report of the new skew changed only the drains'
    `clock_ahead_seconds`, which the agent keeps for a replay and sends to nobody. The next
    replay (a subscriber that joined, one that reconnected) carried it, and the recorder,
    telling a replay from news by its content, listed each drain a second time: a user's
    `assert len(agent.events) == 2` failed where the job had been sent nothing new."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber(topics=("notice", "heartbeat")) as sub:
            recorder = EventRecorder(agent.events).start()
            try:
                assert recorder.first_heartbeat.wait(10), "the recorder heard no heartbeat"
                _karpenters_drains_through_ntps_step(agent, server, offset)
                for _ in range(2):  # a subscriber that reconnects: a replay each time
                    with agent.subscriber() as late:
                        assert late.answers == 1
                # Past the replays' last notice: a heartbeat every second.
                live, last_beat = _live_notices(sub, 1.5)
                eventually(
                    lambda: (recorder.last_heartbeat or {}).get("seq", -1) >= last_beat,
                    what="the recorder's heartbeat after the replays",
                )
                with recorder.changed:
                    recorded = list(recorder.notices)
            finally:
                recorder.close()
        assert len(live) >= 2, live
        assert [(n["action"], n["id"], n["seq"]) for n in recorded] == [
            (n["action"], n["id"], n["seq"]) for n in live
        ]


def test_a_replay_after_ntps_step_is_no_second_event_to_a_clients_listener(
    tmp_path: Path,
) -> None:
    """The client library (`Notices`, which `CheckpointGuard` and a user's listener read)
    after NTP's step, when another client joins: the replay carried the drains' new
    `clock_ahead_seconds` (kept by the agent for replays, sent to no one), and the client,
    telling a repeat by the whole detail, took each drain as changed: `latest` was replaced
    and every listener was called a second time for a notice the agent never re-sent."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        heard: list[tuple[str, str, int]] = []
        with (
            agent,
            agent.subscriber(topics=("notice", "heartbeat")) as sub,
            Notices(agent.events, agent.control_endpoint, client_id="listener") as notices,
        ):
            notices.add_listener(lambda event: heard.append((event.action, event.id, event.seq)))
            eventually(lambda: notices.alive, what="the client's first heartbeat")
            _karpenters_drains_through_ntps_step(agent, server, offset)
            with agent.subscriber() as late:  # another client joins: a replay to every one
                assert late.answers == 1
            live, last_beat = _live_notices(sub, 1.5)
            eventually(
                lambda: (notices.agent or {}).get("seq", -1) >= last_beat,
                what="the client's heartbeat after the replay",
            )
        assert len(live) >= 2, live
        assert heard == [(n["action"], n["id"], n["seq"]) for n in live]


def test_a_replay_after_ntps_step_is_marked_a_replay_by_watch(tmp_path: Path) -> None:
    """`forewarn watch --json` after NTP's step, when another client joins: the replay
    carried the drains' new `clock_ahead_seconds` (kept by the agent for replays, sent to no
    one) and watch printed each drain again as news (`"replay": false`; without `--json`, no
    `[replay]`), which a script reading it took for a changed notice."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        # The watcher on the machine's clock: only the agent's is stepped.
        watch_env = {k: v for k, v in env.items() if k not in shifted}
        with agent, agent.subscriber(topics=("notice", "heartbeat")) as sub:
            watch = subprocess.Popen(
                forewarn_cmd("watch", "--json", "--heartbeats"),
                env=watch_env,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert watch.stdout is not None
                lines: queue.Queue[str] = queue.Queue()
                reader = threading.Thread(
                    target=lambda: [lines.put(line) for line in watch.stdout or ()], daemon=True
                )
                reader.start()
                first = json.loads(lines.get(timeout=10))
                assert first["topic"] == "heartbeat", first
                _karpenters_drains_through_ntps_step(agent, server, offset)
                with agent.subscriber() as late:  # another client joins: a replay to all
                    assert late.answers == 1
                live, last_beat = _live_notices(sub, 1.5)
                printed: list[dict[str, Any]] = []
                while not any(m["topic"] == "heartbeat" and m["seq"] >= last_beat for m in printed):
                    printed.append(json.loads(lines.get(timeout=10)))
            finally:
                watch.terminate()
                watch.wait(10)
        news = [m for m in printed if m["topic"] == "notice" and not m["replay"]]
        assert len(live) >= 2, live
        assert [(n["action"], n["id"], n["seq"]) for n in news] == [
            (n["action"], n["id"], n["seq"]) for n in live
        ]


def test_a_vm_event_raised_just_after_a_step_goes_out_on_the_stepped_clock(
    tmp_path: Path,
) -> None:
    """This node's clock right; a step puts it 2 h ahead, and before the watcher's next look
    at the clock (CLOCK_CHECK, 5 s) AKS's node-problem-detector sets a Reboot 20 min away
    (`VMEventScheduled`, NotBefore on the cluster's clock). The watcher moved it by the skew
    from before the step (none) and the board, raising it afresh, had no earlier reading on
    the boot clock to hold: 100 min past by the stepped clock, it went out as terminate at
    once (the job out 20 min early), and as a drain again at the watcher's next look. The
    watcher reads its skew from the API server's clock, carried on the boot clock, as it
    reports: a drain, once, 20 min out by the node's clock."""
    shifted, offset = shifted_wall_clock(tmp_path, 0.0)
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    reboot = f"kubernetes/{NODE}/vm-event/Reboot"
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), **shifted}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            not_before = (utcnow() + timedelta(minutes=20)).replace(microsecond=0)
            offset.write_text(str(timedelta(hours=2).total_seconds()))  # the bad step
            control(server, "vm-event", event="Reboot", not_before=format_http_date(not_before))
            first = sub.notice(timeout=10)
            # Past the watcher's next look at the clock.
            after = [first, *sub.drain(6.0)]
            status = agent.control({"op": "status"})["active"]
        sent = [(n["action"], n["id"]) for n in after]
        assert sent == [("drain", reboot)], sent
        [active] = status
        left = parse_time(str(active["deadline"])) - utcnow() - timedelta(hours=2)
        assert abs(left - timedelta(minutes=20)) < timedelta(minutes=1), active
    assert "expired" not in agent.output(), agent.output()
