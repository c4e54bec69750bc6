"""Deadlines that were read late or not at all (Date + lead stood in, later than the time
written): forms found in a second hunt, each with the reading that is never late."""

from __future__ import annotations

import textwrap
import time
from datetime import datetime, timedelta

import pytest
from do_support import SENT
from do_support import utc as _utc
from do_support import verdict as _verdict
from forewarn.providers.digitalocean.mail import find_deadline
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("reclaimed at UTC 13:10.", _utc(13, 10)),
        ("reclaimed at GMT 1:10 PM.", _utc(13, 10)),
        ("reclaimed today at GMT 1:10 p.m.", _utc(13, 10)),
        ("reclaimed between UTC 13:10 and 15:00.", _utc(13, 10)),
        # Its date after it is not read with it (each time tried as the start of such a
        # form cost a 256 KiB mail of times seconds): its next occurrence, early, not late.
        ("reclaimed at UTC 13:10 on December 4.", _utc(13, 10)),
        ("reclaimed at UTC 2026-12-04 13:10.", _utc(13, 10, 4)),
        ("reclaimed at UTC Dec 4, 2026 13:10.", _utc(13, 10, 4)),
        ("reclaimed at 13:10 U.T.C.", _utc(13, 10)),
        ("reclaimed at 13:10 (U.T.C.).", _utc(13, 10)),
        ("reclaimed at 13:10 G.M.T. Please save your work.", _utc(13, 10)),
        ("reclaimed at 1:10 in the afternoon UTC.", _utc(13, 10)),
        ("reclaimed at 1:10 in the afternoon (UTC).", _utc(13, 10)),
        ("reclaimed at 8 in the evening CET.", _utc(19)),
        ("reclaimed at 10 in the morning EST.", _utc(15)),
        ("reclaimed at 13:10 Zulu.", _utc(13, 10)),
        ("reclaimed at 13:10 (Zulu).", _utc(13, 10)),
        # In capitals or lowercase, as radio and military mail writes it: skipped.
        ("reclaimed at 13:10 ZULU.", _utc(13, 10)),
        ("reclaimed at 1310 ZULU.", _utc(13, 10)),
        ("reclaimed at 13:10 zulu.", _utc(13, 10)),
        # After "in": skipped.
        ("reclaimed at 13:10 in UTC.", _utc(13, 10)),
        ("reclaimed at 1:10 PM in GMT.", _utc(13, 10)),
        ("reclaimed at 14:10 in UTC+1.", _utc(13, 10)),
        ("reclaimed on December 1, 2026 at 13:10 in UTC.", _utc(13, 10)),
        ("reclaimed at 13:10 Universal Coordinated Time.", _utc(13, 10)),
        ("reclaimed in under 1/2 an hour.", _utc(13)),
        # Already read; kept.
        ("reclaimed at 13h10 UTC.", _utc(13, 10)),
        ("reclaimed at 13.10 UTC.", _utc(13, 10)),
    ],
)
def test_a_zone_before_the_time_or_in_other_words_places_it(text: str, expected: datetime) -> None:
    found = find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT)
    assert found is not None and found[0] == expected, found


@pytest.mark.parametrize(
    "text",
    [
        # A year, a date, a bare hour: no clock after the zone.
        "reclaimed. Times are in UTC 2026 style.",
        "reclaimed. Zone: UTC 12 regions.",
        "reclaimed. UTC 01.12.2026 is the date.",
    ],
)
def test_a_zone_before_what_is_no_clock_places_no_time(text: str) -> None:
    assert find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT) is None


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    zone=st.sampled_from(["UTC", "GMT", "utc"]),
    separator=st.sampled_from([":", "h", "."]),
    twelve=st.booleans(),
)
def test_a_zone_before_any_time_reads_as_after_it(
    hour: int, minute: int, zone: str, separator: str, twelve: bool
) -> None:
    clock = f"{hour}{separator}{minute:02d}"
    if twelve:
        clock = f"{hour % 12 or 12}:{minute:02d} {'PM' if hour >= 12 else 'AM'}"
    before = find_deadline(f"Droplet gpu-spot-1 will be reclaimed at {zone} {clock}.", SENT)
    after = find_deadline(f"Droplet gpu-spot-1 will be reclaimed at {clock} {zone}.", SENT)
    assert after is not None
    assert before is not None and before[0] == after[0], (clock, before, after)
    assert SENT - timedelta(minutes=10) <= before[0] <= SENT + timedelta(days=1)


