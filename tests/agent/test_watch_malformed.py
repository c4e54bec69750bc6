"""`forewarn wait` and `forewarn watch` drop a malformed message on the events socket, say so,
and go on listening, as the client library does: one used to end them with 'unexpected
KeyError' (or JSONDecodeError, or a frame count) and exit 1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from forewarn.agent.cli import main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import free_port

# How the CLI reports a crash. Not the word "unexpected" alone: a correct "dropped a malformed"
# line quotes the decoder, whose own message may say "unexpected end of data" (b"\xc2").
CRASH = "forewarn: unexpected "
NOW = "2026-12-01T00:00:00Z"
HEARTBEAT = {"v": 1, "seq": 1, "agent": "fake", "version": "0", "providers": [], "active": []}
NOTICE = {
    "v": 1,
    "id": "local/manual/1",
    "seq": 2,
    "action": "terminate",
    "reason": "manual",
    "provider": "local",
    "deadline": None,
    "noticed_at": NOW,
    "sent_at": NOW,
    "detail": {},
}


class FakePublisher:
    """A PUB on loopback that sends `frames`, then a good heartbeat and notice, over and over
    (a SUB that joins late misses what went before)."""

    def __init__(self, frames: list[bytes]) -> None:
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self._sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(self.endpoint)
        self._frames = frames
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        beat = [b"heartbeat", json.dumps({**HEARTBEAT, "sent_at": NOW}).encode()]
        notice = [b"notice", json.dumps(NOTICE).encode()]
        while not self._stop.wait(0.05):
            if self._frames:
                self._sock.send_multipart(self._frames)
            self._sock.send_multipart(beat)
            self._sock.send_multipart(notice)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    yield tmp_path


MALFORMED = [
    [b"heartbeat", b"garbage"],
    [b"heartbeat", b"{}"],
    [b"heartbeat", b'{"active": 5, "sent_at": "x", "agent": "a"}'],
    [b"notice", b"[1]"],
    [b"notice", b'{"id": "x"}'],
    [b"notice"],
    [b"notice", b"{}", b"extra"],
    # Found by the property test below: the decoder's own message says "unexpected end of data".
    [b"notice", b"\xc2"],
]
COMMANDS = [
    ["wait", "--for", "drain"],
    ["watch", "--count", "1", "--heartbeats"],
    ["watch", "--count", "1", "--json"],
]


def _run(command: list[str], frames: list[bytes], capsys: pytest.CaptureFixture[str]):
    publisher = FakePublisher(frames)
    try:
        code = main([*command, "--events", publisher.endpoint, "--agent-timeout", "10s"])
    finally:
        publisher.close()
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("frames", MALFORMED, ids=repr)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_malformed_message_is_dropped_and_said_once(
    runtime: Path, command: list[str], frames: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(command, frames, capsys)
    assert code == 0, err
    assert "local/manual/1" in out
    said = err.splitlines()
    assert len(said) <= 1 and CRASH not in err, err
    if said:
        assert said[0].startswith(f"forewarn: {command[0]}: dropped a malformed "), err


_FRAME = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([b"notice", b"heartbeat"]),
    st.builds(lambda d: json.dumps(d).encode(), st.dictionaries(st.text(max_size=8), st.none())),
    st.builds(
        lambda d: json.dumps({**NOTICE, **d}).encode(),
        st.dictionaries(
            st.sampled_from(sorted(NOTICE)),
            st.none() | st.integers() | st.text(max_size=8) | st.lists(st.none(), max_size=2),
        ),
    ),
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=st.lists(_FRAME, min_size=1, max_size=3), command=st.sampled_from(COMMANDS))
def test_whatever_a_publisher_sends_the_next_good_notice_still_arrives(
    runtime: Path, frames: list[bytes], command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(command, frames, capsys)
    # `frames` may itself be a good notice (another id): then that one is printed.
    assert code == 0 and out, err
    assert CRASH not in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_notice_naming_a_key_twice_is_dropped_naming_the_key(
    runtime: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Python's json kept the last of two `action`s, the C subscriber the first: this notice
    was a terminate to `forewarn wait` and a clear to the C subscriber."""
    twice = json.dumps({**NOTICE, "id": "local/twice", "action": "clear"})
    frames = [b"notice", (twice[:-1] + ', "action": "terminate"}').encode()]
    code, out, err = _run(command, frames, capsys)
    assert code == 0, err
    assert "local/manual/1" in out and "local/twice" not in out, out
    assert "the key 'action' appears twice in one object" in err, err


@pytest.mark.parametrize("command", [["watch", "--count", "2"], ["wait", "--for", "drain"]])
def test_a_notice_s_text_from_another_publisher_is_printed_on_one_line(
    runtime: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A publisher that is not the agent sent a newline after `sent_at` (a time is read
    without its blanks, so the notice is taken) and in the id, and an escape sequence in the
    reason: `watch` printed the notice as two lines and sent the escape to the terminal."""
    hostile = {
        **NOTICE,
        "id": "local/two\nlines",
        "action": "drain",
        "reason": "manual\x1b[2J",
        "sent_at": NOW + "\n",
        "noticed_at": NOW,
    }
    code, out, err = _run(command, [b"notice", json.dumps(hostile).encode()], capsys)
    assert code == 0, err
    lines = out.splitlines()
    expected = 2 if command[0] == "watch" else 1
    assert len(lines) == expected and all(line.isprintable() for line in lines), out
    if command[0] == "watch":
        assert any("local/two\\u000alines  manual\\u001b[2J (local)" in line for line in lines)
