"""The economics of `forewarn plan` as properties a user relies on, over generated inputs:
lost work falls as checkpoints come more often until their cost dominates (one minimum);
the answer does not depend on the units the inputs are written in; it moves the right way
with prices and the reclaim rate; the recommended interval meets Young's and Daly's where
their model is the plan's; and every nonsense number is refused naming its flag (exit 2),
never turned into a plan."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.plan import Prices, Timing, choose_interval, costs, overhead
from forewarn.agent.plan import cli as plan_cli
from forewarn.clients.overhead import Scenario, best_interval, breakdown
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import examples

DAY = 86400.0


@pytest.fixture(autouse=True)
def own_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FOREWARN_STATE_DIR", str(state))
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    return state


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert plan_cli.main([*argv, "--json"]) == 0, capsys.readouterr().err
    return dict(json.loads(capsys.readouterr().out))


def exit_code(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = plan_cli.main(list(argv))
    except SystemExit as exit:  # argparse refuses the value itself
        code = int(exit.code or 0)
    captured = capsys.readouterr()
    return code, captured.err + captured.out


checkpoints = st.floats(1.0, 600.0)
mtbis = st.floats(1800.0, 30 * DAY)
restarts = st.floats(0.0, 1800.0)
leads = st.sampled_from([0.0, 30.0, 120.0, 900.0, 7200.0])
shares = st.floats(0.0, 1.0)


def scenario(c: float, m: float, r: float, lead: float, q: float) -> Scenario:
    return Scenario(
        checkpoint_seconds=c,
        mtbi_seconds=m,
        restart_seconds=r,
        notice_lead_seconds=lead,
        no_notice_share=q,
        drain_first=lead > 900,
    )


@settings(max_examples=examples(60), deadline=None)
@given(checkpoints, mtbis, restarts, leads, shares.filter(lambda q: q >= 0.05))
def test_lost_work_falls_as_checkpoints_come_more_often_until_their_cost_dominates(
    c: float, m: float, r: float, lead: float, q: float
) -> None:
    """Checkpointing more often never loses more work, and the total has one minimum: below
    the recommended interval the checkpoints' cost rises faster than the lost work falls."""
    assume(lead <= m)  # reclaims are at least a lead apart (the plan refuses the rest)
    s = scenario(c, m, r, lead, q)
    best = best_interval(s, max_seconds=10 * m)
    assume(best < 10 * m * 0.99)  # a minimum inside the range searched
    at_best = breakdown(s, best).total
    for factor in (1 / 8, 1 / 4, 1 / 2, 2.0, 4.0):
        tau = best * factor
        shorter = breakdown(s, tau / 2)
        here = breakdown(s, tau)
        if tau / 2 >= c:
            # Below the flush itself, more of the wall clock is checkpoints, each open to
            # interruption: the partial ones thrown away grow again. Above it, less is lost.
            assert shorter.lost_work <= here.lost_work * (1 + 1e-9) + 1e-12
        assert here.total >= at_best * (1 - 1e-9)
    # Going further from the minimum costs more, on either side.
    for near, far in ((best / 2, best / 4), (best / 4, best / 8), (best * 2, best * 4)):
        assert breakdown(s, far).total >= breakdown(s, near).total * (1 - 1e-9)
    # Far below it the checkpoints cost more than the work they save.
    tiny = breakdown(s, best / 64)
    assert tiny.checkpoint_tax > tiny.lost_work


