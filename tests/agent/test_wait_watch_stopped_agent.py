"""`forewarn wait` and `forewarn watch` against a stopped agent (SIGSTOP, Ctrl-Z, a
debugger): the line at --agent-timeout names the stopped pid and `kill -CONT`, as `status`
does, instead of asking whether `forewarn agent` is running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from support import AgentProcess, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")


@pytest.mark.parametrize("command", ["wait", "watch"])
def test_a_stopped_agent_is_named_with_how_to_resume_it(command: str, tmp_path: Path) -> None:
    """Found trying `wait` as an operator with the agent under SIGSTOP: it said `no agent on
    ipc://.../events: no heartbeat within 3s (is `forewarn agent` running?)` of an agent
    that runs, and a look at `ps` showed it there."""
    with AgentProcess(tmp_path) as agent:
        assert agent.proc is not None
        pid = agent.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            done = run_forewarn(command, "--agent-timeout", "2s", env=agent.env)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert done.returncode == 3, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pid {pid} is stopped" in lines[0], lines[0]
    assert f"`kill -CONT {pid}` resumes it" in lines[0], lines[0]
    assert "is `forewarn agent` running?" not in lines[0], lines[0]
    assert agent.events in lines[0], lines[0]
