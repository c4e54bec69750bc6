"""The reclaim drill's verdict on a short-lead cell, without running one: the steps lost must be
what `forewarn plan`'s model predicts from the cell's measured timing (the real cells:
tests/agent/test_drill_reclaim.py)."""

from __future__ import annotations

from forewarn.agent.drill_reclaim import Cell, CellResult


def short_cell(resumed_step: int, detection: float | None) -> CellResult:
    return CellResult(
        Cell("cloud", "mid-eval", 0.3, 1.5),
        started_step=91,
        last_step=100,
        resumed_step=resumed_step,
        flush=1.5,
        flush_mean=1.5,
        detection=detection,
        checkpoint_step=91,
        state_match=True,
    )


def test_a_short_lead_cell_passes_when_the_loss_is_the_plans_prediction() -> None:
    cell = short_cell(91, 0.249709)
    assert cell.ok and not cell.lead_is_enough
    outcome = cell.outcome()
    assert outcome.startswith("9 steps lost: lead 0.3s < 2 x flush 1.50s")
    # The prediction uses the values the printed command gives, so the two agree.
    assert "as `forewarn plan` predicts: 9 steps lost" in outcome
    assert "(detection 0.25 s + flush p95 1.5 s)" in outcome
    assert "`forewarn plan --checkpoint 1.50s --checkpoint-p95 1.50s --detection 0.25s" in outcome


def test_a_short_lead_cell_fails_when_the_loss_differs_from_the_prediction() -> None:
    # Resumed from a step the job never reported complete: 5 lost where the model says 9.
    cell = short_cell(95, None)
    assert not cell.ok
    outcome = cell.outcome()
    assert "FAILED: not as `forewarn plan` predicts: 9 steps lost" in outcome
    # No exit save began within the lead: detection counts as the whole lead.
    assert "--detection 0.30s" in outcome
