"""What the commands that ask the agent (`status`, `notify`) do with each kind of reply: a
refusal is one `forewarn:` line and exit 2, whether the command prints text or JSON."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from forewarn.agent.cli import main
from support import free_port


class FakeAgent:
    """A REP socket on loopback that answers every request with the same bytes."""

    def __init__(self, reply: bytes) -> None:
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.reply = reply
        self._sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(self.endpoint)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self._sock.poll(50):
                self._sock.recv()
                self._sock.send(self.reply)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def fake_agent(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeAgent]:
    # A runtime directory of its own: no control token of another agent is read.
    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    agent = FakeAgent(request.param)
    yield agent
    agent.close()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


REFUSAL = b'{"ok": false, "error": "refused: the request has no control token"}'


@pytest.mark.parametrize("fake_agent", [REFUSAL], indirect=True)
@pytest.mark.parametrize(
    "argv", [["status"], ["status", "--json"], ["notify", "drain"], ["notify", "clear"]]
)
def test_a_refusal_is_one_line_and_exit_2(
    fake_agent: FakeAgent, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run([*argv, "--control", fake_agent.endpoint], capsys)
    assert code == 2, err
    assert err == "forewarn: the agent refused: refused: the request has no control token\n"
    assert out == ""
