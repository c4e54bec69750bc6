"""Dollars per useful hour: spot beside on-demand and reserved capacity, line by line."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from forewarn.clients.overhead import Breakdown

from .inputs import PlanError, Prices, Timing
from .model import checkpoint_tax, overhead


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


def spot_option(timing: Timing, prices: Prices, cost: Breakdown) -> Option:
    share = prices.fallback_share
    blended = (1 - share) * prices.spot + share * (prices.on_demand or 0.0)
    per_useful_hour = 3600.0
    c = timing.checkpoint_seconds
    # Checkpoints written per useful hour: the periodic ones and those notices trigger.
    writes = (cost.checkpoint_tax + cost.notice_flush) / c * per_useful_hour if c > 0 else 0.0
    restores = cost.interruptions_per_useful_second * per_useful_hour
    lines = {
        "compute": (1 - share) * prices.spot,
        "fallback to on-demand": share * (prices.on_demand or 0.0),
        "checkpoint tax": blended * cost.checkpoint_tax,
        "lost compute": blended * cost.lost_work,
        "notice flush and idle tail": blended * (cost.notice_flush + cost.notice_idle),
        "restart and reload": blended * cost.restart,
        "checkpoint storage": prices.storage_per_hour * (1 + cost.total),
        "checkpoint I/O": _checkpoint_io(prices, writes, restores),
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


# The flag behind each line, to name when prices and sizes multiply past what a float holds.
_LINE_FIELDS = {"checkpoint storage": "storage_gb_month", "checkpoint I/O": "io_per_gb"}
_PRICE_FIELDS = {"spot": "spot", "on-demand": "on_demand", "reserved": "reserved"}


def _check_finite(option: Option) -> None:
    # The total too: lines each finite can add up past what a float holds.
    for line, value in [*option.lines.items(), ("total", option.per_useful_hour)]:
        if not math.isfinite(value):
            raise PlanError(
                _LINE_FIELDS.get(line, _PRICE_FIELDS[option.name]),
                f"too large: the {option.name} {line} per useful hour is not a finite number",
            )


def costs(timing: Timing, prices: Prices, interval_seconds: float) -> Costs:
    cost = overhead(timing, interval_seconds)
    spot = spot_option(timing, prices, cost)
    # Capacity that is not reclaimed pays only the tax of the same cadence.
    tax = checkpoint_tax(timing.checkpoint_seconds, interval_seconds)
    alternatives = []
    if prices.on_demand is not None:
        alternatives.append(
            steady_option("on-demand", prices.on_demand, prices, tax, interval_seconds)
        )
    if prices.reserved is not None:
        alternatives.append(
            steady_option(
                "reserved",
                prices.reserved / prices.reserved_utilization,
                prices,
                tax,
                interval_seconds,
            )
        )
    for option in [spot, *alternatives]:
        _check_finite(option)
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
        # Against a price of 0 (reserved hardware already paid for) no share is true: it
        # said "0% more"; against a price near it, the share overflowed: "inf% more".
        share = spot.per_useful_hour / best.per_useful_hour if best.per_useful_hour else math.inf
        if not math.isfinite((share - 1) * 100):
            extra = f"{spot.per_useful_hour - best.per_useful_hour:.4g} more per useful hour"
        elif share >= 10:
            # As a percentage, 1e300 against 3.9 printed 300 digits.
            extra = f"{share:.3g}x as much"
        else:
            extra = f"{share - 1:.0%} more"
        verdict = best.name
        summary = (
            f"{best.name}: {best.per_useful_hour:.4g} per useful hour; spot costs "
            f"{spot.per_useful_hour:.4g}, {extra}, once its overhead of "
            f"{cost.total:.1%} is paid"
        )
    return Costs(spot=spot, alternatives=alternatives, verdict=verdict, summary=summary)


__all__ = ["Costs", "Option", "costs", "spot_option", "steady_option"]
