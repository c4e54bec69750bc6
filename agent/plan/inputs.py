"""What `forewarn plan` is given: the job's timing and the prices, validated, with the
flag at fault named on bad values.

Every time is in seconds, every price in dollars (or any one currency) per hour unless named
otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from forewarn.clients.adaptive import SECONDS_PER_DAY, mtbi_from_rate
from forewarn.clients.overhead import (
    DEFAULT_DETECTION_SECONDS,
    DEFAULT_EXIT_MARGIN_SECONDS,
    DEFAULT_NO_NOTICE_SHARE,
    DRAIN_LEAD_SECONDS,
    NOTICE_ACTIONS,
    SPOT_LEAD_SECONDS,
    Scenario,
)
from forewarn.protocol.errors import UsageError

HOURS_PER_MONTH = 730.0


class PlanError(UsageError):
    """Input the plan cannot use; `field` names the flag or value at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _not_negative(name: str, value: float | None) -> None:
    """A time or a price: a finite number, not below zero (None: not given)."""
    if value is not None and (not math.isfinite(value) or value < 0):
        raise PlanError(name, f"must not be negative (got {value})")


@dataclass(frozen=True)
class Timing:
    """What the job and the capacity cost in time. Without `mtbi_seconds` only the
    checkpoint tax can be worked out."""

    # Mean (robust) seconds one checkpoint holds up training: the tax.
    checkpoint_seconds: float
    mtbi_seconds: float | None = None
    # A high quantile of the flush (with an upload, of the time until durable): does the
    # notice cover it? None: the mean, plus the upload when there is one.
    checkpoint_p95_seconds: float | None = None
    restore_seconds: float = 0.0
    restart_seconds: float = 0.0
    reacquire_seconds: float = 0.0
    detection_seconds: float = DEFAULT_DETECTION_SECONDS
    notice_lead_seconds: float | None = None
    # Measured seconds from a terminate notice to the saved checkpoint (p95); it replaces
    # detection + flush in deciding whether the notice covers the flush.
    response_seconds: float | None = None
    no_notice_share: float = DEFAULT_NO_NOTICE_SHARE
    steps_per_second: float | None = None
    max_interval_seconds: float = SECONDS_PER_DAY
    # How the notice reaches the job: `terminate` (save and exit at once, the machine waits,
    # billed, for the reclaim) or `drain` (save and train on; the agent sends the terminate
    # `exit_margin` before the deadline).
    notice_action: str = "terminate"
    exit_margin_seconds: float = DEFAULT_EXIT_MARGIN_SECONDS
    # A background save's upload, from the end of its stall until it is durable.
    upload_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "checkpoint_seconds",
            "checkpoint_p95_seconds",
            "restore_seconds",
            "restart_seconds",
            "reacquire_seconds",
            "detection_seconds",
            "notice_lead_seconds",
            "response_seconds",
            "exit_margin_seconds",
            "upload_seconds",
        ):
            _not_negative(name, getattr(self, name))
        if self.mtbi_seconds is not None and not (
            math.isfinite(self.mtbi_seconds) and self.mtbi_seconds > 0
        ):
            raise PlanError("mtbi_seconds", f"must be positive (got {self.mtbi_seconds})")
        if self.steps_per_second is not None and not self.steps_per_second > 0:
            raise PlanError("steps_per_second", f"must be positive (got {self.steps_per_second})")
        if not 0 <= self.no_notice_share <= 1:
            raise PlanError(
                "no_notice_share", f"must be a share from 0 to 100% (got {self.no_notice_share})"
            )
        if self.notice_action not in NOTICE_ACTIONS:
            raise PlanError(
                "notice_action", f"must be drain or terminate (got {self.notice_action!r})"
            )
        if not (math.isfinite(self.max_interval_seconds) and self.max_interval_seconds > 0):
            raise PlanError(
                "max_interval_seconds", f"must be positive (got {self.max_interval_seconds})"
            )

    @property
    def interruptions_per_day(self) -> float | None:
        return None if self.mtbi_seconds is None else SECONDS_PER_DAY / self.mtbi_seconds

    @property
    def flush_p95(self) -> float:
        p95 = self.checkpoint_p95_seconds
        if p95 is None:
            # A notice's save is kept once durable: its stall and then its upload. On the
            # stall alone a 30 s notice was taken to cover a 1 s stall and a 25 s upload, and
            # the interval planned for the share without notice (an independent simulation:
            # 3.26 % at the 120 s planned, 3.11 % at its best, 84 s).
            return self.flush_floor
        # Below the save's own floor it is not a p95 of that save (with an upload, most
        # likely the stall's alone): given as 10 s for a 2 s stall and a 25 s upload, a 30 s
        # notice was taken to cover a save durable 27 s after its stall began. The floor is
        # used and `warnings` names both (a measured p95 of skewed durations can fall there
        # too, so it is not refused).
        return max(p95, self.flush_floor)

    @property
    def flush_floor(self) -> float:
        """The least a notice's save takes until kept: the mean stall and the mean upload."""
        return self.checkpoint_seconds + self.upload_seconds

    @property
    def escalation_margin(self) -> float:
        """Seconds before the deadline at which the agent sends a drain as terminate."""
        return max(self.exit_margin_seconds, 2 * self.flush_p95)

    @property
    def terminate_lead_seconds(self) -> float | None:
        """The lead of the terminate the job exits on: the notice's own, or for a drain the
        escalation margin (a drain with less lead than that is sent as terminate at once)."""
        lead = self.notice_lead_seconds
        if lead is None or self.notice_action != "drain":
            return lead
        return min(lead, self.escalation_margin)

    @property
    def drains_first(self) -> bool:
        """The job saves on a drain and trains on before the terminate comes."""
        lead = self.notice_lead_seconds
        return self.notice_action == "drain" and lead is not None and lead > self.escalation_margin

    @property
    def notice_to_saved(self) -> float:
        """Seconds from a notice to the saved checkpoint: measured, else detection + p95."""
        if self.response_seconds is not None:
            return self.response_seconds
        return self.detection_seconds + self.flush_p95

    def scenario(self) -> Scenario:
        """The cost model of `forewarn.clients.overhead` (needs the interruption rate)."""
        if self.mtbi_seconds is None:
            raise PlanError("interruptions_per_day", "needed for the overhead")
        # A measured notice-to-saved time stands for detection + flush: the model's
        # detection is what is left of it once the slow flush is taken out.
        detection = self.detection_seconds
        flush = self.flush_p95
        if self.response_seconds is not None:
            detection = max(self.response_seconds - flush, 0.0)
            flush = self.response_seconds - detection
        return Scenario(
            checkpoint_seconds=self.checkpoint_seconds,
            mtbi_seconds=self.mtbi_seconds,
            restart_seconds=self.restart_seconds + self.restore_seconds,
            reacquire_seconds=self.reacquire_seconds,
            # A 2-hour drain was charged its whole lead as a billed wait after the save (9.1 %
            # overhead against 7.3 % with no notice at all); the job trains through it.
            notice_lead_seconds=self.terminate_lead_seconds or 0.0,
            detection_seconds=detection,
            no_notice_share=self.no_notice_share,
            flush_p95_seconds=flush,
            drain_first=self.drains_first,
            upload_seconds=self.upload_seconds,
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
            _not_negative(name, getattr(self, name))
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


def rate_to_mtbi(interruptions_per_day: float) -> float:
    try:
        mtbi = mtbi_from_rate(interruptions_per_day)
    except ValueError:
        raise PlanError(
            "interruptions_per_day", f"must be positive (got {interruptions_per_day})"
        ) from None
    # A rate so small that a day over it is infinite was blamed on --mtbi, never given.
    if not math.isfinite(mtbi):
        raise PlanError(
            "interruptions_per_day",
            f"{interruptions_per_day:g} a day is too small: the time between them has no end",
        )
    return mtbi


__all__ = [
    "DEFAULT_EXIT_MARGIN_SECONDS",
    "DRAIN_LEAD_SECONDS",
    "HOURS_PER_MONTH",
    "NOTICE_ACTIONS",
    "SPOT_LEAD_SECONDS",
    "PlanError",
    "Prices",
    "Timing",
    "rate_to_mtbi",
]
