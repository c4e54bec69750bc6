"""The checkpoint interval that keeps expected overhead near its minimum, as flushes are measured.

Standard library only: it runs inside the training process. `CheckpointGuard(every="auto")`
feeds it each measured flush and asks it for the interval; `forewarn plan` uses the same
formulas.

- Young (1974), first order: tau = sqrt(2 C M).
- Daly (2006), higher order: for C < 2M,
  tau = sqrt(2 C M) * [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C; otherwise tau = M.

C is the seconds one checkpoint costs the job, M the mean time between interruptions.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

SECONDS_PER_DAY = 86400.0


def _positive(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds (got {value!r})")
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
    return SECONDS_PER_DAY / _positive("interruptions_per_day", interruptions_per_day)


class AdaptiveInterval:
    """The checkpoint interval for a configured interruption rate and measured flush times.

    The flush cost is the median of the last `window` measured flushes, so one slow upload
    moves the interval little. Before any flush is measured, `seconds` is `min_seconds`: an
    early first checkpoint is how the cost gets measured. The result is clamped to
    [`min_seconds`, `max_seconds`].
    """

    def __init__(
        self,
        *,
        interruptions_per_day: float | None = None,
        mtbi_seconds: float | None = None,
        formula: str = "daly",
        window: int = 9,
        min_seconds: float = 60.0,
        max_seconds: float = SECONDS_PER_DAY,
    ) -> None:
        if (interruptions_per_day is None) == (mtbi_seconds is None):
            raise ValueError("give exactly one of interruptions_per_day or mtbi_seconds")
        self.mtbi_seconds = (
            mtbi_from_rate(interruptions_per_day)
            if interruptions_per_day is not None
            else _positive("mtbi_seconds", mtbi_seconds)  # type: ignore[arg-type]
        )
        if formula not in ("daly", "young"):
            raise ValueError(f"formula must be 'daly' or 'young' (got {formula!r})")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive integer (got {window!r})")
        self.formula = formula
        self.min_seconds = _positive("min_seconds", min_seconds)
        self.max_seconds = _positive("max_seconds", max_seconds)
        if self.max_seconds < self.min_seconds:
            raise ValueError(
                f"max_seconds ({max_seconds}) must not be below min_seconds ({min_seconds})"
            )
        self._flushes: deque[float] = deque(maxlen=window)
        self._rates: deque[float] = deque(maxlen=window)

    def record_flush(self, seconds: float) -> None:
        """One measured checkpoint: the seconds it held up training."""
        self._flushes.append(_not_negative("flush seconds", seconds))

    def record_progress(self, steps: int, seconds: float) -> None:
        """`steps` training steps took `seconds` (without the checkpoint): measures steps/s."""
        if not isinstance(steps, int) or steps <= 0:
            return
        self._rates.append(steps / _positive("progress seconds", seconds))

    @property
    def flush_seconds(self) -> float | None:
        """The flush cost in use: the median of the recent measurements, None before any."""
        return median(self._flushes) if self._flushes else None

    @property
    def steps_per_second(self) -> float | None:
        """The measured training speed, None before any `record_progress`."""
        return median(self._rates) if self._rates else None

    @property
    def seconds(self) -> float:
        """Seconds of training between checkpoints."""
        cost = self.flush_seconds
        if cost is None:
            return self.min_seconds
        rule = daly_interval if self.formula == "daly" else young_interval
        return min(self.max_seconds, max(self.min_seconds, rule(cost, self.mtbi_seconds)))

    def steps(self, steps_per_second: float | None = None) -> int | None:
        """The interval in steps at `steps_per_second` (else the measured speed); None when
        no speed is known. At least one step."""
        rate = steps_per_second if steps_per_second is not None else self.steps_per_second
        if rate is None:
            return None
        return max(1, round(self.seconds * _positive("steps_per_second", rate)))


__all__ = [
    "AdaptiveInterval",
    "daly_interval",
    "interval_for_tax",
    "mtbi_from_rate",
    "young_interval",
]
