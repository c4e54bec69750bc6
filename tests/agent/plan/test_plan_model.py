"""The formulas of `forewarn plan` on worked numbers, and the cost model line by line."""

from __future__ import annotations

import math

import pytest
from forewarn.agent.plan import (
    PlanError,
    Prices,
    Timing,
    checkpoint_tax,
    choose_interval,
    costs,
    daly_interval,
    interruption_share,
    interval_for_tax,
    lost_work,
    overhead,
    periodic_lost_work,
    rate_to_mtbi,
    summarize_telemetry,
    young_interval,
)

DAY = 86400.0


# The published figures for a 201M-parameter job.


def test_a_10s_upload_at_a_3_percent_tax_is_about_330s_and_1200_steps() -> None:
    interval = interval_for_tax(10.0, 0.03)
    assert interval == pytest.approx(333.33, abs=0.01)
    assert round(interval, -1) == 330
    steps = interval * 3.5
    assert steps == pytest.approx(1166.7, abs=0.1)
    assert round(steps, -2) == 1200
    assert checkpoint_tax(10.0, interval) == pytest.approx(0.03)


def test_one_6_minute_reclaim_a_day_is_about_0_4_percent_of_the_day() -> None:
    share = interruption_share(6 * 60, rate_to_mtbi(1.0))
    assert share == pytest.approx(0.004167, abs=1e-6)
    assert round(share * 100, 1) == 0.4


def test_the_same_figures_through_the_model() -> None:
    # Drained by forewarn: the notice's flush (10 s) plus 350 s to restart and reload make
    # the 6 minutes; nothing is lost.
    timing = Timing(
        checkpoint_seconds=10,
        mtbi_seconds=DAY,
        restart_seconds=290,
        restore_seconds=60,
        notice_lead_seconds=120,
        steps_per_second=3.5,
    )
    at = overhead(timing, interval_for_tax(10, 0.03))
    assert at.model == "drain"
    assert at.per_interruption_seconds == pytest.approx(360)
    assert at.checkpoint_tax == pytest.approx(0.03)
    assert at.restart == pytest.approx(0.004167, abs=1e-6) and at.rework == 0
    assert at.total == pytest.approx(0.034167, abs=1e-6)


# Young and Daly.


def test_young_is_sqrt_2cm() -> None:
    assert young_interval(10, DAY) == pytest.approx(math.sqrt(1_728_000))
    assert young_interval(10, DAY) == pytest.approx(1314.53, abs=0.01)
    assert young_interval(600, 3600) == pytest.approx(2078.46, abs=0.01)


def test_daly_on_worked_numbers() -> None:
    # C = 600 s, M = 1 h: C/2M = 1/12, sqrt(2CM) = 2078.46;
    # 2078.46 * (1 + 0.288675/3 + 0.083333/9) - 600 = 2078.46 * 1.105484 - 600 = 1697.71
    assert daly_interval(600, 3600) == pytest.approx(1697.71, abs=0.01)
    # C = 10 s, M = 1 day: 1314.53 * (1 + 0.0025358 + 0.0000064) - 10 = 1307.88
    assert daly_interval(10, DAY) == pytest.approx(1307.88, abs=0.01)


def test_daly_is_m_once_a_checkpoint_costs_2m_and_meets_young_for_cheap_checkpoints() -> None:
    assert daly_interval(7200, 3600) == 3600
    assert daly_interval(10_000, 3600) == 3600
    assert daly_interval(0.01, DAY) == pytest.approx(young_interval(0.01, DAY), rel=1e-3)


def test_young_minimises_the_periodic_overhead() -> None:
    timing = Timing(checkpoint_seconds=30, mtbi_seconds=6 * 3600, restart_seconds=120)
    best = young_interval(30, 6 * 3600)
    at_best = overhead(timing, best, "periodic").total
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert overhead(timing, best * factor, "periodic").total > at_best


def test_bad_formula_inputs_name_the_field() -> None:
    with pytest.raises(ValueError, match="mtbi_seconds"):
        young_interval(10, 0)
    with pytest.raises(ValueError, match="checkpoint_seconds"):
        daly_interval(-1, DAY)
    with pytest.raises(ValueError, match="tax"):
        interval_for_tax(10, 0)
    with pytest.raises(PlanError, match="interruptions_per_day"):
        rate_to_mtbi(0)
    with pytest.raises(PlanError, match="restore_seconds"):
        Timing(checkpoint_seconds=10, mtbi_seconds=DAY, restore_seconds=-1)
    with pytest.raises(PlanError, match="mtbi_seconds"):
        Timing(checkpoint_seconds=10, mtbi_seconds=0)


