"""Deadlines that were read late or not at all (Date + lead stood in, later than the time
written), round four: forms the last hunt left, each with the reading that is never late."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from do_support import RULES, SENT
from do_support import deadline as _deadline
from do_support import utc as _utc
from do_support import verdict as _verdict
from forewarn.providers.digitalocean.mail import find_deadline
from hypothesis import given
from hypothesis import strategies as st

LEAD = RULES.lead


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "10 PM" alone was read: nine hours late.
        ("reclaimed at 1, 10 PM UTC.", _utc(13, 10)),
        ("reclaimed at 1, 10PM UTC.", _utc(13, 10)),
        # Skipped: Date + lead stood in.
        ("reclaimed at UTC 1 10 PM.", _utc(13, 10)),
        ("reclaimed at UTC 1,10 PM.", _utc(13, 10)),
        ("reclaimed at GMT 110 PM.", _utc(13, 10)),
        # A date before the time: kept.
        ("reclaimed on Dec 4, 10 PM UTC.", _utc(22, 0, 4)),
        ("reclaimed on December 4, 10 PM UTC.", _utc(22, 0, 4)),
    ],
)
def test_a_clock_with_a_comma_and_a_blank_before_its_minutes_is_read_whole(
    text: str, expected: datetime
) -> None:
    assert _deadline(text) == expected


@given(
    hour=st.integers(min_value=1, max_value=12),
    minute=st.integers(min_value=0, max_value=59),
    blank=st.sampled_from(["", " ", ",", ", "]),
    half=st.sampled_from(["AM", "PM", "a.m.", "pm"]),
    zone_first=st.booleans(),
)
def test_any_clock_with_am_or_pm_reads_the_same_however_its_minutes_are_parted(
    hour: int, minute: int, blank: str, half: str, zone_first: bool
) -> None:
    def written(clock: str) -> datetime | None:
        return _deadline(
            f"reclaimed at UTC {clock}." if zone_first else f"reclaimed at {clock} UTC."
        )

    spaced = written(f"{hour}{blank}{minute:02d} {half}")
    colon = written(f"{hour}:{minute:02d} {half}")
    assert spaced is not None and spaced == colon


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Read as 08:10 UTC, tomorrow's: later than Date + lead.
        (
            "Droplet gpu-spot-1 will be reclaimed at 8:10 local time (all times UTC except where"
            " noted).",
            SENT + LEAD,
        ),
        (
            "Reclaim times (UTC):\n\nDroplet gpu-spot-1 will be reclaimed at 8:10 local time.",
            SENT + LEAD,
        ),
        # The local zone named: kept.
        (
            "Droplet gpu-spot-1 will be reclaimed at 13:10 local time. Local time zone: UTC",
            _utc(13, 10),
        ),
        ("Droplet gpu-spot-1 will be reclaimed at 13:10 (all times UTC).", _utc(13, 10)),
    ],
)
def test_a_time_marked_local_takes_no_zone_but_the_local_one(body: str, expected: datetime) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline == expected, report.detail


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    note=st.sampled_from(
        [
            "at {} local time (all times UTC except where noted).",
            "at {} local time. All times are in UTC.",
            "at {} local (time zone: GMT).",
            "at {} local time (in UTC).",
        ]
    ),
)
def test_a_local_time_in_no_known_zone_is_never_read_after_date_plus_lead(
    hour: int, minute: int, note: str
) -> None:
    clock = f"{hour:02d}:{minute:02d}"
    report = _verdict(f"Droplet gpu-spot-1 will be reclaimed {note.format(clock)}").report
    assert report is not None and report.deadline <= SENT + LEAD, report.detail


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Skipped: Date + lead stood in.
        ("reclaimed at 13 10 UTC.", _utc(13, 10)),
        ("reclaimed at 13h UTC.", _utc(13)),
        ("reclaimed at 13.10h UTC.", _utc(13, 10)),
        ("reclaimed at 13:10h UTC.", _utc(13, 10)),
        ("reclaimed at 13 h 10 UTC.", _utc(13, 10)),
        ("reclaimed at 1:10 P M UTC.", _utc(13, 10)),
        ("reclaimed at 1:10 p. m. UTC.", _utc(13, 10)),
        # Already read; kept.
        ("reclaimed at 13h10 UTC.", _utc(13, 10)),
        ("reclaimed at 14:30 hrs UTC.", _utc(14, 30)),
        ("reclaimed at 1:10 PM UTC.", _utc(13, 10)),
        ("reclaimed in 2h.", _utc(14, 30)),
    ],
)
def test_a_clock_with_h_blanks_or_a_spaced_pm_is_read(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    form=st.sampled_from(
        ["{h} {m:02d} UTC", "{h}:{m:02d}h UTC", "{h}.{m:02d}h UTC", "{h} h {m:02d} UTC"]
    ),
)
def test_any_clock_written_with_h_or_a_blank_reads_as_with_a_colon(
    hour: int, minute: int, form: str
) -> None:
    written = _deadline("reclaimed at " + form.format(h=hour, m=minute) + ".")
    colon = _deadline(f"reclaimed at {hour:02d}:{minute:02d} UTC.")
    assert written is not None and written == colon


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Each left Date + lead.
        ("reclaimed in 0h40.", _utc(13, 10)),
        ("reclaimed. Time remaining: 40 minutes.", _utc(13, 10)),
        ("reclaimed. Time left: 0:40.", _utc(13, 10)),
        ("reclaimed. Countdown: 00:40:00.", _utc(13, 10)),
        ("reclaimed. ETA: 40 min.", _utc(13, 10)),
        ("reclaimed following a 30-minute grace period.", _utc(13)),
        ("reclaimed at the end of a 30-minute grace period.", _utc(13)),
        ("reclaimed. You have a 30-minute grace period.", _utc(13)),
        ("reclaimed.\nGrace period: 30 minutes", _utc(13)),
        # A time of day after the label, not a countdown: kept.
        ("reclaimed. ETA: 13:10 UTC.", _utc(13, 10)),
        ("reclaimed. Time left: 1:10 PM UTC.", _utc(13, 10)),
    ],
)
def test_a_countdown_s_label_or_a_grace_period_is_read(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected


@given(
    minutes=st.integers(min_value=1, max_value=599),
    form=st.sampled_from(
        [
            "Time remaining: {n} minutes",
            "ETA: {n} min",
            "Grace period: {n} minutes",
            "following a {n}-minute grace period",
            "You have a {n}-minute grace period",
            "Time left: {h}:{m:02d}",
            "Countdown: {h:02d}:{m:02d}:00",
        ]
    ),
)
def test_any_countdown_is_that_long_after_the_date(minutes: int, form: str) -> None:
    text = form.format(n=minutes, h=minutes // 60, m=minutes % 60)
    assert _deadline(f"reclaimed. {text}.") == SENT + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Read as 14:00: late by the 30 minutes.
        ("reclaimed at 14:00 UTC, 30 minutes earlier at the latest.", _utc(13, 30)),
        ("reclaimed at 14:00 UTC, possibly 1 hour earlier.", _utc(13)),
        # Later, not earlier: no tolerance.
        ("reclaimed at 14:00 UTC, 30 minutes later at the latest.", _utc(14)),
    ],
)
def test_how_much_earlier_after_a_comma_moves_the_deadline_back(
    text: str, expected: datetime
) -> None:
    assert _deadline(text) == expected


@given(minutes=st.integers(min_value=1, max_value=600), latest=st.booleans())
def test_any_amount_earlier_after_a_comma_moves_the_deadline_back_by_it(
    minutes: int, latest: bool
) -> None:
    text = f"reclaimed at 14:00 UTC, {minutes} minutes earlier" + (" at the latest" * latest)
    assert _deadline(text + ".") == _utc(14) - timedelta(minutes=minutes)


@given(
    minutes=st.integers(min_value=1, max_value=59),
    form=st.sampled_from(
        [
            "UTC-0:{:02d}",
            "UTC-00:{:02d}",
            "GMT-00{:02d}",
            "-00:{:02d}",
            "-00{:02d}",
            # Read as a window to 00:MM before.
            "UTC -0:{:02d}",
            "UTC - 0:{:02d}",
            "GMT \u2013 0:{:02d}",
        ]
    ),
)
def test_any_offset_between_utc_minus_one_and_utc_is_an_early_margin(
    minutes: int, form: str
) -> None:
    # No zone has such an offset, nor is "0:MM" after a dash the end of a window: read as
    # either, the deadline was late.
    text = f"reclaimed at 14:00 {form.format(minutes)} on December 1."
    assert _deadline(text) == _utc(14) - timedelta(minutes=minutes), text


@pytest.mark.parametrize(
    "body",
    [
        # Each left Date + lead.
        "Droplet gpu-spot-1 will be reclaimed at 13:10 server time (UTC).",
        "Droplet gpu-spot-1 will be reclaimed at 13:10 system time [GMT].",
        "Droplet gpu-spot-1 will be reclaimed at 13:10.\nAll times are UTC.",
        "Droplet gpu-spot-1 will be reclaimed at 1:10 PM.\n(all times UTC)",
    ],
)
def test_a_zone_noted_as_server_time_or_on_the_next_line_places_the_time(body: str) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(13, 10), report.detail


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    note=st.sampled_from(["All times are UTC.", "(all times GMT)", "Time zone: UTC"]),
)
def test_any_time_with_a_zone_note_on_the_next_line_reads_as_written_with_the_zone(
    hour: int, minute: int, note: str
) -> None:
    clock = f"{hour:02d}:{minute:02d}"
    zone = "GMT" if "GMT" in note else "UTC"
    noted = _verdict(f"Droplet gpu-spot-1 will be reclaimed at {clock}.\n{note}").report
    written = _verdict(f"Droplet gpu-spot-1 will be reclaimed at {clock} {zone}.").report
    assert noted is not None and written is not None
    assert noted.deadline == written.deadline, (noted.detail, written.detail)


_MARGINS_BEFORE_A_DATE = [
    "\u00b1 {} min",
    "(\u00b1 {} min)",
    "+/- {} minutes",
    "(give or take {} minutes)",
    "(up to {} minutes earlier)",
    ", {} minutes earlier at the latest,",
    "(-{}/+0 min)",
    "-{}min",
    "minus {} minutes",
]


@pytest.mark.parametrize("margin", [*_MARGINS_BEFORE_A_DATE, "- 0:{}"])
def test_a_margin_between_a_time_and_its_date_keeps_the_date(margin: str) -> None:
    # The date was lost: the time was read on the mail's day, two days early here.
    text = f"reclaimed at 14:00 UTC {margin.format(30)} on December 3, 2026."
    assert _deadline(text) == _utc(13, 30, 3), text


@given(
    minutes=st.integers(min_value=1, max_value=600),
    day=st.integers(min_value=2, max_value=28),
    margin=st.sampled_from(_MARGINS_BEFORE_A_DATE),
    weekday=st.booleans(),
)
def test_any_margin_before_a_date_moves_that_date_s_time_back_by_it(
    minutes: int, day: int, margin: str, weekday: bool
) -> None:
    date = f"{_utc(0, 0, day):%A}, December {day}" if weekday else f"December {day}, 2026"
    text = f"reclaimed at 14:00 UTC {margin.format(minutes)} on {date}."
    assert _deadline(text) == _utc(14, 0, day) - timedelta(minutes=minutes), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Each was read as 14:00: late by the margin written as a clock.
        ("reclaimed at 14:00 UTC (-0:30).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC (- 0:30).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC (-00:30).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC [\u22120:30].", _utc(13, 30)),
        ("reclaimed at 14:00 Z (-0:30).", _utc(13, 30)),
        ("reclaimed at 2:00 PM UTC (-0:45).", _utc(13, 15)),
        ("reclaimed at 14:00 UTC (\u00b10:30).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC \u00b1 1:00.", _utc(13)),
        ("reclaimed at 14:00 UTC (+/- 1:30).", _utc(12, 30)),
        ("reclaimed at 14:00 UTC, give or take 0:45.", _utc(13, 15)),
        ("reclaimed at 14:00 UTC (0:30 earlier).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC (up to 0:30 earlier).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC, or up to 1:15 earlier.", _utc(12, 45)),
        ("reclaimed at 14:00 UTC, 0:30 earlier at the latest.", _utc(13, 30)),
        # The same with an amount in brackets: read as 14:00 too.
        ("reclaimed at 14:00 UTC (30 minutes earlier).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC [or 1 hour earlier].", _utc(13)),
        # Between the time and its date: the date was kept, the margin lost.
        ("reclaimed at 14:00 UTC (-0:30) on December 3, 2026.", _utc(13, 30, 3)),
        ("reclaimed at 14:00 UTC (\u00b1 0:30) on December 3, 2026.", _utc(13, 30, 3)),
        # An offset in brackets after a time with no zone, and a window: kept.
        ("reclaimed at 09:00 (-05:00).", _utc(14)),
        ("reclaimed at 22:00 UTC - 00:30.", _utc(22)),
        # A bracketed minus of an hour or more may restate a zone's offset ("14:00 EST
        # (-05:00)"): not read as a margin.
        ("reclaimed at 09:00 EST (-05:00).", _utc(14)),
        # After UTC, GMT or Z it restates no offset (theirs is none): a margin of hours,
        # read as 14:00 before, an hour or more late.
        ("reclaimed at 14:00 UTC (-1:00).", _utc(13)),
        ("reclaimed at 14:00 GMT (-1:30).", _utc(12, 30)),
        ("reclaimed at 14:00 Z [-01:00].", _utc(13)),
        ("reclaimed at 14:00 UTC (- 2:00) on December 3, 2026.", _utc(12, 0, 3)),
        ("reclaimed at 14:00 (UTC) (-1:00).", _utc(13)),
    ],
)
def test_a_margin_written_as_a_clock_moves_the_deadline_back(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected, text


@given(
    hours=st.integers(min_value=0, max_value=9),
    minutes=st.integers(min_value=0, max_value=59),
    form=st.sampled_from(
        [
            "(\u00b1{}:{:02d})",
            "\u00b1 {}:{:02d}",
            "+/- {}:{:02d}",
            "(give or take {}:{:02d})",
            "(up to {}:{:02d} earlier)",
            ", {}:{:02d} earlier at the latest,",
            "({}:{:02d} earlier)",
        ]
    ),
    day=st.sampled_from([None, 3]),
)
def test_any_margin_written_as_a_clock_moves_the_deadline_back_by_it(
    hours: int, minutes: int, form: str, day: int | None
) -> None:
    on = "" if day is None else f" on December {day}, 2026"
    text = f"reclaimed at 14:00 UTC {form.format(hours, minutes)}{on}."
    margin = timedelta(hours=hours, minutes=minutes)
    assert _deadline(text) == _utc(14, 0, day or 1) - margin, text


@given(
    minutes=st.integers(min_value=0, max_value=59),
    form=st.sampled_from(["(-0:{:02d})", "(- 00:{:02d})", "[\u22120:{:02d}]", "(\u2013 0:{:02d})"]),
    day=st.sampled_from([None, 3]),
)
def test_any_bracketed_minus_of_no_hours_is_an_early_margin(
    minutes: int, form: str, day: int | None
) -> None:
    on = "" if day is None else f" on December {day}, 2026"
    text = f"reclaimed at 14:00 UTC {form.format(minutes)}{on}."
    assert _deadline(text) == _utc(14, 0, day or 1) - timedelta(minutes=minutes), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The day after the margin was lost: the time was read on the mail's day, a day early.
        ("reclaimed at 14:00 UTC (\u00b1 30 min) tomorrow.", _utc(13, 30, 2)),
        ("reclaimed at 14:00 UTC -30min tomorrow.", _utc(13, 30, 2)),
        ("reclaimed at 14:00 UTC (-0:30), tomorrow.", _utc(13, 30, 2)),
        ("reclaimed at 14:00 UTC, give or take 30 minutes, tomorrow.", _utc(13, 30, 2)),
        ("reclaimed at 14:00 UTC (up to 1 hour earlier) tomorrow.", _utc(13, 0, 2)),
        ("reclaimed at 14:00 UTC (\u00b1 30 min) today.", _utc(13, 30)),
        # Already read: kept.
        ("reclaimed at 14:00 UTC tomorrow (\u00b1 30 min).", _utc(13, 30, 2)),
        ("reclaimed tomorrow at 14:00 UTC (\u00b1 30 min).", _utc(13, 30, 2)),
    ],
)
def test_a_margin_between_a_time_and_its_day_keeps_the_day(text: str, expected: datetime) -> None:
    assert _deadline(text) == expected, text


@given(
    minutes=st.integers(min_value=1, max_value=600),
    margin=st.sampled_from(_MARGINS_BEFORE_A_DATE),
)
def test_any_margin_before_tomorrow_moves_tomorrow_s_time_back_by_it(
    minutes: int, margin: str
) -> None:
    text = f"reclaimed at 14:00 UTC {margin.format(minutes)} tomorrow."
    assert _deadline(text) == _utc(14, 0, 2) - timedelta(minutes=minutes), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Each was read as 14:00 on the mail's day (Tuesday, December 1): days early, so a
        # terminate stopped the job long before the reclaim.
        ("reclaimed at 14:00 UTC on Thursday.", _utc(14, 0, 3)),
        ("reclaimed on Thursday at 14:00 UTC.", _utc(14, 0, 3)),
        ("reclaimed Thursday 14:00 UTC.", _utc(14, 0, 3)),
        ("reclaimed at 14:00 UTC, Thursday.", _utc(14, 0, 3)),
        ("reclaimed at 14:00 UTC on Thu.", _utc(14, 0, 3)),
        ("reclaimed on Thurs. at 2 PM UTC.", _utc(14, 0, 3)),
        ("reclaimed this Saturday at noon UTC.", _utc(12, 0, 5)),
        ("reclaimed at 14:00 UTC (\u00b1 30 min) on Thursday.", _utc(13, 30, 3)),
        ("reclaimed at 14:00 UTC the day after tomorrow.", _utc(14, 0, 3)),
        ("reclaimed the day after tomorrow at 14:00 UTC.", _utc(14, 0, 3)),
        # The mail's own weekday is its day, as "today" is, even when the time is past (a
        # past deadline: clients act at once), not a week later.
        ("reclaimed on Tuesday at 14:00 UTC.", _utc(14)),
        ("reclaimed on Tuesday at 11:00 UTC.", _utc(11)),
        # In the time's zone: 21:00 EST on Wednesday is 02:00 UTC on Thursday.
        ("reclaimed at 9 PM EST on Wednesday.", _utc(2, 0, 3)),
        # Not a day of this time: kept.
        ("reclaimed at 14:00 UTC. On Thursday we will send a report.", _utc(14)),
        ("reclaimed at 14:00 UTC on Thursday, December 3.", _utc(14, 0, 3)),
    ],
)
def test_a_weekday_or_the_day_after_tomorrow_is_the_time_s_day(
    text: str, expected: datetime
) -> None:
    assert _deadline(text) == expected, text


_WEEKDAY_NAMES = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


@given(
    weekday=st.integers(min_value=0, max_value=6),
    hour=st.integers(min_value=0, max_value=23),
    form=st.sampled_from(
        [
            "at {clock} UTC on {day}",
            "on {day} at {clock} UTC",
            "{day} {clock} UTC",
            "at {clock} UTC, {day}",
        ]
    ),
    short=st.booleans(),
)
def test_any_weekday_is_its_next_date_from_the_mail_s(
    weekday: int, hour: int, form: str, short: bool
) -> None:
    name = _WEEKDAY_NAMES[weekday]
    day = f"on {name[:3]}" if short and "on {day}" not in form else name
    text = "reclaimed " + form.format(clock=f"{hour:02d}:00", day=day) + "."
    ahead = (weekday - SENT.weekday()) % 7
    assert _deadline(text) == _utc(hour, 0, 1 + ahead), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Each was read as 14:00 on the mail's day (Tuesday, December 1): days early.
        # "Next Saturday" said on a Tuesday may mean either Saturday ahead: the first, which
        # is never late; never the mail's own day.
        ("reclaimed at 14:00 UTC next Saturday.", _utc(14, 0, 5)),
        ("reclaimed next Saturday at 14:00 UTC.", _utc(14, 0, 5)),
        ("reclaimed next Tuesday at 09:00 UTC.", _utc(9, 0, 8)),
        ("reclaimed at 14:00 UTC on the 3rd.", _utc(14, 0, 3)),
        ("reclaimed on the 3rd at 14:00 UTC.", _utc(14, 0, 3)),
        ("reclaimed at 14:00 UTC on the 1st.", _utc(14)),
        ("reclaimed on the 1st at 11:00 UTC.", _utc(11)),
        ("reclaimed at 14:00 UTC tmrw.", _utc(14, 0, 2)),
        ("reclaimed at 14:00 UTC on the 30th.", _utc(14, 0, 30)),
        # No month has a 45th: the time alone, as before.
        ("reclaimed at 14:00 UTC on the 45th.", _utc(14)),
    ],
)
def test_next_weekday_a_day_of_the_month_or_tmrw_is_the_time_s_day(
    text: str, expected: datetime
) -> None:
    assert _deadline(text) == expected, text


def test_a_day_of_the_month_already_past_is_next_month_s() -> None:
    found = find_deadline(
        "Droplet gpu-spot-1 will be reclaimed at 14:00 UTC on the 1st.", _utc(9, 0, 20)
    )
    assert found is not None and found[0] == datetime(2027, 1, 1, 14, tzinfo=timezone.utc)


@given(
    day=st.integers(min_value=1, max_value=30),  # within the 30 days a deadline may be ahead
    hour=st.integers(min_value=0, max_value=23),
    before=st.booleans(),
)
def test_any_day_of_the_month_is_its_next_date_from_the_mail_s(
    day: int, hour: int, before: bool
) -> None:
    suffix = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}.get(day, "th")
    on = f"on the {day}{suffix}"
    clock = f"{hour:02d}:00 UTC"
    text = f"reclaimed {on} at {clock}." if before else f"reclaimed at {clock} {on}."
    assert _deadline(text) == _utc(hour, 0, day), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A bare 24-hour hour after "at" or "by", before UTC or GMT: skipped, Date + lead
        # stood in, an hour and a half late.
        ("reclaimed at 13 UTC.", _utc(13)),
        ("reclaimed at 13 GMT.", _utc(13)),
        ("reclaimed by 13 UTC.", _utc(13)),
        ("reclaimed today at 13 (UTC).", _utc(13)),
        ("reclaimed on December 4 at 16 UTC.", _utc(16, 0, 4)),
        ("reclaimed at 13 UTC on December 4.", _utc(13, 0, 4)),
        # A number that is no hour: one after no "at", and 25.
        ("reclaimed soon; we run 13 UTC-synced regions.", None),
        ("reclaimed at 25 UTC.", None),
    ],
)
def test_a_bare_hour_after_at_and_before_utc_is_read(text: str, expected: datetime | None) -> None:
    assert _deadline(text) == expected


@given(hour=st.integers(min_value=0, max_value=23), word=st.sampled_from(["at", "by"]))
def test_any_bare_hour_reads_as_its_full_clock(hour: int, word: str) -> None:
    bare = _deadline(f"reclaimed {word} {hour} UTC.")
    assert bare == _deadline(f"reclaimed {word} {hour:02d}:00 UTC.")
