"""`forewarn notify clear --id ID` of an id that is not an active manual notice: a script's
cleanup of a notice that expired, a mistyped id, a flag file's drain. It is no bad input
(exit 2, 'the agent refused'): nothing was cleared, exit 1, naming what is active, as `ack`
of an id that is not active does."""

from __future__ import annotations

import json
from pathlib import Path

from support import AgentProcess, eventually, run_forewarn


def test_clearing_an_id_that_is_not_active_exits_1_naming_the_active_ones(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path) as agent:
        raised = run_forewarn("notify", "drain", "--id", "local/maint", env=agent.env, timeout=60)
        assert raised.returncode == 0, raised.stderr
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        flag_id = eventually(
            lambda: next((n for n in _active(agent) if n.startswith("local/flag/")), None),
            timeout=10,
            what="the flag file's drain",
        )

        typo = run_forewarn("notify", "clear", "--id", "local/mant", env=agent.env, timeout=60)
        assert typo.returncode == 1, typo.stderr
        assert typo.stderr.strip() == (
            "forewarn: no active manual notice 'local/mant' (active manual: local/maint); "
            "nothing cleared"
        )
        flagged = run_forewarn("notify", "clear", "--id", flag_id, env=agent.env, timeout=60)
        assert flagged.returncode == 1, flagged.stderr
        assert f"{flag_id!r} is not a manual notice" in flagged.stderr
        assert "remove the flag file" in flagged.stderr and "nothing cleared" in flagged.stderr

        done = run_forewarn("notify", "clear", "--id", "local/maint", env=agent.env, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "cleared: local/maint"
        again = run_forewarn(
            "notify", "clear", "--id", "local/maint", "--json", env=agent.env, timeout=60
        )
        assert again.returncode == 1, again.stderr
        assert again.stderr.strip() == (
            "forewarn: no active manual notice 'local/maint' (active manual: none); nothing cleared"
        )
        assert json.loads(again.stdout) == {
            "ok": False,
            "error": "no active manual notice with id 'local/maint'",
        }


def _active(agent: AgentProcess) -> list[str]:
    return [str(notice["id"]) for notice in agent.control({"op": "status"})["active"]]


def test_a_notify_naming_a_flag_files_notice_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    # `forewarn notify drain --id <the flag's id> --deadline 5m`, the id copied from
    # `status`: the flag's terminate, sent 30 s before its deadline, went out again as a
    # drain of the notify's deadline (jobs told to exit were told to train on), and a
    # `notify clear --id` of it then answered 'not a manual notice'.
    with AgentProcess(tmp_path, args=("--set", "exit_margin=10m")) as agent:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("5m\n")
        flag_id = eventually(
            lambda: next((n for n in _active(agent) if n.startswith("local/flag/")), None),
            timeout=10,
            what="the flag file's drain",
        )
        before = _notice(agent, flag_id)
        assert before["action"] == "terminate"  # within the exit margin of its deadline
        for action in ("drain", "terminate"):
            changed = run_forewarn(
                "notify", action, "--id", flag_id, "--deadline", "1h", env=agent.env, timeout=60
            )
            assert changed.returncode == 2, changed.stderr
            assert f"id {flag_id!r} belongs to the flag file's notice" in changed.stderr
        after = _notice(agent, flag_id)
        assert (after["action"], after["deadline"]) == ("terminate", before["deadline"])


def _notice(agent: AgentProcess, notice_id: str) -> dict[str, object]:
    found = [n for n in agent.control({"op": "status"})["active"] if n["id"] == notice_id]
    assert len(found) == 1, found
    return dict(found[0])
