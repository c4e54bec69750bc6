"""`forewarn plan`'s numbers against computations that share none of its code: Young's and
Daly's intervals as published, the interval that minimizes Daly's complete model found on a
dense grid, and the expected overhead and lost work of one renewal cycle integrated
numerically (Gauss-Legendre on each smooth piece) with and without a notice lead, and with a
lead too short for the flush. The Monte Carlo check of the model itself is
tests/clients/test_overhead.py; these check the plan's inputs reach it as documented.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from forewarn.agent.plan import Timing, choose_interval, notice, overhead, warnings
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from support import LazyModule, examples

if TYPE_CHECKING:
    import numpy as np
else:  # imported at first use, not while collecting (tests/test_collection_imports.py)
    np = LazyModule("numpy")


@functools.cache
def gauss_legendre() -> tuple[np.ndarray, np.ndarray]:
    """The nodes and weights of 64-point Gauss-Legendre quadrature on [-1, 1]."""
    nodes, weights = np.polynomial.legendre.leggauss(64)
    return nodes, weights


Curve = Callable[["np.ndarray"], "np.ndarray"]


def integrate(f: Curve, low: float, high: float, breaks: list[float]) -> float:
    """∫ f over [low, high], split at `breaks` (where f jumps)."""
    edges = sorted({low, high, *(b for b in breaks if low < b < high)})
    total = 0.0
    nodes, weights = gauss_legendre()
    for a, b in itertools.pairwise(edges):
        x = (b - a) / 2 * nodes + (a + b) / 2
        total += float((b - a) / 2 * np.sum(weights * f(x)))
    return total


def cycle(
    *,
    c: float,
    m: float,
    tau: float,
    lead: float,
    d: float,
    q: float,
    r: float = 0.0,
    g: float = 0.0,
    usable: bool,
    extra_flush: float = 0.0,
) -> tuple[float, float, float]:
    """(expected wall time, useful work, lost work) of one cycle: from a checkpoint to the
    next, or to the restart after an interruption that comes at x ~ Exp(1/m) on the wall
    clock. Without a notice (share q) the work since the checkpoint is lost. With a usable
    notice the job saves (the work up to x + d, or the interval whose checkpoint is due
    first or under way) and the machine goes at x + lead: nothing is lost. With a notice
    too short for the flush it trains on to x + lead and keeps the checkpoints completed by
    then. Restarts (r) are interrupted too (each failed attempt costs its lead when
    noticed); each loss waits g for capacity."""
    lam = 1 / m
    s = tau + c
    # Pieces at most M wide: the density e^{-x/M} is then a low-order polynomial on each.
    spread = [k * m for k in range(1, int(s // m) + 1)]

    def density(x: np.ndarray) -> np.ndarray:
        return lam * np.exp(-lam * x)

    hit = -math.expm1(-lam * s)
    done = math.exp(-lam * s)
    noticed = 1 - q if lead > 0 else 0.0
    if lead == 0:
        breaks = spread

        def saved(x: np.ndarray) -> np.ndarray:
            return 0 * x

        def lost_noticed(x: np.ndarray) -> np.ndarray:
            return 0 * x

    elif usable:
        breaks = [tau - d, *spread]

        def saved(x: np.ndarray) -> np.ndarray:
            return np.where(x < tau - d, x + d, tau)

        def lost_noticed(x: np.ndarray) -> np.ndarray:
            return 0 * x

    else:
        breaks = [*(k * s - lead for k in range(1, int(lead // s) + 2)), *spread]

        def saved(x: np.ndarray) -> np.ndarray:
            return tau * np.floor((x + lead) / s)

        def lost_noticed(x: np.ndarray) -> np.ndarray:
            return x + lead - s * np.floor((x + lead) / s)

    failed = math.expm1(lam * r)  # expected failed restart attempts
    wall = (
        s * done
        + integrate(lambda x: density(x) * (x + noticed * lead), 0, s, breaks)
        + hit * (failed / lam + failed * noticed * lead)  # the last, whole R is in failed / lam
        + hit * (1 + failed) * g
        + hit * noticed * extra_flush
    )
    useful = tau * done + noticed * integrate(lambda x: density(x) * saved(x), 0, s, breaks)
    # Without a lead every interruption loses the work since the checkpoint.
    unnoticed = 1 - noticed
    lost = unnoticed * integrate(lambda x: density(x) * x, 0, s, spread) + noticed * integrate(
        lambda x: density(x) * lost_noticed(x), 0, s, breaks
    )
    return wall, useful, lost


def daly_complete(c: float, m: float, r: float, tau: float) -> float:
    return m / tau * math.exp(r / m) * math.expm1((tau + c) / m) - 1


scales = st.floats(min_value=0.0, max_value=1.0)


@given(
    c=st.floats(min_value=0.5, max_value=3600.0),
    m=st.floats(min_value=600.0, max_value=30 * 86400.0),
)
def test_young_and_daly_are_the_published_forms(c: float, m: float) -> None:
    t = choose_interval(Timing(checkpoint_seconds=c, mtbi_seconds=m, max_interval_seconds=1e9))
    assert t.young == pytest.approx(math.sqrt(2 * c * m), rel=1e-12)
    # Young's is the minimum of the first-order overhead C/τ + τ/2M.
    grid = np.geomspace(t.young / 3, t.young * 3, 200_001)
    assert grid[np.argmin(c / grid + grid / (2 * m))] == pytest.approx(t.young, rel=1e-4)
    # Daly (2006): sqrt(2CM)·[1 + (1/3)·sqrt(C/2M) + (1/9)·(C/2M)] - C for C < 2M, else M.
    x = c / (2 * m)
    published = math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c if c < 2 * m else m
    assert t.daly == pytest.approx(published, rel=1e-12)


@settings(max_examples=examples(60), deadline=None)
@given(
    c=st.floats(min_value=0.5, max_value=3600.0),
    m=st.floats(min_value=600.0, max_value=30 * 86400.0),
    r=st.floats(min_value=0.0, max_value=3600.0),
)
def test_without_a_notice_the_plan_minimizes_dalys_complete_model(
    c: float, m: float, r: float
) -> None:
    timing = Timing(
        checkpoint_seconds=c, mtbi_seconds=m, restart_seconds=r, max_interval_seconds=1e9
    )
    chosen = choose_interval(timing).recommended
    assert chosen is not None
    grid = np.geomspace(c / 100, 50 * m, 400_001)
    values = m / grid * math.exp(r / m) * np.expm1((grid + c) / m) - 1
    best = float(values.min())
    assert overhead(timing, chosen).total == pytest.approx(daly_complete(c, m, r, chosen))
    assert overhead(timing, chosen).total <= best * (1 + 1e-6) + 1e-12
    if c < m / 100:  # where the higher-order form is meant to hold
        assert choose_interval(timing).daly == pytest.approx(chosen, rel=2e-3)


@settings(max_examples=examples(200), deadline=None)
@given(
    c=st.floats(min_value=0.5, max_value=1800.0),
    m=st.floats(min_value=600.0, max_value=30 * 86400.0),
    lead=st.floats(min_value=0.0, max_value=900.0),
    d=st.floats(min_value=0.0, max_value=60.0),
    q=scales,
    r=st.floats(min_value=0.0, max_value=1800.0),
    g=st.floats(min_value=0.0, max_value=1800.0),
    factor=st.floats(min_value=0.05, max_value=20.0),
)
def test_overhead_and_lost_work_with_and_without_a_lead_match_one_cycle_integrated(
    c: float, m: float, lead: float, d: float, q: float, r: float, g: float, factor: float
) -> None:
    """A notice lead that covers detection and the flush loses nothing on the interruptions
    it comes with; one shorter than that (a 30 s GCP notice behind a 98 s flush) is trained
    through and keeps only the checkpoints completed by the reclaim; no lead is Daly's."""
    tau = factor * math.sqrt(2 * c * m)
    assume((tau + c) / m <= 30 and lead <= m)
    timing = Timing(
        checkpoint_seconds=c,
        mtbi_seconds=m,
        restart_seconds=r,
        reacquire_seconds=g,
        detection_seconds=d,
        notice_lead_seconds=lead or None,
        no_notice_share=q,
    )
    seen = notice(timing)
    assert seen.usable == (lead > 0 and lead >= d + c)
    event("no lead" if not lead else "usable lead" if seen.usable else "lead too short")
    wall, useful, lost = cycle(c=c, m=m, tau=tau, lead=lead, d=d, q=q, r=r, g=g, usable=seen.usable)
    cost = overhead(timing, tau)
    assert cost.total == pytest.approx(wall / useful - 1, rel=1e-6, abs=1e-9)
    assert cost.lost_work == pytest.approx(lost / useful, rel=1e-6, abs=1e-9)
    if lead and not seen.usable:
        assert any(
            "shorter than detection plus the flush" in w
            for w in warnings(timing, choose_interval(timing, interval=tau))
        )


