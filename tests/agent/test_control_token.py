"""A control endpoint that file permissions cannot guard (tcp:// on loopback, ipc://@abstract)
answers only requests carrying the token the agent wrote to its runtime directory, over real
processes: the agent's own user (CLI, CheckpointGuard) gets through with no new flag; a missing
or wrong token, or another uid, is refused with an error naming the token."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.cli import main as forewarn_main
from forewarn.agent.controltoken import token_matches
from forewarn.protocol.wire import TOKEN_FILE, needs_token, read_token, request
from hypothesis import given
from hypothesis import strategies as st
from other_user import call_as, other_user
from support import AgentProcess, agent_env, control, eventually, free_port, run_forewarn

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _agent(tmp_path: Path, control_endpoint: str) -> AgentProcess:
    env = agent_env(tmp_path, FOREWARN_CONTROL=control_endpoint)
    return AgentProcess(tmp_path, env=env)


def _abstract() -> str:
    return f"ipc://@forewarn-token-{os.getpid()}-{time.monotonic_ns()}"


@pytest.mark.parametrize("kind", ["tcp", "abstract"])
def test_a_request_without_or_with_a_wrong_token_is_refused(tmp_path: Path, kind: str) -> None:
    endpoint = f"tcp://127.0.0.1:{free_port()}" if kind == "tcp" else _abstract()
    runtime = tmp_path / "run"
    runtime.mkdir()
    # Someone planted a link where the token goes: the agent replaces the link, never
    # writes through it.
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (runtime / TOKEN_FILE).symlink_to(victim)
    with _agent(tmp_path, endpoint) as agent:
        assert victim.read_text() == "untouched"
        found = os.lstat(runtime / TOKEN_FILE)
        assert stat.S_ISREG(found.st_mode) and stat.S_IMODE(found.st_mode) == 0o600
        assert found.st_uid == os.geteuid()
        token = read_token(runtime)
        assert token is not None and len(token) == 64
        for bad in ({"op": "status"}, {"op": "status", "token": "0" * 64}):
            for op in (bad, {**bad, "op": "notify", "action": "terminate"}):
                reply = control(endpoint, op)
                assert reply["ok"] is False and "control token" in reply["error"], reply
                assert str(runtime / TOKEN_FILE) in reply["error"], reply
        for wrong in (1, None, ["x"], {"t": token}, token + "0", token[:-1], "\ud800"):
            reply = control(endpoint, {"op": "status", "token": wrong})
            assert reply["ok"] is False and "control token" in reply["error"], (wrong, reply)
        # Many refusals, one warning: a peer retrying in a loop does not flood the log.
        for _ in range(30):
            control(endpoint, {"op": "notify", "action": "terminate"})
        assert control(endpoint, {"op": "status", "token": token})["ok"]
        # The file as a client in another language reads it, newline included.
        as_read = (runtime / TOKEN_FILE).read_text()
        assert as_read == token + "\n"
        assert control(endpoint, {"op": "status", "token": as_read})["ok"]
        assert agent.control({"op": "status"})["active"] == []
        assert agent.output().count("without the right token") == 1, agent.output()
    assert not (runtime / TOKEN_FILE).exists(), "a stopped agent leaves no token behind"


def test_the_same_users_cli_and_checkpoint_guard_need_no_new_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients import CheckpointGuard, Notices

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = agent_env(tmp_path)
    agent = AgentProcess(
        tmp_path, env=env, args=("--control", endpoint, "--set", "control_probe_interval=0.1")
    )
    agent.control_endpoint = endpoint
    with agent:
        done = run_forewarn(
            "notify", "drain", "--id", "local/token", "--control", endpoint, env=env
        )
        assert done.returncode == 0, done.stderr
        done = run_forewarn("status", "--control", endpoint, env=env)
        assert done.returncode == 0 and "local/token" in done.stdout, done
        # The in-process client finds the token in the runtime directory of its environment.
        monkeypatch.setenv("FOREWARN_RUNTIME_DIR", env["FOREWARN_RUNTIME_DIR"])
        notices = Notices(agent.events, endpoint)
        guard = CheckpointGuard(notices=notices, handle_signals=False, flag_file=None)
        try:
            eventually(lambda: guard.due(1), timeout=10, what="the drain reaching the guard")
            guard.saved(1, 0.1)
            eventually(lambda: "ack local/token from" in agent.output(), timeout=10, what="the ack")
        finally:
            guard.close()
            notices.close()
        # The agent's self-probe (every 0.1 s since it started, seconds ago) carries the token
        # too: a refused probe would count as unanswered and be logged.
        assert "did not answer" not in agent.output(), agent.output()


def test_another_uid_cannot_read_the_token_and_its_notify_is_refused(tmp_path: Path) -> None:
    uid, gid = other_user()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with _agent(tmp_path, endpoint) as agent:
        runtime = tmp_path / "run"
        # Open the way down, the runtime directory included: only the token file's own mode
        # keeps the token from the other user.
        for path in (runtime, tmp_path, tmp_path.parent, tmp_path.parent.parent):
            os.chmod(path, os.stat(path).st_mode | 0o005)

        def attack() -> dict[str, Any]:
            stderr = io.StringIO()
            os.environ["FOREWARN_RUNTIME_DIR"] = str(runtime)
            with contextlib.redirect_stderr(stderr):
                code = forewarn_main(["notify", "terminate", "--control", endpoint])
            return {
                "token": read_token(runtime),
                "reply": request(endpoint, {"op": "notify", "action": "terminate"}),
                "cli": [code, stderr.getvalue()],
            }

        found = call_as(uid, gid, attack)
        assert found["token"] is None
        assert found["reply"]["ok"] is False and "control token" in found["reply"]["error"]
        code, stderr = found["cli"]
        assert code == 2 and stderr.startswith("forewarn: ") and "control token" in stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
        assert agent.control({"op": "status"})["active"] == []


def test_only_socket_files_go_without_a_token() -> None:
    assert not needs_token("ipc:///run/forewarn/control")
    assert needs_token("ipc://@forewarn-control")
    assert needs_token("tcp://127.0.0.1:5556")


@given(JSON)
def test_the_token_check_refuses_every_other_json_value(given_token: Any) -> None:
    expected = "ab" * 32
    same = isinstance(given_token, str) and given_token.strip(" \t\r\n") == expected
    assert token_matches(expected, given_token) is same
    if isinstance(given_token, str):
        assert not token_matches(expected, expected + given_token + "x")


@given(st.text(" \t\r\n", max_size=4), st.text(" \t\r\n", max_size=4))
def test_the_token_file_as_read_is_the_token(before: str, after: str) -> None:
    """What a client in another language reads from the file (the token and its newline) is
    accepted, with any whitespace around it; the token with anything else changed is not."""
    expected = "ab" * 32
    assert token_matches(expected, before + expected + after)
    assert not token_matches(expected, before + expected[:-1] + after)
    assert not token_matches(expected, before + expected + "\x00" + after)


def test_a_client_reads_no_token_through_a_link_a_fifo_or_an_oversize_file(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("a" * 64)
    path = tmp_path / TOKEN_FILE
    path.symlink_to(tmp_path / "real")
    assert read_token(tmp_path) is None
    path.unlink()
    os.mkfifo(path)
    assert read_token(tmp_path) is None  # no writer: returns at once instead of blocking
    path.unlink()
    path.write_text("a" * 300)
    assert read_token(tmp_path) is None
    path.write_text("b" * 64 + "\n")
    assert read_token(tmp_path) == "b" * 64
