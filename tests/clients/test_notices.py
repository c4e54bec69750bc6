"""Notices in-process: late join, reconnect after an agent restart, a dead agent noticed."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.notices import parse_heartbeat
from forewarn.protocol.timefmt import format_time, utcnow
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, eventually, examples

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); the client is what these tests check.
pytestmark = pytest.mark.usefixtures("forked_agents")


def test_late_join_reconnect_and_dead_agent(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    agent = AgentProcess(tmp_path).start()
    raised = agent.control({"op": "notify", "action": "drain"})["notice"]
    notices = Notices(agent.events, agent.control_endpoint, heartbeat_timeout=1.5)
    try:
        assert eventually(lambda: raised["id"] in notices.active)
        assert notices.alive and notices.latest is not None
        assert notices.latest.action == "drain"
        agent.kill()
        assert eventually(lambda: not notices.alive, timeout=4), "a dead agent must be noticed"
        again = AgentProcess(tmp_path, env=agent.env).start()
        try:
            assert eventually(lambda: notices.alive, timeout=5), "reconnects to a new agent"
            again.control({"op": "notify", "action": "terminate", "id": "local/after"})
            assert eventually(lambda: "local/after" in notices.active)
            event = notices.wait(("terminate",), timeout=1)
            assert event is not None and event.id == "local/after"
        finally:
            again.stop()
    finally:
        notices.close()


def test_a_real_restarted_agent_replays_before_its_second_heartbeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What asking a restarted agent again for a notice its replay did not bring relies on:
    a real agent, restarted in its state directory, replays what it lists to the client that
    reconnects before its second heartbeat, so nothing is asked for and nothing is said."""
    agent = AgentProcess(tmp_path).start()
    raised = agent.control({"op": "notify", "action": "drain"})["notice"]
    notices = Notices(agent.events, agent.control_endpoint, heartbeat_timeout=1.5)
    try:
        assert eventually(lambda: raised["id"] in notices.active)
        assert notices.agent is not None
        killed = notices.agent["agent"]
        agent.kill()
        again = AgentProcess(tmp_path, env=agent.env).start()
        try:
            beats: list[object] = []

            def new_agent_beat_thrice() -> bool:
                beat = notices.agent
                if beat is not None and beat["agent"] != killed and beat["seq"] not in beats:
                    beats.append(beat["seq"])
                return len(beats) >= 3

            assert eventually(new_agent_beat_thrice, timeout=8, interval=0.05)
            assert raised["id"] in notices.active
            said = [r.getMessage() for r in caplog.records if "never arrived" in r.getMessage()]
            assert said == [], said
        finally:
            again.stop()
    finally:
        notices.close()


