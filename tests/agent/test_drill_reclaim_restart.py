"""The reclaim drill's "torchrun, restarted" cell on a real job: torchrun with
`--max-restarts 1` (c10d rendezvous on 127.0.0.1, the shared store off), two gloo ranks with
DataLoader workers, a terminate in the middle of an evaluation pass, SIGKILL at the deadline to
the ranks the notice found (torchrun lives on). The guard's ranks save and exit first; torchrun
restarts them in place and they resume the verified exit save: no step lost across the
restart, and the cell says how long from the notice to durable and to resumed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forewarn.agent.drill_reclaim import Cell, Reclaim
from support import requires

pytestmark = requires("torch")


@pytest.mark.slow(60)
@pytest.mark.timeout(600)
def test_a_torchrun_restart_after_a_notice_mid_evaluation_resumes_the_exit_save(
    tmp_path: Path,
) -> None:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    base_env.update(PYTHONUNBUFFERED="1", NO_GCE_CHECK="true")
    said: list[str] = []
    # As bench/reclaim.py runs it: an evaluation pass that follows no save (every 20 steps,
    # saves every 25), where a notice finds something not yet durable.
    drill = Reclaim(
        tmp_path,
        base_env,
        handler="guard",
        seed=11,
        say=said.append,
        every_steps=25,
        skip_saved_evals=True,
    )
    (result,) = drill.run([Cell("torchrun-restart", "mid-eval", 8.0)])
    text = "\n".join(said) + "\n" + (tmp_path / "job-1.log").read_text()[-3000:]
    assert result.ok, text
    assert result.restarted is not None, text  # torchrun restarted the ranks, in this cell
    assert result.lost == 0 and result.state_match is True, text
    assert result.exit_save is not None and result.resumed_step == result.exit_save["step"]
    durable, resumed = result.durable_seconds, result.resumed_seconds
    assert durable is not None and resumed is not None and 0 < durable < resumed, text
    assert durable < result.cell.lead, text
    assert "connectFullMesh" not in text