_EPOCH_1310 = 1796130600  # 2026-12-01T13:10:00Z


@pytest.mark.parametrize(
    "text",
    [
        f"reclaimed at {_EPOCH_1310}.",
        f"reclaimed at epoch {_EPOCH_1310}.",
        f"reclaimed at Unix time {_EPOCH_1310}.",
        f"reclaimed (timestamp: {_EPOCH_1310}).",
        f"reclaimed at @{_EPOCH_1310}.",
        f"reclaimed at {_EPOCH_1310}.250.",
    ],
)
def test_a_unix_time_is_the_deadline(text: str) -> None:
    found = find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT)
    assert found is not None and found[0] == _utc(13, 10), found


@pytest.mark.parametrize(
    "text",
    [
        # No word that says it is a time, more digits, or beyond the 30 days.
        f"reclaimed. Ticket {_EPOCH_1310}.",
        f"reclaimed at {_EPOCH_1310}000.",
        "reclaimed. Call us at 1800555012.",
    ],
)
def test_ten_digits_that_are_no_unix_time_are_passed_over(text: str) -> None:
    assert find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT) is None


@given(
    seconds=st.integers(min_value=-600, max_value=30 * 86400),
    lead_in=st.sampled_from(["at ", "at epoch ", "at unix time ", "(epoch: ", "@"]),
)
def test_any_unix_time_near_the_mail_is_that_moment(seconds: int, lead_in: str) -> None:
    moment = SENT + timedelta(seconds=seconds)
    text = f"Droplet gpu-spot-1 will be reclaimed {lead_in}{int(moment.timestamp())}."
    found = find_deadline(text, SENT)
    assert found is not None and found[0] == moment, (text, found)


@pytest.mark.parametrize("words", ["1:10 PM", "soon", "Tuesday afternoon"])
def test_the_time_of_an_html_time_tag_is_the_deadline(words: str) -> None:
    html = (
        "<html><body><p>Your Spot Droplet gpu-spot-1 will be reclaimed at "
        f'<time datetime="2026-12-01T13:10:00Z">{words}</time>.</p></body></html>'
    )
    report = _verdict(html, "html").report
    assert report is not None and report.deadline == _utc(13, 10), report.detail


@pytest.mark.parametrize(
    ("body", "subtype"),
    [
        (
            "Droplet gpu-spot-1 will be reclaimed.\n\nReclaim times (UTC):\ngpu-spot-1  13:10\n",
            "plain",
        ),
        (
            "Spot Droplets will be reclaimed.\n\nReclaim times (UTC):\n  13:10  gpu-spot-1\n",
            "plain",
        ),
        (
            "Spot Droplets will be reclaimed.\n\nReclaim times [GMT]:\ngpu-spot-1: 1:10 PM\n",
            "plain",
        ),
        ("Spot Droplets will be reclaimed. All times are in UTC.\n\ngpu-spot-1: 13:10\n", "plain"),
        # A word after the time starting with "am" or "pm" is no AM or PM: "13:10 Am UTCsterdam".
        (
            "Droplet gpu-spot-1 will be reclaimed.\n\nReclaim times (UTC):\n"
            "gpu-spot-1: 13:10 Amsterdam region\n",
            "plain",
        ),
        (
            "<p>The following Droplets will be reclaimed:</p><table><tr><th>Droplet</th>"
            "<th>Reclaim time (UTC)</th></tr><tr><td>gpu-spot-7</td><td>15:00</td></tr>"
            "<tr><td>gpu-spot-1</td><td>13:10</td></tr></table>",
            "html",
        ),
        (
            "<p>Droplets to be reclaimed:</p><table><tr><th>Droplet</th><th>When (UTC)</th>"
            "</tr><tr><td>gpu-spot-1</td><td>2026-12-01 13:10</td></tr></table>",
            "html",
        ),
    ],
)
def test_bare_times_under_a_heading_with_a_zone_are_in_that_zone(body: str, subtype: str) -> None:
    report = _verdict(body, subtype).report
    assert report is not None and report.deadline == _utc(13, 10), report.detail


