"""A warning that repeats is said at most once per interval, with how many were held back.

A hostile or broken peer can cause the same warning thousands of times a second (refused
control requests, metrics connections past the cap, malformed events): the log or terminal
must say so without being flooded by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class WarningThrottle:
    """Counts occurrences; `due()` says when one may be reported again."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._held = 0
        self._said_at: float | None = None

    def due(self) -> int | None:
        """Count one occurrence. When a warning is due (the first, or the first after
        `interval`), return how many occurrences it covers, this one included, else None."""
        self._held += 1
        now = self.clock()
        if self._said_at is not None and now - self._said_at < self.interval:
            return None
        held, self._held, self._said_at = self._held, 0, now
        return held


class LineBudget:
    """A token bucket for log lines: at most `burst` at once and `rate` a second after that;
    counts the lines it held back until `held()` takes the count."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._held = 0
        self._held_since: float | None = None

    def take(self) -> bool:
        """Whether one more line may be logged now; one that may not is counted."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        if self._held == 0:
            self._held_since = now
        self._held += 1
        return False

    def held(self) -> tuple[int, float]:
        """How many lines were held back since the last call, and for how many seconds (0, 0.0
        when none); the count starts again from 0."""
        if self._held == 0 or self._held_since is None:
            return 0, 0.0
        held, since = self._held, self._held_since
        self._held, self._held_since = 0, None
        return held, self.clock() - since


__all__ = ["LineBudget", "WarningThrottle"]