@settings(max_examples=examples(100), deadline=None)
@given(
    c=st.floats(min_value=0.5, max_value=600.0),
    m=st.floats(min_value=4 * 3600.0, max_value=30 * 86400.0),
    lead=st.floats(min_value=1800.0, max_value=4 * 3600.0),
    margin=st.floats(min_value=0.0, max_value=600.0),
    q=scales,
    factor=st.floats(min_value=0.05, max_value=20.0),
)
def test_a_long_drain_costs_a_save_and_the_exit_margin_not_its_lead(
    c: float, m: float, lead: float, margin: float, q: float, factor: float
) -> None:
    """A drain (DigitalOcean's 2-hour mail) is saved on and trained through; the terminate
    comes at the exit margin (the larger of --exit-margin and twice the flush) before the
    deadline: one more save, and a billed wait within the margin, not the lead."""
    tau = factor * math.sqrt(2 * c * m)
    acted = max(margin, 2 * c)
    assume((tau + c) / m <= 30 and lead <= m and acted < lead)
    timing = Timing(
        checkpoint_seconds=c,
        mtbi_seconds=m,
        notice_lead_seconds=lead,
        notice_action="drain",
        exit_margin_seconds=margin,
        no_notice_share=q,
    )
    usable = acted >= 5.0 + c
    assert notice(timing).usable == usable
    wall, useful, lost = cycle(
        c=c, m=m, tau=tau, lead=acted, d=5.0, q=q, usable=usable, extra_flush=c if usable else 0
    )
    cost = overhead(timing, tau)
    assert cost.total == pytest.approx(wall / useful - 1, rel=1e-6, abs=1e-9)
    assert cost.lost_work == pytest.approx(lost / useful, rel=1e-6, abs=1e-9)