@pytest.mark.parametrize(
    "line",
    [
        # A city's time is in the city's zone: given the heading's, it was read as 14:10 and
        # 21:10 UTC, one and eight hours late.
        "gpu-spot-1: 14:10 Amsterdam time",
        "gpu-spot-1: 21:10 Singapore time",
        "gpu-spot-1: 14:10 (Frankfurt time)",
        "gpu-spot-1: 8:10 AM New York time",
    ],
)
def test_a_city_s_time_under_a_heading_with_a_zone_keeps_its_own(line: str) -> None:
    report = _verdict(f"Droplet gpu-spot-1 will be reclaimed.\n\nReclaim times (UTC):\n{line}\n")
    assert report.report is not None and report.report.deadline == _utc(13, 10), report.why


@pytest.mark.parametrize(
    "body",
    [
        # Past a blank line, or with a zone of its own, a time is not the heading's.
        "Droplet gpu-spot-1 will be reclaimed.\n\nTimes (UTC):\nnone\n\ngpu-spot-1: 13:10\n",
        "Droplet gpu-spot-1 will be reclaimed.\n\nTimes (UTC):\ngpu-spot-1: 13:10 CET\n",
        # A line with figures is a time's own, no heading.
        "Droplet gpu-spot-1 will be reclaimed at 16:00 (UTC) or 13:10.\n",
    ],
)
def test_a_time_not_under_a_heading_takes_no_zone_from_it(body: str) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline != _utc(13, 10), report.detail


@given(
    hour=st.integers(min_value=0, max_value=23),
    minute=st.integers(min_value=0, max_value=59),
    heading=st.sampled_from(["Reclaim times (UTC):", "Time [GMT]", "All times are in UTC."]),
    row=st.sampled_from(["gpu-spot-1  {}", "{}  gpu-spot-1", "gpu-spot-1: 2026-12-01 {}"]),
)
def test_any_bare_time_under_a_zone_heading_reads_as_written_with_it(
    hour: int, minute: int, heading: str, row: str
) -> None:
    clock = f"{hour:02d}:{minute:02d}"
    zone = "GMT" if "GMT" in heading else "UTC"
    under = _verdict(f"Spot Droplets will be reclaimed.\n\n{heading}\n{row.format(clock)}\n")
    written = _verdict(f"Spot Droplets will be reclaimed.\n\n{row.format(f'{clock} {zone}')}\n")
    assert under.report is not None and written.report is not None
    assert under.report.deadline == written.report.deadline, under.report.detail


@pytest.mark.parametrize(
    "unit",
    [
        "Reclaim times (UTC):\ngpu-spot-1  13:10\n",
        "(UTC)(UTC)(UTC)",
        "(UTC)\n13:10 ",
        "<time<time ",
        '<time datetime="2026-12-01T13:10:00Z">x</time> ',
        "It may be reclaimed up to 50 minutes early. ",
        "Window end: 16:00 UTC\nWindow start: 14:00 UTC\n",
        "gpu-spot-\n1 ",
    ],
)
def test_a_mail_of_thousands_of_these_forms_is_read_without_holding_the_loop(unit: str) -> None:
    # A 40-110 KiB mail of the forms read here, as HTML too (<time> tags are read there).
    body = "Droplet gpu-spot-1 will be reclaimed.\n" + unit * 4000
    for text, subtype in ((body, "plain"), (f"<p>{body}</p>", "html")):
        started = time.thread_time()
        report = _verdict(text, subtype).report
        assert time.thread_time() - started < 5.0  # CPU, not wall: a loaded machine is no fault
        assert report is not None


@pytest.mark.parametrize(
    "body",
    [
        "Droplet gpu-spot-1 will be reclaimed at 15:00 UTC.\n"
        "Correction: the reclaim time is 13:00 UTC, not 15:00 UTC as stated earlier.",
        "Droplet gpu-spot-1 will be reclaimed at 15:00 UTC.\n\n"
        "Droplet gpu-spot-1 will be reclaimed at 13:00 UTC.",
        "Your Droplet gpu-spot-1 will be reclaimed at 15:00 UTC.\n\n"
        "Details:\nThe reclaim of gpu-spot-1 is scheduled for 13:00 UTC.",
    ],
)
def test_of_the_reclaim_s_times_said_again_the_earliest_is_the_deadline(body: str) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(13), report.detail


