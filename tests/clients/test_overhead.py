"""The exact overhead model against a Monte Carlo simulation of the job on a wall clock.

The simulation knows nothing of the model's algebra: it draws Poisson interruption times on
each replica's wall clock, tags each with or without a notice, and walks the job through
work, checkpoints, notices, lead windows and restarts. Replicas and intervals run side by
side as numpy arrays; every interval of a cell sees the same interruptions (common random
numbers), so differences between intervals are measured far more precisely than levels.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from forewarn.clients.overhead import (
    Scenario,
    best_interval,
    breakdown,
    daly_complete,
    overhead,
)
from hypothesis import example, given
from hypothesis import strategies as st
from support import LazyModule

if TYPE_CHECKING:
    import numpy as np
else:  # imported at first use, not while collecting (tests/test_collection_imports.py)
    np = LazyModule("numpy")

MINUTE, HOUR = 60.0, 3600.0
DETECTION = 5.0


@dataclass
class Simulated:
    """Per interval (rows) and replica (columns): wall-clock seconds and useful seconds."""

    wall: np.ndarray
    useful: np.ndarray

    def __add__(self, other: Simulated) -> Simulated:
        return Simulated(
            np.concatenate([self.wall, other.wall], axis=1),
            np.concatenate([self.useful, other.useful], axis=1),
        )

    @property
    def overhead(self) -> np.ndarray:
        return self.wall.sum(axis=1) / self.useful.sum(axis=1) - 1.0

    @property
    def influence(self) -> np.ndarray:
        """The delta method's terms for the ratio of sums, per interval and replica."""
        ratio = self.overhead + 1.0
        return (self.wall - ratio[:, None] * self.useful) / self.useful.mean(axis=1)[:, None]

    @property
    def standard_error(self) -> np.ndarray:
        influence = self.influence
        return influence.std(axis=1, ddof=1) / math.sqrt(influence.shape[1])

    def difference_error(self, i: int, j: int) -> float:
        """Standard error of overhead[i] - overhead[j] (same interruptions: paired)."""
        paired = self.influence[i] - self.influence[j]
        return float(paired.std(ddof=1) / math.sqrt(paired.size))


def simulate(
    scenario: Scenario,
    intervals: np.ndarray,
    *,
    replicas: int,
    horizon: float,
    seed: list[int],
) -> Simulated:
    """Run `replicas` jobs for at least `horizon` wall-clock seconds each (to the end of the
    cycle under way) at each interval; overhead = wall time / progress - 1."""
    rng = np.random.default_rng(seed)
    c = scenario.checkpoint_seconds
    m = scenario.mtbi_seconds
    r = scenario.restart_seconds
    lead = scenario.notice_lead_seconds
    d = scenario.detection_seconds
    usable = scenario.notice_usable
    # Enough interruptions to outlast the horizon with overhead up to 4x (checked below).
    count = int((horizon * 5) / m + 10 * math.sqrt(horizon * 5 / m) + 20)
    events = np.cumsum(rng.exponential(m, size=(replicas, count)), axis=1)
    noticed = (rng.random(size=(replicas, count)) >= scenario.no_notice_share) & (lead > 0)
    events = np.concatenate([events, np.full((replicas, 1), np.inf)], axis=1)
    noticed = np.concatenate([noticed, np.zeros((replicas, 1), bool)], axis=1)

    k = len(intervals)
    tau = np.broadcast_to(intervals[:, None], (k, replicas)).astype(float)
    seg = tau + c
    rows = np.broadcast_to(np.arange(replicas)[None, :], (k, replicas))
    t = np.zeros((k, replicas))
    progress = np.zeros((k, replicas))
    ptr = np.zeros((k, replicas), dtype=np.int64)
    restarting = np.zeros((k, replicas), bool)
    active = np.ones((k, replicas), bool)

    def skip_to(mask: np.ndarray) -> None:
        """Drop the interruptions at or before each masked replica's clock: the lead window
        of a reclaim under way, or the wait for capacity."""
        while True:
            late = mask & (events[rows, ptr] <= t)
            if not late.any():
                return
            ptr[late] += 1

    while active.any():
        at = events[rows, ptr]
        kind = noticed[rows, ptr]
        # Training from a checkpoint: whole segments until the next interruption.
        train = active & ~restarting
        whole = np.floor((at - t) / seg)
        t = np.where(train, t + whole * seg, t)
        progress = np.where(train, progress + whole * tau, progress)
        x = at - t  # the interruption comes x seconds into the segment under way
        # A usable notice saves the work to detection (a periodic checkpoint due first, or
        # under way, serves as the flush); otherwise training goes on through the lead and
        # keeps what periodic checkpoints finish in it.
        saved = np.where(x < tau - d, x + d, tau) if usable else tau * np.floor((x + lead) / seg)
        with_notice = train & kind
        progress = np.where(with_notice, progress + saved, progress)
        t = np.where(train, at + np.where(kind, lead, 0.0), t)
        ptr[train] += 1
        restarting = restarting | train
        skip_to(train)
        # Restarting: done in R seconds unless interrupted first.
        trying = active & restarting & ~train
        at = events[rows, ptr]
        kind = noticed[rows, ptr]
        through = trying & (at - t >= r)
        t = np.where(through, t + r, t)
        restarting = restarting & ~through
        broken = trying & ~through
        t = np.where(broken, at + np.where(kind, lead, 0.0), t)
        ptr[broken] += 1
        skip_to(broken)
        active = active & ~(~restarting & (t >= horizon))
    assert (ptr < count).all(), "the simulation ran out of drawn interruptions"
    return Simulated(t, progress)


