"""Checkpoint economics behind `forewarn plan`: how often to checkpoint, what interruptions
cost with and without a usable notice, and whether spot capacity pays.

One job per module: `inputs` (the job's timing and prices, validated), `sizes` (checkpoint
sizes, bandwidths, the estimate from the parameter count), `telemetry` (what the agent's
telemetry measured), `model` (intervals, overhead, warnings; the exact model itself is
`forewarn.clients.overhead`), `costs` (dollars per useful hour), `table` and `plot`
(rendering), `cli` (the command). Importing this package loads neither the CLI nor
matplotlib.
"""

from __future__ import annotations

from .costs import Costs, Option, costs, spot_option, steady_option
from .inputs import HOURS_PER_MONTH, PlanError, Prices, Timing, rate_to_mtbi
from .model import (
    DEFAULT_WARN_TAX,
    RULE_OF_THUMB_TAX,
    Intervals,
    Notice,
    NoticeWorth,
    ReclaimLoss,
    checkpoint_tax,
    choose_interval,
    daly_interval,
    interruption_share,
    interval_for_tax,
    notice,
    notice_worth,
    overhead,
    overhead_without_notice,
    reclaim_loss,
    recommended_interval,
    warnings,
    young_interval,
)
from .sizes import SizeEstimate, parse_bandwidth, parse_count, parse_size
from .telemetry import TelemetrySummary, summarize_telemetry

__all__ = [
    "DEFAULT_WARN_TAX",
    "HOURS_PER_MONTH",
    "RULE_OF_THUMB_TAX",
    "Costs",
    "Intervals",
    "Notice",
    "NoticeWorth",
    "Option",
    "PlanError",
    "Prices",
    "ReclaimLoss",
    "SizeEstimate",
    "TelemetrySummary",
    "Timing",
    "checkpoint_tax",
    "choose_interval",
    "costs",
    "daly_interval",
    "interruption_share",
    "interval_for_tax",
    "notice",
    "notice_worth",
    "overhead",
    "overhead_without_notice",
    "parse_bandwidth",
    "parse_count",
    "parse_size",
    "rate_to_mtbi",
    "reclaim_loss",
    "recommended_interval",
    "spot_option",
    "steady_option",
    "summarize_telemetry",
    "warnings",
    "young_interval",
]
