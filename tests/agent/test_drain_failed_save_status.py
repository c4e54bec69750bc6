"""A drain's save that failed (the client acked it `outcome=failed`: a `CheckpointGuard` whose
save raised, a shell loop's `forewarn ack --outcome failed`) was only in the agent's log:
`forewarn status` said `save_failed` only past a terminate's deadline, so a drain the job had
failed to save for showed as if nothing were wrong. It is shown (text and `--json`) while the
notice is active, kept across a restart of the agent, and gone with the notice."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard, Notices
from support import AgentProcess, agent_env, eventually, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")

WHY = "OSError: [Errno 28] No space left on device: '/ckpt/step-41.pt'"


def _status(env: dict[str, str]) -> tuple[dict[str, object], str]:
    as_json = run_forewarn("status", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    text = run_forewarn("status", env=env)
    assert text.returncode == 0, text.stderr
    return json.loads(as_json.stdout), text.stdout


def _line(text: str, notice_id: str) -> str:
    (shown,) = [row for row in text.splitlines() if notice_id in row]
    return shown


def _full_disk(step: int) -> None:
    raise OSError(28, "No space left on device", f"/ckpt/step-{step}.pt")


def test_a_guards_failed_drain_save_is_in_status_across_a_restart_until_cleared(
    tmp_path: Path,
) -> None:
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        notices = Notices(agent.events, agent.control_endpoint, client_id="trainer")
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            notice_id = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
            eventually(lambda: guard.due(41), 10, "the guard to see the drain")
            with pytest.raises(OSError):
                guard.save(41, _full_disk)
            eventually(
                lambda: "outcome=failed" in agent.output(), 10, "the agent to take the failed ack"
            )
            reply, text = _status(env)
            assert reply["save_failed"] == {notice_id: {"trainer": WHY}}, reply
            shown = _line(text, notice_id)
            assert shown.endswith(f"not saved by trainer (its save failed: {WHY})"), shown
        finally:
            guard.close()
            notices.close()
        assert agent.stop() == 0
    with AgentProcess(tmp_path, env=env) as agent:
        reply, text = _status(env)
        assert reply["save_failed"] == {notice_id: {"trainer": WHY}}, reply
        assert _line(text, notice_id).endswith(f"(its save failed: {WHY})"), text
        assert agent.control({"op": "clear", "id": notice_id})["cleared"] == [notice_id]
        reply, text = _status(env)
        assert reply["save_failed"] == {}, reply
        assert "its save failed" not in text, text
        assert agent.stop() == 0
    saved = json.loads((Path(env["FOREWARN_STATE_DIR"]) / "state.json").read_text())
    assert "save_failed" not in saved, saved


def test_a_failed_drain_save_then_a_saved_retry_is_shown_no_more(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        notices = Notices(agent.events, agent.control_endpoint, client_id="trainer")
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            notice_id = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
            eventually(lambda: guard.due(41), 10, "the guard to see the drain")
            with pytest.raises(OSError):
                guard.save(41, _full_disk)
            eventually(
                lambda: agent.control({"op": "status"})["save_failed"], 10, "the failed save"
            )
            assert guard.due(42)  # the drain is still owed: the loop saves again
            guard.save(42, lambda step: None)
            eventually(
                lambda: agent.control({"op": "status"})["acked_by"] == {notice_id: ["trainer"]},
                10,
                "the retry's ack",
            )
            reply, text = _status(env)
            assert reply["save_failed"] == {}, reply
            assert "its save failed" not in text, text
        finally:
            guard.close()
            notices.close()


def test_the_readme_loops_failed_ack_of_a_drain_is_in_status(tmp_path: Path) -> None:
    """The README's shell loop, its save failing: `forewarn ack ID --outcome failed` with the
    save's last line as its note, from the loop's own shell (held by its `wait`)."""
    env = agent_env(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "forewarn"
    program.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m forewarn.agent.cli "$@"\n'
    )
    program.chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"}
    script = (
        "me=save-loop\n"
        'notice=$(forewarn wait --for drain --client "$me" --pid $$ --json)\n'
        "id=$(printf '%s\\n' \"$notice\" | jq -r .id)\n"
        "if ! ./save-checkpoint.sh 2> save.log; then\n"
        '  forewarn ack "$id" --client "$me" --outcome failed --note "$(tail -n 1 save.log)"\n'
        "fi\n"
    )
    job = tmp_path / "job"
    job.mkdir()
    save = job / "save-checkpoint.sh"
    save.write_text("#!/bin/sh\necho 'cp: error writing /ckpt/step-7: No space left' >&2\nexit 1\n")
    save.chmod(0o755)
    with AgentProcess(tmp_path, env=env) as agent:
        notice_id = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        done = subprocess.run(
            ["sh", "-e", "-c", script],
            cwd=job,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,  # its own process group, as a job started from a shell
        )
        assert done.returncode == 0, done.stderr
        why = "cp: error writing /ckpt/step-7: No space left"
        reply, text = _status(env)
        assert reply["save_failed"] == {notice_id: {"save-loop": why}}, reply
        assert f"its save failed: {why})" in _line(text, notice_id), text
        # The loop's shell is gone: its hold goes, and its failed save is still said.
        eventually(lambda: not agent.control({"op": "status"})["held_for"], 10, "the let-go")
        reply, text = _status(env)
        assert reply["save_failed"] == {notice_id: {"save-loop": why}}, reply
        assert reply["gone_before_ack"] == {}, reply
        shown = _line(text, notice_id)
        assert shown.endswith(f"not saved by save-loop (its save failed: {why})"), shown