CELLS = [
    (c, m, lead, r, share)
    for c, m, lead, r, share in itertools.product(
        (10.0, 60.0, 360.0),  # C
        (HOUR, 6 * HOUR, 24 * HOUR),  # M
        (0.0, 30.0, 120.0),  # L
        (0.0, 300.0),  # R
        (0.2, 0.05),  # share of interruptions without a usable notice
    )
    if lead > 0 or share == 0.2  # without a notice every interruption is without one
]
# Intervals around plan's, from a quarter to four times it: the simulation's best is sought
# among them.
FACTORS = (0.25, 0.5, 0.7, 0.85, 1.0, 1.2, 1.4, 2.0, 4.0)
TOLERANCE = 0.05  # predicted against simulated overhead, relative
REGRET = 0.01  # overhead at plan's interval against the best simulated, relative


@pytest.mark.parametrize(("c", "m", "lead", "r", "share"), CELLS)
def test_plan_matches_the_simulation(
    c: float, m: float, lead: float, r: float, share: float
) -> None:
    scenario = Scenario(
        checkpoint_seconds=c,
        mtbi_seconds=m,
        restart_seconds=r,
        notice_lead_seconds=lead,
        detection_seconds=DETECTION,
        no_notice_share=share,
    )
    chosen = best_interval(scenario, max_seconds=86400)  # plan's default --max-interval
    key = [int(c), int(m), int(lead), int(r), int(share * 100)]
    intervals = chosen * np.array(FACTORS)
    here = FACTORS.index(1.0)

    def precise(sim: Simulated) -> bool:
        """The simulation's own errors are a third of the tolerances or less."""
        best = int(np.argmin(sim.overhead))
        return bool(
            (sim.standard_error / sim.overhead < TOLERANCE / 3).all()
            and sim.difference_error(here, best) / sim.overhead[best] < REGRET / 3
        )

    sim = simulate(scenario, intervals, replicas=500, horizon=40 * m, seed=[*key, 0])
    for batch in range(1, 8):  # where the curve is flat or losses rare, more replicas
        if precise(sim):
            break
        sim += simulate(scenario, intervals, replicas=500, horizon=40 * m, seed=[*key, batch])
    assert precise(sim), (sim.standard_error, sim.overhead)
    predicted = np.array([overhead(scenario, tau) for tau in intervals])
    relative = np.abs(predicted / sim.overhead - 1)
    assert (relative < TOLERANCE).all(), (relative, predicted, sim.overhead)
    best = int(np.argmin(sim.overhead))
    assert sim.overhead[here] <= sim.overhead[best] * (1 + REGRET), (sim.overhead, intervals)


