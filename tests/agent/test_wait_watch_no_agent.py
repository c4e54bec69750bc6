"""`forewarn wait` and `forewarn watch` never wait in silence: without an agent (or after losing
it) they say so in one line naming the socket and exit 3."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support import AgentProcess, forewarn_cmd, run_forewarn


@pytest.mark.parametrize("command", ["wait", "watch"])
def test_no_agent_exits_3_within_seconds_naming_the_socket(
    command: str, env: dict[str, str]
) -> None:
    started = time.monotonic()
    done = run_forewarn(command, "--agent-timeout", "2s", env=env, timeout=30)
    took = time.monotonic() - started
    assert done.returncode == 3, done.stdout + done.stderr
    assert took < 10
    socket = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/events"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and socket in lines[0] and "no agent" in lines[0], done.stderr


def test_the_default_agent_timeout_is_a_few_seconds(env: dict[str, str]) -> None:
    started = time.monotonic()
    done = run_forewarn("wait", env=env, timeout=30)
    assert done.returncode == 3, done.stderr
    assert 4 <= time.monotonic() - started < 15


def test_a_quiet_live_agent_is_waited_on_and_a_lost_one_is_reported(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        wait = subprocess.Popen(
            forewarn_cmd("wait", "--agent-timeout", "2s"),
            env=agent.env,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(4)  # twice the agent timeout: heartbeats keep it waiting
        assert wait.poll() is None
        agent.kill()
        assert wait.wait(15) == 3
        assert wait.stderr is not None
        assert "lost the agent" in wait.stderr.read()


def test_agent_timeout_zero_waits_forever(env: dict[str, str]) -> None:
    wait = subprocess.Popen(forewarn_cmd("wait", "--agent-timeout", "0"), env=env)
    try:
        time.sleep(3)  # the scenario: longer than the default agent timeout, no agent at all
        assert wait.poll() is None
    finally:
        wait.kill()
        wait.wait()


def test_watch_prints_notices_not_heartbeats_unless_asked(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        watch = subprocess.Popen(
            forewarn_cmd("watch", "--json", "--count", "1"),
            env=agent.env,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2.5)  # a couple of heartbeats go by
        agent.control({"op": "notify", "action": "drain"})
        out, _ = watch.communicate(timeout=15)
    assert watch.returncode == 0
    assert [line for line in out.splitlines() if '"heartbeat"' in line] == []
    assert '"notice"' in out


@pytest.mark.parametrize("command", ["wait", "watch"])
def test_a_timeout_shorter_than_the_agent_timeout_still_tells_no_agent_from_no_notice(
    command: str, env: dict[str, str]
) -> None:
    """`wait --timeout 3s` with no agent exited 1, "no terminate within 3s", as if an agent
    had been heard and no notice had come: the `--timeout` ran out before the 5 s
    `--agent-timeout`, and a script could not tell a dead agent from a quiet one."""
    done = run_forewarn(command, "--timeout", "2s", env=env, timeout=30)
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no agent" in lines[0] and "2s" in lines[0], done.stderr


def test_a_timeout_beside_a_live_agent_is_no_notice(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        done = run_forewarn("wait", "--timeout", "2s", env=agent.env, timeout=30)
    assert done.returncode == 1, done.stderr
    assert "no terminate within 2s" in done.stderr
