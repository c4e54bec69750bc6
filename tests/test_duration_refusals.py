"""A refused duration says what part of it is wrong, and one that overflows a float is refused
naming it: hundreds of digits came to infinity, and every check after said "got inf"."""

from __future__ import annotations

import math

import pytest
from forewarn.protocol.oneline import quoted
from forewarn.protocol.timefmt import TooLargeError, parse_deadline, parse_duration
from hypothesis import example, given
from hypothesis import strategies as st


@given(st.text(alphabet="0123456789.smhd +-eE", max_size=500))
@example("9" * 400)
@example("9" * 400 + "d")
@example("1d" + "9" * 400 + "s")
def test_a_duration_is_finite_seconds_or_a_value_error_naming_it(text: str) -> None:
    # Hundreds of digits came to infinity, and every check after said "got inf".
    try:
        seconds = parse_duration(text)
    except TooLargeError as error:
        assert f"too large a duration: {quoted(text)}" in str(error)
    except ValueError as error:
        # Its start, cut where it is long: the whole of a 1 MiB field made a 1 MiB line.
        assert quoted(text) in str(error)
    else:
        assert math.isfinite(seconds) and seconds >= 0


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("-5", "not a duration: '-5' has a sign; a duration is 0 or more"),
        ("+5m", "not a duration: '+5m' has a sign"),
        ("1e400", "not a duration: '1e400' has an exponent; write the number out"),
        ("1.5E3s", "not a duration: '1.5E3s' has an exponent"),
        ("9" * 400, "too large a duration: '999"),
        # `\d` took them: `status --timeout ١٢` waited 12 s, `exit_margin = "١٢"` was 12 s.
        ("١٢", "not a duration: '١٢' has digits other than 0-9; write it in the digits 0-9"),
        ("\uff15m", "not a duration: '\uff15m' has digits other than 0-9"),
        # `exit_margin = "1,5m"` said only "not a duration (use e.g. 90s ...)", where
        # `forewarn plan --notice-lead 1,5h` reads the comma: the agent's durations take
        # the point, as its TOML numbers and flags do, and say so.
        ("1,5m", "not a duration: '1,5m' has a decimal comma; write its decimal mark as a point"),
        ("1h 2,5m", "not a duration: '1h 2,5m' has a decimal comma"),
    ],
)
def test_a_refused_duration_says_which_part_is_wrong(text: str, said: str) -> None:
    with pytest.raises(ValueError, match="^" + said.replace("+", r"\+").replace(".", r"\.")):
        parse_duration(text)


def test_a_deadline_too_far_in_digits_is_past_the_last_time_a_date_can_hold() -> None:
    text = "9" * 400 + "d"
    with pytest.raises(ValueError, match="is past the last time a date can hold"):
        parse_deadline(text)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("+15m", "'+15m' has a sign"),
        ("1e3", "'1e3' has an exponent"),
        ("2.5E2s", "'2.5E2s' has an exponent"),
        ("\u0661\u0662m", "'\u0661\u0662m' has digits other than 0-9"),
        ("1,5h", "'1,5h' has a decimal comma"),
    ],
)
def test_a_refused_deadline_says_which_part_is_wrong_as_a_duration_does(
    text: str, said: str
) -> None:
    # `notify --deadline +15m` and `1e3` said only "not an RFC 3339 time or a duration such as
    # 90s, 15m or 2h", where every duration flag names the sign or the exponent (H119's walk).
    with pytest.raises(ValueError) as error:
        parse_deadline(text)
    assert str(error.value).startswith("not an RFC 3339 time or a duration: "), error.value
    assert said in str(error.value), error.value


@given(st.text(alphabet="0123456789.smhd +-eETZ:", max_size=60))
def test_a_refused_deadline_names_the_value_written(text: str) -> None:
    try:
        parse_deadline(text)
    except ValueError as error:
        assert repr(text) in str(error) or repr(text.strip()) in str(error), error
