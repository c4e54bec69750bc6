"""StepPace: the time between `due` calls, read by the guard's ticker."""

from __future__ import annotations

from forewarn.clients.steppace import RECENT_SECONDS, StepPace
from hypothesis import given
from hypothesis import strategies as st


def test_nothing_is_measured_before_the_first_due() -> None:
    pace = StepPace()
    pace.observe(None, 0, 10.0)
    assert pace.longest(20.0) is None


def test_fast_steps_share_the_ticks_gap() -> None:
    pace = StepPace()
    for tick in range(5):
        pace.observe(tick * 25, 0, tick * 0.25)  # 25 steps a tick: 10 ms each
    assert abs((pace.longest(1.0) or 0.0) - 0.01) < 1e-9


def test_the_step_running_now_counts_once_it_is_the_longest() -> None:
    pace = StepPace()
    pace.observe(1, 0, 0.0)
    pace.observe(2, 0, 1.0)
    assert pace.longest(1.5) == 1.0
    assert pace.longest(4.0) == 3.0  # step 3 has run 3 s so far


def test_evaluation_checks_are_calls_too() -> None:
    pace = StepPace()
    pace.observe(5, 0, 0.0)
    pace.observe(5, 4, 1.0)  # four due_in_eval batches at the same step
    pace.observe(5, 4, 1.1)
    longest = pace.longest(1.1)
    assert longest is not None and abs(longest - 0.25) < 1e-9


def test_an_old_long_step_is_forgotten() -> None:
    pace = StepPace()
    pace.observe(0, 0, 0.0)
    pace.observe(1, 0, 60.0)  # a first step's compile
    now = 60.0
    for step in range(2, 2 + int(RECENT_SECONDS) + 2):
        now += 1.0
        pace.observe(step, 0, now)
    assert pace.longest(now) == 1.0


@given(st.lists(st.floats(min_value=0.0, max_value=7.0), min_size=1, max_size=40))
def test_the_longest_is_never_below_a_recent_single_step(gaps: list[float]) -> None:
    """One call per reading: the longest is at least every step timed (at most 280 s in
    all here, so every one is recent)."""
    pace = StepPace()
    now = 0.0
    pace.observe(0, 0, now)
    for step, gap in enumerate(gaps, start=1):
        now += gap
        pace.observe(step, 0, now)
    longest = pace.longest(now)
    assert longest is not None
    assert all(longest >= gap - 1e-6 for gap in gaps)
