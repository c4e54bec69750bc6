"""The throttle that keeps a repeated warning to one line per interval, and the budget of
ack lines."""

from __future__ import annotations

import itertools

from forewarn.agent.throttle import LineBudget, WarningThrottle
from hypothesis import given
from hypothesis import strategies as st


def test_the_first_is_said_then_held_until_the_interval_has_passed() -> None:
    now = [100.0]
    throttle = WarningThrottle(60.0, clock=lambda: now[0])
    assert throttle.due() == 1
    now[0] += 30
    assert throttle.due() is None
    assert throttle.due() is None
    now[0] += 30
    assert throttle.due() == 3, "the line covers the two held back and itself"
    now[0] += 59.9
    assert throttle.due() is None


@given(st.lists(st.floats(min_value=0, max_value=200, allow_nan=False), max_size=60))
def test_each_line_counts_every_occurrence_since_the_last_and_lines_are_an_interval_apart(
    gaps: list[float],
) -> None:
    now = [0.0]
    throttle = WarningThrottle(60.0, clock=lambda: now[0])
    said: list[tuple[int, float, int]] = []  # (occurrence index, time, count said)
    for index, gap in enumerate(gaps):
        now[0] += gap
        held = throttle.due()
        if held is not None:
            said.append((index, now[0], held))
    if gaps:
        assert said[0] == (0, gaps[0], 1), "the first occurrence is always said"
    for (index, at, _), (later_index, later_at, held) in itertools.pairwise(said):
        assert later_at - at >= 60.0
        assert held == later_index - index, "a line counts what was held since the last"
    # Nothing held back was due: every occurrence after the last line came within its interval.
    if said:
        last_index, last_at, _ = said[-1]
        times = list(itertools.accumulate(gaps))
        assert all(at - last_at < 60.0 for at in times[last_index + 1 :])


@given(
    steps=st.lists(st.floats(min_value=0, max_value=2, allow_nan=False), max_size=300),
    rate=st.floats(min_value=0.5, max_value=50),
    burst=st.integers(min_value=1, max_value=50),
)
def test_a_line_budget_lets_through_at_most_its_burst_and_rate_and_counts_the_rest(
    steps: list[float], rate: float, burst: int
) -> None:
    now = [0.0]
    budget = LineBudget(rate, burst, clock=lambda: now[0])
    taken = held = 0
    for step in steps:
        now[0] += step
        if budget.take():
            taken += 1
        if step > 1.5:  # now and then, as the heartbeat takes the count
            held += budget.held()[0]
    held += budget.held()[0]
    assert taken + held == len(steps)
    assert taken <= burst + rate * now[0] + 1e-6
    assert budget.held() == (0, 0.0)


def test_a_line_budget_says_how_long_it_held_lines() -> None:
    now = [0.0]
    budget = LineBudget(1.0, 1, clock=lambda: now[0])
    assert budget.take()
    assert not budget.take()  # the burst spent
    now[0] = 0.5
    assert not budget.take()
    now[0] = 0.9
    assert budget.held() == (2, 0.9)
    now[0] = 2.0
    assert budget.take()
