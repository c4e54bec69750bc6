"""Which of several times on the reclaim's line is the deadline: the one written right after
the reclaim's own words, else the earliest not past, never a time today already past that
is something else's (when the droplet was created, when the mail was written)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from do_support import RULES, new_mail
from forewarn.providers.digitalocean.mail import find_deadline, reclaim_verdict
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support import examples

SENT = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc)
_SENT_NEAR = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
).map(lambda moment: moment.replace(microsecond=0))


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, 1, hour, minute, tzinfo=timezone.utc)


def _mail(body: str, sent: datetime = SENT) -> bytes:
    message = new_mail()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Spot Droplet reclaim notice"
    message["Date"] = format_datetime(sent)
    message["Message-ID"] = "<reclaim-times@digitalocean.com>"
    message.set_content(body)
    return bytes(message)


def _clock(moment: datetime) -> str:
    return f"{moment:%H:%M} UTC"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # The first time on the line was taken: 09:00, so a terminate at once (before the
        # 'today' rule: 09:00 tomorrow, a day late).
        (
            "Your Droplet gpu-spot-1, created today at 09:00 UTC, will be reclaimed today at "
            "16:00 UTC.",
            _at(16),
        ),
        (
            "We sent this today at 12:00 UTC. Your Droplet gpu-spot-1 will be reclaimed at "
            "16:00 UTC.",
            _at(16),
        ),
        # Within the 10 minutes of slack, so not past: the reclaim's own time still wins.
        (
            "We sent this today at 12:25 UTC. Your Droplet gpu-spot-1 will be reclaimed at "
            "16:00 UTC.",
            _at(16),
        ),
        # A sentence wrapped over lines, as plain-text mail is.
        (
            "Your Droplet gpu-spot-1, created today at 09:00 UTC,\nwill be reclaimed today at "
            "16:00 UTC.",
            _at(16),
        ),
        (
            "Your Droplet gpu-spot-1 (created today at 12:25 UTC) is scheduled to be\n"
            "interrupted between 15:00 and 16:00 UTC.",
            _at(15),
        ),
        (
            "The reclaim of Droplet gpu-spot-1 (ID 424242424) is scheduled for 16:00 UTC; it "
            "was started at 12:25 UTC.",
            _at(16),
        ),
        # Advice is not the reclaim: the agent keeps its own margin before the deadline.
        (
            "Please save your work before 15:00 UTC. Droplet gpu-spot-1 will be reclaimed at "
            "16:00 UTC.",
            _at(16),
        ),
        # Unsure which is the reclaim's: the earliest not past.
        ("Droplet gpu-spot-1: 16:00 UTC (window opens 14:00 UTC).", _at(14)),
        ("Droplet gpu-spot-1: reclaim due, see 17:00 UTC or 15:00 UTC.", _at(15)),
        # The reclaim's own time today, already past: still the deadline.
        (
            "Your Droplet gpu-spot-1 was to be reclaimed today at 11:00 UTC; we sent this at "
            "12:25 UTC.",
            _at(11),
        ),
        ("Your Droplet gpu-spot-1 will be reclaimed today at 11:00 UTC.", _at(11)),
        # Alone, a time today already past is still taken (clients act at once).
        ("Droplet gpu-spot-1: today at 11:00 UTC.", _at(11)),
        # Another droplet's time on the same line is not ours, earlier or not.
        ("Droplets: gpu-spot-1 at 16:00 UTC, gpu-spot-7 at 14:00 UTC.", _at(16)),
        ("gpu-spot-1: 16:00 UTC\ngpu-spot-7: 14:00 UTC", _at(16)),
    ],
)
def test_the_reclaim_s_own_time_on_its_line_is_the_deadline(body: str, expected: datetime) -> None:
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline == expected, report.detail["deadline_source"]


_OTHER_TIMES = st.sampled_from(
    [
        "created today at {}",
        "we sent this today at {}",
        "started today at {}",
        "last updated today at {}",
        "booted at {} today",
    ]
)
_RECLAIM_TIMES = st.sampled_from(
    [
        "will be reclaimed {day}at {}",
        "will be reclaimed {day}between {} and 23:59 UTC",
        "is scheduled to be reclaimed {day}at {}",
        "will be interrupted {day}at {}",
        "will be stopped {day}at {}",
        "has a reclaim scheduled for {day}{}",
    ]
)
_LAYOUTS = st.sampled_from(
    [
        "Your Droplet gpu-spot-1, {other}, {reclaim}.",
        "Your Droplet gpu-spot-1, {other},\n{reclaim}.",
        "{Other}. Your Droplet gpu-spot-1 {reclaim}.",
        "{Other}; Droplet gpu-spot-1 (ID 424242424) {reclaim}.",
        "Your Droplet gpu-spot-1 {reclaim} ({other}).",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    ahead=st.integers(min_value=11, max_value=20 * 60),
    other=st.tuples(st.integers(0, 23), st.integers(0, 59)),
    other_form=_OTHER_TIMES,
    reclaim_form=_RECLAIM_TIMES,
    layout=_LAYOUTS,
)
def test_any_other_time_on_the_reclaim_s_line_leaves_the_reclaim_s_time(
    sent: datetime,
    ahead: int,
    other: tuple[int, int],
    other_form: str,
    reclaim_form: str,
    layout: str,
) -> None:
    reclaim = (sent + timedelta(minutes=ahead)).replace(second=0)
    # "today" only when it is; else the time's next occurrence, the day after.
    day = "today " if reclaim.date() == sent.date() else ""
    assume(not (day == "" and "between" in reclaim_form))  # a window to 23:59 is today's
    said = other_form.format("{:02d}:{:02d} UTC".format(*other))
    body = layout.format(
        other=said,
        Other=said[0].upper() + said[1:],
        reclaim=reclaim_form.format(_clock(reclaim), day=day),
    )
    found = find_deadline(body, sent)
    assert found is not None, body
    assert found[0] == reclaim, (body, sent, found)


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    first=st.integers(min_value=11, max_value=23 * 60),
    second=st.integers(min_value=11, max_value=23 * 60),
    joint=st.sampled_from([" or ", ", ", " (see also ", "; window opens "]),
)
def test_of_times_on_the_droplet_s_line_none_the_reclaim_s_the_earliest_is_taken(
    sent: datetime, first: int, second: int, joint: str
) -> None:
    # Never later than a time that may be the reclaim's: a deadline read late loses work,
    # one read early only stops early.
    times = [(sent + timedelta(minutes=m)).replace(second=0) for m in (first, second)]
    body = f"Droplet gpu-spot-1: {_clock(times[0])}{joint}{_clock(times[1])}"
    found = find_deadline(body, sent)
    assert found is not None, body
    assert found[0] == min(times), (body, sent, found)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A colon after the zone was refused, so the time was not read and Date + lead stood
        # in: a mail sent 15:30 for a 16:00 reclaim was read as 17:30, after it.
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC: please save your work", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 Z: save your work", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 17:00 CET: save your work", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC+1: save your work", _at(15)),
        ("Droplet gpu-spot-1 will be reclaimed at 11:00 GMT-05:00: save", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 17:00 Europe/Berlin: save", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed between 14:00 and 16:00 UTC: save", _at(14)),
        ("Droplet gpu-spot-1 will be reclaimed on December 4 at 16:00 UTC: save", None),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC:", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC; please save", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC!", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed (16:00 UTC).", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 (UTC): save", _at(16)),
    ],
)
def test_a_zone_ending_a_clause_places_the_time(text: str, expected: datetime | None) -> None:
    found = find_deadline(text, SENT)
    assert found is not None, text
    assert found[0] == (expected or datetime(2026, 12, 4, 16, tzinfo=timezone.utc)), found


@pytest.mark.parametrize(
    "text",
    [
        # "UTC:" before a figure labels what follows: it is not the zone of the time before.
        "Droplet gpu-spot-1 will be reclaimed at 16:00 UTC: 2026-12-01",
        "Droplet gpu-spot-1 will be reclaimed at 17:00\nUTC: 16:00",
        "Droplet gpu-spot-1 will be reclaimed at 16:00 UTC:\n2026-12-01",
        "Droplet gpu-spot-1 will be reclaimed at 16:00 UTC:00",
    ],
)
def test_a_zone_labelling_the_figures_after_it_places_no_time_before_it(text: str) -> None:
    assert find_deadline(text, SENT) is None


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    ahead=st.integers(min_value=0, max_value=20 * 60),
    zone=st.sampled_from(
        [
            *[("UTC", 0), ("GMT", 0), ("Z", 0), ("+01:00", 1), ("UTC-5", -5), ("(UTC)", 0)],
            *[("CEST", 2), ("JST", 9), ("Asia/Tokyo", 9), ("Etc/GMT+3", -3)],  # Etc: sign flipped
        ]
    ),
    mark=st.sampled_from([":", ";", "!", ".", ",", ")", " -", "?", ":\n"]),
    rest=st.sampled_from(["", " please save your work", " Save your work.", "\nThanks"]),
)
def test_any_zone_ending_a_clause_places_the_time(
    sent: datetime, ahead: int, zone: tuple[str, int], mark: str, rest: str
) -> None:
    moment = (sent + timedelta(minutes=ahead)).replace(second=0)
    local = moment + timedelta(hours=zone[1])
    text = f"Droplet gpu-spot-1 will be reclaimed at {local:%H:%M} {zone[0]}{mark}{rest}"
    found = find_deadline(text, sent)
    assert found is not None, text
    assert found[0] == moment, (text, sent, found)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A time wrapped alone onto the next line was skipped (that line says nothing of the
        # reclaim), and Date + lead stood in, later than the reclaim.
        ("Droplet gpu-spot-1 will be reclaimed at\n16:00 UTC.", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed at\n  16:00 UTC: save your work.", _at(16)),
        ("Hello,\n\nYour Droplet gpu-spot-1 will be reclaimed\nat 16:00 UTC.", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed today,\n16:00 UTC.", _at(16)),
        ("Droplet gpu-spot-1 will be reclaimed tomorrow at\n16:00 UTC.", _at(16) + timedelta(1)),
        ("Droplet gpu-spot-1 will be reclaimed at\n16:00 UTC tomorrow.", _at(16) + timedelta(1)),
        # The reclaim's own time, wrapped, still wins over another time on its line.
        ("Droplet gpu-spot-1, created at 12:25 UTC, will be reclaimed at\n16:00 UTC.", _at(16)),
        (
            "Droplet gpu-spot-1, created today at 09:00 UTC, will be reclaimed at\n16:00 UTC.",
            _at(16),
        ),
    ],
)
def test_a_time_wrapped_onto_the_next_line_is_the_reclaim_s(body: str, expected: datetime) -> None:
    report = reclaim_verdict(_mail(f"Notice.\n\n{body}"), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline == expected, report.detail["deadline_source"]
    found = find_deadline(f"Notice.\n\n{body}", SENT)
    assert found is not None and found[0] == expected, found


def test_a_line_that_does_not_carry_on_the_reclaim_s_keeps_its_times_to_itself() -> None:
    # Support hours on a line of their own are no deadline, whatever line is before them.
    body = "Notice.\nDroplet gpu-spot-1 will be reclaimed.\n09:00-17:00 UTC: support hours"
    assert find_deadline(body, SENT) is None
    assert find_deadline("Notice.\nSupport is open,\n09:00-17:00 UTC.", SENT) is None


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    ahead=st.integers(min_value=11, max_value=20 * 60),
    other=st.tuples(st.integers(0, 23), st.integers(0, 59)),
    other_form=_OTHER_TIMES,
    reclaim_form=_RECLAIM_TIMES,
    layout=_LAYOUTS,
    wraps=st.lists(st.booleans(), min_size=32, max_size=32),
)
def test_the_reclaim_s_sentence_wrapped_at_any_space_keeps_its_time(
    sent: datetime,
    ahead: int,
    other: tuple[int, int],
    other_form: str,
    reclaim_form: str,
    layout: str,
    wraps: list[bool],
) -> None:
    # Plain-text mail wraps at 72-78 columns, at any space: the lines a sentence wraps onto
    # are read as its line.
    reclaim = (sent + timedelta(minutes=ahead)).replace(second=0)
    day = "today " if reclaim.date() == sent.date() else ""
    assume(not (day == "" and "between" in reclaim_form))
    said = other_form.format("{:02d}:{:02d} UTC".format(*other))
    body = layout.format(
        other=said,
        Other=said[0].upper() + said[1:],
        reclaim=reclaim_form.format(_clock(reclaim), day=day),
    )
    words = body.split(" ")
    wrapped = words[0] + "".join(
        ("\n" if wrap else " ") + word for word, wrap in zip(words[1:], wraps * 2, strict=False)
    )
    found = find_deadline(f"Notice.\n\n{wrapped}", sent)
    assert found is not None, wrapped
    assert found[0] == reclaim, (wrapped, sent, found)


# Sent at 12:00 UTC, as in the notes of the mails these came from.
_NOON = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "text",
    [
        # "stops" is a word of the reclaim, but billing's here: 13:00 was taken as the
        # earliest time after such words, wherever its sentence stood on the line.
        "Billing stops today at 13:00 UTC. Droplet gpu-1 will be reclaimed at 16:00 UTC.",
        "Droplet gpu-1 will be reclaimed at 16:00 UTC. Billing stops today at 13:00 UTC.",
        "Droplet gpu-1 will be reclaimed at 16:00 UTC. Billing stops today at 23:59 UTC.",
        "Backups stop at 13:00 UTC; Droplet gpu-1 will be reclaimed at 16:00 UTC.",
        "Log shipping is shut down at 13:00 UTC. Your Droplet will be reclaimed at 16:00 UTC.",
        "Billing stops today at\n13:00 UTC. Droplet gpu-1 will be reclaimed at 16:00 UTC.",
    ],
)
def test_a_time_after_a_reclaim_word_in_another_sentence_leaves_the_reclaim_s(text: str) -> None:
    found = find_deadline(text, _NOON)
    assert found is not None and found[0] == _at(16), found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Of the reclaim's own sentences, or the droplet's, the earliest still wins.
        ("The Droplet stops at 15:00 UTC. Droplet gpu-1 will be reclaimed at 16:00 UTC.", 15),
        ("Droplet gpu-1 will be reclaimed at 16:00 UTC; it will be shut down at 15:00 UTC.", 15),
        ("Droplet gpu-1 will be shut down at 15:00 UTC and reclaimed at 16:00 UTC.", 15),
        # A time after "stops" alone is still taken.
        ("Droplet gpu-1. Billing stops today at 13:00 UTC.", 13),
    ],
)
def test_the_reclaim_s_and_the_droplet_s_sentences_keep_the_earliest(
    text: str, expected: int
) -> None:
    found = find_deadline(text, _NOON)
    assert found is not None and found[0] == _at(expected), found


@pytest.mark.parametrize(
    "text",
    [
        # A time today already past, in a sentence that says nothing of the reclaim: taken
        # when the reclaim's sentence had no time, so a terminate at once.
        "Your maintenance window starts today at 09:00 UTC. Droplet gpu-1 will be reclaimed soon.",
        "Droplet gpu-1 will be reclaimed soon. Your maintenance window starts today at 09:00 UTC.",
        "Billing stopped today at 09:00 UTC. Droplet gpu-1 will be reclaimed soon.",
        "We sent this today at 09:00 UTC; Droplet gpu-1 will be reclaimed soon.",
    ],
)
def test_a_past_time_in_another_sentence_is_no_deadline(text: str) -> None:
    assert find_deadline(text, _NOON) is None


def test_a_mail_whose_only_time_is_another_sentence_s_past_one_takes_date_plus_lead() -> None:
    body = (
        "Your maintenance window starts today at 09:00 UTC. Droplet gpu-spot-1 will be "
        "reclaimed soon."
    )
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.detail["deadline_source"] == "date+lead"
    assert report.deadline == SENT + timedelta(hours=2)


@pytest.mark.parametrize(
    "body",
    [
        # The reclaim's sentence has no time, another sentence on its line a later one: it
        # was the deadline, hours after Date + lead, and the work since the drain was lost.
        "Your Spot GPU Droplet gpu-spot-1 (ID 424242424) will be reclaimed. Backups run daily "
        "at 18:00 UTC.",
        "Your Spot GPU Droplet gpu-spot-1 will be reclaimed. Our support team is available "
        "until 22:00 UTC.",
        "Your Spot GPU Droplet gpu-spot-1 will be reclaimed soon. A snapshot scheduled for "
        "23:00 UTC will not run.",
        "Your Spot Droplet gpu-spot-1 will be reclaimed. Billing stops at 18:00 UTC.",
        "Backups run daily at 18:00 UTC. Your Spot GPU Droplet gpu-spot-1 will be reclaimed.",
        # A new time without its time: the later one was the new deadline.
        "The reclaim of gpu-spot-1 has been rescheduled. Backups run daily at 18:00 UTC.",
        "Your Spot Droplet gpu-spot-1 will be reclaimed.\nSupport: 13:00-22:00 UTC, then "
        "from 2026-12-02 08:00 UTC.",
    ],
)
def test_another_sentence_s_later_time_never_puts_the_deadline_past_date_plus_lead(
    body: str,
) -> None:
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline <= SENT + timedelta(hours=2), report.detail["deadline_source"]


@settings(max_examples=examples(200), deadline=None)
@given(
    thing=st.sampled_from(
        [
            "Backups run daily",
            "Our support team is available until",
            "Billing stops",
            "A snapshot is scheduled for",
            "Maintenance of nyc2 starts",
            "The invoice is sent",
            "Your backups have been moved to",
        ]
    ),
    hour=st.integers(15, 23),
    minute=st.integers(0, 59),
    dated=st.booleans(),
    before=st.booleans(),
    wrap=st.sampled_from([" ", "\n"]),
)
def test_no_later_time_of_something_else_is_the_deadline(
    thing: str, hour: int, minute: int, dated: bool, before: bool, wrap: str
) -> None:
    when = f"{'2026-12-01 ' if dated else ''}{hour:02d}:{minute:02d} UTC"
    aside = f"{thing} {'at ' if not thing.endswith(('until', 'for', 'to')) else ''}{when}."
    notice = "Your Spot Droplet gpu-spot-1 will be reclaimed."
    body = f"{aside}{wrap}{notice}" if before else f"{notice}{wrap}{aside}"
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline <= SENT + timedelta(hours=2), (body, report.detail)


@pytest.mark.parametrize(
    "body",
    [
        # The reclaim's own time, or a sentence of nothing but a time, is the deadline however
        # far after Date + lead.
        "Droplet gpu-spot-1 will be reclaimed at 18:00 UTC.",
        "Droplet gpu-spot-1 will be reclaimed. Time: 18:00 UTC.",
        "gpu-spot-1: 18:00 UTC",
        "Your Droplet gpu-spot-1 will be reclaimed soon. It will be powered off at 18:00 UTC.",
        "Backups run daily at 13:00 UTC. Droplet gpu-spot-1 will be reclaimed at 18:00 UTC.",
        "gpu-spot-1: rescheduled to 18:00 UTC, previously scheduled for 13:00 UTC.",
        "Droplet gpu-spot-1: rescheduled\nOld time: 13:00 UTC\nNew time: 18:00 UTC",
    ],
)
def test_the_reclaim_s_own_later_time_is_still_the_deadline(body: str) -> None:
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline == _at(18), report.detail["deadline_source"]


@pytest.mark.parametrize(
    "body",
    [
        # The droplet named by its name alone, or the reclaim's own words: still at once.
        "gpu-spot-1: today at 11:00 UTC.",
        "Droplet gpu-spot-1: today at 11:00 UTC.",
        "Your Droplet gpu-spot-1 will be reclaimed\ntoday at 11:00 UTC.",
        "Notice for gpu-spot-1.\nReclaim: today at 11:00 UTC.",
        # A sentence of only the time says nothing of anything else: the reclaim's.
        "Droplet gpu-spot-1 will be reclaimed. Time: today at 11:00 UTC.",
        "Droplet gpu-spot-1 will be reclaimed soon. Scheduled for: today at 11:00 UTC.",
        "Droplet gpu-spot-1 will be reclaimed soon. When: today at 11 a.m. UTC.",
    ],
)
def test_a_past_time_today_in_the_reclaim_s_sentence_is_still_the_deadline(body: str) -> None:
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    assert report.deadline == _at(11), report.detail["deadline_source"]


_UNRELATED = st.sampled_from(
    [
        "Billing stops {day}at {}",
        "Your maintenance window starts {day}at {}",
        "Backups stop {day}at {}",
        "Log shipping was shut down {day}at {}",
        "We sent this {day}at {}",
    ]
)
_RECLAIM_SENTENCES = st.sampled_from(
    [
        "Droplet gpu-spot-1 will be reclaimed {day}at {}",
        "Your Droplet gpu-spot-1 will be stopped {day}at {}",
        "The reclaim of Droplet gpu-spot-1 is scheduled for {day}{}",
        "Droplet gpu-spot-1 will be interrupted {day}between {} and 23:59 UTC",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    ahead=st.integers(min_value=11, max_value=20 * 60),
    other=st.integers(min_value=-12 * 60, max_value=20 * 60),
    unrelated=_UNRELATED,
    reclaim_form=_RECLAIM_SENTENCES,
    after=st.booleans(),
    joint=st.sampled_from([". ", "; ", ".\n", ". \n\n", "! "]),
)
def test_another_sentence_s_time_never_replaces_the_reclaim_s(
    sent: datetime,
    ahead: int,
    other: int,
    unrelated: str,
    reclaim_form: str,
    after: bool,
    joint: str,
) -> None:
    reclaim = (sent + timedelta(minutes=ahead)).replace(second=0)
    day = "today " if reclaim.date() == sent.date() else ""
    assume(not (day == "" and "between" in reclaim_form))
    moment = (sent + timedelta(minutes=other)).replace(second=0)
    # "today" only when it is; otherwise the other time may be any day's.
    other_day = "today " if moment.date() == sent.date() else ""
    sentences = [
        reclaim_form.format(_clock(reclaim), day=day),
        unrelated.format(_clock(moment), day=other_day),
    ]
    body = joint.join(sentences if not after else sentences[::-1]) + "."
    report = reclaim_verdict(_mail(body, sent), RULES, "key", sent).report
    assert report is not None
    assert report.deadline == reclaim, (body, sent, report.detail["deadline_source"])
    if "\n" not in joint or not after:
        # Alone, the text is read from its first time's line: the mail, from the droplet's.
        found = find_deadline(body, sent)
        assert found is not None, body
        assert found[0] == reclaim, (body, sent, found)


@settings(max_examples=examples(300), deadline=None)
@given(
    sent=_SENT_NEAR,
    other=st.integers(min_value=-12 * 60, max_value=-11),
    unrelated=_UNRELATED,
    after=st.booleans(),
    joint=st.sampled_from([". ", "; ", ".\n", "! "]),
)
def test_another_sentence_s_past_time_never_stands_in_for_the_reclaim_s(
    sent: datetime, other: int, unrelated: str, after: bool, joint: str
) -> None:
    moment = (sent + timedelta(minutes=other)).replace(second=0)
    assume(moment.date() == sent.date())  # a time "today", already past
    sentences = [
        "Droplet gpu-spot-1 will be reclaimed soon",
        unrelated.format(_clock(moment), day="today "),
    ]
    body = joint.join(sentences if not after else sentences[::-1]) + "."
    assert find_deadline(body, sent) is None, body
    report = reclaim_verdict(_mail(body, sent), RULES, "key", sent).report
    assert report is not None and report.detail["deadline_source"] == "date+lead", body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # Only the first time counted as the reclaim's: another time stood between the
        # second and the reclaim's words, so 16:00, two hours late.
        (
            "Your Droplet gpu-spot-1 will be reclaimed no later than 16:00 UTC, possibly as "
            "early as 14:00 UTC.",
            _at(14),
        ),
        ("Droplet gpu-spot-1 will be reclaimed at 16:00 UTC or even 13:30 UTC.", _at(13, 30)),
        (
            "Droplet gpu-spot-1 is expected to be reclaimed at 15:00 UTC, but maybe as early "
            "as 13:45 UTC.",
            _at(13, 45),
        ),
        ("The reclaim of gpu-spot-1 is due by 16:00 UTC and may start at 14:30 UTC.", _at(14, 30)),
        # Still the reclaim's own time first: "created" is not the reclaim's.
        (
            "Droplet gpu-spot-1 will be reclaimed at 16:00 UTC, created today at 09:00 UTC.",
            _at(16),
        ),
    ],
)
def test_every_time_after_the_reclaim_s_words_is_the_reclaim_s(
    body: str, expected: datetime
) -> None:
    found = find_deadline(body, SENT)
    assert found is not None and found[0] == expected, (body, found)


@settings(max_examples=examples(200), deadline=None)
@given(
    sent=_SENT_NEAR,
    first=st.integers(min_value=11, max_value=23 * 60),
    second=st.integers(min_value=11, max_value=23 * 60),
    lead_in=st.sampled_from(["at", "no later than", "by", "around", "at the latest"]),
    joint=st.sampled_from(
        [", possibly as early as ", " or even ", ", but maybe at ", " and may start at ", " or "]
    ),
    wrapped=st.booleans(),
)
def test_of_times_after_the_reclaim_s_words_the_earliest_is_taken(
    sent: datetime, first: int, second: int, lead_in: str, joint: str, wrapped: bool
) -> None:
    times = [(sent + timedelta(minutes=m)).replace(second=0) for m in (first, second)]
    joint = joint.replace(" ", "\n", 1) if wrapped and joint.startswith(" ") else joint
    body = (
        f"Your Droplet gpu-spot-1 will be reclaimed {lead_in} {_clock(times[0])}{joint}"
        f"{_clock(times[1])}."
    )
    found = find_deadline(body, sent)
    assert found is not None, body
    assert found[0] == min(times), (body, sent, found)


def test_a_time_inside_another_time_s_words_is_not_the_reclaim_s_too() -> None:
    # "2000 Z" is the year of "20:01 on January 2, 2000 Z", not a second time (20:00).
    sent = datetime(2000, 1, 1, tzinfo=timezone.utc)
    text = "Droplet gpu-spot-1 will be reclaimed at 20:01 on January 2, 2000 Z"
    found = find_deadline(text, sent)
    assert found is not None and found[0] == datetime(2000, 1, 2, 20, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "line",
    [
        # Lines not about the reclaim: their times were skipped, and Date + lead (14:30)
        # stood in, 80 minutes late.
        "ETA: 13:10 UTC",
        "Time: 13:10 UTC",
        "Expected at: 13:10 UTC",
        "Earliest: 13:10 UTC\nLatest: 15:00 UTC",
        "Latest: 15:00 UTC\nEarliest: 13:10 UTC",
        "Not before: 13:10 UTC\nNot after: 15:00 UTC",
        "\nThis will happen at 13:10 UTC.",
        "\nPlease save your work before 13:10 UTC.",
        "\nYou have until 13:10 UTC.",
        "\nWe need the capacity back at 13:10 UTC.",
    ],
)
def test_a_time_sooner_than_date_plus_lead_stands_in_for_it(line: str) -> None:
    report = reclaim_verdict(
        _mail(f"Droplet gpu-spot-1 will be reclaimed.\n{line}"), RULES, "key", SENT
    ).report
    assert report is not None
    assert report.deadline == _at(13, 10), report.detail["deadline_source"]


def test_a_time_later_than_date_plus_lead_off_the_reclaim_s_lines_is_passed_over() -> None:
    report = reclaim_verdict(
        _mail("Droplet gpu-spot-1 will be reclaimed.\nOur next newsletter: 16:00 UTC"),
        RULES,
        "key",
        SENT,
    ).report
    assert report is not None and report.detail["deadline_source"] == "date+lead"


@settings(max_examples=examples(100), deadline=None)
@given(
    sent=_SENT_NEAR,
    clocks=st.lists(st.tuples(st.integers(0, 23), st.integers(0, 59)), max_size=3),
    reclaim=st.none() | st.integers(min_value=11, max_value=20 * 60),
    label=st.sampled_from(["ETA: ", "Support hours: ", "Updates at ", "\nIt happens at "]),
)
def test_a_time_off_the_reclaim_s_lines_never_makes_the_deadline_later(
    sent: datetime, clocks: list[tuple[int, int]], reclaim: int | None, label: str
) -> None:
    said = "" if reclaim is None else f" at {_clock(sent + timedelta(minutes=reclaim))}"
    first = f"Droplet gpu-spot-1 will be reclaimed{said}."
    extra = "".join(f"\n{label}{h:02d}:{m:02d} UTC" for h, m in clocks)
    without = reclaim_verdict(_mail(first, sent), RULES, "key", sent + timedelta(minutes=1))
    with_them = reclaim_verdict(
        _mail(first + extra, sent), RULES, "key", sent + timedelta(minutes=1)
    )
    assert without.report is not None and with_them.report is not None
    assert with_them.report.deadline <= without.report.deadline, (first + extra, sent)
    if reclaim is None:  # Date + lead (2 h) at the latest
        assert with_them.report.deadline <= sent + timedelta(hours=2)


@pytest.mark.parametrize(
    "body",
    [
        # A digest whose blocks give the time above the droplet: the first block's time,
        # another droplet's, was taken, two hours fifty late.
        "Reclaim: 16:00 UTC\nDroplet: gpu-spot-7\n\nReclaim: 13:10 UTC\nDroplet: gpu-spot-1\n",
        "Reclaim: 16:00 UTC\nDroplet: gpu-spot-7\nReclaim: 13:10 UTC\nDroplet: gpu-spot-1\n",
        "When: 2026-12-01 16:00 UTC\nWhat: reclaim of gpu-spot-7\n\n"
        "When: 2026-12-01 13:10 UTC\nWhat: reclaim of gpu-spot-1\n",
    ],
)
def test_a_digest_s_block_giving_its_time_above_its_droplet_is_read_as_written(body: str) -> None:
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None and report.deadline == _at(13, 10), report


@given(
    ours=st.sampled_from(["", "Reclaim: 13:10 UTC\n", "Reclaim: 17:00 UTC\n"]),
    blank=st.sampled_from(["", "\n"]),
    order=st.booleans(),
)
def test_a_time_above_this_droplet_never_makes_the_deadline_later(
    ours: str, blank: str, order: bool
) -> None:
    # The other droplet's block, its time above or below its name, then this droplet's.
    other = (
        "Reclaim: 16:00 UTC\nDroplet: gpu-spot-7\n"
        if order
        else "Droplet: gpu-spot-7\nReclaim: 16:00 UTC\n"
    )
    body = f"{other}{blank}{ours}Droplet: gpu-spot-1\n"
    report = reclaim_verdict(_mail(body), RULES, "key", SENT).report
    assert report is not None
    # With no time of its own, Date + lead, or a time above every droplet (a heading for
    # all of them); never the time of the block above it.
    none_of_its_own = _at(16) if order else SENT + RULES.lead
    written = {"": none_of_its_own, "Reclaim: 13:10 UTC\n": _at(13, 10)}
    assert report.deadline <= written.get(ours, _at(17)), (body, report.detail)
