"""`forewarn status` against an agent that is stopped (SIGSTOP, Ctrl-Z, a debugger): the
operator is told it is stopped and how to resume it, not to wait longer for a busy disk."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")


def test_status_of_a_stopped_agent_says_it_is_stopped_and_how_to_resume_it(
    tmp_path: Path,
) -> None:
    """Found walking a reclaim as on-call: with the agent under SIGSTOP, `status` said only
    'has not answered within 2s (busy, or a slow disk; --timeout waits longer)', and waiting
    longer never helps a stopped process."""
    with AgentProcess(tmp_path) as agent:
        assert agent.proc is not None
        pid = agent.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            done = run_forewarn("status", "--timeout", "1", env=agent.env)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert done.returncode == 1, done
        assert "has not answered: its" in done.stderr
        assert f"pid {pid} is stopped" in done.stderr
        assert f"`kill -CONT {pid}` resumes it" in done.stderr
        assert "--timeout waits longer" not in done.stderr
        assert len(done.stderr.splitlines()) == 1
        assert agent.control({"op": "status"})["ok"]  # resumed, it answers again


def test_a_running_agent_is_not_called_stopped() -> None:
    from forewarn.agent.rundir import process_state

    assert process_state(os.getpid()) in {"R", "S"}
    assert process_state(2**31 - 1) is None  # no such process


@given(
    comm=st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
    state=st.sampled_from("RSDZTtXIW"),
)
def test_the_state_is_read_after_the_last_parenthesis_whatever_the_name(
    comm: str, state: str
) -> None:
    """A process may name itself anything, `) T (` and line breaks included: the state is
    the field after the last `)` of /proc/PID/stat."""
    from forewarn.agent.rundir import stat_state

    assert stat_state(f"42 ({comm}) {state} 1 42 42 0 -1") == state


@given(st.text(max_size=40))
def test_a_stat_line_of_any_shape_gives_a_state_or_none(text: str) -> None:
    from forewarn.agent.rundir import stat_state

    state = stat_state(text)
    assert state is None or (len(state) == 1 and state.isalpha())