def test_importing_the_client_loads_no_agent_runtime() -> None:
    import subprocess

    probe = (
        "import sys, forewarn.clients; "
        "bad = [m for m in ('pydantic', 'httpx', 'boto3', 'forewarn.agent.runner') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


class SilentControlAgent:
    """An agent whose events socket beats but whose control socket never answers (the hung
    control task of issue 15): real ZeroMQ sockets on ipc."""

    def __init__(self, directory: Path) -> None:
        import threading

        import zmq

        self.events = f"ipc://{directory}/events"
        self.control = f"ipc://{directory}/control"
        context = zmq.Context.instance()
        self.pub = context.socket(zmq.XPUB)
        self.pub.bind(self.events)
        self.rep = context.socket(zmq.REP)
        self.rep.bind(self.control)  # bound, never read
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        import json

        seq = 0
        while not self.stop.wait(0.2):
            seq += 1
            beat = {"v": 1, "seq": seq, "agent": "silent", "providers": ["local"], "active": []}
            self.pub.send_multipart([b"heartbeat", json.dumps(beat).encode()])

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.pub.close(linger=0)
        self.rep.close(linger=0)


def test_saved_never_waits_for_a_control_socket_that_does_not_answer(tmp_path: Path) -> None:
    from forewarn.clients import CheckpointGuard

    agent = SilentControlAgent(tmp_path)
    notices = Notices(agent.events, agent.control, heartbeat_timeout=2)
    guard = CheckpointGuard(notices=notices, handle_signals=False, flag_file=None)
    try:
        assert eventually(lambda: notices.alive)
        took = []
        for step in range(1, 6):  # five saves, five acks to a control that never answers
            guard.request("drain")
            assert guard.due(step)
            started = time.monotonic()
            guard.saved(step, 0.01)
            took.append(time.monotonic() - started)
        assert max(took) < 0.1, took
    finally:
        guard.close()
        started = time.monotonic()
        notices.close(ack_timeout=0.5)
        assert time.monotonic() - started < 2.5, "close gives queued acks a bounded time"
        agent.close()


def test_close_gives_an_ack_of_no_notice_one_try_not_the_restart_window(tmp_path: Path) -> None:
    """A job's final save on SIGTERM is acked with no notice (telemetry). When the agent had
    stopped with it (the node shutting down, `kill -9` of `drill local`), close() retried that
    ack for 10 s, and the job lingered after its save holding the GPU. An ack of a notice
    still gets the window (test_an_ack_sent_while_the_agent_restarts_...)."""
    from forewarn.clients import CheckpointGuard

    agent = SilentControlAgent(tmp_path)
    notices = Notices(agent.events, agent.control, heartbeat_timeout=2)
    guard = CheckpointGuard(notices=notices, handle_signals=False, flag_file=None)
    try:
        assert eventually(lambda: notices.alive)
        guard.request("sigterm", exit=True)
        assert guard.due(1)
        assert guard.saved(1, 0.01).exit
        assert notices._sender is not None
    finally:
        guard.close()
        started = time.monotonic()
        notices.close()
        took = time.monotonic() - started
        agent.close()
    assert took < 3, f"close() waited {took:.1f}s for an agent that was gone"


def test_no_agent_is_logged_once_and_a_late_agent_is_picked_up_with_its_replay(
    tmp_path: Path, caplog
) -> None:  # type: ignore[no-untyped-def]
    import logging

    first = AgentProcess(tmp_path).start()
    first.control({"op": "notify", "action": "drain", "id": "local/kept"})
    first.stop()  # the manual notice is kept in the state file
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    notices = Notices(first.events, first.control_endpoint, heartbeat_timeout=1.0)
    try:
        # Past the heartbeat timeout with no agent: the client has said so (a fixed 2.5 s
        # sleep stood here).
        eventually(
            lambda: any("no agent on" in r.getMessage() for r in caplog.records),
            timeout=30,
            what="the client's 'no agent' line",
        )
        assert not notices.alive and notices.active == {}
        again = AgentProcess(tmp_path, env=first.env).start()
        try:
            assert eventually(lambda: "local/kept" in notices.active, timeout=10), (
                "the agent's replay reaches a client that started before it"
            )
            assert notices.alive
        finally:
            again.stop()
    finally:
        notices.close()
    said = [r.getMessage() for r in caplog.records if "no agent on" in r.getMessage()]
    assert len(said) == 1, said


class FakeAgent:
    """An agent's events socket that sends what the test says (a real XPUB on ipc), and a
    control socket that takes every request (an ack no agent answers is retried, and close()
    would wait for it)."""

    def __init__(self, directory: Path) -> None:
        import threading

        import zmq

        self.endpoint = f"ipc://{directory}/events"
        self.control = f"ipc://{directory}/control"
        self.pub = zmq.Context.instance().socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(self.endpoint)
        self.seq = 0
        self.token: str | None = None  # the client's `replay/<token>`, once subscribed
        self._rep = zmq.Context.instance().socket(zmq.REP)
        self._rep.setsockopt(zmq.LINGER, 0)
        self._rep.bind(self.control)
        self._stop = threading.Event()
        self._answering = threading.Thread(target=self._answer, daemon=True)
        self._answering.start()

    def _answer(self) -> None:
        while not self._stop.is_set():
            if self._rep.poll(50):
                self._rep.recv()
                self._rep.send(b'{"ok": true}')

    def subscribed(self, timeout: float = 10) -> None:
        """Until the client has subscribed to notices; the first time, to its
        `replay/<token>` too (its last subscription), whose token is kept in `token`."""
        end = time.monotonic() + timeout
        noticed = False
        while self.pub.poll(max(int((end - time.monotonic()) * 1000), 1)):
            frame = self.pub.recv()
            if frame.startswith(b"\x01replay/"):
                self.token = frame[len(b"\x01replay/") :].decode()
            noticed = noticed or frame == b"\x01notice"
            if noticed and self.token is not None:
                return
        raise AssertionError("the client did not subscribe")

    def raw(self, *frames: bytes) -> None:
        self.pub.send_multipart(list(frames))

    def beat(self, **fields: Any) -> None:
        self.seq += 1
        beat = {"v": 1, "seq": self.seq, "agent": "fake", "providers": ["aws"], "active": []}
        self.raw(b"heartbeat", json.dumps({**beat, **fields}).encode())

    def notice(self, notice_id: str, action: str, **fields: Any) -> None:
        self.seq += 1
        now = format_time(utcnow())
        notice = {
            "v": 1,
            "id": notice_id,
            "seq": self.seq,
            "action": action,
            "reason": "spot-interruption",
            "provider": "aws",
            "deadline": None,
            "noticed_at": now,
            "sent_at": now,
            "detail": {},
        }
        self.raw(b"notice", json.dumps({**notice, **fields}).encode())

    def close(self) -> None:
        self._stop.set()
        self._answering.join(5)
        self._rep.close(linger=0)
        self.pub.close(linger=0)


def test_an_ack_of_a_notice_heard_before_any_heartbeat_reaches_the_restarted_agent(
    tmp_path: Path,
) -> None:
    """The agent sent a terminate before this client had read any heartbeat (it read the
    subscription late on a loaded node, so its replay, heartbeat first, had not come), and
    restarted before its next beat. The job saved and acked: `ack` took the client for one
    that never heard an agent and dropped the ack, so the restarted agent listed the
    terminate as one nobody acted on and the next job on the node exited at once. A notice
    is the agent heard; its ack waits for the restarted agent as any other."""
    import zmq

    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=0.5)
    restarted = zmq.Context.instance().socket(zmq.REP)
    restarted.setsockopt(zmq.LINGER, 0)
    try:
        agent.subscribed()
        agent.notice("aws/i-1/spot", "terminate")
        eventually(lambda: "aws/i-1/spot" in notices.active, what="the terminate")
        agent.close()  # gone before its next heartbeat
        eventually(lambda: not notices.alive, what="the agent gone")
        assert notices.ack("aws/i-1/spot", step=1, flush_seconds=0.01), "ack dropped"
        restarted.bind(agent.control)
        assert restarted.poll(10_000), "the ack never reached the restarted agent"
        ack = json.loads(restarted.recv())
        restarted.send(b'{"ok": true}')
        assert (ack["op"], ack["notice_id"], ack["outcome"]) == ("ack", "aws/i-1/spot", "saved")
    finally:
        notices.close(ack_timeout=0.5)
        restarted.close()


def test_wait_without_end_takes_the_terminate_and_a_nan_timeout_is_refused(
    tmp_path: Path,
) -> None:
    """`wait(timeout=float("inf"))` (no end, read from a setting) raised OverflowError at
    once instead of waiting for the terminate; `timeout=nan` waited forever."""
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control)
    try:
        with pytest.raises(ValueError, match="timeout"):
            notices.wait(timeout=float("nan"))
        agent.subscribed()
        agent.beat()
        agent.notice("aws/i-1/spot", "terminate")
        event = notices.wait(timeout=float("inf"))
        assert event is not None and event.id == "aws/i-1/spot"
    finally:
        notices.close(ack_timeout=0.5)
        agent.close()


def test_an_ack_of_array_scalars_is_sent(tmp_path: Path) -> None:
    """A 0-d array (numpy's, or a torch tensor: the float one has an `__index__` that raises)
    as a flush's seconds made `ack` raise TypeError in the training thread."""
    numpy = pytest.importorskip("numpy")
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5)
        assert notices.ack(None, step=numpy.array(3), flush_seconds=numpy.array(0.25), wait=True)
    finally:
        notices.close(ack_timeout=0.5)
        agent.close()


