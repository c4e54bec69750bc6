"""Deadlines that were read late or not at all (Date + lead stood in, later than the time
written): forms reported by the last hunt and found in this one, each with the reading
that is never late."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from do_support import SENT
from do_support import deadline as _deadline
from do_support import utc as _utc
from do_support import verdict as _verdict
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "10 PM" alone was read: nine hours late.
        ("reclaimed at 1 10 PM UTC.", _utc(13, 10)),
        ("reclaimed at 1 10PM UTC.", _utc(13, 10)),
        ("reclaimed at 1 10 p.m. UTC.", _utc(13, 10)),
        ("reclaimed at 1,10 PM UTC.", _utc(13, 10)),
        # Skipped: Date + lead stood in.
        ("reclaimed at 110 PM UTC.", _utc(13, 10)),
        ("reclaimed at 930 AM EST tomorrow.", _utc(14, 30, 2)),
        ("reclaimed at 20261201T131000Z.", _utc(13, 10)),
        # Its time alone was read, on the mail's day: days early.
        ("reclaimed at 20261204T131000Z.", _utc(13, 10, 4)),
        ("reclaimed at 20261204T1310Z.", _utc(13, 10, 4)),
        # Already read; kept.
        ("reclaimed at 1.10 pm UTC.", _utc(13, 10)),
        ("reclaimed at 1:10pm UTC.", _utc(13, 10)),
        ("reclaimed at 10 PM UTC.", _utc(22)),
        ("reclaimed on December 4 10 PM UTC.", _utc(22, 0, 4)),
        ("reclaimed on 4 December 10 PM UTC.", _utc(22, 0, 4)),
        ("reclaimed on Dec 4, 10 PM UTC.", _utc(22, 0, 4)),
        ("reclaimed at 1600 UTC.", _utc(16)),
    ],
)
def test_a_clock_with_its_minutes_after_a_blank_or_none_is_read_whole(
    text: str, expected: datetime
) -> None:
    assert _deadline(text) == expected


@given(
    hour=st.integers(min_value=1, max_value=12),
    minute=st.integers(min_value=0, max_value=59),
    blank=st.sampled_from(["", " ", ","]),
    half=st.sampled_from(["AM", "PM", "a.m.", "pm"]),
)
def test_any_clock_with_am_or_pm_reads_the_same_without_its_colon(
    hour: int, minute: int, blank: str, half: str
) -> None:
    spaced = _deadline(f"reclaimed at {hour}{blank}{minute:02d} {half} UTC.")
    colon = _deadline(f"reclaimed at {hour}:{minute:02d} {half} UTC.")
    assert spaced is not None and spaced == colon


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reclaimed in 0:40.", _utc(13, 10)),
        ("reclaimed in 00:40:00.", _utc(13, 10)),
        ("reclaimed in 1:05 hours.", _utc(13, 35)),
        ("reclaimed in 40'.", _utc(13, 10)),
        ("reclaimed in 40\u2032.", _utc(13, 10)),
        ("reclaimed with a 30-minute notice.", _utc(13)),
        ("reclaimed with 30-minute notice.", _utc(13)),
        ("reclaimed after a 30-minute grace period.", _utc(13)),
        ("reclaimed after a 1-hour delay.", _utc(13, 30)),
        # Found in the hunt: Date + lead stood in.
        ("reclaimed in 40 mn.", _utc(13, 10)),
        ("reclaimed in 40+ minutes.", _utc(13, 10)),
        ("reclaimed in no later than 40 minutes.", _utc(13, 10)),
        ("reclaimed 40 minutes from receipt of this email.", _utc(13, 10)),
    ],
)
def test_a_countdown_written_otherwise_is_read(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        # A time of day, not a countdown: with no zone it cannot be placed.
        "reclaimed in 1:10 PM.",
        "reclaimed in 12:00.",
        # After an event T that the mail does not place: no time (Date + lead).
        "reclaimed at T+40m.",
        # Feet and inches, not minutes.
        "reclaimed. Rack height 6'2\".",
    ],
)
def test_what_is_no_countdown_is_not_read_as_one(text: str) -> None:
    assert _deadline(text) is None


@given(
    hours=st.integers(min_value=0, max_value=9),
    minutes=st.integers(min_value=0, max_value=59),
    padded=st.booleans(),
    seconds=st.booleans(),
)
def test_any_countdown_clock_is_that_long_after_the_date(
    hours: int, minutes: int, padded: bool, seconds: bool
) -> None:
    clock = f"{hours:02d}" if padded else str(hours)
    clock += f":{minutes:02d}" + (":00" if seconds else "")
    assert _deadline(f"reclaimed in {clock}.") == SENT + timedelta(hours=hours, minutes=minutes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Read as 14:00: late by the margin.
        ("reclaimed at 14:00 UTC -30min.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC-30min.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC \u2013 30 minutes.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC -1h.", _utc(13)),
        # Read as the offset UTC-1: an hour late.
        ("reclaimed at 14:00 UTC-1 min.", _utc(13, 59)),
        ("reclaimed at 14:00 UTC -5 hours.", _utc(9)),
        # Found in the hunt, each read as 14:00.
        ("reclaimed at 14:00 UTC minus 30 minutes.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC (minus 30 minutes).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC, -30 min.", _utc(13, 30)),
        # Read as the offset UTC-0:30, which no zone has: half an hour late.
        ("reclaimed at 14:00 UTC-0:30.", _utc(13, 30)),
        ("reclaimed at 14:00 GMT-00:30.", _utc(13, 30)),
        ("reclaimed at 14:00 -0030.", _utc(13, 30)),
        # Read as a window to 00:30: half an hour late.
        ("reclaimed at 14:00 UTC -0:30.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC - 0:30.", _utc(13, 30)),
        ("reclaimed at 14:00 GMT \u2013 0:45.", _utc(13, 15)),
        ("reclaimed on December 3, 2026 14:00 UTC - 0:30.", _utc(13, 30, 3)),
        # Offsets and windows, not margins: kept.
        ("reclaimed at 22:00 UTC - 00:30.", _utc(22)),
        ("reclaimed at 22:00 UTC - 0:30 UTC.", _utc(22)),
        ("reclaimed at 14:00 UTC-3.", _utc(17)),
        ("reclaimed at 14:00 UTC-3:30.", _utc(17, 30)),
        ("reclaimed at 14:00 UTC-00:00.", _utc(14)),
        ("reclaimed at 14:00 UTC -3.", _utc(17)),
        ("reclaimed at 14:00 UTC-0300.", _utc(17)),
        ("reclaimed at 14:00 UTC - 16:00 UTC.", _utc(14)),
        ("reclaimed at 14:00 UTC-16:00 UTC.", _utc(14)),
    ],
)
def test_a_margin_without_brackets_moves_the_deadline_back(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected


@given(
    minutes=st.integers(min_value=1, max_value=600),
    form=st.sampled_from(
        [
            "{} -{}min",
            "{}-{} min",
            "{} - {} minutes",
            "{} \u2013{}m",
            "{} minus {} minutes",
            "{}, -{} min",
            "{} (minus {} min)",
        ]
    ),
)
def test_any_margin_without_brackets_moves_the_deadline_back_by_it(minutes: int, form: str) -> None:
    text = "reclaimed at " + form.format("14:00 UTC", minutes) + "."
    assert _deadline(text) == _utc(14) - timedelta(minutes=minutes)


@pytest.mark.parametrize(
    "body",
    [
        "Droplet gpu-spot-1 will be reclaimed at 13:10 (all times UTC).",
        "Droplet gpu-spot-1 will be reclaimed at 13:10. All times are UTC.",
        "Droplet gpu-spot-1 will be reclaimed at 1:10 PM. All times are shown in GMT.",
        "Droplet gpu-spot-1 will be reclaimed at 13:10 (time zone: UTC).",
        "Droplet gpu-spot-1 will be reclaimed.\nTime (UTC): 13:10",
        "Droplet gpu-spot-1 will be reclaimed.\nDeadline [GMT]: 2026-12-01 13:10",
        # Found in the hunt.
        "Droplet gpu-spot-1 will be reclaimed at 13:10 (times in UTC).",
        "Droplet gpu-spot-1 will be reclaimed at 13:10 (tz: UTC).",
        "Droplet gpu-spot-1 will be reclaimed at 13:10 (in UTC).",
    ],
)
def test_a_zone_noted_on_the_time_s_line_places_it(body: str) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(13, 10), report.detail


def test_a_time_converted_to_utc_on_its_line_is_no_note_for_the_other() -> None:
    # "in UTC" here is the zone of 14:00 alone: 9:00 read in UTC was tomorrow's, 18 h late.
    report = _verdict("Droplet gpu-spot-1 will be reclaimed at 9:00 ET (14:00 in UTC).").report
    assert report is not None and report.deadline == _utc(14), report.detail


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    note=st.sampled_from(
        [
            "at {} (all times UTC).",
            "at {}. All times are in UTC.",
            "at {} (time zone: GMT).",
            "at {} (in UTC).",
            "at {} (tz: GMT).",
        ]
    ),
)
def test_any_time_with_a_zone_note_reads_as_written_with_the_zone(
    hour: int, minute: int, note: str
) -> None:
    clock = f"{hour:02d}:{minute:02d}"
    zone = "GMT" if "GMT" in note else "UTC"
    noted = _verdict(f"Droplet gpu-spot-1 will be reclaimed {note.format(clock)}").report
    written = _verdict(f"Droplet gpu-spot-1 will be reclaimed at {clock} {zone}.").report
    assert noted is not None and written is not None
    assert noted.deadline == written.deadline, (noted.detail, written.detail)


@pytest.mark.parametrize(
    "unit",
    [
        "1 10 PM UTC ",
        "110 PM UTC ",
        "20261201T131000Z ",
        "in 0:40 ",
        "in 40' ",
        "with a 30-minute notice ",
        "after a 30-minute grace period ",
        "14:00 UTC -30min ",
        "14:00 UTC (\u00b1 0:30) ",
        "14:00 UTC (-0:30) on December 3, ",
        "14:00 UTC (or 30 minutes earlier) ",
        "on Thursday at 14:00 UTC ",
        "13:10 (all times UTC) ",
        "13:10. All times are UTC.\n",
        "Time (UTC): 13:10\n",
    ],
)
def test_a_mail_of_thousands_of_these_forms_is_read_without_holding_the_loop(unit: str) -> None:
    body = "Droplet gpu-spot-1 will be reclaimed.\n" + unit * 4000
    started = time.thread_time()
    report = _verdict(body).report
    assert time.thread_time() - started < 5.0  # CPU, not wall: a loaded machine is no fault
    assert report is not None