def test_another_droplet_s_earlier_time_after_it_is_named_stays_its_own() -> None:
    body = (
        "Droplet gpu-spot-1 will be reclaimed at 15:00 UTC.\n"
        "Droplet gpu-spot-7 will be reclaimed at 13:00 UTC."
    )
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(15), report.detail


@given(
    first=st.integers(min_value=13 * 60, max_value=23 * 60),
    second=st.integers(min_value=13 * 60, max_value=23 * 60),
    gap=st.sampled_from([" ", "\n", "\n\n", "\nCorrection: "]),
    again=st.sampled_from(
        [
            "the reclaim time is {}",
            "Droplet gpu-spot-1 will be reclaimed at {}",
            "it will be reclaimed at {}",
        ]
    ),
)
def test_the_reclaim_s_time_said_twice_gives_the_earlier(
    first: int, second: int, gap: str, again: str
) -> None:
    def clock(minutes: int) -> str:
        return f"{minutes // 60:02d}:{minutes % 60:02d} UTC"

    said_again = again.format(clock(second))
    body = f"Droplet gpu-spot-1 will be reclaimed at {clock(first)}.{gap}{said_again}."
    report = _verdict(body).report
    assert report is not None
    assert report.deadline == SENT.replace(hour=0, minute=0) + timedelta(minutes=min(first, second))


@pytest.mark.parametrize(
    "body",
    [
        "Hello,\n\nWe need to reclaim capacity. Your Spot GPU Droplet gpu-spot-\n"
        "1 will be reclaimed at 13:10 UTC. Please save your work.",
        "Your Spot GPU Droplet gpu-\nspot-1 will be reclaimed at 13:10 UTC.",
        "Your Spot GPU Droplet gpu-spot-  \n  1 will be reclaimed at 13:10 UTC.",
    ],
)
def test_a_name_wrapped_at_a_hyphen_is_still_this_droplet(body: str) -> None:
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(13, 10), report
    assert report.detail["matched"] == "name"


@pytest.mark.parametrize(
    "body",
    [
        "Your Spot GPU Droplet gpu-spot-\n10 will be reclaimed at 13:10 UTC.",
        "Your Spot GPU Droplet gpu-spot-\n\n1 will be reclaimed at 13:10 UTC.",
    ],
)
def test_another_name_wrapped_at_a_hyphen_is_not_this_droplet(body: str) -> None:
    assert _verdict(body).report is None


@given(indent=st.integers(min_value=0, max_value=90), width=st.integers(min_value=20, max_value=78))
def test_the_notice_wrapped_anywhere_names_this_droplet_and_its_time(
    indent: int, width: int
) -> None:
    sentence = "x" * indent + " Your Spot GPU Droplet gpu-spot-1 will be reclaimed at 13:10 UTC."
    body = textwrap.fill(sentence, width=width, break_on_hyphens=True)
    report = _verdict(body).report
    assert report is not None and report.deadline == _utc(13, 10), (body, report)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("reclaimed at 14:00 UTC. It may be reclaimed up to 50 minutes early.", _utc(13, 10)),
        ("reclaimed at 14:00 UTC. The reclaim may come as much as 1 hour earlier.", _utc(13)),
        ("reclaimed at 14:00 UTC (-30/+0 min).", _utc(13, 30)),
        (
            "reclaimed at 14:00 UTC. Note: reclaims can occur up to 30 min ahead of the "
            "announced time.",
            _utc(13, 30),
        ),
        ("reclaimed at 14:00 UTC (+0/-30 min).", _utc(13, 30)),
        ("reclaimed at 14:00 UTC [-1/+0 h].", _utc(13)),
        ("reclaimed at 14:00 UTC (-30/+30).", _utc(13, 30)),
        # Not the reclaim's: kept.
        ("reclaimed at 14:00 UTC. Backups may run up to 50 minutes early.", _utc(14)),
        ("reclaimed at 14:00 UTC. Support may take up to 50 minutes longer.", _utc(14)),
    ],
)
def test_a_reclaim_that_may_come_early_is_due_at_its_earliest(
    body: str, expected: datetime
) -> None:
    report = _verdict(f"Droplet gpu-spot-1 will be {body}").report
    assert report is not None and report.deadline == expected, report.detail


