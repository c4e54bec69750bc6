"""The checkpoint interval that keeps expected overhead near its minimum, as flushes are measured.

Standard library only: it runs inside the training process. `CheckpointGuard(every="auto")`
feeds it each measured flush (and a background save's upload) and asks it for the interval;
`forewarn plan` uses the same model (`forewarn.clients.overhead`) and recommends the interval
this converges to.

- Young (1974), first order: tau = sqrt(2 C M).
- Daly (2006), higher order: for C < 2M,
  tau = sqrt(2 C M) * [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C; otherwise tau = M.

C is the seconds one checkpoint costs the job, M the mean time between interruptions.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from statistics import median

from .overhead import (
    DEFAULT_DETECTION_SECONDS,
    DEFAULT_EXIT_MARGIN_SECONDS,
    DEFAULT_NO_NOTICE_SHARE,
    DRAIN_LEAD_SECONDS,
    NOTICE_ACTIONS,
    Scenario,
    best_interval,
)

SECONDS_PER_DAY = 86400.0
# A flush counts at most this many times the median in the mean (robust_mean).
DEFAULT_CLIP = 20.0


def _positive(name: str, value: float, unit: str = "seconds") -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number ({unit}; got {value!r})")
    return float(value)


def _not_negative(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must not be negative (got {value!r})")
    return float(value)


def young_interval(checkpoint_seconds: float, mtbi_seconds: float) -> float:
    """Young's first-order optimum, sqrt(2 C M), in seconds of work between checkpoints."""
    c = _not_negative("checkpoint_seconds", checkpoint_seconds)
    m = _positive("mtbi_seconds", mtbi_seconds)
    return math.sqrt(2.0 * c * m)


def daly_interval(checkpoint_seconds: float, mtbi_seconds: float) -> float:
    """Daly's higher-order optimum; M itself once a checkpoint costs 2M or more."""
    c = _not_negative("checkpoint_seconds", checkpoint_seconds)
    m = _positive("mtbi_seconds", mtbi_seconds)
    if c >= 2.0 * m:
        return m
    ratio = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - c


def interval_for_tax(checkpoint_seconds: float, tax: float) -> float:
    """The interval at which checkpoints cost `tax` (a fraction: 0.03 is 3 %) of compute."""
    c = _not_negative("checkpoint_seconds", checkpoint_seconds)
    if not isinstance(tax, (int, float)) or not math.isfinite(tax) or not 0 < tax < 1:
        raise ValueError(f"tax must be a fraction between 0 and 1, e.g. 0.03 (got {tax!r})")
    return c / tax


def mtbi_from_rate(interruptions_per_day: float) -> float:
    """Mean seconds between interruptions for a rate per day."""
    return SECONDS_PER_DAY / _positive(
        "interruptions_per_day", interruptions_per_day, "interruptions a day"
    )


def robust_mean(values: Sequence[float], clip: float = DEFAULT_CLIP) -> float:
    """The mean, with each value counted at most `clip` times the median: a hung upload
    cannot drag it far, while a second mode (one flush in three at 10x) counts in full."""
    if not values:
        raise ValueError("robust_mean of no values")
    cap = clip * median(values)
    return sum(min(value, cap) for value in values) / len(values)