seconds = st.floats(min_value=0.0, max_value=5e4, allow_nan=False)


@given(
    c=st.floats(min_value=0.01, max_value=5e3),
    m=st.floats(min_value=60.0, max_value=1e7),
    r=seconds,
    g=seconds,
    lead=st.floats(min_value=0.0, max_value=3600.0),
    d=st.floats(min_value=0.0, max_value=60.0),
    q=st.floats(min_value=0.0, max_value=1.0),
    tau=st.floats(min_value=0.1, max_value=1e6),
)
# Found by a CI run: an unusable 1 s notice, R far beyond M and τ ≈ 600 M kept work so rarely
# that restart/progress overflowed and the total was inf - inf = NaN.
@example(c=1.0, m=78.0, r=17087.0, g=1.0, lead=1.0, d=1.0, q=0.0, tau=47279.0)
def test_the_parts_are_never_negative_and_add_up(
    c: float, m: float, r: float, g: float, lead: float, d: float, q: float, tau: float
) -> None:
    scenario = Scenario(c, m, r, g, lead, d, q)
    parts = breakdown(scenario, tau)
    if math.isinf(parts.total):
        return  # an interval so long that no work is ever kept
    values = (
        parts.checkpoint_tax,
        parts.lost_work,
        parts.notice_flush,
        parts.notice_idle,
        parts.restart,
        parts.reacquire,
    )
    assert all(value >= -1e-9 * max(1.0, parts.total) for value in values), values
    assert parts.total == pytest.approx(sum(values))
    # More interruptions cost more; without a notice it is Daly's complete model.
    blind = Scenario(c, m, r, 0.0, lead, d, 1.0)
    if math.isfinite(daly_complete(blind, tau)):
        assert breakdown(blind, tau).total == pytest.approx(daly_complete(blind, tau), rel=1e-9)
    else:
        assert math.isinf(breakdown(blind, tau).total)


