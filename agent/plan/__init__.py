"""Checkpoint economics behind `forewarn plan`: how often to checkpoint, what interruptions
cost, and whether spot capacity pays.

One job per module: `inputs` (the job's timing and prices, validated), `telemetry` (what
the agent's telemetry measured), `model` (intervals and overhead), `costs` (dollars per
useful hour), `table` and `plot` (rendering), `cli` (the command). Importing this package
loads neither the CLI nor matplotlib.
"""

from __future__ import annotations

from .costs import Costs, Option, costs, spot_option, steady_option
from .inputs import HOURS_PER_MONTH, PlanError, Prices, Timing, rate_to_mtbi
from .model import (
    Intervals,
    LostWork,
    Model,
    Overhead,
    checkpoint_tax,
    choose_interval,
    daly_interval,
    interruption_share,
    interval_for_tax,
    lost_work,
    overhead,
    periodic_lost_work,
    young_interval,
)
from .telemetry import TelemetrySummary, summarize_telemetry

__all__ = [
    "HOURS_PER_MONTH",
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
    "spot_option",
    "steady_option",
    "summarize_telemetry",
    "young_interval",
]
