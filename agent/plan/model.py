"""Checkpoint economics: pure formulas and the cost model behind `forewarn plan`.

Every time is in seconds, every price in dollars (or any one currency) per hour unless named
otherwise. The model is first order, as Young's is: overheads add up as fractions of useful
time, so a 5 % overhead means 100 hours of work take 105 hours.

- checkpoint tax: C / tau (tau: seconds of work between checkpoints).
- per interruption: the work lost since the last checkpoint, the restart and the reload,
  and (wall clock only, as nothing is billed) the wait to get capacity back.
- lost work per interruption, two models:
  - `periodic` (no usable notice): tau/2 of work plus half a flush under way, (tau + C)/2.
  - `drain` (forewarn's drain before terminate): nothing is lost when the notice lead covers
    the time from notice to saved checkpoint (detection plus flush); the extra flush, C, is
    counted with the restart instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from forewarn.clients.adaptive import (
    daly_interval,
    interval_for_tax,
    young_interval,
)

from .inputs import PlanError, Timing

Model = Literal["periodic", "drain"]


def checkpoint_tax(checkpoint_seconds: float, interval_seconds: float) -> float:
    """The share of compute time spent checkpointing: C / tau."""
    if interval_seconds <= 0:
        raise PlanError("interval", f"must be positive (got {interval_seconds})")
    return checkpoint_seconds / interval_seconds


def interruption_share(seconds_per_interruption: float, mtbi_seconds: float) -> float:
    """The share of time one interruption costs: seconds per interruption over the mean time
    between them (one 6-minute reclaim a day is about 0.4 %)."""
    if mtbi_seconds <= 0:
        raise PlanError("mtbi_seconds", f"must be positive (got {mtbi_seconds})")
    return seconds_per_interruption / mtbi_seconds


def periodic_lost_work(interval_seconds: float, checkpoint_seconds: float) -> float:
    """Work lost per interruption without a usable notice: half an interval plus half a
    flush that was under way, (tau + C) / 2."""
    return (interval_seconds + checkpoint_seconds) / 2.0


@dataclass(frozen=True)
class LostWork:
    """Seconds of work lost per interruption under each model, and which one applies."""

    periodic: float
    drain: float
    applies: Model
    why: str

    @property
    def seconds(self) -> float:
        return self.drain if self.applies == "drain" else self.periodic


def lost_work(timing: Timing, interval_seconds: float) -> LostWork:
    periodic = periodic_lost_work(interval_seconds, timing.checkpoint_seconds)
    needed = timing.notice_to_saved
    lead = timing.notice_lead_seconds
    applies: Model
    if lead is not None:
        if lead >= needed:
            applies = "drain"
            why = f"notice lead {lead:g} s covers the {needed:g} s from notice to saved checkpoint"
        else:
            applies = "periodic"
            why = (
                f"notice lead {lead:g} s is shorter than the {needed:g} s from notice to "
                "saved checkpoint: the flush would not finish"
            )
    elif timing.drained_observed:
        applies = "drain"
        why = "every terminate notice in the telemetry was followed by a saved checkpoint"
    else:
        applies = "periodic"
        why = "no notice lead known (give --notice-lead): assuming no usable notice"
    return LostWork(periodic=periodic, drain=0.0, applies=applies, why=why)


@dataclass(frozen=True)
class Overhead:
    """Overheads at one interval, each a fraction of useful time."""

    interval_seconds: float
    model: Model
    checkpoint_tax: float
    rework: float
    restart: float
    idle: float
    # Seconds one interruption costs: lost work, restart, reload (and flush), wait.
    per_interruption_seconds: float

    @property
    def billed(self) -> float:
        """What paid capacity spends on anything but progress."""
        return self.checkpoint_tax + self.rework + self.restart

    @property
    def total(self) -> float:
        """Wall-clock overhead, including the unbilled wait for capacity."""
        return self.billed + self.idle


def overhead(timing: Timing, interval_seconds: float, model: Model | None = None) -> Overhead:
    """The expected overhead at `interval_seconds` under `model` (default: the one that
    applies to `timing`)."""
    if not interval_seconds > 0:
        raise PlanError("interval", f"must be positive (got {interval_seconds})")
    lost = lost_work(timing, interval_seconds)
    chosen = model or lost.applies
    lost_seconds = lost.drain if chosen == "drain" else lost.periodic
    # Under drain the notice costs one extra flush; the restart and reload come either way.
    restart = timing.restart_seconds + timing.restore_seconds
    if chosen == "drain":
        restart += timing.checkpoint_seconds
    m = timing.mtbi_seconds
    return Overhead(
        interval_seconds=interval_seconds,
        model=chosen,
        checkpoint_tax=checkpoint_tax(timing.checkpoint_seconds, interval_seconds),
        rework=lost_seconds / m,
        restart=restart / m,
        idle=timing.reacquire_seconds / m,
        per_interruption_seconds=lost_seconds + restart + timing.reacquire_seconds,
    )


@dataclass(frozen=True)
class Intervals:
    young: float
    daly: float
    for_tax: float | None
    chosen: float
    basis: str


def choose_interval(
    timing: Timing, *, interval: float | None = None, tax: float | None = None
) -> Intervals:
    """Young's and Daly's optima, the interval for a target tax, and the one to evaluate:
    the given interval, else the one for the tax, else Daly's."""
    young = young_interval(timing.checkpoint_seconds, timing.mtbi_seconds)
    daly = daly_interval(timing.checkpoint_seconds, timing.mtbi_seconds)
    for_tax = None
    if tax is not None:
        try:
            for_tax = interval_for_tax(timing.checkpoint_seconds, tax)
        except ValueError as error:
            raise PlanError("tax", str(error)) from None
    if interval is not None:
        if not interval > 0:
            raise PlanError("interval", f"must be positive (got {interval})")
        return Intervals(young, daly, for_tax, interval, "given")
    if for_tax is not None:
        if for_tax <= 0:
            raise PlanError("tax", "a checkpoint that costs 0 s gives no interval for a tax")
        return Intervals(young, daly, for_tax, for_tax, "target tax")
    if daly <= 0:
        raise PlanError("checkpoint_seconds", "a checkpoint that costs 0 s has no optimal interval")
    return Intervals(young, daly, for_tax, daly, "Daly optimum")


__all__ = [
    "Intervals",
    "LostWork",
    "Model",
    "Overhead",
    "checkpoint_tax",
    "choose_interval",
    "daly_interval",
    "interruption_share",
    "interval_for_tax",
    "lost_work",
    "overhead",
    "periodic_lost_work",
    "young_interval",
]
