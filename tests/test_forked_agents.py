"""`forked_agents` (tests/conftest.py): an agent forked from a launcher that loaded it once runs
as `python -m forewarn.agent.cli agent` started fresh does, as its own process; an agent the
launcher cannot start as the interpreter would (another PYTHONPATH, a wrapped argv) starts
fresh."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from forked_ranks import RankLauncher
from support import AgentProcess, agent_env, shifted_wall_clock


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_once(agent: AgentProcess) -> tuple[list[str], bool, str, bool, int]:
    """Its providers as its status says, whether its pid there is its process's, its working
    directory, whether its log says where it serves, and its exit code at SIGTERM."""
    with agent:
        assert agent.proc is not None
        status = agent.control({"op": "status"})
        cwd = os.readlink(f"/proc/{agent.proc.pid}/cwd")
        notice = agent.control({"op": "notify", "action": "drain"})
        own_pid = status["agent"]["pid"] == agent.proc.pid
    code = agent.stop(signal.SIGTERM)
    assert status["ok"] and notice["ok"], (status, notice)
    serving = "serving events on" in agent.output()
    return status["agent"]["providers"], own_pid, cwd, serving, code


def test_a_forked_agent_answers_logs_and_exits_as_a_fresh_one(
    forked_agents: RankLauncher, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    forked = AgentProcess(tmp_path / "forked", cwd=work, env=agent_env(mkdir(tmp_path / "forked")))
    # Another PYTHONPATH than the launcher's: this one starts as a fresh interpreter.
    fresh_env = agent_env(mkdir(tmp_path / "fresh"), PYTHONPATH=str(tmp_path / "elsewhere"))
    fresh = AgentProcess(tmp_path / "fresh", cwd=work, env=fresh_env)

    said = run_once(forked)
    assert forked.forked and forked.proc is not None
    assert forked.proc.pid != os.getpid()
    assert said == run_once(fresh)
    assert not fresh.forked and fresh.proc is not None
    assert said == (["local"], True, str(work), True, 0)


def test_a_forked_agent_is_the_launcher_s_child_and_a_wrapped_one_is_not(
    forked_agents: RankLauncher, tmp_path: Path
) -> None:
    agent = AgentProcess(tmp_path).start()
    try:
        assert agent.forked and agent.proc is not None
        assert parent_of(agent.proc.pid) != os.getpid()
    finally:
        assert agent.stop() == 0
    wrapped = AgentProcess(mkdir(tmp_path / "wrapped"))
    wrapped.argv = ["/usr/bin/env", *wrapped.argv]
    clocked, _ = shifted_wall_clock(tmp_path)
    shifted = AgentProcess(
        mkdir(tmp_path / "shifted"), env=agent_env(tmp_path / "shifted", **clocked)
    )
    for agent in (wrapped, shifted):
        with agent:
            assert not agent.forked and agent.proc is not None
            assert parent_of(agent.proc.pid) == os.getpid()
