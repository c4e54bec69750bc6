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


__all__ = ["WarningThrottle"]
