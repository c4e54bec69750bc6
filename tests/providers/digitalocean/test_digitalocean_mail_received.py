"""A mail without a usable Date header: its times are read from when the server received it
(IMAP INTERNALDATE), not from when the agent happened to read it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime, make_msgid
from pathlib import Path

import pytest
from do_support import RULES, new_mail, utc
from forewarn.agent.protocol import parse_time, utcnow
from forewarn.providers.digitalocean.imap import received_of
from forewarn.providers.digitalocean.mail import reclaim_verdict
from forewarn.testing import start_agent
from forewarn.testing.dovecot import Dovecot, MailUser
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from test_digitalocean_mailbox import running, settings_for

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def undated(text: str, date: str | None = None) -> bytes:
    message = new_mail()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Spot Droplet reclaim notice"
    if date is not None:
        message["Date"] = date
    message["Message-ID"] = make_msgid(domain="digitalocean.com")
    message.set_content(text)
    return bytes(message)


@pytest.mark.parametrize("date", [None, "yesterday-ish", "Mon, 99 Foo 2026 25:61:00 +0000"])
def test_a_bare_time_in_a_mail_without_a_date_is_read_from_its_delivery(date: str | None) -> None:
    # Delivered at 23:25, judged at 23:30: the reclaim at 01:00 is the next day's. Read
    # before as no time at all, received + lead (01:30) stood in, after the machine was gone.
    raw = undated("Droplet gpu-spot-1 will be reclaimed at 01:00 UTC.", date)
    verdict = reclaim_verdict(raw, RULES, "key", utc(23, 30), received=utc(23, 25))
    assert verdict.report is not None
    assert verdict.report.deadline == utc(1, 0, day=2)
    assert verdict.report.detail["deadline_source"] == "text: 01:00 UTC"


def test_a_mail_without_a_date_read_late_keeps_the_time_of_its_delivery() -> None:
    # Delivered at 23:25, read at 02:00 after a restart: "at 01:00 UTC" is past, to be acted
    # on at once; read from 02:00 it was 01:00 the day after, a day late.
    raw = undated("Droplet gpu-spot-1 will be reclaimed at 01:00 UTC.")
    verdict = reclaim_verdict(raw, RULES, "key", utc(2, 0, day=2), received=utc(23, 25))
    assert verdict.report is not None
    assert verdict.report.deadline == utc(1, 0, day=2)


def test_a_mail_without_a_date_or_time_is_due_its_delivery_plus_lead() -> None:
    raw = undated("Droplet gpu-spot-1 will be reclaimed.")
    verdict = reclaim_verdict(raw, RULES, "key", utc(23, 30), received=utc(23, 25))
    assert verdict.report is not None
    assert verdict.report.deadline == utc(1, 25, day=2)
    assert verdict.report.detail["deadline_source"] == "received+lead"


def test_a_mail_without_a_date_delivered_before_max_age_raises_nothing() -> None:
    raw = undated("Droplet gpu-spot-1 will be reclaimed.")
    verdict = reclaim_verdict(raw, RULES, "key", utc(12, day=3), received=utc(11, day=2))
    assert verdict.report is None
    assert "older than max_age" in verdict.why


def test_the_date_header_comes_before_the_delivery() -> None:
    raw = undated(
        "Droplet gpu-spot-1 will be reclaimed at 01:00 UTC.", "Tue, 01 Dec 2026 12:00:00 +0000"
    )
    verdict = reclaim_verdict(raw, RULES, "key", utc(12, 5), received=utc(11, 0))
    assert verdict.report is not None
    assert verdict.report.deadline == utc(1, 0, day=2)
    assert verdict.report.detail["date"] == "2026-12-01T12:00:00Z"


@given(
    moment=st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(9998, 12, 30), timezones=st.none()
    ),
    offset=st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
    padded=st.booleans(),
    uid_first=st.booleans(),
)
def test_the_internal_date_of_a_fetch_answer_is_that_moment(
    moment: datetime, offset: int, padded: bool, uid_first: bool
) -> None:
    zone = timezone(timedelta(minutes=offset))
    moment = moment.replace(microsecond=0, tzinfo=zone)
    day = f"{moment.day:2d}" if padded else str(moment.day)
    sign = "-" if offset < 0 else "+"
    written = (
        f'INTERNALDATE "{day}-{_MONTHS[moment.month - 1]}-{moment.year:04d} '
        f'{moment:%H:%M:%S} {sign}{abs(offset) // 60:02d}{abs(offset) % 60:02d}"'
    )
    if uid_first:
        data = [(f"1 (UID 9 {written} BODY[]<0> {{3}}".encode(), b"abc"), b")"]
    else:
        data = [(b"1 (BODY[]<0> {3}", b"abc"), f" {written} UID 9)".encode()]
    assert received_of(data, 9) == moment
    assert received_of(data, 10) is None


@given(st.lists(st.one_of(st.binary(max_size=60), st.tuples(st.binary(), st.binary()))))
def test_a_fetch_answer_of_any_bytes_gives_a_moment_or_none(data: list[object]) -> None:
    found = received_of(data, 9)
    assert found is None or found.tzinfo is not None


@pytest.mark.parametrize(
    "written",
    [
        b'INTERNALDATE "31-Feb-2026 10:00:00 +0000"',
        b'INTERNALDATE "01-Foo-2026 10:00:00 +0000"',
        b'INTERNALDATE "01-Dec-2026 24:00:00 +0000"',
        b'INTERNALDATE "01-Dec-2026 10:00:00 +9900"',
        b'INTERNALDATE "01-Dec-0000 10:00:00 +0100"',
        b"INTERNALDATE NIL",
    ],
)
def test_an_internal_date_that_is_no_moment_is_none(written: bytes) -> None:
    assert received_of([(b"1 (UID 9 " + written + b" BODY[]<0> {3}", b"abc"), b")"], 9) is None


async def test_a_mail_without_a_date_is_due_at_its_time_from_its_delivery(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path
) -> None:
    # Delivered an hour ago (the agent was down), reclaimed 90 min after its delivery. Read
    # before as no time at all: now + lead, 90 minutes after the machine was gone.
    delivered = utcnow().replace(microsecond=0) - timedelta(hours=1)
    at = delivered + timedelta(minutes=90)
    dovecot.append(
        mail_user,
        undated(f"Droplet gpu-spot-1 will be reclaimed at {at:%H:%M} UTC."),
        delivered=delivered,
    )
    async with running(settings_for(dovecot, mail_user, tmp_path), tmp_path / "state") as run:
        await run.until(lambda: len(run.reports) == 1)
        assert run.reports[0].deadline == at.replace(second=0)
        assert run.reports[0].detail["notice_time"] == f"{delivered:%Y-%m-%dT%H:%M:%SZ}"


# Tuesday 20:00 in New York, 01:00 UTC on Wednesday, as a server in New York writes
# INTERNALDATE (Dovecot gives its own zone; Gmail +0000).
_NY = timezone(timedelta(hours=-5))


@pytest.mark.parametrize(
    ("text", "received", "expected"),
    [
        # Of two readings of a day word, the earlier not past (as for a Date of -0500): one
        # read late loses work. A server in UTC has only the UTC day's reading.
        ("tomorrow at 14:00 UTC", datetime(2026, 12, 1, 20, tzinfo=_NY), utc(14, day=2)),
        ("tomorrow at 14:00 UTC", utc(1, day=2), utc(14, day=3)),
        # The UTC reading past by 22.5 h (a machine alive now was not reclaimed then): the
        # one ahead on the delivery's own calendar. In UTC it is past: at once, or another
        # machine's reclaim for a machine started since.
        ("today at 01:00 UTC", datetime(2026, 12, 1, 18, 30, tzinfo=_NY), utc(1, day=2)),
        ("today at 01:00 UTC", utc(23, 30), utc(1)),
        # Without a day word the zone of the delivery changes nothing.
        ("at 14:00 UTC", datetime(2026, 12, 1, 20, tzinfo=_NY), utc(14, day=2)),
        ("at 14:00 UTC", utc(1, day=2), utc(14, day=2)),
    ],
)
def test_a_mail_without_a_date_reads_day_words_on_the_calendar_of_its_delivery(
    text: str, received: datetime, expected: datetime
) -> None:
    """Without a Date, INTERNALDATE's own offset (the server's zone) stands for the Date's:
    its calendar gives the second reading of `today` and `tomorrow`, under the same rules."""
    raw = undated(f"Droplet gpu-spot-1 will be reclaimed {text}.")
    verdict = reclaim_verdict(raw, RULES, "key", received, received=received)
    assert verdict.report is not None, verdict.why
    assert verdict.report.deadline == expected


@hypothesis_settings(max_examples=40)
@given(
    moment=st.datetimes(
        min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.none()
    ),
    offset=st.integers(-12 * 60, 14 * 60).map(lambda minutes: minutes - minutes % 15),
    clock=st.tuples(st.integers(0, 23), st.sampled_from([0, 30])),
    day=st.sampled_from(["", "today", "tomorrow"]),
)
def test_an_internal_date_stands_for_the_missing_date_and_is_never_later_than_utc_s(
    moment: datetime, offset: int, clock: tuple[int, int], day: str
) -> None:
    """A mail without a Date read from its INTERNALDATE reads as that mail dated so (the
    same moment and offset); and the server's zone never makes its deadline later than the
    reading of a server in UTC, unless that one is past (a deadline already gone, acted on at
    once or passed over)."""
    received = moment.replace(second=0, microsecond=0, tzinfo=timezone.utc).astimezone(
        timezone(timedelta(minutes=offset))
    )
    said = f"{day} at" if day else "at"
    text = f"Droplet gpu-spot-1 will be reclaimed {said} {clock[0]:02d}:{clock[1]:02d} UTC."
    from_received = reclaim_verdict(undated(text), RULES, "key", received, received=received)
    dated = undated(text, format_datetime(received))
    from_date = reclaim_verdict(dated, RULES, "key", received)
    in_utc = received.astimezone(timezone.utc)
    from_utc = reclaim_verdict(undated(text), RULES, "key", in_utc, received=in_utc)
    assert from_received.report is not None and from_date.report is not None
    assert from_utc.report is not None
    assert from_received.report.deadline == from_date.report.deadline
    deadline, utc_deadline = from_received.report.deadline, from_utc.report.deadline
    assert deadline is not None and utc_deadline is not None
    if utc_deadline >= received - timedelta(minutes=10):
        assert deadline <= utc_deadline


def dated(text: str, date: datetime) -> bytes:
    return undated(text, format_datetime(date))


def test_a_date_hours_after_the_mails_receipt_is_counted_from_its_receipt() -> None:
    """A mail whose Date is 5 h after the server received it (the sender's clock, not when
    it was sent): "in about 2 hours" was read from the Date, 7 h after the mail came, and
    the terminate came 5 h after the reclaim. Its times are read from its receipt, and the
    verdict says why."""
    received = utc(12, 0)
    raw = dated("Droplet gpu-spot-1 will be reclaimed in about 2 hours.", utc(17, 0))
    verdict = reclaim_verdict(raw, RULES, "key", utc(12, 1), received=received)
    assert verdict.report is not None
    assert verdict.report.deadline == utc(14, 0)
    assert "5.0 h after the server received it" in verdict.why, verdict.why
    assert verdict.report.detail["date_after_receipt_seconds"] == 5 * 3600
    # No time written: receipt + lead, said so.
    raw = dated("Droplet gpu-spot-1 will be reclaimed.", utc(17, 0))
    verdict = reclaim_verdict(raw, RULES, "key", utc(12, 1), received=received)
    assert verdict.report is not None
    assert verdict.report.deadline == received + RULES.lead
    assert verdict.report.detail["deadline_source"] == "received+lead"


@given(
    ahead=st.integers(-86400, 86400),
    offset=st.integers(-14 * 60, 14 * 60),
    hours=st.integers(1, 5),
)
def test_times_count_from_the_earlier_of_the_date_and_the_receipt(
    ahead: int, offset: int, hours: int
) -> None:
    """Any Date around the receipt, in any offset: a Date up to 5 min after the receipt (or
    any before it) stands; one later, the receipt does, and a relative time counts from it."""
    received = utc(12, 0)
    zone = timezone(timedelta(minutes=offset))
    date = (received + timedelta(seconds=ahead)).astimezone(zone)
    raw = dated(f"Droplet gpu-spot-1 will be reclaimed in {hours} hours.", date)
    now = max(received, date) + timedelta(minutes=1)
    verdict = reclaim_verdict(raw, RULES, "key", now, received=received)
    if ahead < -RULES.max_age.total_seconds():
        return
    assert verdict.report is not None, verdict.why
    sent = date if ahead <= 300 else received
    assert verdict.report.deadline == sent + timedelta(hours=hours), verdict.why
    assert ("after the server received it" in verdict.why) == (ahead > 300)


def test_the_agent_times_a_mail_dated_hours_ahead_from_its_delivery() -> None:
    """Through the real agent and Dovecot: a reclaim mail whose Date is 5 h ahead of its
    delivery, "in about 2 hours", is one drain due 2 h after the delivery, the log line of
    its verdict naming the Date."""
    with start_agent("digitalocean") as agent:
        droplet_id, _ = agent.digitalocean.droplet()
        delivered = datetime.now(timezone.utc)
        message = new_mail()
        message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
        message["Subject"] = "Your Spot Droplet will be reclaimed"
        message["Date"] = format_datetime(delivered + timedelta(hours=5))
        message["Message-ID"] = make_msgid(domain="digitalocean.com")
        message.set_content(f"Droplet {droplet_id} will be reclaimed in about 2 hours.\n")
        agent.digitalocean.mail(bytes(message))
        drain = agent.wait_for_event(action="drain", timeout=20)
        deadline = parse_time(drain["deadline"])
        expected = delivered + timedelta(hours=2)
        assert abs(deadline - expected) < timedelta(seconds=30), (deadline, expected)
        assert re.search(r"mail UID \d+ is a .*5\.0 h after the server received it", agent.log())
