"""What the commands that ask the agent (`status`, `notify`) do with each kind of reply: a
refusal is one `forewarn:` line and exit 2, whether the command prints text or JSON."""

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
from support import examples, free_port


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
    # The command first, as in its other errors (and `ack`'s): a script's log said which.
    assert err == (
        f"forewarn: {argv[0]}: the agent refused: refused: the request has no control token\n"
    )
    # `--json` prints the agent's refusal, as it sent it, for the script reading stdout.
    assert out == ("" if "--json" not in argv else json.dumps(json.loads(REFUSAL), indent=2) + "\n")


@pytest.mark.parametrize("fake_agent", [REFUSAL], indirect=True)
def test_a_refusal_of_an_ack_says_it_was_the_ack(
    fake_agent: FakeAgent, capsys: pytest.CaptureFixture[str]
) -> None:
    # As its other errors do (`forewarn: ack: --step: ...`): a script's log did not say
    # which of its commands the agent refused.
    code, out, err = _run(["ack", "--control", fake_agent.endpoint], capsys)
    assert code == 2, err
    assert err == ("forewarn: ack: the agent refused: refused: the request has no control token\n")
    assert out == ""


NOT_AN_AGENT = [
    b"garbage",
    b"\xff\xfe",
    b"[1, 2]",
    b"[" * 100_000,
    b'{"ok": true}',
    b'{"ok": true, "agent": {}, "notice": 5, "cleared": 7, "active": [1]}',
]


@pytest.mark.parametrize("fake_agent", NOT_AN_AGENT, indirect=True, ids=lambda r: repr(r[:20]))
@pytest.mark.parametrize(
    "argv", [["status"], ["status", "--json"], ["notify", "drain"], ["notify", "clear"]]
)
def test_a_reply_that_is_not_the_agents_is_one_line_naming_the_endpoint(
    fake_agent: FakeAgent, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _out, err = _run([*argv, "--control", fake_agent.endpoint], capsys)
    if code == 0:  # `status --json` prints whatever JSON object the agent sent
        assert argv == ["status", "--json"] and fake_agent.reply.startswith(b"{"), err
        return
    assert code == 1, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"forewarn: the agent on {fake_agent.endpoint} sent a reply"), err
    assert "unexpected" not in err


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(["ok", "agent", "active", "health", "notice", "cleared", "error"])
_REPLIES = st.one_of(
    st.binary(max_size=60),
    st.dictionaries(_KEYS, _JSON, max_size=5).map(lambda d: json.dumps(d).encode()),
    st.dictionaries(_KEYS, _JSON, max_size=5).map(lambda d: json.dumps({**d, "ok": True}).encode()),
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(reply=_REPLIES, argv=st.sampled_from([["status"], ["notify", "drain"], ["notify", "clear"]]))
def test_whatever_the_reply_the_command_ends_with_an_exit_code_not_a_crash(
    reply: bytes, argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    agent = FakeAgent(reply)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
            code, _, err = _run([*argv, "--control", agent.endpoint], capsys)
    finally:
        agent.close()
    assert code in (0, 1, 2), err
    assert "unexpected" not in err and "Traceback" not in err, err
    if code:
        assert len(err.splitlines()) == 1 and err.startswith("forewarn: "), err


_STATUS_KEYS = st.sampled_from(["ok", "agent", "active", "health", "parts", "error"])
_STATUS_REPLIES = st.one_of(
    _REPLIES,
    st.dictionaries(_STATUS_KEYS, _JSON, max_size=5).map(
        lambda d: json.dumps({**d, "ok": True}).encode()
    ),
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(reply=_STATUS_REPLIES)
def test_status_json_prints_one_json_object_whatever_the_reply(
    reply: bytes, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A script runs `forewarn status --json | jq .ok`: whatever answered, stdout is one JSON
    object with `ok`, and `ok` is true only on exit 0 or a dead part's 1 (found walking
    `status --json` as a script reads it: a refusal or a reply that is not the agent's printed
    nothing on stdout, and jq read no document at all)."""
    agent = FakeAgent(reply)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
            code, out, err = _run(["status", "--json", "--control", agent.endpoint], capsys)
    finally:
        agent.close()
    assert code in (0, 1, 2, 4), err
    assert "unexpected" not in err and "Traceback" not in err, err
    printed = json.loads(out)
    assert isinstance(printed, dict) and "ok" in printed, out
    if printed["ok"] is not True:
        assert code in (1, 2), (code, out, err)
    if code == 2:
        assert printed == json.loads(reply), out  # the agent's own refusal, as it sent it