@settings(max_examples=examples(60), deadline=None)
@given(checkpoints, mtbis, restarts, leads, shares, st.floats(1e-3, 1e3))
def test_the_overhead_does_not_depend_on_the_unit_of_time(
    c: float, m: float, r: float, lead: float, q: float, k: float
) -> None:
    """Every time scaled by k (seconds to minutes, to milliseconds): the same shares, the
    interval scaled by k."""
    s = scenario(c, m, r, lead, q)
    scaled = Scenario(
        checkpoint_seconds=c * k,
        mtbi_seconds=m * k,
        restart_seconds=r * k,
        notice_lead_seconds=lead * k,
        no_notice_share=q,
        detection_seconds=s.detection_seconds * k,
        drain_first=s.drain_first,
    )
    tau = math.sqrt(2 * c * m)
    one, other = breakdown(s, tau), breakdown(scaled, tau * k)
    for part in ("checkpoint_tax", "lost_work", "notice_flush", "notice_idle", "restart"):
        assert getattr(other, part) == pytest.approx(getattr(one, part), rel=1e-7, abs=1e-12)
    # The best found either way costs the same (where the curve is flat, the two searches
    # may stop at different points of it).
    found = best_interval(scaled, max_seconds=DAY * k)
    assert breakdown(scaled, found).total == pytest.approx(
        breakdown(s, best_interval(s, max_seconds=DAY)).total, rel=1e-6, abs=1e-12
    )


UNIT_SPELLINGS = [
    (["--checkpoint", "90s"], ["--checkpoint", "1.5m"]),
    (["--checkpoint", "90s"], ["--checkpoint", "90000ms"]),
    (["--checkpoint", "90s"], ["--checkpoint", "1m30s"]),
    (["--interruptions-per-day", "2"], ["--mtbi", "12h"]),
    (["--interruptions-per-day", "2"], ["--mtbi", "720m"]),
    (["--interruptions-per-day", "2"], ["--mtbi", "0.5d"]),
    (["--restart", "300"], ["--restart", "5 minutes"]),
    (["--notice-lead", "2m"], ["--notice-lead", "120"]),
    (["--spot-price", "1.2"], ["--spot-price", "1.2/h"]),
    (["--spot-price", "1.2"], ["--spot-price", "$1.2"]),
    (["--on-demand-price", "3.9"], ["--on-demand-price", "3.9/hour"]),
    (["--spot-price", "1.2"], ["--spot-price", f"{1.2 / 3600!r}/s"]),
    (["--on-demand-price", "3.9"], ["--on-demand-price", "0.065/min"]),
    (["--on-demand-price", "3.9"], ["--on-demand-price", "93.6/day"]),
]


@pytest.mark.parametrize(("one", "other"), UNIT_SPELLINGS)
def test_the_plan_is_the_same_whatever_units_the_inputs_are_written_in(
    capsys: pytest.CaptureFixture[str], one: list[str], other: list[str]
) -> None:
    base = {
        "--checkpoint": "90s",
        "--interruptions-per-day": "2",
        "--restart": "300",
        "--notice-lead": "2m",
        "--spot-price": "1.2",
        "--on-demand-price": "3.9",
    }

    def argv(override: list[str]) -> list[str]:
        flags = dict(base)
        if override[0] == "--mtbi":
            del flags["--interruptions-per-day"]
        flags[override[0]] = override[1]
        return [part for pair in flags.items() for part in pair]

    first, second = plan_json(capsys, *argv(one)), plan_json(capsys, *argv(other))
    assert second["intervals"]["seconds"] == pytest.approx(first["intervals"]["seconds"])
    assert second["overhead"]["total"] == pytest.approx(first["overhead"]["total"])
    spot = [plan["costs"]["spot"]["per_useful_hour"] for plan in (first, second)]
    assert spot[1] == pytest.approx(spot[0])


SIZE_SPELLINGS = [
    ["--checkpoint-size", "2400MB", "--bandwidth", "200MB/s"],
    ["--checkpoint-size", "2.4GB", "--bandwidth", "0.2GB/s"],
    ["--checkpoint-gb", "2.4", "--bandwidth", "1.6Gbit/s"],
    ["--checkpoint-size", f"{2.4e9 / 2**30!r}GiB", "--bandwidth", "1600Mbps"],
    ["--checkpoint-size", "2400000000B", "--bandwidth", "200 MB per second"],
]


