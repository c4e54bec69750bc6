"""`forewarn drill local`'s numbers are bounded as they are read: each refusal names the flag's
range (the flag itself is named by the parser: tests/agent/test_cli_errors.py)."""

from __future__ import annotations

import argparse

import pytest
from forewarn.agent.drill_limits import (
    MAX_LEAD,
    MAX_SEED,
    MAX_STEP_TIME,
    MAX_STEPS,
    count_within,
    seconds_within,
    written_bound,
)
from forewarn.agent.drill_local import check_steps, minimum_steps
from forewarn.protocol.errors import UsageError
from hypothesis import given
from hypothesis import strategies as st


@given(st.integers(-(10**45), 10**45) | st.integers(-10, MAX_STEPS + 10))
def test_a_count_is_taken_within_its_range_and_refused_naming_it(value: int) -> None:
    parse = count_within(1, MAX_STEPS)
    if 1 <= value <= MAX_STEPS:
        assert parse(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be from 1 to {MAX_STEPS}"):
            parse(str(value))


@given(st.integers(-(10**25), MAX_SEED * 2))
def test_a_seed_is_a_64_bit_number_not_below_0(value: int) -> None:
    parse = count_within(0, MAX_SEED)
    if 0 <= value <= MAX_SEED:
        assert parse(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"from 0 to {MAX_SEED}"):
            parse(str(value))


@given(
    seconds=st.floats(0.0, 1e300) | st.floats(0.0, 2 * MAX_LEAD),
    zero=st.booleans(),
)
def test_a_duration_is_taken_within_its_range_and_refused_naming_it(
    seconds: float, zero: bool
) -> None:
    parse = seconds_within(MAX_LEAD, zero=zero)
    written = repr(seconds)
    if seconds <= MAX_LEAD and (zero or seconds > 0):
        assert parse(written) == seconds
    else:
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            parse(written)
        assert f"at most {written_bound(MAX_LEAD)}" in str(refused.value) or "from 0s to" in str(
            refused.value
        )
        assert repr(written) in str(refused.value)


@given(text=st.text(max_size=30))
def test_any_text_is_a_duration_in_range_or_refused_as_a_usage_error(text: str) -> None:
    """Never a ValueError or OverflowError out of the parser: argparse turns only its own
    refusal into the one-line `forewarn:` error."""
    try:
        seconds = seconds_within(MAX_STEP_TIME, zero=True)(text)
    except argparse.ArgumentTypeError:
        return
    assert 0 <= seconds <= MAX_STEP_TIME


@given(
    step_time=st.floats(0.0, MAX_STEP_TIME),
    upload=st.floats(1e-3, 3600.0),
    background=st.booleans(),
)
def test_the_least_steps_a_drill_needs_is_within_the_range_or_refused(
    step_time: float, upload: float, background: bool
) -> None:
    least = minimum_steps(step_time, background, upload)
    if least <= MAX_STEPS:
        check_steps(least, step_time, background, upload)
        return
    with pytest.raises(UsageError, match="more than the most"):
        check_steps(MAX_STEPS, step_time, background, upload)


def test_bounds_are_written_as_users_write_them() -> None:
    assert [written_bound(s) for s in (3600.0, 7200.0, 10.0, 1.5, 120.0)] == [
        "1h",
        "2h",
        "10s",
        "1.5s",
        "2m",
    ]
