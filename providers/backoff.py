"""Backoff with jitter, the one implementation every watcher and the agent's supervisor use.

Waits double from `first` up to `ceiling`; each is spread by up to `jitter` (a fraction) either
way, so that many agents restarted together (a fleet after a metadata outage) do not retry in
lockstep, but never past `ceiling`: callers document it as the longest wait (AWS's 5 s of the
two-minute notice, Azure's 1.25 intervals, DigitalOcean's and Kubernetes' `retry_max`), and
at the ceiling a spread downward alone still breaks the lockstep.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# 2**64 times any first wait is past every ceiling; stopping the count there keeps the
# arithmetic finite however long an endpoint stays down.
_MAX_DOUBLINGS = 64


class Backoff:
    """Successive waits after failures: `next()` after each failure, `reset()` after a
    success."""

    def __init__(
        self,
        first: float,
        ceiling: float,
        *,
        jitter: float = 0.2,
        factor: float = 2.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if not (first > 0 and ceiling > 0):
            raise ValueError(f"backoff: waits must be positive, got {first} and {ceiling}")
        if not 0 <= jitter < 1:
            raise ValueError(f"backoff: jitter is a fraction in [0, 1), got {jitter}")
        if factor < 1:
            raise ValueError(f"backoff: factor must be at least 1, got {factor}")
        self.first = min(first, ceiling)
        self.ceiling = ceiling
        self.jitter = jitter
        self.factor = factor
        self.rng = rng
        self.failures = 0

    def peek(self) -> float:
        """The wait `next()` would spread by jitter, without counting a failure."""
        return min(self.ceiling, self.first * self.factor ** min(self.failures, _MAX_DOUBLINGS))

    def next(self) -> float:
        """Count one failure; the seconds to wait before trying again."""
        base = self.peek()
        self.failures += 1
        return min(self.ceiling, base * (1.0 + self.jitter * (2.0 * self.rng() - 1.0)))

    def reset(self) -> None:
        self.failures = 0


__all__ = ["Backoff"]
