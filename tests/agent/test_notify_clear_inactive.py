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
