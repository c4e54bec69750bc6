"""The zones of Central Europe as German mail writes them (MEZ, MESZ), and IST, which names
three: each skipped before, so Date + lead stood in, after the reclaim."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from do_support import utc
from do_support import verdict as _verdict
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Not read: Date + lead (14:30) stood in, after the reclaim.
        ("Droplet gpu-spot-1 will be reclaimed at 14:10 MEZ.", utc(13, 10)),
        ("Droplet gpu-spot-1 will be reclaimed at 15:10 MESZ.", utc(13, 10)),
        ("Droplet gpu-spot-1 wird am 1. Dezember um 14:10 MEZ freigegeben.", utc(13, 10)),
        # IST: India's +05:30, the earliest of its readings (Israel +02:00, Ireland +01:00).
        ("Droplet gpu-spot-1 will be reclaimed at 18:40 IST.", utc(13, 10)),
    ],
)
def test_central_european_and_ist_times_are_read(body: str, expected: datetime) -> None:
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == expected, result.why


def test_ist_is_said_to_be_ambiguous() -> None:
    result = _verdict("Droplet gpu-spot-1 will be reclaimed at 18:40 IST.")
    assert "IST" in result.why and "ambiguous" in result.why, result.why


@given(
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    zone=st.sampled_from([("MEZ", 1.0), ("MESZ", 2.0), ("IST", 5.5)]),
    space=st.sampled_from([" ", "  ", "\u00a0"]),
)
def test_any_time_in_these_zones_is_read_at_their_offset(
    hour: int, minute: int, zone: tuple[str, float], space: str
) -> None:
    name, offset = zone
    result = _verdict(
        f"Droplet gpu-spot-1 will be reclaimed at {hour:02d}:{minute:02d}{space}{name}."
    )
    assert result.report is not None, result.why
    written = result.report.deadline + timedelta(hours=offset)
    assert (written.hour, written.minute) == (hour, minute), result.why


def test_ist_in_lowercase_is_no_zone() -> None:
    # German "ist" after a time ("um 14:10 ist ...") names no zone.
    result = _verdict("Droplet gpu-spot-1 wird um 14:10 ist es soweit reclaimed.")
    assert result.report is not None
    assert result.report.detail["deadline_source"] == "date+lead", result.why


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Israel's IST: read as India's, 10:40 UTC, already past, so the next day's.
        ("Droplet gpu-spot-1 will be reclaimed at 16:10 IST (+02:00).", utc(14, 10)),
        ("Droplet gpu-spot-1 will be reclaimed at 15:10 IST (GMT+1).", utc(14, 10)),
        ("Droplet gpu-spot-1 will be reclaimed at 19:40 IST (+05:30).", utc(14, 10)),
        # China's CST: read as US Central's, 14 h late.
        ("Droplet gpu-spot-1 will be reclaimed at 22:10 CST (UTC+8).", utc(14, 10)),
        ("Droplet gpu-spot-1 will be reclaimed at 9:10 ET (UTC-05:00).", utc(14, 10)),
    ],
)
def test_the_offset_written_beside_a_zone_is_the_one_read(body: str, expected: datetime) -> None:
    result = _verdict(body)
    assert result.report is not None, result.why
    assert result.report.deadline == expected, result.why
    assert "ambiguous" not in result.why, result.why


@given(
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    zone=st.sampled_from(["IST", "CST", "EST", "BST", "MEZ", "PT", "AEST"]),
    hours=st.integers(-12, 14),
    minutes=st.sampled_from([0, 30, 45]),
    form=st.sampled_from(
        ["({sign}{h:02d}:{m:02d})", "(UTC{sign}{h}:{m:02d})", "( GMT{sign}{h:02d}{m:02d} )"]
    ),
)
def test_any_offset_beside_a_zone_is_read(
    hour: int, minute: int, zone: str, hours: int, minutes: int, form: str
) -> None:
    sign = "-" if hours < 0 else "+"
    beside = form.format(sign=sign, h=abs(hours), m=minutes)
    result = _verdict(
        f"Droplet gpu-spot-1 will be reclaimed at {hour:02d}:{minute:02d} {zone} {beside}."
    )
    assert result.report is not None, result.why
    offset = timedelta(hours=abs(hours), minutes=minutes) * (-1 if hours < 0 else 1)
    written = result.report.deadline + offset
    assert (written.hour, written.minute) == (hour, minute), (beside, result.why)