# Overhead and lost work.


def test_overhead_adds_tax_rework_restart_and_idle() -> None:
    timing = Timing(
        checkpoint_seconds=10,
        mtbi_seconds=DAY / 2,
        restart_seconds=120,
        restore_seconds=60,
        reacquire_seconds=600,
    )
    at = overhead(timing, 500)
    assert at.model == "periodic"
    assert at.checkpoint_tax == pytest.approx(10 / 500)
    assert at.rework == pytest.approx(255 / 43200)  # (500 + 10) / 2 lost
    assert at.restart == pytest.approx(180 / 43200)
    assert at.idle == pytest.approx(600 / 43200)
    assert at.billed == pytest.approx(0.02 + 435 / 43200)
    assert at.total == pytest.approx(0.02 + 1035 / 43200)
    assert at.per_interruption_seconds == pytest.approx(255 + 180 + 600)


def test_lost_work_models_and_which_applies() -> None:
    assert periodic_lost_work(330, 10) == 170
    blind = Timing(checkpoint_seconds=10, mtbi_seconds=DAY)
    assert lost_work(blind, 330).applies == "periodic"
    assert "no notice lead" in lost_work(blind, 330).why
    covered = Timing(
        checkpoint_seconds=10, mtbi_seconds=DAY, notice_lead_seconds=120, detection_seconds=5
    )
    lost = lost_work(covered, 330)
    assert (lost.applies, lost.seconds, lost.periodic) == ("drain", 0.0, 170)
    # GCP spot without preemptionNoticeDuration: <= 30 s, too short for a 40 s flush.
    short = Timing(checkpoint_seconds=40, mtbi_seconds=DAY, notice_lead_seconds=30)
    assert lost_work(short, 330).applies == "periodic"
    assert "would not finish" in lost_work(short, 330).why
    measured = Timing(
        checkpoint_seconds=10, mtbi_seconds=DAY, notice_lead_seconds=30, response_seconds=31
    )
    assert lost_work(measured, 330).applies == "periodic"
    observed = Timing(checkpoint_seconds=10, mtbi_seconds=DAY, drained_observed=True)
    assert lost_work(observed, 330).applies == "drain"


def test_choose_interval_prefers_given_then_tax_then_daly() -> None:
    timing = Timing(checkpoint_seconds=10, mtbi_seconds=DAY)
    assert choose_interval(timing).basis == "Daly optimum"
    assert choose_interval(timing).chosen == pytest.approx(1307.88, abs=0.01)
    assert choose_interval(timing, tax=0.03).chosen == pytest.approx(333.33, abs=0.01)
    assert choose_interval(timing, interval=900, tax=0.03).chosen == 900
    with pytest.raises(PlanError, match="tax"):
        choose_interval(timing, tax=1.5)


# The cost model.


def test_spot_cost_per_useful_hour_line_by_line() -> None:
    timing = Timing(
        checkpoint_seconds=10, mtbi_seconds=DAY, restart_seconds=300, restore_seconds=60
    )
    prices = Prices(
        spot=1.0, on_demand=3.0, checkpoint_gb=2.0, storage_gb_month=0.023, keep=2, io_per_gb=0.01
    )
    plan = costs(timing, prices, 360)
    spot = plan.spot
    lines = spot.lines
    assert lines["compute"] == 1.0
    assert lines["checkpoint tax"] == pytest.approx(10 / 360)
    assert lines["lost compute"] == pytest.approx(185 / DAY)  # (360 + 10) / 2
    assert lines["restart and reload"] == pytest.approx(360 / DAY)
    overhead_total = 10 / 360 + (185 + 360) / DAY
    assert lines["checkpoint storage"] == pytest.approx(2 * 2 * 0.023 / 730 * (1 + overhead_total))
    # 10 checkpoints written an hour, one restore read a day.
    assert lines["checkpoint I/O"] == pytest.approx(2 * 0.01 * (10 + 1 / 24))
    assert spot.per_useful_hour == pytest.approx(sum(lines.values()))
    assert spot.wall_hours_per_useful_hour == pytest.approx(1 + overhead_total)
    on_demand = plan.alternatives[0]
    assert on_demand.name == "on-demand"
    assert on_demand.per_useful_hour == pytest.approx(
        3.0 * (1 + 10 / 360) + 2 * 2 * 0.023 / 730 * (1 + 10 / 360) + 2 * 0.01 * 10
    )
    assert plan.verdict == "spot"
    assert "less than on-demand" in plan.summary