def warnings_about(caplog: Any, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_malformed_notices_are_dropped_and_the_next_terminate_still_acts(
    tmp_path: Path, caplog: Any
) -> None:
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
    try:
        agent.subscribed()
        agent.beat()
        agent.notice("aws/bad", "terminate", deadline=5)  # parse_time(5): AttributeError
        agent.raw(b"notice", b'{"v": 1, "id": "aws/bad", "seq": 1e400}')  # int(inf)
        agent.raw(b"notice", b"{}", b"a third frame")  # unpacking
        agent.raw(b"notice", b"[" * 100_000 + b"]" * 100_000)  # RecursionError
        agent.raw(b"notice", b"\x80 not UTF-8")
        agent.raw(b"heartbeat", b"[" * 100_000 + b"]" * 100_000)
        agent.raw(b"heartbeat")
        agent.notice("aws/real", "terminate")
        assert eventually(lambda: guard.should_exit, timeout=5, what="the terminate acted on")
        assert list(notices.active) == ["aws/real"]
        assert guard.due(1)
        said = warnings_about(caplog, "dropped a malformed")
        assert len(said) == 1, f"one warning a minute, not one a message: {said}"
        assert "aws/bad" not in notices.active
        agent.close()
        assert eventually(lambda: not notices.alive, timeout=5, what="the agent's loss noticed")
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_a_notice_the_heartbeats_list_but_that_never_arrived_is_asked_for_again(
    tmp_path: Path, caplog: Any
) -> None:
    """A job stopped for hours (SIGSTOP, a scheduler's suspend) fills the high-water marks
    with heartbeats, and a terminate sent then is dropped: resumed, the job read heartbeats
    listing it and never acted on it. Listed twice and never received, it is asked for again
    by a second subscription to `notice`, which makes an agent replay."""
    import zmq

    agent = FakeAgent(tmp_path)
    agent.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # as the agent's: repeated subscriptions too
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=3.0)
    try:
        agent.subscribed()
        agent.beat(active=["aws/spot/1"])
        eventually(lambda: notices.alive, timeout=5, what="the first heartbeat")
        # Once is no loss: a new subscriber's replay may come after the first heartbeat.
        assert not agent.pub.poll(300), "asked after one heartbeat"
        agent.beat(active=["aws/spot/1"])
        agent.subscribed(timeout=5)
        agent.notice("aws/spot/1", "terminate")
        event = eventually(lambda: notices.active.get("aws/spot/1"), timeout=5, what="it")
        assert event.action == "terminate"
        assert len(warnings_about(caplog, "never received here")) == 1
        # Received now: no more asking.
        agent.beat(active=["aws/spot/1"])
        agent.beat(active=["aws/spot/1"])
        assert not agent.pub.poll(300)
    finally:
        notices.close()
        agent.close()


def test_a_join_replay_an_agent_has_not_sent_yet_is_not_taken_for_a_loss(
    tmp_path: Path, caplog: Any
) -> None:
    """An agent slow to read subscriptions (a loaded node) beat for seconds listing a notice
    in force before the job started: the job's log said it was "never received here" and it
    asked for a replay, which was only late. An agent whose heartbeats carry `replay_for`
    names the client's token in the heartbeat of its answer; until then nothing is lost."""
    import zmq

    agent = FakeAgent(tmp_path)
    agent.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # as the agent's: repeated subscriptions too
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=3.0)
    try:
        agent.subscribed()
        for _ in range(4):
            agent.beat(active=["aws/spot/1"], replay_for=[])
        eventually(lambda: notices.alive, timeout=5, what="the first heartbeat")
        assert not agent.pub.poll(300), "asked for a replay that was only late"
        agent.beat(active=["aws/spot/1"], replay_for=["another", agent.token])
        agent.notice("aws/spot/1", "drain")
        eventually(lambda: notices.active.get("aws/spot/1"), timeout=5, what="the replay")
        assert not warnings_about(caplog, "never received here")
        # Answered: one listed twice and never received is asked for again, as ever.
        agent.beat(active=["aws/spot/1", "aws/spot/2"], replay_for=[])
        agent.beat(active=["aws/spot/1", "aws/spot/2"], replay_for=[])
        assert agent.pub.poll(5000) and agent.pub.recv() == b"\x01notice"
        assert len(warnings_about(caplog, "never received here")) == 1
    finally:
        notices.close()
        agent.close()


def test_a_restarted_agent_s_replay_slow_to_come_is_not_taken_for_lost(
    tmp_path: Path, caplog: Any
) -> None:
    """A restarted agent slow to read the reconnected socket's subscriptions beat twice before
    its replay: at its second heartbeat the job's log said "the restarted agent ... lists
    aws/spot/1, whose replay never arrived here" and asked for another. An agent with
    `replay_for` names the socket's token in its replay's heartbeat; the check waits for it."""
    import zmq

    agent = FakeAgent(tmp_path)
    agent.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # as the agent's: repeated subscriptions too
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=3.0)
    try:
        agent.subscribed()
        agent.beat(replay_for=[agent.token])
        agent.notice("aws/spot/1", "drain")
        eventually(lambda: notices.active.get("aws/spot/1"), timeout=5, what="the drain")
        agent.seq = 500  # restarted: it numbers on from its mark
        for _ in range(4):
            agent.beat(active=["aws/spot/1"], agent="restarted", replay_for=[])
        agent.beat(active=["aws/spot/1"], agent="restarted", replay_for=[agent.token])
        agent.notice("aws/spot/1", "drain")
        agent.beat(active=["aws/spot/1"], agent="restarted", replay_for=[])
        eventually(
            lambda: notices.agent is not None and notices.agent["seq"] == agent.seq,
            timeout=5,
            what="the last heartbeat",
        )
        assert not agent.pub.poll(300), "asked for a replay that was only late"
        assert not warnings_about(caplog, "never arrived here")
    finally:
        notices.close()
        agent.close()


