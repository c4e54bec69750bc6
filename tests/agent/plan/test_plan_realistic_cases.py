"""`forewarn plan`'s numbers for jobs people run, against a hand calculation and a seeded
simulation that shares none of the model's code.

The cases: a 70B model on 8 GPUs (980 GB of bf16 weights, fp32 master weights and AdamW
moments, written at 4 GB/s across the node: a 245 s flush) and a 1B model on one GPU (14 GB at
1 GB/s: 14 s), each behind AWS's 2-minute interruption notice, GCP's 30 s preemption notice,
and no notice; two interruptions a day, 5 minutes to restart. The 70B flush fits neither lead
(so every interruption loses the work since the last checkpoint, Daly's model); the 1B flush
fits both, and then a noticed interruption loses no work: it costs the lead from the save on
(the save, then the billed wait for the reclaim) and the restart.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

import pytest
from forewarn.agent.plan import cli as plan_cli

DAY = 86400.0
M = DAY / 2  # two interruptions a day
R = 300.0  # --restart 5m
D = 5.0  # the default detection
Q = 0.10  # the default share of interruptions without a usable notice
COMMON = ["--interruptions-per-day", "2", "--restart", "5m"]
LARGE = ["--params", "70B", "--bandwidth", "4GB/s"]  # 70e9 x 14 B / 4e9 B/s = 245 s
SMALL = ["--params", "1B", "--bandwidth", "1GB/s"]  # 1e9 x 14 B / 1e9 B/s = 14 s


@dataclass(frozen=True)
class Case:
    argv: list[str]
    flush: float
    lead: float  # 0: no notice
    usable: bool


CASES = {
    "70B on 8 GPUs, AWS 2-minute notice": Case(
        [*LARGE, "--notice-lead", "2m"], 245.0, 120.0, False
    ),
    "70B on 8 GPUs, GCP 30 s notice": Case([*LARGE, "--notice-lead", "30s"], 245.0, 30.0, False),
    "70B on 8 GPUs, no notice": Case(LARGE, 245.0, 0.0, False),
    "1B on 1 GPU, AWS 2-minute notice": Case([*SMALL, "--notice-lead", "2m"], 14.0, 120.0, True),
    "1B on 1 GPU, GCP 30 s notice": Case([*SMALL, "--notice-lead", "30s"], 14.0, 30.0, True),
    "1B on 1 GPU, no notice": Case(SMALL, 14.0, 0.0, False),
}


def _plan(capsys: pytest.CaptureFixture[str], case: Case) -> dict[str, Any]:
    assert plan_cli.main([*case.argv, *COMMON, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("name", CASES)
def test_the_plan_agrees_with_a_hand_calculation(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    case = CASES[name]
    plan = _plan(capsys, case)
    c = case.flush
    assert plan["flush"]["mean_seconds"] == pytest.approx(c, rel=1e-12)
    # Young: sqrt(2CM). Daly (2006): sqrt(2CM)(1 + sqrt(C/2M)/3 + (C/2M)/9) - C.
    young = math.sqrt(2 * c * M)
    daly = young * (1 + math.sqrt(c / (2 * M)) / 3 + c / (2 * M) / 9) - c
    assert plan["intervals"]["seconds"]["young"] == pytest.approx(young, rel=1e-9)
    assert plan["intervals"]["seconds"]["daly"] == pytest.approx(daly, rel=1e-9)
    # Figures to check by eye: 70B: Young 4601 s, Daly 4439 s; 1B: 1100 s and 1091 s.
    assert round(young) == (4601 if c == 245 else 1100)
    assert round(daly) == (4439 if c == 245 else 1091)
    assert plan["notice"]["usable"] is case.usable
    tau = plan["intervals"]["seconds"]["chosen"]
    s = tau + c
    # An interruption without a usable notice throws away, on average, the work and the
    # checkpoint under way since the last complete one: E[x | x < s] = s/2 (1 - s/6M) to
    # second order. A noticed one with a usable lead throws away nothing: the job works
    # through detection, saves and waits, billed, for the reclaim: L - D of wall clock.
    lost = s / 2 * (1 - s / (6 * M))
    share = Q if case.usable else 1.0
    noticed_cost = (1 - share) * (case.lead - D)
    # A restart interrupted (e^{-λR} of interruptions come during work) starts over.
    during_work = math.exp(-R / M)
    restart = -math.expm1(-R / M) * (M + (1 - share) * case.lead)
    hand = during_work * (share * lost + noticed_cost) + restart
    overhead = plan["overhead"]
    # 1 %: the hand form leaves out the edges (a notice in the last D seconds before a
    # periodic checkpoint, or during one, which then serves as the save).
    assert overhead["per_interruption_seconds"] == pytest.approx(hand, rel=0.01)
    # Lost work, a share of useful time: what a run from a checkpoint to an interruption
    # throws away over the work it keeps, τ/(e^{s/M} - 1) = (Mτ/s)(1 - s/2M) to first order
    # in whole segments.
    # A usable notice keeps the work of the segment under way too: τ/2 and detection.
    kept = M * tau / s * (1 - s / (2 * M)) + (1 - share) * (tau / 2 + D)
    assert overhead["lost_work"] == pytest.approx(share * lost / kept, rel=0.01)
    if case.usable:
        # The notice's lead saves the work: without it the same interval loses more.
        assert plan["overhead_without_notice"] > overhead["total"]


@dataclass
class Simulated:
    """Per renewal cycle (from a finished restart to the next): wall seconds, useful
    seconds, seconds of completed periodic checkpoints, seconds lost (work and checkpoint
    time thrown away, lead windows trained through), and interruptions."""

    wall: list[float]
    useful: list[float]
    checkpoints: list[float]
    lost: list[float]
    interruptions: list[float]


def _simulate(case: Case, tau: float, cycles: int, seed: int) -> Simulated:
    """Renewal cycles of the job at interval τ. Poisson interruptions (mean M); each with a
    notice of `case.lead` unless it is among the share Q without one."""
    rng = random.Random(seed)
    c, lead = case.flush, case.lead
    s = tau + c
    share = Q if lead > 0 else 1.0
    sim = Simulated([], [], [], [], [])
    for _ in range(cycles):
        x = rng.expovariate(1 / M)
        done = math.floor(x / s)
        y = x - done * s  # into the segment under way
        progress = done * tau
        completed = float(done)
        wall = x
        thrown = 0.0
        if rng.random() >= share:  # with a notice
            wall += lead
            if case.usable:
                # Work through detection and save; a periodic checkpoint due first, or
                # under way, is the save. Nothing is thrown away.
                progress += y + D if y < tau - D else tau
                completed += y >= tau  # the checkpoint under way completes
            else:
                # Trained through: what checkpoints finish before the reclaim is kept.
                kept = math.floor((y + lead) / s)
                progress += kept * tau
                completed += kept
                thrown = y + lead - kept * s
        else:
            thrown = y
        count = 1
        while True:  # restart: R seconds uninterrupted, else again
            z = rng.expovariate(1 / M)
            if z >= R:
                wall += R
                break
            wall += z + (lead if rng.random() >= share else 0.0)
            count += 1
        sim.wall.append(wall)
        sim.useful.append(progress)
        sim.checkpoints.append(completed * c)
        sim.lost.append(thrown)
        sim.interruptions.append(float(count))
    return sim


def _ratio(top: list[float], bottom: list[float]) -> tuple[float, float]:
    """sum(top)/sum(bottom) and its standard error (the delta method)."""
    n = len(top)
    ratio = sum(top) / sum(bottom)
    mean = sum(bottom) / n
    terms = [(t - ratio * b) / mean for t, b in zip(top, bottom, strict=True)]
    average = sum(terms) / n
    spread = math.sqrt(sum((t - average) ** 2 for t in terms) / (n - 1))
    return ratio, spread / math.sqrt(n)


TOLERANCE = 0.02  # printed overhead and cost of one interruption against the simulated
LOST_TOLERANCE = 0.05  # printed lost work (a tenth of the interruptions, in the 1B cases)


@pytest.mark.parametrize("name", CASES)
def test_the_printed_loss_matches_a_seeded_simulation(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    case = CASES[name]
    plan = _plan(capsys, case)
    tau = plan["intervals"]["seconds"]["chosen"]
    sim = _simulate(case, tau, cycles=60_000, seed=167)
    printed = plan["overhead"]
    # The whole overhead: wall clock over useful time, less one.
    ratio, error = _ratio(sim.wall, sim.useful)
    assert error < TOLERANCE * (ratio - 1) / 3  # the simulation resolves the tolerance
    assert printed["total"] == pytest.approx(ratio - 1, rel=TOLERANCE)
    # What one interruption costs: the wall clock but the work and completed checkpoints.
    cost = [
        wall - work - saved
        for wall, work, saved in zip(sim.wall, sim.useful, sim.checkpoints, strict=True)
    ]
    per_interruption, error = _ratio(cost, sim.interruptions)
    assert error < TOLERANCE * per_interruption / 3
    assert printed["per_interruption_seconds"] == pytest.approx(per_interruption, rel=TOLERANCE)
    # The work thrown away, a share of useful time.
    lost_share, error = _ratio(sim.lost, sim.useful)
    assert error < LOST_TOLERANCE * lost_share / 3
    assert printed["lost_work"] == pytest.approx(lost_share, rel=LOST_TOLERANCE)
