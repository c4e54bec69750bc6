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

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal

from forewarn.clients.adaptive import (
    SECONDS_PER_DAY,
    daly_interval,
    interval_for_tax,
    mtbi_from_rate,
    young_interval,
)
from forewarn.protocol.timefmt import parse_time

HOURS_PER_MONTH = 730.0
Model = Literal["periodic", "drain"]


class PlanError(ValueError):
    """Input the plan cannot use; `field` names the flag or value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


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
class Timing:
    """What the job and the capacity cost in time."""

    checkpoint_seconds: float
    mtbi_seconds: float
    restore_seconds: float = 0.0
    restart_seconds: float = 0.0
    reacquire_seconds: float = 0.0
    detection_seconds: float = 5.0
    notice_lead_seconds: float | None = None
    # Measured seconds from notice to saved checkpoint; else detection + C.
    response_seconds: float | None = None
    # From telemetry: every terminate notice was followed by a saved checkpoint.
    drained_observed: bool | None = None
    steps_per_second: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "checkpoint_seconds",
            "restore_seconds",
            "restart_seconds",
            "reacquire_seconds",
            "detection_seconds",
            "notice_lead_seconds",
            "response_seconds",
        ):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise PlanError(name, f"must not be negative (got {value})")
        if not math.isfinite(self.mtbi_seconds) or self.mtbi_seconds <= 0:
            raise PlanError("mtbi_seconds", f"must be positive (got {self.mtbi_seconds})")
        if self.steps_per_second is not None and not self.steps_per_second > 0:
            raise PlanError("steps_per_second", f"must be positive (got {self.steps_per_second})")

    @property
    def interruptions_per_day(self) -> float:
        return SECONDS_PER_DAY / self.mtbi_seconds

    @property
    def notice_to_saved(self) -> float:
        if self.response_seconds is not None:
            return self.response_seconds
        return self.detection_seconds + self.checkpoint_seconds


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
class Prices:
    """Prices per hour of the capacity, and what checkpoints cost to keep and move."""

    spot: float
    on_demand: float | None = None
    reserved: float | None = None
    reserved_utilization: float = 1.0
    # Share of compute hours that run on on-demand while spot capacity is unavailable.
    fallback_share: float = 0.0
    checkpoint_gb: float = 0.0
    storage_gb_month: float = 0.0
    keep: int = 2
    io_per_gb: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "spot",
            "on_demand",
            "reserved",
            "checkpoint_gb",
            "storage_gb_month",
            "io_per_gb",
        ):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise PlanError(name, f"must not be negative (got {value})")
        if self.on_demand is None and self.reserved is None:
            raise PlanError("on_demand", "needed (or a reserved price) to compare spot against")
        if not 0 < self.reserved_utilization <= 1:
            raise PlanError(
                "reserved_utilization", f"must be in (0, 1] (got {self.reserved_utilization})"
            )
        if not 0 <= self.fallback_share < 1:
            raise PlanError("fallback_share", f"must be in [0, 1) (got {self.fallback_share})")
        if self.fallback_share > 0 and self.on_demand is None:
            raise PlanError("on_demand", "needed to price the fallback to on-demand")
        if self.keep < 1:
            raise PlanError("keep", f"must be at least 1 (got {self.keep})")
        if (self.storage_gb_month or self.io_per_gb) and not self.checkpoint_gb:
            raise PlanError("checkpoint_gb", "needed to price checkpoint storage and I/O")

    @property
    def storage_per_hour(self) -> float:
        return self.checkpoint_gb * self.keep * self.storage_gb_month / HOURS_PER_MONTH


@dataclass(frozen=True)
class Option:
    """One way to buy the capacity: dollars per useful hour, line by line."""

    name: str
    per_useful_hour: float
    wall_hours_per_useful_hour: float
    lines: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Costs:
    spot: Option
    alternatives: list[Option]
    verdict: str
    summary: str


def _checkpoint_io(prices: Prices, writes_per_hour: float, reads_per_hour: float) -> float:
    return prices.checkpoint_gb * prices.io_per_gb * (writes_per_hour + reads_per_hour)


def spot_option(timing: Timing, prices: Prices, cost: Overhead) -> Option:
    share = prices.fallback_share
    blended = (1 - share) * prices.spot + share * (prices.on_demand or 0.0)
    per_hour = 3600.0
    interruptions = per_hour / timing.mtbi_seconds
    emergency = interruptions if cost.model == "drain" else 0.0
    lines = {
        "compute": (1 - share) * prices.spot,
        "fallback to on-demand": share * (prices.on_demand or 0.0),
        "checkpoint tax": blended * cost.checkpoint_tax,
        "lost compute": blended * cost.rework,
        "restart and reload": blended * cost.restart,
        "checkpoint storage": prices.storage_per_hour * (1 + cost.total),
        "checkpoint I/O": _checkpoint_io(
            prices, per_hour / cost.interval_seconds + emergency, interruptions
        ),
        "reacquisition idle (unbilled)": 0.0,
    }
    return Option("spot", sum(lines.values()), 1 + cost.total, lines)


def steady_option(name: str, price: float, prices: Prices, tax: float, interval: float) -> Option:
    """Capacity that is not reclaimed: only the checkpoint tax at the same interval."""
    lines = {
        "compute": price,
        "checkpoint tax": price * tax,
        "checkpoint storage": prices.storage_per_hour * (1 + tax),
        "checkpoint I/O": _checkpoint_io(prices, 3600.0 / interval, 0.0),
    }
    return Option(name, sum(lines.values()), 1 + tax, lines)


def costs(timing: Timing, prices: Prices, interval_seconds: float) -> Costs:
    cost = overhead(timing, interval_seconds)
    spot = spot_option(timing, prices, cost)
    alternatives = []
    if prices.on_demand is not None:
        alternatives.append(
            steady_option(
                "on-demand", prices.on_demand, prices, cost.checkpoint_tax, interval_seconds
            )
        )
    if prices.reserved is not None:
        alternatives.append(
            steady_option(
                "reserved",
                prices.reserved / prices.reserved_utilization,
                prices,
                cost.checkpoint_tax,
                interval_seconds,
            )
        )
    best = min(alternatives, key=lambda option: option.per_useful_hour)
    slowdown = spot.wall_hours_per_useful_hour / best.wall_hours_per_useful_hour
    slower = f"the job takes {slowdown:.3g}x the wall-clock time it takes on {best.name}"
    if spot.per_useful_hour <= best.per_useful_hour:
        saving = 1 - spot.per_useful_hour / best.per_useful_hour if best.per_useful_hour else 0
        verdict = "spot"
        summary = (
            f"spot: {spot.per_useful_hour:.4g} per useful hour, {saving:.0%} less than "
            f"{best.name} at {best.per_useful_hour:.4g}; {slower}"
        )
    else:
        extra = spot.per_useful_hour / best.per_useful_hour - 1 if best.per_useful_hour else 0
        verdict = best.name
        summary = (
            f"{best.name}: {best.per_useful_hour:.4g} per useful hour; spot costs "
            f"{spot.per_useful_hour:.4g}, {extra:.0%} more, once its overhead of "
            f"{cost.total:.1%} is paid"
        )
    if cost.total >= 0.5:
        summary += " (overhead of 50 % or more: the first-order model understates it)"
    return Costs(spot=spot, alternatives=alternatives, verdict=verdict, summary=summary)


@dataclass(frozen=True)
class TelemetrySummary:
    """What a telemetry file says about the job and the capacity."""

    records: int
    span_seconds: float
    terminate_notices: int
    flush_seconds: float | None
    flushes: int
    restore_seconds: float | None
    resumes: int
    steps_lost: float | None
    notice_lead_seconds: float | None
    response_seconds: float | None
    drained: bool | None
    reasons: dict[str, int]

    @property
    def mtbi_seconds(self) -> float | None:
        if not self.terminate_notices or self.span_seconds <= 0:
            return None
        return self.span_seconds / self.terminate_notices


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def summarize_telemetry(*sources: Iterable[dict[str, Any]]) -> TelemetrySummary:
    """Medians of flush, restore, notice lead and notice-to-saved time, and the terminate
    notices (one per id, escalated drains included) over the observed span.

    Each source is one agent's records (one machine); the span is the sum of each source's
    first-to-last time, so machines in a row or side by side both count their running time.
    """
    count = 0
    span = 0.0
    terminated: dict[tuple[int, str], float] = {}  # (source, id) -> when the terminate was sent
    reasons: dict[str, int] = {}
    leads: list[float] = []
    saved_at: dict[tuple[int, str], list[float]] = {}  # when saved acks for a notice arrived
    flushes: list[float] = []
    restores: list[float] = []
    lost_steps: list[float] = []
    for index, records in enumerate(sources):
        first: float | None = None
        last: float | None = None
        for record in records:
            count += 1
            at = parse_time(str(record["at"])).timestamp()
            first = at if first is None else min(first, at)
            last = at if last is None else max(last, at)
            kind = record["kind"]
            if kind in ("notice", "escalation") and record.get("action") == "terminate":
                key = (index, str(record.get("id")))
                if key in terminated:
                    continue
                sent = parse_time(str(record.get("sent_at") or record["at"])).timestamp()
                terminated[key] = sent
                reason = str(record.get("reason"))
                reasons[reason] = reasons.get(reason, 0) + 1
                if record.get("deadline"):
                    leads.append(parse_time(str(record["deadline"])).timestamp() - sent)
            elif kind == "ack" and record.get("outcome") == "saved":
                if record.get("flush_seconds") is not None:
                    flushes.append(float(record["flush_seconds"]))
                if record.get("notice_id") is not None:
                    saved_at.setdefault((index, str(record["notice_id"])), []).append(at)
            elif kind == "resume":
                if record.get("restore_seconds") is not None:
                    restores.append(float(record["restore_seconds"]))
                if record.get("steps_lost") is not None:
                    lost_steps.append(float(record["steps_lost"]))
        if first is not None and last is not None:
            span += last - first
    # Only a save at or after the terminate protects the work; a drain's earlier ack does not.
    responses = {
        notice_id: min(moment for moment in saved_at.get(notice_id, []) if moment >= sent) - sent
        for notice_id, sent in terminated.items()
        if any(moment >= sent for moment in saved_at.get(notice_id, []))
    }
    return TelemetrySummary(
        records=count,
        span_seconds=span,
        terminate_notices=len(terminated),
        flush_seconds=_median(flushes),
        flushes=len(flushes),
        restore_seconds=_median(restores),
        resumes=len(restores),
        steps_lost=_median(lost_steps),
        notice_lead_seconds=_median(leads),
        response_seconds=_median(list(responses.values())),
        drained=len(responses) == len(terminated) if terminated else None,
        reasons=reasons,
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


def rate_to_mtbi(interruptions_per_day: float) -> float:
    try:
        return mtbi_from_rate(interruptions_per_day)
    except ValueError:
        raise PlanError(
            "interruptions_per_day", f"must be positive (got {interruptions_per_day})"
        ) from None


__all__ = [
    "Costs",
    "Intervals",
    "LostWork",
    "Model",
    "Option",
    "Overhead",
    "PlanError",
    "Prices",
    "TelemetrySummary",
    "Timing",
    "checkpoint_tax",
    "choose_interval",
    "costs",
    "daly_interval",
    "interruption_share",
    "interval_for_tax",
    "lost_work",
    "overhead",
    "periodic_lost_work",
    "rate_to_mtbi",
    "summarize_telemetry",
    "young_interval",
]
