"""A notify whose notice could not be saved says so: the notice is active and published,
but an agent restart before a later save succeeds forgets it. `forewarn notify` answered as
if all were well."""

from __future__ import annotations

from pathlib import Path

from support import AgentProcess, agent_env, run_forewarn


def test_notify_says_when_its_notice_could_not_be_saved(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        state.unlink(missing_ok=True)
        state.mkdir()  # the rename over it fails: as a full disk or a read-only mount would
        done = run_forewarn("notify", "drain", "--id", "local/unsaved", env=env)
        assert done.returncode == 0, done
        assert "local/unsaved" in done.stdout
        assert "not saved" in done.stderr and str(state) in done.stderr, done.stderr
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/unsaved"})
        assert reply["ok"] and str(state) in reply["unsaved"], reply
        state.rmdir()
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/saved"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
        assert state.is_file()
