"""Periodic sleeps on one grid of the loop's clock.

An idle agent wakes for its periodic parts only: the flag file's looks (every 0.25 s), the
heartbeats and the watchdog's report (every second), the control self-probe (every 2 s). Each
sleeping its interval from when it last ran put each on a phase of its own, so each was a
wake-up of its own (7.5 a second, measured). Sleeping to the next multiple of the interval on
the loop's clock puts them on one grid: their deadlines are then the same float, and one turn
of the loop runs them all. The period is kept (a part runs at each multiple of its interval;
only the first sleep is shorter), and a part that ran late does not drift.
"""

from __future__ import annotations

import asyncio
import math


def next_tick(now: float, interval: float) -> float:
    """The first multiple of `interval` after `now`."""
    if not (interval > 0 and math.isfinite(interval)):
        raise ValueError(f"interval must be a positive number of seconds, not {interval!r}")
    tick = (math.floor(now / interval) + 1) * interval
    while tick <= now:  # a quotient rounded down past a multiple
        tick += interval
    return tick


async def sleep_to_tick(interval: float) -> None:
    """Sleep until the loop's clock reaches the next multiple of `interval`."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()
    timer = loop.call_at(next_tick(loop.time(), interval), _wake, woken)
    try:
        await woken
    finally:
        timer.cancel()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


__all__ = ["next_tick", "sleep_to_tick"]