@given(
    c=st.floats(min_value=0.0, max_value=5e3),
    m=st.floats(min_value=10.0, max_value=1e7),
    restarts=st.floats(min_value=0.0, max_value=690.0),
    g=seconds,
    lead=st.floats(min_value=0.0, max_value=3600.0),
    d=st.floats(min_value=0.0, max_value=60.0),
    q=st.floats(min_value=0.0, max_value=1.0),
    tau=st.floats(min_value=0.1, max_value=1e6),
)
# `forewarn plan --checkpoint 0s --restart 467218 --reacquire 1663 --mtbi 1693 --interval 90`
# printed lost work of -1.07e+106 %: the restart (e^276 failed attempts), subtracted back out
# of the cycle's time, left only its rounding error.
@example(c=0.0, m=1693.0, restarts=467218 / 1693, g=1663.0, lead=0.0, d=5.0, q=0.1, tau=90.0)
def test_the_lost_work_does_not_depend_on_the_restart(
    c: float, m: float, restarts: float, g: float, lead: float, d: float, q: float, tau: float
) -> None:
    quick = breakdown(Scenario(c, m, 0.0, g, lead, d, q), tau)
    slow = breakdown(Scenario(c, m, restarts * m, g, lead, d, q), tau)
    if math.isinf(quick.total) or math.isinf(slow.total):
        return
    assert slow.lost_work >= -1e-9 * max(1.0, quick.total)
    assert slow.lost_work == pytest.approx(quick.lost_work, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("share", [0.0, 0.1])
def test_a_usable_notice_keeps_the_work_at_intervals_far_beyond_the_mtbi(share: float) -> None:
    """With notices acted on, an interval of hundreds of M still keeps work: each notice
    saves it (a drill's telemetry gives M of seconds). Only without a usable notice is
    nothing ever kept. Intervals on both sides of e^{(τ+C)/M} = e^700."""
    scenario = Scenario(1.0, 60.0, notice_lead_seconds=30.0, no_notice_share=share)
    intervals = np.array([2e4, 5e4, 86400.0])
    predicted = np.array([overhead(scenario, tau) for tau in intervals])
    sim = simulate(
        scenario, intervals, replicas=500, horizon=400 * 60.0, seed=[17, int(share * 10)]
    )
    assert np.isfinite(predicted).all(), predicted
    assert (np.abs(predicted / sim.overhead - 1) < TOLERANCE).all(), (predicted, sim.overhead)
    # With every interruption noticed, longer never costs more.
    if share == 0:
        best = overhead(scenario, best_interval(scenario, max_seconds=86400))
        assert best <= overhead(scenario, 86400) * (1 + 1e-9)
    assert math.isinf(
        overhead(Scenario(1.0, 60.0, notice_lead_seconds=30.0, no_notice_share=1), 5e4)
    )


def test_hopeless_intervals_cost_infinitely_much_without_overflow() -> None:
    scenario = Scenario(10.0, 60.0, restart_seconds=5e4)
    assert math.isinf(overhead(scenario, 100.0))
    assert math.isinf(overhead(Scenario(10.0, 60.0), 1e6))
    assert math.isinf(daly_complete(Scenario(10.0, 60.0), 1e6))


def test_bad_scenarios_name_the_field() -> None:
    for kwargs, named in (
        ({"mtbi_seconds": 0.0}, "mtbi_seconds"),
        ({"checkpoint_seconds": -1.0}, "checkpoint_seconds"),
        ({"no_notice_share": 1.5}, "no_notice_share"),
        ({"notice_lead_seconds": float("inf")}, "notice_lead_seconds"),
    ):
        values = {"checkpoint_seconds": 10.0, "mtbi_seconds": 3600.0, **kwargs}
        with pytest.raises(ValueError, match=named):
            Scenario(**values)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval_seconds"):
        overhead(Scenario(10.0, 3600.0), 0.0)
    with pytest.raises(ValueError, match="0 s"):
        best_interval(Scenario(0.0, 3600.0))


@given(
    c=st.floats(min_value=0.0, max_value=3600.0),
    tau=st.floats(min_value=1.0, max_value=86400.0),
    exponent=st.floats(min_value=4.0, max_value=300.0),
    r=st.floats(min_value=0.0, max_value=3600.0),
)
@example(c=10.0, tau=86400.0, exponent=300.0, r=0.0)
def test_one_interruption_costs_half_a_cycle_however_rare_interruptions_are(
    c: float, tau: float, exponent: float, r: float
) -> None:
    """`forewarn plan --checkpoint 10s --interruptions-per-day 1e-300` said "one interruption
    costs 0 s" at a 24 h interval: the lost work, the cycle's time less its work and tax,
    cancelled to 0 where λ(τ+C) is below the float's precision. An interruption without a
    notice throws away on average E[x | x < s] = s/2 - λs²/12 + ... of the cycle s = τ + C,
    plus the restart."""
    s = tau + c
    m = s * 10**exponent  # λs = 10^-exponent, from 1e-4 down to 1e-300
    parts = breakdown(Scenario(c, m, restart_seconds=r), tau)
    # A restart interrupted is tried again: each interruption costs e^{-λR} of the lost
    # work (the rest are restarts' own) and (1 - e^{-λR})/λ of restarts.
    kept = math.exp(-r / m)
    expected = s / 2 * (1 - (s / m) / 6) * kept - math.expm1(-r / m) * m
    assert parts.per_interruption_seconds == pytest.approx(expected, rel=1e-6)
    assert parts.lost_work > 0
