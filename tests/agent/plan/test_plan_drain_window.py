"""A long drain is planned from its terminate: the training between the drain and the
terminate is not counted as progress, so the plan's overhead errs high, by about
(1 - q) x (lead - margin) / M of itself (docs/plan.md, `--notice-action`'s help). A seeded
simulation of drains that come at random and are trained through, sharing no code with the
model, checks the direction and the size the docs give."""

from __future__ import annotations

import random

import pytest
from forewarn.clients.overhead import Scenario, best_interval, breakdown

FLUSH, RESTART, LEAD, MARGIN, DETECTION, NO_NOTICE = 60.0, 300.0, 3600.0, 120.0, 5.0, 0.1


def simulated_overhead(tau: float, mtbi: float, reclaims: int, seed: int) -> float:
    """Wall-clock time over progress, less 1. Interruptions come as a Poisson process on the
    wall clock; a share NO_NOTICE kills at once (the work since the last complete checkpoint
    is lost); the rest are drains LEAD before the machine goes: the job works DETECTION more
    and saves (a periodic save under way or due first serves), trains on with its periodic
    saves, and at the terminate MARGIN before the deadline works DETECTION, saves and waits.
    An interruption within a notice's window is the same reclaim; one during a restart
    abandons it (a notice: after its lead)."""
    rng = random.Random(seed)
    wall = progress = 0.0
    seen = 0
    while seen < reclaims:
        while True:  # the restart, until one runs RESTART seconds uninterrupted
            cut = rng.expovariate(1 / mtbi)
            if cut >= RESTART:
                wall += RESTART
                break
            wall += cut + (LEAD if rng.random() >= NO_NOTICE else 0.0)
            seen += 1
        cut = rng.expovariate(1 / mtbi)
        done = 0.0  # work since the last complete checkpoint
        while True:
            cycle = tau - done + FLUSH
            if cut >= cycle:
                wall += cycle
                cut -= cycle
                progress += tau
                done = 0.0
                continue
            seen += 1
            wall += cut
            if rng.random() < NO_NOTICE:
                break
            if cut >= tau - done:  # during a periodic save: it completes and serves
                wall += cycle - cut
                progress += tau
            elif done + cut + DETECTION >= tau:  # a periodic save is due first: it serves
                wall += tau - done - cut + FLUSH
                progress += tau
            else:  # the drain's own save
                wall += DETECTION + FLUSH
                progress += done + cut + DETECTION
            window = max(LEAD - MARGIN - DETECTION - FLUSH, 0.0)
            whole, rest = divmod(window, tau + FLUSH)
            progress += whole * tau + min(rest, tau) + DETECTION
            wall += window + DETECTION + FLUSH + max(MARGIN - DETECTION - FLUSH, 0.0)
            break
    return wall / progress - 1.0


@pytest.mark.parametrize(("per_day", "low", "high"), [(1, 0.0, 0.06), (4, 0.05, 0.16)])
def test_a_long_drain_is_planned_with_more_overhead_than_it_costs(
    per_day: int, low: float, high: float
) -> None:
    mtbi = 86400.0 / per_day
    scenario = Scenario(
        checkpoint_seconds=FLUSH,
        mtbi_seconds=mtbi,
        restart_seconds=RESTART,
        notice_lead_seconds=MARGIN,
        detection_seconds=DETECTION,
        no_notice_share=NO_NOTICE,
        flush_p95_seconds=FLUSH,
        drain_first=True,
    )
    tau = best_interval(scenario)
    planned = breakdown(scenario, tau).total
    simulated = simulated_overhead(tau, mtbi, 30_000, seed=per_day)
    # Measured: +2.6 % at one a day (1.682 % against 1.640 %), +9.8 % at four (4.407 % against
    # 4.014 %), each simulation's spread about 1 % of itself; the estimate (1 - q)(L - m)/M
    # is 3.5 % and 14 %.
    assert low < planned / simulated - 1 < high, (planned, simulated)
