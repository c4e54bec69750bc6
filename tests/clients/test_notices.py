"""Notices in-process: late join, reconnect after an agent restart, a dead agent noticed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from forewarn.clients import CheckpointGuard, Notices
from forewarn.protocol.timefmt import format_time, utcnow
from support import AgentProcess, eventually


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
        time.sleep(2.5)  # past the heartbeat timeout, with no agent
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
    """An agent's events socket that sends what the test says: a real XPUB on ipc."""

    def __init__(self, directory: Path) -> None:
        import zmq

        self.endpoint = f"ipc://{directory}/events"
        self.control = f"ipc://{directory}/control"  # nothing answers there
        self.pub = zmq.Context.instance().socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(self.endpoint)
        self.seq = 0

    def subscribed(self, timeout: float = 10) -> None:
        """Until the client has subscribed to notices (its last subscription)."""
        end = time.monotonic() + timeout
        while self.pub.poll(max(int((end - time.monotonic()) * 1000), 1)):
            if self.pub.recv() == b"\x01notice":
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
        self.pub.close(linger=0)


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