def test_fallback_reacquisition_and_reserved() -> None:
    timing = Timing(checkpoint_seconds=10, mtbi_seconds=DAY / 4, reacquire_seconds=1800)
    prices = Prices(
        spot=1.0, on_demand=3.0, reserved=2.0, reserved_utilization=0.5, fallback_share=0.25
    )
    plan = costs(timing, prices, 600)
    assert plan.spot.lines["compute"] == 0.75
    assert plan.spot.lines["fallback to on-demand"] == 0.75
    assert plan.spot.lines["lost compute"] == pytest.approx(1.5 * 305 / (DAY / 4))
    # The wait for capacity is not billed but stretches the wall clock.
    assert plan.spot.lines["reacquisition idle (unbilled)"] == 0
    assert plan.spot.wall_hours_per_useful_hour == pytest.approx(
        1 + 10 / 600 + (305 + 1800) / (DAY / 4)
    )
    reserved = plan.alternatives[1]
    assert reserved.name == "reserved" and reserved.lines["compute"] == 4.0


def test_on_demand_wins_when_interruptions_eat_the_discount() -> None:
    timing = Timing(
        checkpoint_seconds=120, mtbi_seconds=3600, restart_seconds=900, restore_seconds=300
    )
    plan = costs(timing, Prices(spot=2.5, on_demand=3.0), daly_interval(120, 3600))
    assert plan.verdict == "on-demand"
    assert plan.spot.per_useful_hour > plan.alternatives[0].per_useful_hour
    assert "more" in plan.summary and "first-order" in plan.summary


def test_missing_and_bad_prices_name_the_field() -> None:
    with pytest.raises(PlanError, match="on_demand") as error:
        Prices(spot=1.0)
    assert error.value.field == "on_demand"
    with pytest.raises(PlanError, match="spot"):
        Prices(spot=-1.0, on_demand=3.0)
    with pytest.raises(PlanError, match="checkpoint_gb"):
        Prices(spot=1.0, on_demand=3.0, storage_gb_month=0.02)
    with pytest.raises(PlanError, match="on_demand"):
        Prices(spot=1.0, reserved=2.0, fallback_share=0.1)


# Telemetry.


def record(at: str, kind: str, **fields: object) -> dict[str, object]:
    return {"v": 1, "at": f"2026-11-30T{at}Z", "kind": kind, **fields}


def test_summarize_telemetry_measures_flush_restore_rate_lead_and_response() -> None:
    machine_1 = [
        record("00:00:00", "start"),
        record("01:00:00", "ack", notice_id=None, flush_seconds=8.0, outcome="saved"),
        record("02:00:00", "ack", notice_id=None, flush_seconds=12.0, outcome="saved"),
        record("03:00:00", "notice", id="d1", action="drain", sent_at="2026-11-30T03:00:00Z"),
        record("03:00:05", "ack", notice_id="d1", flush_seconds=10.0, outcome="saved"),
        record(
            "05:00:00",
            "escalation",
            id="d1",
            action="terminate",
            reason="reclaim",
            sent_at="2026-11-30T05:00:00Z",
            deadline="2026-11-30T05:02:00Z",
        ),
        record(
            "05:00:00",
            "escalation",
            id="d1",
            action="terminate",
            reason="reclaim",
            sent_at="2026-11-30T05:00:00Z",
            deadline="2026-11-30T05:02:00Z",
        ),
        record("05:00:15", "ack", notice_id="d1", flush_seconds=11.0, outcome="saved"),
        record("06:00:00", "ack", notice_id=None, flush_seconds=99.0, outcome="failed"),
        record("06:00:00", "stop"),
    ]
    machine_2 = [
        record("07:00:00", "start"),
        record("07:00:30", "resume", restore_seconds=30.0, steps_lost=0),
        record(
            "11:00:00",
            "notice",
            id="t1",
            action="terminate",
            reason="spot-interruption",
            sent_at="2026-11-30T11:00:00Z",
        ),
        record("12:00:00", "stop"),
    ]
    summary = summarize_telemetry(machine_1, machine_2)
    assert summary.records == 14
    assert summary.span_seconds == 11 * 3600  # 6 h + 5 h of running machines
    assert summary.terminate_notices == 2  # the repeated escalation counts once
    assert summary.mtbi_seconds == 5.5 * 3600
    assert summary.flush_seconds == 10.5 and summary.flushes == 4  # failed ack left out
    assert summary.restore_seconds == 30.0 and summary.steps_lost == 0
    assert summary.notice_lead_seconds == 120.0
    assert summary.response_seconds == 15.0  # the drain's earlier ack does not count
    assert summary.drained is False  # t1 was never flushed for
    assert summary.reasons == {"reclaim": 1, "spot-interruption": 1}
