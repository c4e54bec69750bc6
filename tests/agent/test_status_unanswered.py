"""`forewarn status` when the agent does not answer, as an operator and a script meet it: a
stopped agent is named at once (no wait for `--timeout`), and `status --json` prints a JSON
object on stdout saying why there is no reply, for a script piping it into `jq`."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import zmq
from support import AgentProcess, agent_env, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")


def test_status_of_a_stopped_agent_says_so_without_waiting_for_the_timeout(
    tmp_path: Path,
) -> None:
    """Left by the last session: with the agent under SIGSTOP, `status` waited the whole
    `--timeout` (30 s by default) before naming the stopped pid and `kill -CONT`, though
    /proc/PID/stat says `T` from the first moment and no wait can help."""
    with AgentProcess(tmp_path) as agent:
        assert agent.proc is not None
        pid = agent.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            done = run_forewarn("status", "--timeout", "20", env=agent.env, timeout=60)
            took = time.monotonic() - started
        finally:
            os.kill(pid, signal.SIGCONT)
        assert done.returncode == 1, done
        assert took < 10, f"took {took:.1f}s of --timeout 20s: {done.stderr}"
        assert f"pid {pid}" in done.stderr and "is stopped" in done.stderr, done.stderr
        assert f"`kill -CONT {pid}` resumes it" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
        # Resumed, the request the stopped agent was sent is no harm, and it answers again.
        assert run_forewarn("status", env=agent.env).returncode == 0


def _unanswered(done: object) -> dict[str, object]:
    """The JSON object `status --json` printed for no reply, checked for its common shape."""
    stdout = getattr(done, "stdout", "")
    reply = json.loads(stdout)
    assert isinstance(reply, dict), stdout
    assert reply["ok"] is False and reply["answered"] is False, reply
    assert isinstance(reply["error"], str) and reply["error"], reply
    return reply


def test_status_json_without_an_agent_prints_a_json_object(tmp_path: Path) -> None:
    """Left by the last session: `status --json | jq .ok` got nothing on stdout when no agent
    runs, so a script read an empty document (jq: no output, exit 0) where it needed a no."""
    env = agent_env(tmp_path)
    done = run_forewarn("status", "--json", env=env)
    assert done.returncode == 1, done
    reply = _unanswered(done)
    control = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/control"
    assert reply["reason"] == "not-running" and reply["control"] == control, reply
    assert "pid" not in reply, reply
    # The line for people is still on stderr, and says the same.
    assert done.stderr == f"forewarn: {reply['error']}\n", done.stderr


def test_status_json_with_a_stale_socket_file_says_not_running(tmp_path: Path) -> None:
    """A SIGKILLed agent leaves its socket file: a connection to it is refused."""
    env = agent_env(tmp_path)
    path = Path(env["FOREWARN_RUNTIME_DIR"]) / "control"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
        left.bind(str(path))  # bound, never listening, then closed: as a killed agent's
    done = run_forewarn("status", "--json", env=env)
    assert done.returncode == 1, done
    reply = _unanswered(done)
    assert reply["reason"] == "not-running", reply
    assert "refused" in str(reply["error"]).lower(), reply


def test_status_json_of_a_stopped_agent_names_its_pid(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        assert agent.proc is not None
        pid = agent.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            done = run_forewarn("status", "--json", "--timeout", "20", env=agent.env, timeout=60)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert done.returncode == 1, done
    reply = _unanswered(done)
    assert reply["reason"] == "stopped" and reply["pid"] == pid, reply


def test_status_json_of_an_agent_starting_names_the_lock_holder(tmp_path: Path) -> None:
    from forewarn.agent.rundir import AgentLock

    env = agent_env(tmp_path)
    lock = AgentLock(Path(env["FOREWARN_RUNTIME_DIR"]) / "agent.lock").acquire()
    try:
        done = run_forewarn("status", "--json", env=env)
    finally:
        lock.release()
    assert done.returncode == 1, done
    reply = _unanswered(done)
    assert reply["reason"] == "starting-or-stopping", reply
    assert str(reply["holder"]).startswith(f"pid {os.getpid()} holds "), reply


def test_status_json_of_an_agent_that_does_not_answer_in_time(tmp_path: Path) -> None:
    """Something takes the request on the control socket and never answers (a hung agent)."""
    env = agent_env(tmp_path)
    control = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/control"
    hung = zmq.Context.instance().socket(zmq.REP)
    hung.setsockopt(zmq.LINGER, 0)
    hung.bind(control)
    try:
        done = run_forewarn("status", "--json", "--timeout", "1", env=env)
    finally:
        hung.close()
    assert done.returncode == 1, done
    reply = _unanswered(done)
    assert reply["reason"] == "timed-out" and reply["timeout_seconds"] == 1, reply
    assert "pid" not in reply, reply


@pytest.mark.parametrize("argv", [["notify", "drain"], ["ack", "--client", "loop"]])
def test_notify_and_ack_json_without_an_agent_print_a_json_line(
    argv: list[str], tmp_path: Path
) -> None:
    """As `status --json`: `notify --json` and `ack --json` printed nothing on stdout when no
    agent runs, and a script reading their one JSON line read none."""
    env = agent_env(tmp_path)
    done = run_forewarn(*argv, "--json", env=env)
    assert done.returncode == 1, done
    assert len(done.stdout.splitlines()) == 1, done.stdout  # one line, as their replies
    reply = _unanswered(done)
    assert reply["reason"] == "not-running", reply