def test_a_change_lost_just_before_another_notice_is_asked_for_again(
    tmp_path: Path, caplog: Any
) -> None:
    """The client looked for a gap in `seq` only at heartbeats, against the last message
    received: an escalation to terminate lost on the way (past the high-water marks), with
    a new notice received after it and before the next heartbeat, left no gap to see (the
    heartbeat's `seq` followed the new notice's), and the heartbeats list the same ids. The
    job trained on under a drain the agent sent as terminate. Found by a subscriber written
    in another language from the README, which said the same."""
    import zmq

    agent = FakeAgent(tmp_path)
    agent.pub.setsockopt(zmq.XPUB_VERBOSE, 1)  # as the agent's: repeated subscriptions too
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=3.0)
    try:
        agent.subscribed()
        agent.notice("aws/spot/1", "drain")
        agent.beat(active=["aws/spot/1"])
        eventually(lambda: notices.active.get("aws/spot/1"), timeout=5, what="the drain")
        agent.seq += 1  # the terminate of aws/spot/1, lost
        agent.notice("aws/spot/2", "drain")
        agent.beat(active=["aws/spot/1", "aws/spot/2"])
        eventually(lambda: notices.active.get("aws/spot/2"), timeout=5, what="the second")
        agent.subscribed(timeout=5)
        agent.notice("aws/spot/1", "terminate")
        event = eventually(lambda: notices.active["aws/spot/1"].action == "terminate", timeout=5)
        assert event
        assert len(warnings_about(caplog, "never arrived here")) == 1
    finally:
        notices.close()
        agent.close()


