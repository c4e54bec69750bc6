"""A leap second (`23:59:60`) in a time a provider sends: `datetime` has no second 60, so
every reader refused it, and an AWS spot notice at one went out with no deadline. It is read
as the last instant `datetime` holds before it: never later than the real moment, so a job
weighing its save against the deadline is never told it has more time than it has."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.httpdate import (
    format_http_date,
    format_short_http_date,
    parse_http_date,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

LAST = datetime(2016, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text",
    [
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.5Z",
        "2016-12-31T23:59:60.999999999Z",
        "2016-12-31T18:59:60-05:00",
        "2017-01-01T00:59:60+01:00",
    ],
)
def test_a_leap_second_is_the_last_instant_before_it(text: str) -> None:
    assert parse_time(text) == LAST


@pytest.mark.parametrize("text", ["Sat, 31 Dec 2016 23:59:60 GMT", "31 Dec 2016 23:59:60 GMT"])
def test_a_leap_second_in_an_http_date_is_the_last_instant_before_it(text: str) -> None:
    assert parse_http_date(text) == LAST


@pytest.mark.parametrize("text", ["2016-12-31T23:59:61Z", "2016-12-31T23:60:00Z"])
def test_past_the_leap_second_is_still_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        parse_time(text)


MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(timezone.utc)
)
OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59)
FRACTIONS = st.one_of(st.just(""), st.from_regex(r"\A\.[0-9]{1,12}\Z"))


def _local(moment: datetime, minutes: int) -> tuple[str, str]:
    """`moment`'s date and hour:minute as read at a UTC offset of `minutes`, and the offset."""
    local = moment.astimezone(timezone(timedelta(minutes=minutes)))
    sign = "-" if minutes < 0 else "+"
    zone = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    return local.strftime("%Y-%m-%dT%H:%M").rjust(16, "0"), zone


@settings(max_examples=examples(200))
@given(moment=MOMENTS, minutes=OFFSETS, fraction=FRACTIONS)
def test_second_60_is_read_just_before_the_next_minute_never_after(
    moment: datetime, minutes: int, fraction: str
) -> None:
    """Whatever the minute, the offset and the fraction: second 60 of a minute is read
    within a microsecond before the next minute begins, and written back as a time every
    reader takes."""
    minute = moment.replace(second=0, microsecond=0)
    stamp, zone = _local(minute, minutes)
    read = parse_time(f"{stamp}:60{fraction}{zone}")
    following = minute + timedelta(minutes=1)
    assert following - timedelta(microseconds=1) == read < following
    assert parse_time(format_time(read)) <= read


@settings(max_examples=examples(100))
@given(
    moment=st.datetimes(
        min_value=datetime(1000, 1, 1),
        max_value=datetime(9999, 12, 31, 23, 58),
        timezones=st.just(timezone.utc),
    ),
    weekday=st.booleans(),
)
def test_second_60_in_an_http_date_is_read_just_before_the_next_minute(
    moment: datetime, weekday: bool
) -> None:
    """Azure's RFC 1123 NotBefore and AWS's short scheduled-event date alike."""
    minute = moment.replace(second=0, microsecond=0)
    # Written by the project's own formatters: strftime's %a and %b follow the locale.
    written = format_http_date(minute) if weekday else format_short_http_date(minute)
    text = written.replace(":00 GMT", ":60 GMT")
    read = parse_http_date(text)
    following = minute + timedelta(minutes=1)
    assert following - timedelta(microseconds=1) == read < following