def test_a_size_and_bandwidth_give_the_same_plan_in_any_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = ["--interruptions-per-day", "4", "--spot-price", "1.2", "--on-demand-price", "3.9"]
    plans = [plan_json(capsys, *size, *job, "--storage-price", "0.023") for size in SIZE_SPELLINGS]
    for plan in plans:
        assert plan["inputs"]["checkpoint_seconds"]["value"] == pytest.approx(12.0)
        assert plan["intervals"]["seconds"]["recommended"] == pytest.approx(
            plans[0]["intervals"]["seconds"]["recommended"]
        )
        assert plan["costs"]["spot"]["per_useful_hour"] == pytest.approx(
            plans[0]["costs"]["spot"]["per_useful_hour"]
        )
    # A storage price per GiB-month is the same price per GB-month once converted.
    per_gib = plan_json(
        capsys, *SIZE_SPELLINGS[0], *job, "--storage-price", f"{0.023 * 2**30 / 1e9!r}/GiB-month"
    )
    assert per_gib["costs"]["spot"]["per_useful_hour"] == pytest.approx(
        plans[0]["costs"]["spot"]["per_useful_hour"]
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    checkpoints,
    mtbis,
    restarts,
    leads,
    shares,
    st.floats(0.05, 50.0),
    st.floats(1.01, 10.0),
)
def test_spot_costs_more_as_its_price_or_its_reclaim_rate_rises(
    c: float, m: float, r: float, lead: float, q: float, spot: float, more: float
) -> None:
    timing = Timing(
        checkpoint_seconds=c,
        mtbi_seconds=m,
        restart_seconds=r,
        notice_lead_seconds=lead or None,
        no_notice_share=q,
    )
    assume(lead <= m)
    interval = choose_interval(timing).chosen

    def per_hour(t: Timing, price: float) -> float:
        priced = costs(t, Prices(spot=price, on_demand=spot * 3), choose_interval(t).chosen)
        return priced.spot.per_useful_hour

    base = per_hour(timing, spot)
    assert per_hour(timing, spot * more) > base
    assume(lead <= m / more)
    faster = Timing(**{**timing.__dict__, "mtbi_seconds": m / more})
    # More reclaims: more overhead at the best interval, and the best interval is shorter
    # or the same (more to lose between checkpoints).
    assert overhead(faster, choose_interval(faster).chosen).total >= overhead(
        timing, interval
    ).total * (1 - 1e-9)
    assert per_hour(faster, spot) >= base * (1 - 1e-9)


@settings(max_examples=examples(60), deadline=None)
@given(st.floats(0.1, 600.0), st.floats(3600.0, 365 * DAY))
def test_without_notice_or_restart_the_recommended_interval_is_young_and_daly_s(
    c: float, m: float
) -> None:
    """Where the plan's model is theirs (no notice, no restart, no wait for capacity), the
    recommended interval is Daly's higher-order optimum to within a few percent, and
    Young's sqrt(2CM) to first order (C << M)."""
    assume(c / m < 0.01)
    timing = Timing(checkpoint_seconds=c, mtbi_seconds=m, max_interval_seconds=365 * DAY)
    intervals = choose_interval(timing)
    young = math.sqrt(2 * c * m)
    assert intervals.young == pytest.approx(young)
    assert intervals.recommended == pytest.approx(intervals.daly, rel=0.01)
    assert intervals.recommended == pytest.approx(young, rel=0.1)