BEAT: dict[str, Any] = {
    "v": 1,
    "seq": 18,
    "agent": "host/1/a",
    "version": "0.1.0",
    "providers": ["local", "aws"],
    "active": ["aws/x"],
    "sent_at": "2026-11-30T03:10:00Z",
    "acked": [],
    "exit_margin": 30.0,
}
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "3"])
def test_a_heartbeat_timeout_that_is_not_a_positive_number_is_refused(timeout: object) -> None:
    """0 or less: the agent was never `alive`, so the guard took the flag file the agent's
    local provider also takes (two saves); NaN: nobody ever took it without an agent; a
    string: a TypeError on the notices thread, and no notice reached the job again."""
    with pytest.raises(ValueError, match="heartbeat_timeout"):
        Notices("ipc:///nonexistent/events", heartbeat_timeout=timeout, start=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heartbeat_timeout"):
        CheckpointGuard(heartbeat_timeout=timeout, handle_signals=False, flag_file=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "events", ["localhost:5555", "tcp://127.0.0.1", "ipc://", "ipc:///run/forewarn/"]
)
def test_an_events_endpoint_zmq_cannot_connect_is_refused_by_name(
    events: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in the events endpoint (the scheme left out): the thread that reads the notices
    died of a ZMQError at its first line, and the job trained on without ever hearing a
    terminate. A path naming a directory (`ipc:///run/forewarn/`, the trailing slash) was
    taken, and its connect retried in silence for good: no agent can bind there."""
    with pytest.raises(ValueError, match=f"events {events!r}"):
        Notices(events, start=False)
    monkeypatch.setenv("FOREWARN_EVENTS", events)
    with pytest.raises(ValueError, match=f"events {events!r}"):
        CheckpointGuard(handle_signals=False, flag_file=None)


@given(
    st.dictionaries(st.sampled_from(sorted(BEAT)), JSON, max_size=3),
    st.sets(st.sampled_from(sorted(BEAT)), max_size=2),
)
# A whole number past a float (JSON reads 4,300 digits): math.isfinite raised OverflowError,
# which the notices thread logged as a bug with its traceback (found: adversarial pass H235).
@example({"exit_margin": 10**400}, set())
@example({"exit_margin": -(10**400)}, set())
def test_a_heartbeat_parses_to_lists_of_strings_or_value_error(
    changed: dict[str, Any], missing: set[str]
) -> None:
    fields = {**BEAT, **changed}
    payload = json.dumps({name: value for name, value in fields.items() if name not in missing})
    try:
        beat = parse_heartbeat(payload.encode())
    except ValueError:
        return
    for name in ("active", "acked", "providers"):
        value = beat.get(name, [])
        assert isinstance(value, list) and all(isinstance(item, str) for item in value), name
    # The guard takes the larger of it and its own margin on its ticker thread: a string, a
    # bool or NaN there raised or never compared as a number of seconds.
    margin = beat.get("exit_margin")
    assert margin is None or (
        type(margin) in (int, float) and math.isfinite(margin) and margin >= 0
    ), margin


@given(st.one_of(st.booleans(), st.text(max_size=3), st.floats(), st.integers()))
@example(float("nan"))
@example(float("inf"))
@example(-1)
@example(True)
def test_a_heartbeats_exit_margin_is_seconds_or_the_heartbeat_is_refused(margin: Any) -> None:
    payload = json.dumps({**BEAT, "exit_margin": margin}).encode()
    if type(margin) in (int, float) and math.isfinite(margin) and margin >= 0:
        assert parse_heartbeat(payload)["exit_margin"] == margin
    else:
        with pytest.raises(ValueError, match="exit_margin"):
            parse_heartbeat(payload)


@given(st.binary() | JSON.map(lambda document: json.dumps(document).encode()))
def test_any_heartbeat_payload_gives_a_heartbeat_or_value_error(payload: bytes) -> None:
    with contextlib.suppress(ValueError):
        parse_heartbeat(payload)


# Anything but the integer 1: `true` and `1.0` equal 1 in Python, and were read as v1.
NOT_ONE = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.lists(st.integers(), max_size=2)
).filter(lambda version: not (type(version) is int and version == 1))


@given(st.one_of(NOT_ONE.map(lambda version: {"v": version}), st.just({})))
@example({"v": True})
@example({"v": 1.0})
@example({"v": "1"})
@example({"v": 2})
def test_a_heartbeat_whose_v_is_not_the_integer_1_is_refused_naming_v(
    version: dict[str, Any],
) -> None:
    """parse_heartbeat did not look at `v`: a heartbeat of another protocol version was taken
    at its word, and its `active` withdrew the notices this client held."""
    fields = {name: value for name, value in BEAT.items() if name != "v"}
    with pytest.raises(ValueError, match="heartbeat: field 'v' must be the integer 1, got "):
        parse_heartbeat(json.dumps({**fields, **version}).encode())
    assert parse_heartbeat(json.dumps(BEAT).encode())["v"] == 1


def test_a_heartbeat_of_another_version_is_dropped_and_the_guard_listens_on(
    tmp_path: Path, caplog: Any
) -> None:
    """A `v: 2` heartbeat listing nothing withdrew the drain in force (a clear of its own
    making); refused, the drain stays, one warning names `v`, and the terminate that follows
    is still acted on."""
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=3.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
    try:
        agent.subscribed()
        agent.beat(active=["aws/drain"])
        agent.notice("aws/drain", "drain")
        assert eventually(lambda: "aws/drain" in notices.active, timeout=5, what="the drain")
        for version in (2, "1", True, 1.0, None):
            agent.beat(v=version, active=[])
        agent.raw(b"heartbeat", json.dumps({"seq": 99, "agent": "fake", "active": []}).encode())
        assert eventually(
            lambda: warnings_about(caplog, "field 'v' must be the integer 1"),
            timeout=5,
            what="the refused heartbeat said",
        )
        agent.beat(active=["aws/drain"])
        agent.notice("aws/real", "terminate")
        assert eventually(lambda: guard.should_exit, timeout=5, what="the terminate acted on")
        assert set(notices.active) == {"aws/drain", "aws/real"}
        assert notices.agent is not None and notices.agent["v"] == 1
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_refused_heartbeats_are_no_sign_of_life(tmp_path: Path, caplog: Any) -> None:
    """Every message on the agent's topics kept `alive` true, refused or not: an agent of
    another protocol version (or a broken publisher) beating every 0.2 s hid that no agent
    this client can read was there, which `forewarn watch` and the C subscriber say. Refused,
    they are dropped and said like a malformed notice, and the agent is lost."""
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5, what="the first heartbeat")
        end = time.monotonic() + 10
        while notices.alive and time.monotonic() < end:
            agent.beat(v=2)
            agent.raw(b"heartbeat", b"not JSON")
            agent.raw(b"notice", b'{"v": 1, "id": "aws/bad"}')
            time.sleep(0.2)  # the cadence of an agent beating, not a wait for a result
        assert not notices.alive, "refused messages kept the agent alive"
        assert warnings_about(caplog, "dropped a malformed heartbeat")
        # Said by the reader's thread just after it sets `alive`: waited for, not raced.
        eventually(lambda: warnings_about(caplog, "lost the agent"), timeout=5, what="the warning")
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5, what="a v1 heartbeat heard again")
    finally:
        notices.close()
        agent.close()


NOTICE_VERSIONS = st.fixed_dictionaries(
    {
        "action": st.sampled_from(["drain", "terminate", "clear"]),
        "reason": st.sampled_from(["spot-interruption", "scheduled-maintenance"]),
        "deadline": st.none() | st.sampled_from(["2026-11-30T03:12:00Z", "2026-11-30T04:00:00Z"]),
        "detail": st.sampled_from([{}, {"action": "terminate"}, {"action": "stop"}]),
        "noticed_at": st.sampled_from(["2026-11-30T03:10:00Z", "2026-11-30T03:11:00Z"]),
    }
)


@given(st.lists(NOTICE_VERSIONS, max_size=12))
def test_active_holds_what_the_agent_sent_last_and_listeners_hear_each_change(
    versions: list[dict[str, Any]],
) -> None:
    """Whatever the agent sends for one id (changes, replays, clears), `active` holds the last
    version sent, and listeners hear every version but a repeat of the active one."""
    notices = Notices("ipc:///nonexistent/events", "ipc:///nonexistent/control", start=False)
    heard: list[Any] = []
    notices.add_listener(heard.append)
    expected = 0
    current: dict[str, Any] | None = None
    for seq, version in enumerate(versions, start=1):
        message = {"v": 1, "id": "aws/spot-itn/1", "seq": seq, "provider": "aws"}
        message.update(version, sent_at="2026-11-30T03:10:00Z")
        notices._message([b"notice", json.dumps(message).encode()])
        content = {key: version[key] for key in ("action", "reason", "deadline", "detail")}
        if version["action"] == "clear":
            expected += current is not None
            current = None
        else:
            expected += content != current
            current = content
        event = notices.active.get("aws/spot-itn/1")
        if current is None:
            assert event is None
        else:
            assert event is not None
            assert (event.action, event.reason, event.detail) == (
                current["action"],
                current["reason"],
                current["detail"],
            )
            assert (event.deadline is None) == (current["deadline"] is None)
    assert len(heard) == expected


@pytest.mark.parametrize(
    "bad",
    [{"providers": None}, {"providers": 5}, {"acked": None}, {"acked": [None]}],
    ids=["providers-null", "providers-number", "acked-null", "acked-null-item"],
)
def test_a_malformed_heartbeat_is_dropped_and_the_guard_keeps_ticking(
    tmp_path: Path, caplog: Any, bad: dict[str, Any]
) -> None:
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=5.0)
    # The ticker reads `providers` for the flag file and `acked` for a terminate in force
    # before the job started (still undecided here): both must survive any heartbeat.
    guard = CheckpointGuard(
        every_seconds=0.3,
        notices=notices,
        flag_file=tmp_path / "checkpoint-now",
        handle_signals=False,
    )
    try:
        agent.subscribed()
        agent.beat()
        agent.notice(
            "aws/old",
            "terminate",
            noticed_at=format_time(utcnow() - timedelta(hours=1)),
            deadline=format_time(utcnow() + timedelta(hours=1)),
        )
        agent.beat(active=["aws/old"], **bad)
        agent.notice("aws/after", "drain")  # sent after the heartbeat, so read after it
        assert eventually(lambda: "aws/after" in notices.active, timeout=5)
        assert guard.due(1)
        guard.saved(1, 0.01)
        assert eventually(lambda: guard.due(2), timeout=5, what="a periodic save: the ticker ticks")
        assert not guard.should_exit
        (name,) = bad
        said = warnings_about(caplog, "dropped a malformed heartbeat")
        assert len(said) == 1 and repr(name) in said[0], said
        (tmp_path / "checkpoint-now").touch()  # the flag file is the guard's: no local provider
        guard.saved(2, 0.01)
        assert eventually(lambda: guard.due(3), timeout=5, what="the flag file")
        assert "flag" in guard.saved(3, 0.01).reasons
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_a_drain_withdrawn_during_an_agent_restart_is_flushed_again_when_it_comes_back(
    tmp_path: Path,
) -> None:
    agent = AgentProcess(tmp_path).start()
    notices = Notices(agent.events, agent.control_endpoint, heartbeat_timeout=1.5)
    seen: list[Any] = []
    notices.add_listener(seen.append)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
    try:
        agent.control({"op": "notify", "action": "drain", "id": "local/x"})
        assert eventually(lambda: guard.due(1), timeout=10, what="the drain")
        assert guard.saved(1, 0.01).notices == ("local/x",)
        agent.stop()
        # The next agent keeps its state elsewhere: the manual drain is gone, and no agent
        # ever sends a clear for it. Only the new agent's heartbeat says so.
        state = tmp_path / "state-2"
        state.mkdir()
        again = AgentProcess(tmp_path, env={**agent.env, "FOREWARN_STATE_DIR": str(state)})
        again.start()
        try:
            cleared = eventually(
                lambda: [e for e in seen if e.id == "local/x" and e.action == "clear"],
                timeout=10,
                what="a clear for the notice the new agent's heartbeat does not list",
            )[0]
            assert cleared.detail == {"withdrawn": "no longer listed by the agent's heartbeat"}
            # Numbered after the drain (the heartbeat's seq): with the drain's own, a listener
            # keeping the highest seq of each id kept the drain.
            drained = [e for e in seen if e.id == "local/x" and e.action == "drain"]
            assert cleared.seq > max(e.seq for e in drained), seen
            assert "local/x" not in notices.active
            assert notices.latest is not None and notices.latest.action == "clear"
            again.control({"op": "notify", "action": "drain", "id": "local/x"})
            assert eventually(lambda: guard.due(2), timeout=10, what="a flush for it again")
            assert guard.saved(2, 0.01).notices == ("local/x",)
        finally:
            again.stop()
    finally:
        guard.close()
        notices.close()


def test_an_inherited_terminate_withdrawn_during_an_agent_restart_no_longer_ends_the_job(
    tmp_path: Path, caplog: Any
) -> None:
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    seen: list[Any] = []
    notices.add_listener(seen.append)
    guard = CheckpointGuard(
        every_seconds=0.5, notices=notices, flag_file=None, handle_signals=False, exit_margin=3
    )
    try:
        agent.subscribed()
        # In force since before this job started, and acted on by an earlier one: the job
        # trains and would save and exit 3 s before the deadline.
        agent.beat(active=["aws/t"], acked=["aws/t"])
        agent.notice(
            "aws/t",
            "terminate",
            noticed_at=format_time(utcnow() - timedelta(hours=1)),
            deadline=format_time(utcnow() + timedelta(seconds=60)),
        )
        assert eventually(
            lambda: warnings_about(caplog, "an earlier client acted on it"), timeout=5
        )
        # The agent restarts; meanwhile the notice was withdrawn, and no clear is ever sent.
        agent.close()
        agent = FakeAgent(tmp_path)
        agent.subscribed()
        agent.beat(active=[])
        assert eventually(
            lambda: [e for e in seen if e.id == "aws/t" and e.action == "clear"],
            timeout=5,
            what="a clear for the terminate the new agent's heartbeat does not list",
        )
        # A slow save stretches the exit margin (twice the slowest flush) past the deadline:
        # a terminate the guard still held would end the job at the ticker's next look.
        guard.request("slow")
        assert guard.due(1)
        guard.saved(1, 100.0)
        for step in (2, 3):  # two periodic saves: the ticker has looked at least once
            assert eventually(lambda step=step: guard.due(step), timeout=5, what="the ticker")
            assert not guard.saved(step, 0.01).exit
        assert not guard.should_exit
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_an_inherited_terminate_resent_for_its_detail_does_not_end_the_job(
    tmp_path: Path, caplog: Any
) -> None:
    """Azure re-sends its notices at every DocumentIncarnation, each with a new `noticed_at`.
    Now that a detail change reaches the listeners, the guard must not take it for a terminate
    raised after the start; a new deadline still acts at once."""
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False, exit_margin=3)
    try:
        agent.subscribed()
        deadline = format_time(utcnow() + timedelta(seconds=60))
        agent.beat(active=["azure/E1"], acked=["azure/E1"])
        earlier = format_time(utcnow() - timedelta(hours=1))
        agent.notice("azure/E1", "terminate", noticed_at=earlier, deadline=deadline)
        assert eventually(
            lambda: warnings_about(caplog, "an earlier client acted on it"), timeout=5
        )
        seen: list[Any] = []
        notices.add_listener(seen.append)
        detail = {"DocumentIncarnation": 2}
        agent.notice("azure/E1", "terminate", deadline=deadline, detail=detail)
        eventually(lambda: seen, timeout=5, what="the re-sent notice")
        assert not guard.should_exit and not guard.due(1)
        agent.notice("azure/E1", "terminate", deadline=format_time(utcnow()), detail=detail)
        assert eventually(lambda: guard.should_exit, timeout=5, what="the new deadline acted on")
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_an_inherited_terminate_sent_again_with_a_moved_deadline_plans_for_the_new_one(
    tmp_path: Path, caplog: Any
) -> None:
    """The agent sends a terminate again, same id and `noticed_at`, when a step of the wall
    clock moved its deadline (a deadline given as a duration, kept on the boot clock). A job
    that inherited it (an earlier job saved for it) kept planning its exit for the deadline
    from before the step: stepped back 10 minutes, the job's save came 10 minutes after the
    machine was gone. The plan follows the new deadline, later or earlier; neither moves the
    exit to now."""
    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False, exit_margin=3)
    try:
        agent.subscribed()
        agent.beat(active=["aws/T1"], acked=["aws/T1"])
        earlier = format_time(utcnow() - timedelta(hours=1))
        deadline = format_time(utcnow() + timedelta(seconds=60))
        agent.notice("aws/T1", "terminate", noticed_at=earlier, deadline=deadline)
        assert eventually(
            lambda: warnings_about(caplog, "an earlier client acted on it"), timeout=5
        )
        seen: list[Any] = []
        notices.add_listener(seen.append)
        later = format_time(utcnow() + timedelta(seconds=660))
        agent.notice("aws/T1", "terminate", noticed_at=earlier, deadline=later)
        eventually(lambda: seen, timeout=5, what="the terminate sent again")
        assert not guard.should_exit and not guard.due(1)
        soon = format_time(utcnow() + timedelta(seconds=2))
        agent.notice("aws/T1", "terminate", noticed_at=earlier, deadline=soon)
        assert eventually(lambda: guard.should_exit, timeout=5, what="the exit for the move")
        assert guard.due(2)
        assert guard.saved(2, 0.01).exit
        # Saved and exiting: the same terminate moved again asks for no second exit save.
        seen.clear()
        again = format_time(utcnow() + timedelta(seconds=30))
        agent.notice("aws/T1", "terminate", noticed_at=earlier, deadline=again)
        eventually(lambda: seen, timeout=5, what="the terminate moved again")
        assert not guard.due(3)
    finally:
        guard.close()
        notices.close()
        agent.close()


def test_an_ack_to_an_endpoint_zmq_refuses_is_a_warning_not_a_dead_sender(
    tmp_path: Path, caplog: Any
) -> None:
    agent = FakeAgent(tmp_path)
    control = "tcp://127.0.0.1:notaport"  # a typo zmq refuses at connect (ZMQError)
    notices = Notices(agent.endpoint, control, heartbeat_timeout=5.0)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5)
        assert notices.ack(None, step=1)
        said = eventually(
            lambda: warnings_about(caplog, f"ack to {control} failed"), timeout=5, what="a warning"
        )
        assert "Invalid argument" in said[0]
        assert notices.ack(None, step=2, wait=True) is False
        assert notices.ack(None, step=3)
        assert notices._sender is not None and notices._sender.is_alive()
    finally:
        notices.close(ack_timeout=0.5)
        agent.close()


def test_an_ack_that_cannot_be_sent_is_logged_and_the_next_one_goes_out(
    tmp_path: Path, caplog: Any
) -> None:
    import zmq

    agent = FakeAgent(tmp_path)
    control = zmq.Context.instance().socket(zmq.REP)
    control.setsockopt(zmq.LINGER, 0)
    control.bind(agent.control)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=5.0)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5)
        assert notices.ack(None, step=1, note=object())  # type: ignore[arg-type]
        assert eventually(
            lambda: warnings_about(caplog, "could not be sent"), timeout=5, what="the error logged"
        )
        assert notices.ack(None, step=2, flush_seconds=0.5)
        assert control.poll(5000), "the next ack reaches the control socket"
        assert json.loads(control.recv())["step"] == 2
        control.send(b'{"ok": true}')
    finally:
        notices.close(ack_timeout=0.5)
        control.close(linger=0)
        agent.close()


def test_an_agent_restarted_quicker_than_the_heartbeat_timeout_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Killed and started again within `heartbeat_timeout`, the agent was followed in silence:
    never 'lost', so never 'found' either."""
    import threading

    import zmq
    from support import free_port

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.XPUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)

    def publish() -> None:
        wanted = {b"\x01heartbeat", b"\x01notice"}
        while wanted and sock.poll(10_000):
            wanted.discard(sock.recv())
        for seq, agent in enumerate(("vm/1/aaaaaa", "vm/1/aaaaaa", "vm/2/bbbbbb"), 1):
            beat = {"v": 1, "seq": seq, "agent": agent, "version": "0", "providers": []}
            beat |= {"active": [], "sent_at": format_time(utcnow())}
            sock.send_multipart([b"heartbeat", json.dumps(beat).encode()])

    publisher = threading.Thread(target=publish, daemon=True)
    caplog.set_level("INFO", logger="forewarn")
    notices = Notices(endpoint, "tcp://127.0.0.1:1", heartbeat_timeout=30)
    publisher.start()
    try:
        eventually(lambda: notices.agent and notices.agent["agent"] == "vm/2/bbbbbb")
        said = [r.getMessage() for r in caplog.records if "restarted" in r.getMessage()]
        assert said == [
            f"forewarn: the agent on {endpoint} restarted (was vm/1/aaaaaa, now vm/2/bbbbbb)"
        ]
    finally:
        notices.close()
        publisher.join(5)
        sock.close()


def test_an_ack_sent_while_the_agent_restarts_reaches_the_restarted_agent(
    tmp_path: Path,
) -> None:
    """A job saved for a terminate and exited while its agent restarted: the ack was tried once
    and dropped (or never queued, the agent's heartbeats having stopped), and the restarted
    agent listed the terminate as one nobody acted on, so the next job on the node exited at
    once. close() now lets the unanswered ack go out to the restarted agent."""
    import threading

    from forewarn.protocol.timefmt import format_time

    agent = AgentProcess(tmp_path).start()
    notices = Notices(agent.events, agent.control_endpoint, heartbeat_timeout=1.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)

    def close() -> None:  # as the job does on its way out: the guard, then its Notices
        guard.close()
        notices.close()

    closing = threading.Thread(target=close)
    try:
        deadline = format_time(utcnow() + timedelta(seconds=600))
        request = {"op": "notify", "action": "terminate", "id": "local/t", "deadline": deadline}
        agent.control(request)
        assert eventually(lambda: guard.due(1), timeout=10, what="the terminate")
        agent.kill()
        assert eventually(lambda: not notices.alive, timeout=5, what="the agent gone")
        assert guard.saved(1, 0.01).exit
        closing.start()  # the job exits: its close waits for the ack, not the training loop
        again = AgentProcess(tmp_path, env=agent.env).start()
        try:
            # close() returns once the ack is answered (the guard does not own these Notices:
            # its own close returned at once, and the first heartbeat could come before the
            # ack's next retry).
            closing.join(timeout=15)
            assert not closing.is_alive()
            with again.subscriber(("heartbeat",)) as sub:
                _, beat = sub.recv(timeout=3)
            assert beat["active"] == ["local/t"]
            assert beat["acked"] == ["local/t"], "the restarted agent knows it was acted on"
        finally:
            again.stop()
    finally:
        if not closing.is_alive() and closing.ident is None:
            guard.close()
        notices.close()


FOLLOWER = """
import sys, time
from forewarn.clients.notices import Notices
notices = Notices(sys.argv[1], sys.argv[2])
shown = None
while True:
    event = notices.active.get(sys.argv[3])
    if event is not None and event.action != shown:
        shown = event.action
        print(shown, flush=True)
    time.sleep(0.02)
"""


def test_a_change_dropped_while_the_job_was_stopped_reaches_it_when_it_resumes(
    tmp_path: Path,
) -> None:
    """A job stopped (SIGSTOP, a scheduler's suspend) while the agent sends more than its
    high-water mark holds loses what comes after, and a drain escalated to terminate then is a
    change of a notice it has, not a new one: the heartbeats went on listing its id, the job
    never asked for a replay, and it trained on under a drain the agent sent as terminate. The
    gap in the agent's `seq` (it counts every message) says something was lost."""
    import os
    import select
    import signal
    import subprocess

    import zmq

    agent = AgentProcess(tmp_path).start()
    later = format_time(utcnow() + timedelta(hours=2))
    follower: subprocess.Popen[str] | None = None
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    try:
        agent.control({"op": "notify", "action": "drain", "id": "local/slow", "deadline": later})
        follower = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER, agent.events, agent.control_endpoint, "local/slow"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert follower.stdout is not None
        assert select.select([follower.stdout], [], [], 20)[0], "the job never saw the drain"
        assert follower.stdout.readline().strip() == "drain"
        os.kill(follower.pid, signal.SIGSTOP)
        # Past the high-water mark of 1,000 messages (10,000 before), in replays of 64 notices of
        # 2 kB each.
        for number in range(63):
            request = {"op": "notify", "action": "drain", "id": f"local/n{number}"}
            agent.control({**request, "note": "x" * 1900, "deadline": later})
        sub.setsockopt(zmq.SUBSCRIBE, b"notice")
        sub.connect(agent.events)
        for _ in range(200):
            received = 0
            while received < 64:
                assert sub.poll(10_000), "no replay"
                received += sub.recv_multipart()[0] == b"notice"
            sub.setsockopt(zmq.SUBSCRIBE, b"notice")  # again: a replay to every subscriber
        sub.close()
        terminate = {"op": "notify", "action": "terminate", "id": "local/slow", "deadline": later}
        assert agent.control(terminate)["notice"]["action"] == "terminate"
        os.kill(follower.pid, signal.SIGCONT)
        assert select.select([follower.stdout], [], [], 20)[0], "the terminate never reached it"
        assert follower.stdout.readline().strip() == "terminate"
    finally:
        sub.close()
        if follower is not None:
            follower.kill()
            follower.wait()
        agent.stop()


def test_an_inherited_terminate_follows_a_step_of_the_wall_clock(
    tmp_path: Path, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deadlines are wall-clock times, and the agent's escalation follows a step of the
    system clock (NTP, a resume). A job that inherited an acted-on terminate planned its exit
    on the monotonic clock from the seconds left when it inherited it: after the wall clock
    stepped forward by most of an hour, the agent's deadline was 2 s away while the job
    meant to train for most of an hour more. Nothing new comes from the agent (the notice is
    a terminate already): the job must see the step itself."""
    from forewarn.clients import guard_notices

    agent = FakeAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control, heartbeat_timeout=1.0)
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False, exit_margin=3)
    try:
        agent.subscribed()
        deadline = utcnow() + timedelta(hours=1)
        agent.beat(active=["aws/t"], acked=["aws/t"])
        earlier = format_time(utcnow() - timedelta(hours=1))
        agent.notice("aws/t", "terminate", noticed_at=earlier, deadline=format_time(deadline))
        assert eventually(
            lambda: warnings_about(caplog, "an earlier client acted on it"), timeout=5
        )
        assert not guard.should_exit
        stepped = deadline - timedelta(seconds=2)
        monkeypatch.setattr(guard_notices, "utcnow", lambda: stepped)
        assert eventually(lambda: guard.should_exit, timeout=5, what="the exit after the step")
    finally:
        guard.close()
        notices.close()
        agent.close()


@pytest.mark.parametrize("client_id", ["", "j" * 1100, "job\nfake", "x" * 201])
def test_a_client_id_the_agent_could_never_take_is_refused_at_once(client_id: str) -> None:
    """Taken, `Notices(client_id="j" * 1100)` subscribed `client/jjj...`, a frame over the
    agent's KiB: ZeroMQ dropped the connection, the client reconnected in a loop saying "no
    agent", and never heard the active notice; an id past 200 characters had every ack
    refused."""
    with pytest.raises(ValueError, match="client_id"):
        Notices("ipc:///nonexistent/events", "ipc:///nonexistent/control", client_id=client_id)


def test_notices_hear_an_agent_on_ipv6_loopback(tmp_path: Path) -> None:
    """ZeroMQ connects to an IPv6 address only with ZMQ_IPV6 set: Notices (and so the guard)
    connected to an agent on tcp://[::1] and waited there in silence."""
    import socket

    ports = []
    for _ in range(2):
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            ports.append(probe.getsockname()[1])
    events, control = (f"tcp://[::1]:{port}" for port in ports)
    env = agent_env(tmp_path, FOREWARN_EVENTS=events, FOREWARN_CONTROL=control)
    with AgentProcess(tmp_path, env=env) as agent:
        agent.control({"op": "notify", "action": "drain", "id": "local/v6"})
        notices = Notices(events, control)
        try:
            assert eventually(lambda: "local/v6" in notices.active, timeout=20), notices.alive
        finally:
            notices.close()


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(st.sampled_from(("taint", "node", "uid")), st.text(max_size=5), max_size=3),
    st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6)), min_size=2, max_size=4),
    st.booleans(),
)
def test_a_replay_is_news_to_listeners_only_where_more_than_its_skew_changed(
    detail: dict[str, str], skews: list[float | None], other_change: bool
) -> None:
    """The same drain received again (a replay) with any `clock_ahead_seconds` (or none) is no
    news: listeners hear it once, and `active` holds the detail last received. A change of
    any other detail is news, heard again."""
    notices = Notices("ipc:///nonexistent/events", "ipc:///nonexistent/control", start=False)
    heard: list[int] = []
    notices.add_listener(lambda event: heard.append(event.seq))
    sent = format_time(utcnow())
    for seq, skew in enumerate(skews, start=1):
        shown = dict(detail) if skew is None else {**detail, "clock_ahead_seconds": skew}
        if other_change and seq == len(skews):
            shown["changed"] = "yes"
        notice = {"v": 1, "id": "kubernetes/n/cordon", "seq": seq, "action": "drain"}
        notice.update(reason="node-drain", provider="kubernetes", deadline=None)
        notice.update(noticed_at=sent, sent_at=sent, detail=shown)
        notices._message([b"notice", json.dumps(notice).encode()])
    assert heard == ([1, len(skews)] if other_change else [1])
    assert notices.active["kubernetes/n/cordon"].detail == shown
