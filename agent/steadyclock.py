"""The clock notices are aged on: seconds since boot, which no step of the wall clock moves.

Apart from the board so that `forewarn wait` (whose start loads no pydantic: see
tests/agent/test_startup_imports.py) reads the same clock the agent ages its notices on.
"""

from __future__ import annotations

import time


def steady_seconds() -> float:
    """Seconds since boot, suspends included (Linux's boot clock), else the monotonic clock:
    neither is stepped with the wall clock."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


__all__ = ["steady_seconds"]