NUMERIC_FLAGS = {
    "--checkpoint": "10s",
    "--checkpoint-p95": "10s",
    "--restore": "10s",
    "--restart": "10s",
    "--reacquire": "10s",
    "--detection": "5s",
    "--notice-lead": "2m",
    "--exit-margin": "30s",
    "--interruptions-per-day": "1",
    "--mtbi": "1d",
    "--no-notice-share": "10%",
    "--max-interval": "24h",
    "--steps-per-second": "3.5",
    "--interval": "1h",
    "--tax": "3%",
    "--checkpoint-size": "14GB",
    "--checkpoint-gb": "14",
    "--params": "7B",
    "--bandwidth": "1GB/s",
    "--spot-price": "1.2",
    "--on-demand-price": "3.9",
    "--reserved-price": "2.0",
    "--reserved-utilization": "80%",
    "--fallback-share": "10%",
    "--storage-price": "0.023",
    "--keep": "2",
    "--io-price": "0.0004",
    "--warn-tax": "10%",
}
# What each flag needs beside it to be used at all.
COMPANIONS = {
    "--exit-margin": ["--notice-lead", "2h"],
    "--reserved-utilization": ["--reserved-price", "2.0"],
    "--keep": ["--storage-price", "0.023", "--checkpoint-gb", "14"],
    "--storage-price": ["--checkpoint-gb", "14"],
    "--io-price": ["--checkpoint-gb", "14"],
    "--bandwidth": ["--checkpoint-size", "14GB"],
    "--fallback-share": [],
}
EXCLUSIVE = {
    "--mtbi": "--interruptions-per-day",
    "--checkpoint-size": "--checkpoint",
    "--checkpoint-gb": "--checkpoint",
    "--params": "--checkpoint",
    "--interval": "--tax",
}
BAD = ["nan", "NaN", "inf", "-inf", "Infinity", "-1", "-0.5", "1e400", "", " ", "abc", "1e-400"]


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.sampled_from(sorted(NUMERIC_FLAGS)), st.sampled_from(BAD))
def test_a_nonsense_number_is_refused_naming_its_flag(
    capsys: pytest.CaptureFixture[str], flag: str, bad: str
) -> None:
    """Zero where zero means nothing, NaN, infinities, negatives, numbers past a float's
    range and text: exit 2 and the flag named, never a plan."""
    valid = {
        "--checkpoint": "10s",
        "--interruptions-per-day": "1",
        "--notice-lead": "2m",
        "--tax": "3%",
        "--spot-price": "1.2",
        "--on-demand-price": "3.9",
    }
    valid.pop(EXCLUSIVE.get(flag, ""), None)
    if flag == "--interval":
        valid.pop("--tax", None)
    valid.pop(flag, None)
    argv = [part for pair in valid.items() for part in pair]
    argv += [*COMPANIONS.get(flag, []), flag, bad]
    code, said = exit_code(capsys, *argv)
    if code == 0:
        # Only a tiny positive number may pass (1e-400 reads as 0 or the smallest float):
        # then the plan must still be finite.
        assert bad == "1e-400", (argv, said)
        assert "inf" not in said.lower() and "nan" not in said.lower(), said
        return
    assert code == 2, (argv, said)
    assert flag in said, (argv, said)
    assert "Traceback" not in said


ZERO_MEANS_NOTHING = [
    "--checkpoint-size",
    "--checkpoint-gb",
    "--params",
    "--bandwidth",
    "--interruptions-per-day",
    "--mtbi",
    "--steps-per-second",
    "--interval",
    "--tax",
    "--spot-price",
    "--on-demand-price",
    "--max-interval",
    "--reserved-utilization",
]


@pytest.mark.parametrize("flag", ZERO_MEANS_NOTHING)
def test_a_zero_that_means_nothing_is_refused_naming_its_flag(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    valid = {
        "--checkpoint": "10s",
        "--interruptions-per-day": "1",
        "--tax": "3%",
        "--spot-price": "1.2",
        "--on-demand-price": "3.9",
    }
    valid.pop(EXCLUSIVE.get(flag, ""), None)
    if flag == "--interval":
        valid.pop("--tax", None)
    flag_value = [flag, "0"]
    valid.pop(flag, None)
    argv = [part for pair in valid.items() for part in pair]
    argv += COMPANIONS.get(flag, []) + (
        ["--reserved-price", "2.0"] if flag == "--reserved-utilization" else []
    )
    code, said = exit_code(capsys, *argv, *flag_value)
    assert code == 2, (argv, said)
    assert flag in said, said
