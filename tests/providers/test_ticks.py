"""The idle agent's periodic parts (the flag file's looks, heartbeats, the watchdog's report,
the control self-probe) wake on one grid of the loop's clock, so that their timers fall due in
the same turn of the loop: each on its own phase was a wake-up of its own."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.local import watch
from forewarn.providers.ticks import next_tick, sleep_to_tick
from hypothesis import given
from hypothesis import strategies as st


@given(
    st.floats(min_value=0, max_value=1e7, allow_nan=False),
    st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.5, 1.0, 1.5, 2.0, 7.0, 60.0, 3600.0])
    | st.floats(min_value=0.001, max_value=3600, allow_nan=False),
)
def test_the_next_tick_is_after_now_and_within_one_interval(now: float, interval: float) -> None:
    tick = next_tick(now, interval)
    assert now < tick
    # Within one interval, to the float's own rounding at that magnitude.
    assert tick - now <= interval + 4 * math.ulp(tick)
    assert math.isclose(tick / interval, round(tick / interval), rel_tol=1e-9, abs_tol=1e-6)


@given(st.floats(min_value=0, max_value=1e7, allow_nan=False))
def test_the_ticks_of_intervals_a_quarter_second_apart_are_the_same_float(now: float) -> None:
    """The defaults (0.25 s looks, 1 s beats and reports, 2 s probes): at a whole second
    their deadlines are one float, so one turn of the loop runs them all."""
    seconds = next_tick(now, 1.0)
    quarter = now
    while (quarter := next_tick(quarter, 0.25)) < seconds:
        pass
    assert quarter == seconds
    if next_tick(now, 2.0) == seconds:
        assert next_tick(now, 0.25) <= seconds


@pytest.mark.parametrize("interval", [0, -1.0, math.inf, math.nan])
def test_an_interval_that_is_not_a_positive_number_is_refused(interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        next_tick(1.0, interval)


def _deadlines(loop: asyncio.AbstractEventLoop) -> list[float]:
    """Every `when` the loop's timers are set to from now on."""
    seen: list[float] = []
    call_at = loop.call_at

    def recording(when: float, *args: object, **kwargs: object) -> asyncio.TimerHandle:
        seen.append(when)
        return call_at(when, *args, **kwargs)  # type: ignore[arg-type]

    loop.call_at = recording  # type: ignore[method-assign]
    return seen


async def test_sleep_to_tick_wakes_at_the_grid_point() -> None:
    loop = asyncio.get_running_loop()
    seen = _deadlines(loop)
    await sleep_to_tick(0.05)
    assert len(seen) == 1 and seen[0] / 0.05 == pytest.approx(round(seen[0] / 0.05))
    assert loop.time() >= seen[0]


async def test_the_flag_file_is_looked_at_on_the_grid_of_its_interval(tmp_path: Path) -> None:
    """Found: the idle local agent woke 7.5 times a second (strace, schedstat): four looks at
    the flag file, a heartbeat, a watchdog report and half a probe, each on its own phase."""
    loop = asyncio.get_running_loop()
    looks: list[float] = []
    health = PollHealth("local")
    health.listeners.append(lambda *_: looks.append(loop.time()))
    watcher = watch.LocalWatcher(
        tmp_path / "checkpoint-now", 0.1, WatcherContext(tmp_path, tmp_path, health)
    )
    seen = _deadlines(loop)
    task = asyncio.create_task(watcher.watch(lambda report: None))
    try:
        while len(looks) < 4:
            await asyncio.sleep(0.01)  # the test's own look at how far the watcher got
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    grid = [when for when in seen if when / 0.1 == pytest.approx(round(when / 0.1), abs=1e-6)]
    assert len(grid) >= 3, f"the watcher's timers {seen} are not on the 0.1 s grid"
