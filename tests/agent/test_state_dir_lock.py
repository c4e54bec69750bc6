"""One agent per state directory, whatever directory each agent runs in.

The state directory's lock is held by the agent's own process for its life (flock: two opens
in one process conflict as two processes do), so these tests take it in-process through
`AgentDirs` rather than start agent processes; `test_hostile.py` starts real ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forewarn.agent.rundir import AgentDirs
from forewarn.protocol.errors import ConfigError


@pytest.mark.parametrize("first_runs_there", [True, False])
def test_an_agent_whose_state_dir_is_a_runtime_dir_still_holds_it_against_a_second(
    tmp_path: Path, first_runs_there: bool
) -> None:
    """An agent whose runtime and state directories are one (`--runtime-dir D --state-dir D`,
    one volume mounted in a container for both) took only the runtime lock there, so a
    second agent with a runtime directory of its own and the same state directory started:
    it restored and published the first's manual notices (a `notify terminate` included),
    and both wrote the same state file. The other way round too: an agent running in a
    directory that another agent keeps its state in took that state as its own. The second
    is refused, naming the directory and the first's pid."""
    shared, own = tmp_path / "shared", tmp_path / "own"
    if first_runs_there:
        first, second = AgentDirs(shared, shared), AgentDirs(own, shared)
    else:
        first, second = AgentDirs(own, shared), AgentDirs(shared, shared)
    first.hold()
    try:
        with pytest.raises(ConfigError) as refused:
            second.hold()
        message = str(refused.value)
        assert f"another agent (pid {os.getpid()})" in message, message
        assert f"keeps its state in {shared}" in message, message
        assert "--state-dir" in message, message
        # The refused agent left the first's locks as they were, and took none.
        assert second.lock is None and second.state_lock is None
    finally:
        second.release()
        first.release()
    # Released, the directories are the next agent's.
    second.hold().release()
