"""Where the agent keeps its state, said at its start: the default depends on who runs it
(/var/lib/forewarn when writable, else the XDG state home, else a subdirectory named after
an overridden runtime directory), and a relative `--state-dir` on the directory it is started
from."""

from __future__ import annotations

from pathlib import Path

from support import AgentProcess, agent_env


def test_the_start_names_the_state_directory_as_an_absolute_path(tmp_path: Path) -> None:
    """Nothing at the start said where the state was: an agent run once from a shell with
    `--state-dir state` and then from a unit (working directory /) started with none of the
    notices raised before, and neither its log nor `forewarn status` said where it had
    looked, nor where the first had saved. Errors about the state file named the relative
    path, which the reader of a unit's journal cannot place."""
    cwd = tmp_path / "job"
    cwd.mkdir()
    env = agent_env(tmp_path, FOREWARN_STATE_DIR="state")
    with AgentProcess(tmp_path, env=env, cwd=cwd) as agent:
        assert agent.control({"op": "status"})["ok"]
        started = [line for line in agent.output().splitlines() if "serving events" in line]
        assert started and started[0].endswith(f"; state in {cwd / 'state'}"), started
        state = cwd / "state" / "state.json"
        state.mkdir()  # the rename over it fails: as a full disk would
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/where"})
        assert f"cannot write {state} " in reply["unsaved"], reply
