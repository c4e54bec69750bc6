"""The expected overhead of periodic checkpoints, exactly, with and without a usable notice.

Standard library only: `AdaptiveInterval` runs it inside the training process and
`forewarn plan` prints it. Every time is in seconds.

The job works τ seconds, then checkpoints for C seconds, and so on. Interruptions arrive as a
Poisson process on the wall clock (mean time between them M, rate λ = 1/M): during work,
during a checkpoint, during a restart. A share q comes without a usable notice and kills the
machine at once; the rest come with a notice L seconds before the machine goes.

- **Without a usable notice** the work since the last completed checkpoint is lost, then the
  job restarts (R seconds, restart plus reload, itself open to interruptions). With L = 0 or
  q = 1 this is Daly's complete model: overhead = (M/τ)·e^{R/M}·(e^{(τ+C)/M} - 1) - 1.
- **With a usable notice** (L ≥ detection + the flush, its 95th percentile where measured):
  the job keeps working through the detection delay D, flushes (C; a periodic checkpoint
  already under way or due first serves as the flush), then waits, billed, for the reclaim at
  L, then restarts. Nothing is lost; the flush, the idle tail L - D - C and the restart are
  the cost, and the interrupted interval's work is checkpointed once, not twice.
- **A notice too short for the flush** is not acted on: the job trains on until the machine
  goes L later and loses what no periodic checkpoint saved by then.
- **A background save** (stall C, durable W seconds after training resumes): an
  interruption without a usable notice within W of a completed checkpoint loses the interval
  before it too.
- Further notices during a notice's lead window are the same reclaim and do nothing; a notice
  during a restart abandons it (the restart starts over once the machine is replaced);
  capacity comes back `reacquire` seconds after each loss (wall clock, not billed).

The renewal argument (one cycle: from a fresh checkpoint to the next, or to the restart
after an interruption) gives the expected time T and progress U per cycle in closed form;
overhead = T/U - 1, split exactly into its parts. `best_interval` minimizes it numerically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Interruptions without a usable notice, as a share of all, when nothing better is known.
# They are what periodic checkpoints insure against once notices are acted on: crashes,
# host failures, kernel panics, a notice lost while the agent was down. Spot reclaims with
# notice dominate a spot job's interruptions; one in ten without is on the safe side (a
# larger share only moves the interval toward Daly's at the full rate, which costs a little
# tax; a smaller one risks long rework).
DEFAULT_NO_NOTICE_SHARE = 0.1
DEFAULT_DETECTION_SECONDS = 5.0
# The agent's floor of the margin before a deadline at which a drain is sent as terminate
# (`exit_margin`); the margin is the larger of it and twice the slowest flush.
DEFAULT_EXIT_MARGIN_SECONDS = 30.0
# A notice lead over this is taken as a drain with a deadline (DigitalOcean's reclaim mail,
# about 2 h; GCP's host maintenance, 60 min; AWS scheduled maintenance, days). It is the
# longest lead a provider publishes as terminate: Azure's scale-set Terminate, whose
# notBeforeTimeout is PT5M to PT15M (a 10-minute lead was planned as a drain, where the job
# in fact exits at once and the machine waits 10 billed minutes). Azure's Reboot and Redeploy
# (10-15 min) come as drains too, but within it: `notice_action="drain"` says so.
DRAIN_LEAD_SECONDS = 900.0
# The longest spot reclaim lead (AWS 2 min; GCP and Azure 30 s): up to it a terminate for sure.
SPOT_LEAD_SECONDS = 300.0
NOTICE_ACTIONS = ("drain", "terminate")


def _check(name: str, value: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number (got {value!r})")
    if value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be {'positive' if positive else 'zero or more'} (got {value!r})"
        )
    return float(value)


@dataclass(frozen=True)
class Scenario:
    """What the job and the capacity cost in time."""

    checkpoint_seconds: float  # C: mean seconds one checkpoint holds up training
    mtbi_seconds: float  # M: mean wall-clock seconds between interruptions of any kind
    restart_seconds: float = 0.0  # R: from new capacity to training again (restart + reload)
    reacquire_seconds: float = 0.0  # wait for capacity after a loss (wall clock, unbilled)
    notice_lead_seconds: float = 0.0  # L: notice before the machine goes (0: none)
    detection_seconds: float = DEFAULT_DETECTION_SECONDS  # D: notice to the start of the flush
    no_notice_share: float = DEFAULT_NO_NOTICE_SHARE  # q: share without a usable notice
    # The flush the notice must cover (a high quantile); None: the mean.
    flush_p95_seconds: float | None = field(default=None)
    # The notice came as a drain with a deadline: the job saved on it at once and trained
    # on, and `notice_lead_seconds` is the lead of the terminate the agent sent later
    # (deadline - exit margin). That first save is one more flush per notice.
    drain_first: bool = False
    # W: a background save's upload, from the end of its stall (training resumes) until the
    # checkpoint is durable. An interruption without a usable notice in that window loses
    # the interval before it too (a 2 s stall and a 600 s upload at four interruptions a
    # day: 5.87 % was planned, where a simulation gives 8.8 %). 0: durable once the stall ends.
    upload_seconds: float = 0.0

    def __post_init__(self) -> None:
        _check("checkpoint_seconds", self.checkpoint_seconds)
        _check("mtbi_seconds", self.mtbi_seconds, positive=True)
        _check("restart_seconds", self.restart_seconds)
        _check("reacquire_seconds", self.reacquire_seconds)
        _check("notice_lead_seconds", self.notice_lead_seconds)
        _check("detection_seconds", self.detection_seconds)
        _check("upload_seconds", self.upload_seconds)
        if not 0 <= _check("no_notice_share", self.no_notice_share) <= 1:
            raise ValueError(f"no_notice_share must be in [0, 1] (got {self.no_notice_share})")
        if self.flush_p95_seconds is not None:
            _check("flush_p95_seconds", self.flush_p95_seconds)

    @property
    def notice_needs_seconds(self) -> float:
        """From the notice to a saved checkpoint: detection plus the flush (its p95)."""
        flush = self.flush_p95_seconds
        return self.detection_seconds + (self.checkpoint_seconds if flush is None else flush)

    @property
    def notice_usable(self) -> bool:
        """The notice covers detection and the flush (and there is a notice at all)."""
        lead = self.notice_lead_seconds
        return lead > 0 and lead >= self.notice_needs_seconds

    @property
    def effective_no_notice_share(self) -> float:
        """The share of interruptions that cost lost work: all of them when the notice
        cannot be used."""
        return self.no_notice_share if self.notice_usable else 1.0

    def without_notice(self) -> Scenario:
        """The same job with no usable notice at all (Daly's complete model)."""
        return Scenario(
            checkpoint_seconds=self.checkpoint_seconds,
            mtbi_seconds=self.mtbi_seconds,
            restart_seconds=self.restart_seconds,
            reacquire_seconds=self.reacquire_seconds,
            notice_lead_seconds=0.0,
            detection_seconds=self.detection_seconds,
            no_notice_share=1.0,
            upload_seconds=self.upload_seconds,
        )


@dataclass(frozen=True)
class Breakdown:
    """Overhead at one interval, each part a share of useful time; they add up to `total`."""

    interval_seconds: float
    checkpoint_tax: float  # completed periodic checkpoints
    lost_work: float  # work (and checkpoint time) thrown away, unusable lead windows
    notice_flush: float  # the flush a usable notice triggers
    notice_idle: float  # billed wait from the saved flush to the reclaim
    restart: float  # restart and reload, repeated restarts included
    reacquire: float  # waiting for capacity (wall clock, unbilled)
    interruptions_per_useful_second: float

    @property
    def total(self) -> float:
        return (
            self.checkpoint_tax
            + self.lost_work
            + self.notice_flush
            + self.notice_idle
            + self.restart
            + self.reacquire
        )

    @property
    def billed(self) -> float:
        """What paid capacity spends on anything but progress."""
        return self.total - self.reacquire

    @property
    def per_interruption_seconds(self) -> float:
        """Seconds one interruption costs on average: everything but the periodic tax."""
        rate = self.interruptions_per_useful_second
        # The parts summed, not total - tax: a tax of 1e-4 swallowed a lost work of 1e-301.
        cost = self.lost_work + self.notice_flush + self.notice_idle + self.restart
        return (cost + self.reacquire) / rate if rate > 0 else 0.0


def _tail_over(y: float) -> float:
    """(1 - e^{-y} - y·e^{-y}) / y, accurate for small y: y² underflowed to 0 below 1e-154
    (an interruption in 1e300 days lost no work)."""
    if y < 1e-4:
        return y / 2 - y * y / 3
    return (-math.expm1(-y) - y * math.exp(-y)) / y


class _Exp:
    """Integrals against the density λ·e^{-λx} of the first interruption."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def p(self, u: float, v: float) -> float:
        """∫_u^v λe^{-λx} dx."""
        if v <= u:
            return 0.0
        return math.exp(-self.rate * u) * -math.expm1(-self.rate * (v - u))

    def x(self, u: float, v: float) -> float:
        """∫_u^v x·λe^{-λx} dx."""
        if v <= u:
            return 0.0
        d = v - u
        return math.exp(-self.rate * u) * (
            u * -math.expm1(-self.rate * d) + d * _tail_over(self.rate * d)
        )


def breakdown(scenario: Scenario, interval_seconds: float) -> Breakdown:
    """The expected overhead at `interval_seconds` of work between checkpoints."""
    # A periodic save due while the last one is still uploading waits for it, training on
    # (`clients/guard_background.py`): saves come at most once per upload.
    tau = max(_check("interval_seconds", interval_seconds, positive=True), scenario.upload_seconds)
    c = scenario.checkpoint_seconds
    lam = 1.0 / scenario.mtbi_seconds
    r = scenario.restart_seconds
    lead = scenario.notice_lead_seconds
    d = scenario.detection_seconds
    q = scenario.no_notice_share
    noticed = 1.0 - q
    s = tau + c
    # e^700 is near the float limit. A restart that long against M never completes; an
    # interval that long keeps no work unless notices save it (then the cycle ends in a
    # notice almost surely, and the terms below stay finite).
    if lam * r > 700 or (lam * s > 700 and not (noticed > 0 and lead > 0)):
        return _never_kept(tau)
    e = _Exp(lam)
    hit = e.p(0, s)  # the cycle ends in an interruption
    done = math.exp(-lam * s)
    # Restart phase: attempts until one runs R seconds uninterrupted; a notice during it costs
    # its lead window too. Expected failed attempts: e^{λR} - 1.
    failed = math.expm1(lam * r)
    restart_time = hit * (failed / lam + failed * noticed * lead)
    losses = hit * (1.0 + failed)
    reacquire_time = losses * scenario.reacquire_seconds
    # What the cycle's interruptions throw away before a notice saves any of it (∫_0^s x dF)
    # and the lead windows: the cycle's time, hit/λ + hit·(1-q)·L, less the s·e^{-λs} of a
    # cycle that completes. Taken as that difference, it cancelled to 0 where λs is below the
    # float's precision ("one interruption costs 0 s" at 1e-300 interruptions a day). Nor
    # does it hold the restart and reacquisition: subtracted again, they swamped the lost
    # work (a restart of e^54 s against M left it -7e9 % in rounding error).
    lost = e.x(0, s) + hit * noticed * lead
    tax = c * done
    flush = idle = 0.0
    progress = tau * done
    if noticed > 0 and lead > 0:
        if scenario.notice_usable:
            a = max(tau - d, 0.0)
            # Before a: work D more, flush. Between a and τ: the periodic checkpoint is the
            # flush. During a checkpoint: it completes. Then wait for the reclaim.
            saved = e.x(0, a) + d * e.p(0, a) + tau * e.p(a, s)
            flush = noticed * c * e.p(0, tau)
            tax_noticed = noticed * c * e.p(tau, s)
            if scenario.drain_first:
                # The drain's save, made while the job trained on towards the terminate: as
                # much time as flush, so nothing lost.
                flush += noticed * c * hit
            idle = noticed * (
                (lead - d - c) * e.p(0, a)
                + (lead - tau - c) * e.p(a, tau)
                + e.x(a, tau)
                + (lead - s) * e.p(tau, s)
                + e.x(tau, s)
            )
        else:
            # Training goes on through the lead; what periodic checkpoints are durable by
            # the reclaim is kept: one finished at k·s is durable W later, so floor((x + L -
            # W)/s) of them for a notice at x. Counted as kept once finished, a 1 s stall
            # and a 25 s upload behind GCP's 30 s notice read 2.75 % at 84 s where a
            # simulation gives 3.11 %. (Their stall time is then lost work, not tax.)
            whole, rest = divmod(max(lead - scenario.upload_seconds, 0.0), s)
            completed = whole * hit + e.p(s - rest, s)
            saved = tau * completed
            tax_noticed = noticed * c * completed
        progress += noticed * saved
        tax += tax_noticed
        drain_save = noticed * c * hit if scenario.notice_usable and scenario.drain_first else 0.0
        lost -= noticed * saved + tax_noticed + flush - drain_save + idle
    # A cycle that follows a completed one starts with that checkpoint still uploading for
    # W (within the interval: see tau). An interruption in it that no notice saves rolls
    # back to the checkpoint before: the previous interval's work, counted as progress when
    # its cycle completed, is lost.
    # One cycle completes with probability e^{-λs} whatever came before, so that is the
    # share of cycles that begin with an upload. A notice too short to save on loses it
    # only if the machine goes before the upload ends.
    window = scenario.upload_seconds
    if window > 0:
        if noticed > 0 and lead > 0:
            unsaved = q * e.p(0, window)
            if not scenario.notice_usable:
                unsaved += noticed * e.p(0, max(window - lead, 0.0))
        else:
            unsaved = e.p(0, window)
        rolled_back = done * tau * unsaved
        progress -= rolled_back
        lost += rolled_back
    if not progress > 0:  # an interval so long that no work is ever kept
        return _never_kept(tau)
    restart = restart_time
    rest_total = lost
    parts = Breakdown(
        interval_seconds=tau,
        checkpoint_tax=tax / progress,
        lost_work=rest_total / progress,
        notice_flush=flush / progress,
        notice_idle=idle / progress,
        restart=restart / progress,
        reacquire=reacquire_time / progress,
        interruptions_per_useful_second=losses / progress,
    )
    # Work kept so rarely (a notice too short to use, an interval far beyond M: progress near
    # 1e-259 s a cycle) that the ratios overflow, and inf - inf made the total NaN.
    if not math.isfinite(parts.total):
        return _never_kept(tau)
    return parts


def _never_kept(tau: float) -> Breakdown:
    """An interval at which (as good as) no work is ever kept: infinite overhead."""
    return Breakdown(tau, math.inf, math.inf, 0.0, 0.0, math.inf, 0.0, math.inf)


def overhead(scenario: Scenario, interval_seconds: float) -> float:
    """Expected wall-clock overhead at the interval, a share of useful time (0.05: 5 %)."""
    return breakdown(scenario, interval_seconds).total


def daly_complete(scenario: Scenario, interval_seconds: float) -> float:
    """Daly's complete model, (M/τ)·e^{R/M}·(e^{(τ+C)/M} - 1) - 1: every interruption
    without a usable notice, no wait for capacity."""
    tau = _check("interval_seconds", interval_seconds, positive=True)
    m = scenario.mtbi_seconds
    if max(scenario.restart_seconds, tau + scenario.checkpoint_seconds) / m > 700:
        return math.inf
    return (
        m
        / tau
        * math.exp(scenario.restart_seconds / m)
        * math.expm1((tau + scenario.checkpoint_seconds) / m)
        - 1.0
    )


def best_interval(
    scenario: Scenario, *, min_seconds: float | None = None, max_seconds: float = 86400.0
) -> float:
    """The interval that minimizes the expected overhead, within [min_seconds, max_seconds].

    A log-spaced scan brackets the minimum, golden-section search refines it. With every
    interruption noticed in time (q = 0) the overhead only falls as the interval grows: the
    answer is then `max_seconds`, the longest the caller accepts.
    """
    c = scenario.checkpoint_seconds
    if c <= 0:
        raise ValueError("a checkpoint that costs 0 s has no optimal interval")
    high = _check("max_seconds", max_seconds, positive=True)
    low = min(high, c / 100.0 if min_seconds is None else _check("min_seconds", min_seconds))
    # Below the upload every interval is the upload's (see `breakdown`).
    low = min(high, max(low, 1e-9, scenario.upload_seconds))
    if high <= low:
        return high
    points = 41
    step = math.log(high / low) / (points - 1)
    grid = [low * math.exp(step * index) for index in range(points)]
    values = [overhead(scenario, tau) for tau in grid]
    best = min(range(points), key=values.__getitem__)
    left = math.log(grid[max(best - 1, 0)])
    right = math.log(grid[min(best + 1, points - 1)])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    x1 = right - ratio * (right - left)
    x2 = left + ratio * (right - left)
    f1 = overhead(scenario, math.exp(x1))
    f2 = overhead(scenario, math.exp(x2))
    for _ in range(40):
        if f1 <= f2:
            right, x2, f2 = x2, x1, f1
            x1 = right - ratio * (right - left)
            f1 = overhead(scenario, math.exp(x1))
        else:
            left, x1, f1 = x1, x2, f2
            x2 = left + ratio * (right - left)
            f2 = overhead(scenario, math.exp(x2))
    found = math.exp((left + right) / 2.0)
    return found if overhead(scenario, found) <= values[best] else grid[best]


__all__ = [
    "DEFAULT_DETECTION_SECONDS",
    "DEFAULT_EXIT_MARGIN_SECONDS",
    "DEFAULT_NO_NOTICE_SHARE",
    "DRAIN_LEAD_SECONDS",
    "NOTICE_ACTIONS",
    "SPOT_LEAD_SECONDS",
    "Breakdown",
    "Scenario",
    "best_interval",
    "breakdown",
    "daly_complete",
    "overhead",
]
