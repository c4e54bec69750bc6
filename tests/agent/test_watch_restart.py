"""`forewarn watch` and `forewarn wait` across an agent restart: the events socket reconnects
by itself, and one line on stderr says the agent changed (its heartbeat's `agent`)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import zmq
from forewarn.agent.cli import main
from forewarn.clients import notices
from forewarn.protocol.timefmt import format_time, utcnow
from support import free_port

NOW = "2026-12-01T00:00:00Z"
NOTICE = {
    "v": 1,
    "id": "local/manual/1",
    "seq": 9,
    "action": "terminate",
    "reason": "manual",
    "provider": "local",
    "deadline": None,
    "noticed_at": NOW,
    "sent_at": NOW,
    "detail": {},
}


def _beat(agent: str, seq: int, active: tuple[str, ...] = ()) -> list[bytes]:
    beat = {"v": 1, "seq": seq, "agent": agent, "version": "0", "providers": []}
    return [b"heartbeat", json.dumps({**beat, "active": list(active), "sent_at": NOW}).encode()]


RESTART_THEN_TERMINATE = (
    _beat("vm/100/aaaaaa", 1),
    _beat("vm/100/aaaaaa", 2),
    _beat("vm/200/bbbbbb", 3),
    _beat("vm/200/bbbbbb", 4),
    [b"notice", json.dumps(NOTICE).encode()],
)


class RestartingAgent:
    """An XPUB that, once a subscriber has joined, sends `messages`: by default heartbeats of
    one agent, then of another (a restart), then a terminate. With `beating`, it then goes on
    sending the last message each tenth of a second, as an agent sends its heartbeat, until
    closed."""

    def __init__(
        self, messages: tuple[list[bytes], ...] = RESTART_THEN_TERMINATE, *, beating: bool = False
    ) -> None:
        self.messages = messages
        self.beating = beating
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self._stop = threading.Event()
        self._sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.XPUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(self.endpoint)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        wanted = {b"\x01notice", b"\x01heartbeat"}
        while wanted and self._sock.poll(10_000):
            wanted.discard(self._sock.recv())
        for message in self.messages:
            self._sock.send_multipart(message)
        topic, last = self.messages[-1]
        while self.beating and not self._stop.wait(0.1):
            # Stamped as a real agent stamps each one: the settle after a restart counts on
            # the agent's clock too.
            now = format_time(utcnow())
            self._sock.send_multipart(
                [topic, json.dumps({**json.loads(last), "sent_at": now}).encode()]
            )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.mark.parametrize(
    "command", [["watch", "--count", "1"], ["wait", "--for", "terminate"]], ids=["watch", "wait"]
)
def test_a_restarted_agent_is_followed_and_named(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    # Noticed after the command began, as a terminate the restarted agent raises: one noticed
    # before it is decided by the heartbeats' `acked`, which these heartbeats leave out.
    later = format_time(utcnow() + timedelta(minutes=1))
    terminate = [b"notice", json.dumps({**NOTICE, "noticed_at": later}).encode()]
    agent = RestartingAgent((*RESTART_THEN_TERMINATE[:-1], terminate))
    try:
        code = main([*command, "--timeout", "20", "--events", agent.endpoint])
    finally:
        agent.close()
    out, err = capsys.readouterr()
    assert code == 0 and "terminate" in out and "local/manual/1" in out
    assert err.count("\n") == 1, err
    assert f"the agent on {agent.endpoint} restarted (was vm/100/aaaaaa, now vm/200/bbbbbb)" in err


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["text", "json"])
def test_a_notice_withdrawn_while_the_agent_restarted_is_shown_cleared(
    output: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The restarted agent sent the notice's clear before watch had reconnected: watch went on
    showing it as in force. Its heartbeat no longer lists it, and watch says it is cleared."""
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    # The restarted agent's heartbeats count once its own settle has passed, as in the client.
    monkeypatch.setattr(notices, "RESTART_SETTLE", 0.5)
    notice_id = NOTICE["id"]
    agent = RestartingAgent(
        (
            _beat("vm/100/aaaaaa", 1, (notice_id,)),
            [b"notice", json.dumps(NOTICE).encode()],
            _beat("vm/100/aaaaaa", 2, (notice_id,)),
            _beat("vm/200/bbbbbb", 3),
        ),
        beating=True,
    )
    try:
        code = main(
            ["watch", "--count", "2", "--timeout", "20", "--events", agent.endpoint, *output]
        )
    finally:
        agent.close()
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert code == 0 and len(lines) == 2, out
    if output:
        cleared = json.loads(lines[1])
        assert cleared["action"] == "clear" and cleared["id"] == notice_id
        assert cleared["replay"] is False and "withdrawn" in cleared["detail"]
    else:
        assert lines[1].split()[1:3] == ["clear", notice_id], lines[1]
        assert "withdrawn: " in lines[1]


def test_a_notice_published_just_before_the_agent_was_killed_is_not_shown_cleared(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The agent published a drain and was SIGKILLed before its state file had it (the publish
    does not wait for the disk; a full disk never saves it): the restarted agent's first
    heartbeats do not list it until its watcher reports it again. Watch took them at their word
    and printed a clear for a notice nobody withdrew, then the drain again as news, where the
    client library and the C subscriber wait RESTART_SETTLE before a restarted agent's
    heartbeats withdraw anything."""
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    notice_id = NOTICE["id"]
    drain = {**NOTICE, "action": "drain", "deadline": "2126-12-01T00:00:00Z"}
    agent = RestartingAgent(
        (
            _beat("vm/100/aaaaaa", 1, (notice_id,)),
            [b"notice", json.dumps(drain).encode()],
            _beat("vm/100/aaaaaa", 2, (notice_id,)),
            _beat("vm/200/bbbbbb", 3),  # its first answer is not in yet
            [b"notice", json.dumps({**drain, "seq": 5}).encode()],
            _beat("vm/200/bbbbbb", 6, (notice_id,)),
        )
    )
    try:
        code = main(
            ["watch", "--count", "2", "--timeout", "20", "--events", agent.endpoint, "--json"]
        )
    finally:
        agent.close()
    out, _ = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 2, out
    assert [line["action"] for line in lines] == ["drain", "drain"], out
    assert lines[1]["replay"] is True, out


def test_the_clear_watch_makes_for_a_withdrawn_notice_is_numbered_after_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`watch --json` printed the clear it makes for a notice the heartbeats stopped listing
    with the `seq` of the notice's last message: a consumer keeping, for each id, the message
    with the highest `seq` (as the agent's numbering invites) kept the notice in force. It
    carries the `seq` of the heartbeat that showed it gone, after the notice's own."""
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(notices, "RESTART_SETTLE", 0.5)
    notice_id = NOTICE["id"]
    agent = RestartingAgent(
        (
            _beat("vm/100/aaaaaa", 8, (notice_id,)),
            [b"notice", json.dumps(NOTICE).encode()],  # seq 9
            _beat("vm/100/aaaaaa", 10, (notice_id,)),
            # The restarted agent numbers on past the old one's reserved mark.
            _beat("vm/200/bbbbbb", 40),
        ),
        beating=True,
    )
    try:
        code = main(
            ["watch", "--count", "2", "--timeout", "20", "--events", agent.endpoint, "--json"]
        )
    finally:
        agent.close()
    out, _ = capsys.readouterr()
    notice, cleared = (json.loads(line) for line in out.splitlines())
    assert code == 0 and cleared["action"] == "clear", out
    assert cleared["seq"] == 40 > notice["seq"], out