def quantile(values: Sequence[float], share: float) -> float:
    """The `share` quantile (0.95: p95), linear between order statistics."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class AdaptiveInterval:
    """The checkpoint interval for the configured interruptions and the measured flushes.

    With `formula="exact"` (the default) it is the interval that minimizes the expected
    overhead of `forewarn.clients.overhead` (the one `forewarn plan` recommends) for the
    robust mean of the last `window` flushes, the notice lead (if any) and the share of
    interruptions that come without a usable notice; whether the notice covers a flush is
    judged on the flushes' 95th percentile. `"daly"` and `"young"` use those closed forms at
    the full interruption rate. Before any flush is measured, `seconds` is `min_seconds`: an
    early first checkpoint is how the cost gets measured. The result is clamped to
    [`min_seconds`, `max_seconds`], and is never shorter than the upload W of a background
    save (`upload_seconds`, else the robust mean of the recorded uploads; 0 before any).
    """

    def __init__(
        self,
        *,
        interruptions_per_day: float | None = None,
        mtbi_seconds: float | None = None,
        restart_seconds: float = 0.0,
        notice_lead_seconds: float = 0.0,
        detection_seconds: float = DEFAULT_DETECTION_SECONDS,
        no_notice_share: float = DEFAULT_NO_NOTICE_SHARE,
        notice_action: str | None = None,
        exit_margin_seconds: float = DEFAULT_EXIT_MARGIN_SECONDS,
        formula: str = "exact",
        window: int = 32,
        clip: float = DEFAULT_CLIP,
        min_seconds: float = 60.0,
        max_seconds: float = SECONDS_PER_DAY,
        upload_seconds: float | None = None,
    ) -> None:
        if (interruptions_per_day is None) == (mtbi_seconds is None):
            raise ValueError("give exactly one of interruptions_per_day or mtbi_seconds")
        self.mtbi_seconds = (
            mtbi_from_rate(interruptions_per_day)
            if interruptions_per_day is not None
            else _positive("mtbi_seconds", mtbi_seconds)  # type: ignore[arg-type]
        )
        if isinstance(notice_lead_seconds, bool) or not isinstance(
            notice_lead_seconds, (int, float)
        ):
            # Compared below before Scenario checks it: a string from an environment variable
            # raised a TypeError that named no parameter.
            raise ValueError(
                f"notice_lead_seconds must be a number of seconds (got {notice_lead_seconds!r})"
            )
        if notice_action is None:
            # As `forewarn plan` takes a lead it is given: no provider publishes a terminate
            # that far ahead.
            notice_action = "drain" if notice_lead_seconds > DRAIN_LEAD_SECONDS else "terminate"
        if notice_action not in NOTICE_ACTIONS:
            raise ValueError(
                f"notice_action must be 'drain' or 'terminate' (got {notice_action!r})"
            )
        self.notice_action = notice_action
        self.exit_margin_seconds = _not_negative("exit_margin_seconds", exit_margin_seconds)
        if formula not in ("exact", "daly", "young"):
            raise ValueError(f"formula must be 'exact', 'daly' or 'young' (got {formula!r})")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer (got {window!r})")
        if not isinstance(clip, (int, float)) or not math.isfinite(clip) or clip < 1:
            raise ValueError(f"clip must be a number of at least 1 (got {clip!r})")
        self.formula = formula
        self.clip = float(clip)
        self.min_seconds = _positive("min_seconds", min_seconds)
        self.max_seconds = _positive("max_seconds", max_seconds)
        if self.max_seconds < self.min_seconds:
            raise ValueError(
                f"max_seconds ({max_seconds}) must not be below min_seconds ({min_seconds})"
            )
        # Validates the rest (names the parameter at fault) before any flush is measured.
        self._base = Scenario(
            checkpoint_seconds=0.0,
            mtbi_seconds=self.mtbi_seconds,
            restart_seconds=restart_seconds,
            notice_lead_seconds=notice_lead_seconds,
            detection_seconds=detection_seconds,
            no_notice_share=no_notice_share,
        )
        # A caller's W is fixed; None: learned from `record_upload`, as the plan takes
        # the telemetry's durable less stall.
        self._fixed_upload = (
            None if upload_seconds is None else _not_negative("upload_seconds", upload_seconds)
        )
        self._uploads: deque[float] = deque(maxlen=window)
        self._flushes: deque[float] = deque(maxlen=window)
        self._rates: deque[float] = deque(maxlen=window)
        self._cached: tuple[tuple[float, float, float], float] | None = None

    def record_flush(self, seconds: float) -> None:
        """One measured checkpoint: the seconds it held up training."""
        self._flushes.append(_not_negative("flush seconds", seconds))

    def record_upload(self, seconds: float) -> None:
        """One background save's upload: the seconds from the end of its stall (the flush
        `record_flush` got) until it was durable. An interruption without a usable notice
        in that window loses the interval before it too."""
        self._uploads.append(_not_negative("upload seconds", seconds))

    @property
    def upload_seconds(self) -> float:
        """W in use: the caller's, else the robust mean of the recent uploads, else 0."""
        if self._fixed_upload is not None:
            return self._fixed_upload
        return robust_mean(self._uploads, self.clip) if self._uploads else 0.0

    def record_progress(self, steps: int, seconds: float) -> None:
        """`steps` training steps took `seconds` (without the checkpoint): measures steps/s."""
        if not isinstance(steps, int) or steps <= 0:
            return
        self._rates.append(steps / _positive("progress seconds", seconds))

    @property
    def flush_seconds(self) -> float | None:
        """The flush cost in use: the robust mean of the recent flushes, None before any."""
        return robust_mean(self._flushes, self.clip) if self._flushes else None

    @property
    def flush_p95_seconds(self) -> float | None:
        """The 95th percentile of the recent flushes (does a notice cover the flush?)."""
        return quantile(self._flushes, 0.95) if self._flushes else None

    @property
    def save_p95_seconds(self) -> float | None:
        """What a notice's save takes until it is kept: the flushes' 95th percentile, plus
        the uploads' (or the given `upload_seconds`) for a background save, which is kept
        once durable, and at least the mean stall plus upload. None before any flush."""
        p95 = self.flush_p95_seconds
        cost = self.flush_seconds
        if p95 is None or cost is None:
            return None
        if self._fixed_upload is not None:
            p95 += self._fixed_upload
        else:
            p95 += quantile(self._uploads, 0.95) if self._uploads else 0.0
        # Never below the mean stall and upload, as the plan takes it (`Timing.flush_p95`):
        # one slow flush in 40 puts the robust mean above the p95, and a lead between the
        # two read usable here and not in the plan.
        return max(p95, cost + self.upload_seconds)

    @property
    def scenario(self) -> Scenario | None:
        """The cost model for the flushes measured so far, None before any."""
        cost = self.flush_seconds
        if cost is None:
            return None
        # Judged on the stall alone, a 30 s notice was taken to cover a 1 s stall and a
        # 25 s upload: 120 s was chosen where an independent simulation puts the best at
        # 84 s (3.26 % against 3.11 %).
        p95 = self.save_p95_seconds
        scenario = replace(
            self._base,
            checkpoint_seconds=cost,
            flush_p95_seconds=p95,
            upload_seconds=self.upload_seconds,
        )
        lead = scenario.notice_lead_seconds
        if self.notice_action != "drain" or lead <= 0:
            return scenario
        # A drain is saved on and trained through: what the job waits out is the terminate
        # the agent sends at the exit margin before the deadline, not the whole lead (a
        # 2-hour lead was counted as 2 billed hours a reclaim, where the plan counts the
        # margin). The margin is the agent's: the larger of its floor and twice the flush.
        margin = max(self.exit_margin_seconds, 2.0 * max(p95 or 0.0, cost))
        return replace(scenario, notice_lead_seconds=min(lead, margin), drain_first=lead > margin)

    @property
    def steps_per_second(self) -> float | None:
        """The measured training speed, None before any `record_progress`."""
        return median(self._rates) if self._rates else None

    @property
    def seconds(self) -> float:
        """Seconds of training between checkpoints."""
        scenario = self.scenario
        if scenario is None or scenario.checkpoint_seconds <= 0:
            return self.min_seconds
        cost = scenario.checkpoint_seconds
        if self.formula == "exact":
            key = (cost, scenario.flush_p95_seconds or 0.0, scenario.upload_seconds)
            if self._cached is None or self._cached[0] != key:
                found = best_interval(
                    scenario, min_seconds=self.min_seconds, max_seconds=self.max_seconds
                )
                self._cached = (key, found)
            value = self._cached[1]
        elif self.formula == "daly":
            value = daly_interval(cost, self.mtbi_seconds)
        else:
            value = young_interval(cost, self.mtbi_seconds)
        # A save due while the last one uploads waits for it (`breakdown` counts it so): an
        # interval below W is never what the job gets, so it is not recommended (not even
        # under `max_seconds`).
        return max(scenario.upload_seconds, min(self.max_seconds, max(self.min_seconds, value)))

    def steps(self, steps_per_second: float | None = None) -> int | None:
        """The interval in steps at `steps_per_second` (else the measured speed); None when
        no speed is known. At least one step."""
        rate = steps_per_second if steps_per_second is not None else self.steps_per_second
        if rate is None:
            return None
        return max(1, round(self.seconds * _positive("steps_per_second", rate, "steps a second")))


__all__ = [
    "DEFAULT_CLIP",
    "AdaptiveInterval",
    "daly_interval",
    "interval_for_tax",
    "mtbi_from_rate",
    "quantile",
    "robust_mean",
    "young_interval",
]
