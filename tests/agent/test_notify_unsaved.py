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


def test_a_stop_with_its_state_unsaved_names_the_notices_the_next_start_loses(
    tmp_path: Path,
) -> None:
    """A state directory on a disk filled by checkpoints: the notify said "not saved", and
    the agent retried at every heartbeat; stopped then (`systemctl restart`, an upgrade), it
    logged "stopping", "stopped" and nothing else, and the next start served no drain: the
    manual notice was gone without a word where the operator looks. The stop says which
    file it could not write, why, and which manual notices the next start will not have."""
    env = agent_env(tmp_path)
    agent = AgentProcess(tmp_path, env=env).start()
    try:
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/kept"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
        state.unlink()
        state.mkdir()  # the rename over it fails: as a full disk or a read-only mount would
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/lost"})
        assert reply["ok"] and reply.get("unsaved"), reply
        assert agent.stop() == 0
        last = agent.output().splitlines()[-3:]
        unsaved = [line for line in last if "ERROR" in line and str(state) in line]
        assert unsaved, last
        assert "local/lost" in unsaved[0] and "local/kept" in unsaved[0], unsaved
        assert "forewarn notify" in unsaved[0], unsaved
    finally:
        agent.stop()
    # Said once, at the stop: a stop whose state was written says nothing of the kind.
    state.rmdir()
    with AgentProcess(tmp_path, env=env) as again:
        assert again.control({"op": "status"})["ok"]
    assert str(state) not in again.output()