def test_a_mail_without_a_time_that_may_come_early_is_due_that_much_before_date_plus_lead() -> None:
    body = "Droplet gpu-spot-1 will be reclaimed soon. It may be reclaimed up to 30 minutes early."
    report = _verdict(body).report
    assert report is not None and report.deadline == SENT + timedelta(minutes=90), report.detail


@given(
    minutes=st.integers(min_value=1, max_value=600),
    form=st.sampled_from(
        [
            "at 14:00 UTC. It may be reclaimed up to {} minutes early.",
            "at 14:00 UTC. It may be reclaimed up to {} minutes before the scheduled time.",
            "at 14:00 UTC (-{}/+0 min).",
            "at 14:00 UTC [+0/-{} minutes].",
        ]
    ),
)
def test_any_early_margin_moves_the_deadline_back_by_it(minutes: int, form: str) -> None:
    report = _verdict(f"Droplet gpu-spot-1 will be reclaimed {form.format(minutes)}").report
    assert report is not None
    assert report.deadline == _utc(14) - timedelta(minutes=minutes), report.detail


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("Window end: 16:00 UTC\nWindow start: 14:00 UTC\n", _utc(14)),
        ("Ends: 16:00 UTC\nStarts: 14:00 UTC\n", _utc(14)),
        ("End time: 2026-12-04 16:00 UTC\nStart time: 2026-12-04 14:00 UTC\n", _utc(14, day=4)),
        # The start of another droplet's window is not ours.
        ("Window end: 16:00 UTC\nDroplet gpu-spot-7\nWindow start: 14:00 UTC\n", _utc(16)),
    ],
)
def test_a_window_s_end_written_above_its_start_gives_the_start(
    body: str, expected: datetime
) -> None:
    report = _verdict(f"Droplet gpu-spot-1 will be reclaimed.\n{body}").report
    assert report is not None and report.deadline == expected, report.detail


@given(
    start=st.integers(min_value=13 * 60, max_value=22 * 60),
    length=st.integers(min_value=1, max_value=120),
    labels=st.sampled_from([("Window end", "Window start"), ("End", "Start"), ("Until", "From")]),
)
def test_any_window_end_above_its_start_gives_the_start(
    start: int, length: int, labels: tuple[str, str]
) -> None:
    def clock(minutes: int) -> str:
        return f"{minutes // 60:02d}:{minutes % 60:02d} UTC"

    body = (
        "Droplet gpu-spot-1 will be reclaimed in this window.\n"
        f"{labels[0]}: {clock(start + length)}\n{labels[1]}: {clock(start)}\n"
    )
    report = _verdict(body).report
    assert report is not None
    written = SENT.replace(hour=0, minute=0) + timedelta(minutes=start)
    # Lines labelled "End:" and "Start:" alone are not about the reclaim: Date + lead, when
    # sooner, stands in (never later than the start).
    assert report.deadline <= written, body
    if labels[0].startswith("Window"):
        assert report.deadline == written, body


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A city's time, for the cities of DigitalOcean's regions: skipped, so Date + lead
        # stood in (for Singapore seven and a half hours after the time written).
        ("reclaimed at 13:15 London time.", _utc(13, 15)),
        ("reclaimed at 14:00 Amsterdam time.", _utc(13)),
        ("reclaimed at 14:00 (Frankfurt time).", _utc(13)),
        ("reclaimed at 21:00 Singapore time.", _utc(13)),
        ("reclaimed at 8:00 AM New York time.", _utc(13)),
        ("reclaimed at 8:00 Toronto time.", _utc(13)),
        ("reclaimed at 8:00 Atlanta time.", _utc(13)),
        ("reclaimed at 5 AM San Francisco time.", _utc(13)),
        ("reclaimed at 18:30 Bangalore time.", _utc(13)),
        ("reclaimed at 18:30 Bengaluru time.", _utc(13)),
        ("reclaimed at 13:00 SYDNEY TIME on December 2.", _utc(2, 0, 2)),
        # A city without "time" names no zone: still skipped.
        ("reclaimed at 13:15 London.", None),
    ],
)
def test_a_city_s_time_is_read_in_its_zone(text: str, expected: datetime | None) -> None:
    found = find_deadline(f"Droplet gpu-spot-1 will be {text}", SENT)
    assert (found and found[0]) == expected, found
