"""The mail parser's shortcuts read exactly what the plain reading did: each time's form is
read once per mail (not once per match), and RELATIVE is tried only where a relative time
can start. A hostile or just large mail is judged before the next one is read, so its cost
delays every notice behind it (bench/digitalocean_parse.py measures it)."""

from __future__ import annotations

import inspect
import re
import re._constants as sre_constants
import re._parser as sre_parser
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from do_support import verdict
from forewarn.providers.digitalocean import deadline, mail, written
from forewarn.providers.digitalocean.mail import Verdict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

# A mail of the same hostile form hundreds of times (the form of the slowest mail seen).
HOSTILE = "Droplet gpu-spot-1 will be reclaimed.\n" + "14:00 UTC (-0:30) on December 3, " * 600


def test_each_form_of_a_time_is_read_once_per_mail() -> None:
    """Each time was read again (2,400 readings here; 16,000, 2 of the 6 CPU-s it took, for
    4,000 of them in a 130 KB mail): the reading depends only on the match's groups, the
    Date and the options."""
    read: list[int] = []
    clock = written._clock

    def counted(parts: dict[str, str | None], n: str) -> tuple[int, int, int, str]:
        read.append(1)
        return clock(parts, n)

    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(written, "_clock", counted)
        found = verdict(HOSTILE)
    assert found.report is not None
    assert len(read) < 50, len(read)


def _first(items: Any) -> tuple[set[object], bool]:
    """What a parsed pattern's match can start with (a superset), and whether it can be
    empty: its literals and classes; anything else is named, so the test below fails."""
    found: set[object] = set()
    for op, arg in items:
        if op in (sre_constants.AT, sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            continue
        if op is sre_constants.LITERAL:
            return found | {chr(arg)}, False
        if op is sre_constants.IN:
            for kind, value in arg:
                if kind is sre_constants.LITERAL:
                    found.add(chr(value))
                elif kind is sre_constants.RANGE:
                    found.update(chr(code) for code in range(value[0], value[1] + 1))
                else:
                    found.add((kind, value))
            return found, False
        if op is sre_constants.SUBPATTERN:
            more, empty = _first(arg[3])
        elif op is sre_constants.BRANCH:
            both = [_first(branch) for branch in arg[1]]
            more = set().union(*(chars for chars, _ in both))
            empty = any(empty for _, empty in both)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            more, empty = _first(arg[2])
            empty = empty or arg[0] == 0
        else:
            return found | {op}, False
        found |= more
        if not empty:
            return found, False
    return found, True


def test_relative_times_are_tried_only_where_one_can_start() -> None:
    """The engine entered each of RELATIVE's branches at every position (a case-insensitive
    branch is entered before its first letter is compared): a third of a hostile 130 KB
    mail's CPU, 1.4 s for a plain 256 KiB one. The class in front holds every character a
    match of the pattern behind it can start with, in the same (case-insensitive) flags."""
    first = written._RELATIVE_FIRST
    assert written.RELATIVE.pattern == f"(?=[{first}])(?:{written._RELATIVE})"
    assert written.RELATIVE.flags & re.IGNORECASE
    chars, empty = _first(sre_parser.parse(written._RELATIVE, written.RELATIVE.flags))
    assert not empty
    assert all(isinstance(c, str) for c in chars), chars
    # Every character one of them matches (case-insensitive: "s" matches "\u017f" too) the
    # class matches.
    each = re.compile("|".join(re.escape(str(c)) for c in sorted(map(str, chars))), re.I)
    front = re.compile(f"[{first}]", re.IGNORECASE)
    missed = [
        hex(code) for code in range(0x10000) if each.match(chr(code)) and not front.match(chr(code))
    ]
    assert missed == [], missed


# The plain reading, as before the shortcuts: every match read again, RELATIVE tried whole.
def _read_every_time(
    match: re.Match[str],
    sent: datetime | None = None,
    *,
    order: str = "mdy",
    relative_day: str = "",
    shift: timedelta = timedelta(0),
) -> tuple[datetime, datetime] | None:
    form = id(match.re)
    written._GROUP_NAMES.setdefault(form, (match.re, tuple(match.re.groupindex.items())))
    return written._read_time.__wrapped__(  # type: ignore[attr-defined]
        form, match.groups(), sent, None, order, relative_day, shift
    )


_PLAIN_RELATIVE = re.compile(written._RELATIVE, re.IGNORECASE)


def _forget() -> None:
    """Every text's matches and readings forgotten."""
    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    deadline._dated_by_form.cache_clear()
    deadline._recent.clear()


def _plain(body: str) -> Verdict:
    _forget()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "written_time", _read_every_time)
        patch.setattr(deadline, "RELATIVE", _PLAIN_RELATIVE)
        patch.setattr(deadline, "_DATED_CONTEXT", 10**9)  # each text's dated times its own
        return verdict(body)


def _fast(body: str) -> Verdict:
    _forget()
    return verdict(body)


_PIECES = [
    "Droplet gpu-spot-1 will be reclaimed",
    "Droplet gpu-spot-1 (ID 424242424) will be reclaimed at 14:00 UTC",
    "The reclaim of gpu-spot-7 is scheduled for 13:10 UTC",
    "in about 2 hours",
    "within the next 90 minutes",
    "30 minutes from now",
    "with 45 minutes' notice",
    "after a 30-minute grace period",
    "in 0:40",
    "Time remaining: 40 min",
    "T-30 minutes",
    "reclaimed immediately",
    "at 1796220600",
    "14:00 UTC (-0:30) on December 3,",
    "14:00 UTC (\u00b1 0:30)",
    "14:00 UTC, or up to 30 minutes earlier",
    "on Thursday at 14:00 UTC",
    "tomorrow at 13:30 UTC",
    "today at midnight UTC",
    "between 14:00 and 16:00 UTC",
    "12/01/2026 14:30 UTC",
    "03/12/26 09:00 GMT",
    "December 4 at 4 PM EST",
    "2026-12-01T14:30:00Z",
    "Tue, 01 Dec 2026 14:30:00 +0000",
    "20261201T131000Z",
    "1600 hrs UTC",
    "30 minutes before 14:00 UTC",
    "has been rescheduled to 15:00 UTC",
    "has been cancelled",
    "in \u00bd hour",
    "in three quarters of an hour",
    "support hours 09:00-17:00 UTC",
    "\u0664\u0662:\u0663\u0660 UTC",
]
_JOINTS = st.sampled_from([". ", ", ", "\n", " ", ".\n\n", "; "])
_BODIES = st.builds(
    lambda pieces, joints, repeat: (
        "".join(piece + joint for piece, joint in zip(pieces, joints * len(pieces), strict=False))
        * repeat
    ),
    st.lists(st.sampled_from(_PIECES) | st.text(max_size=30), min_size=1, max_size=10),
    st.lists(_JOINTS, min_size=1, max_size=3),
    st.integers(min_value=1, max_value=30),
)


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_BODIES)
def test_the_shortcuts_read_exactly_what_the_plain_reading_read(body: str) -> None:
    assert _fast(body) == _plain(body)


def _hostile() -> Iterator[str]:
    yield HOSTILE
    yield "Droplet gpu-spot-1 will be reclaimed.\n" + "in 0:40 " * 2000
    yield "Droplet gpu-spot-1 will be reclaimed.\n" + "with a 30-minute notice " * 800


@pytest.mark.parametrize("body", list(_hostile()), ids=["margins", "countdowns", "notices"])
def test_a_hostile_mail_is_read_as_the_plain_reading_read_it(body: str) -> None:
    assert _fast(body) == _plain(body)


def test_a_mail_of_one_long_run_of_digits_is_judged_in_linear_time() -> None:
    """A word of digits (or letters and digits) is checked for being a size slug ("16gb",
    "8x80gb") before it is taken for another droplet named: `.*(?:...\\d+x\\d+).*` as a
    whole match of the word backtracked over every split of it. 8,000 digits took 1.3
    CPU-s, 16,000 took 5; the 256 KiB the watcher fetches, about 20 minutes, during which
    no later mail, the reclaim among them, was read."""
    body = "Droplet gpu-spot-1 will be reclaimed " + "1" * 16000
    started = time.thread_time()
    found = verdict(body)
    took = time.thread_time() - started
    assert found.report is not None
    assert took < 1.0, took


# The check as it was, a whole match of the word: the new one must answer the same.
_WHOLE_WORD_CHECK = re.compile(
    r"(?i:(?:UTC|GMT)[+-]?\d.*|[a-z]{3}\d|.*(?:vcpu|\d+gb|\d+x\d+).*)"
    r"|[A-Z]{1,3}\d{2,4}[A-Z]?"
)
_WORDS = st.text(
    st.sampled_from("0123456789xXgGbBvVcCpPuUtTmM.-_+K\u212a\u0663\n a"), max_size=14
) | st.sampled_from(
    [
        "16gb",
        "s-2vcpu-4gb",
        "gpu-h100x1-80gb",
        "H100",
        "L40S",
        "MI300X",
        "nyc2",
        "UTC+1",
        "gmt-0530",
        "gpu-spot-7",
        "web1.example.com",
        "8x80GB",
        "1x",
    ]
)


@given(_WORDS)
def test_a_word_is_no_droplet_exactly_when_the_whole_word_check_said_so(word: str) -> None:
    assert mail._not_a_droplet(word) == (_WHOLE_WORD_CHECK.fullmatch(word) is not None)


def test_the_dated_times_of_a_mail_are_read_once_for_its_two_readings() -> None:
    """A mail without a usable time is read from the line naming the droplet, then whole:
    the whole text ends with the first, and every dated time in it was found and read again
    (a hostile 100 KB mail: 0.66 CPU-s each reading, 1.47 of its 1.48 s). Past the first
    reading's first few characters, the whole text's dated times are that reading's."""
    read: list[int] = []
    real = deadline.tolerance_at

    def counted(text: str, end: int) -> Any:
        read.append(end)
        return real(text, end)

    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "tolerance_at", counted)
        found = verdict(HOSTILE)
    assert found.report is not None
    assert found.report.detail["deadline_source"] == "date+lead"  # both readings were made
    # Two readings of each of the 600 dated times, then a few of the whole text's first
    # characters: 2,398 when the whole text's were all read again.
    assert len(read) < 1300, len(read)


def _lookbehind_width(items: Any) -> int:
    """The widest lookbehind in a parsed pattern."""
    widest = 0
    for op, arg in items:
        if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            direction, inner = arg
            if direction < 0:
                widest = max(widest, inner.getwidth()[1])
            widest = max(widest, _lookbehind_width(inner))
        elif op is sre_constants.SUBPATTERN:
            widest = max(widest, _lookbehind_width(arg[3]))
        elif op is sre_constants.BRANCH:
            widest = max([widest, *(_lookbehind_width(branch) for branch in arg[1])])
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            widest = max(widest, _lookbehind_width(arg[2]))
        elif op is sre_constants.GROUPREF_EXISTS:
            widest = max(widest, _lookbehind_width(arg[1]), _lookbehind_width(arg[2] or []))
        elif op is sre_constants.AT:
            # Only a word boundary (one character back) and the text's end, the same in a
            # text and in one that ends with it; a line's start would not be.
            assert arg in (sre_constants.AT_BOUNDARY, sre_constants.AT_END_STRING), arg
            widest = max(widest, 1)
    return widest


def test_a_dated_time_reads_the_same_past_the_context_in_any_text_ending_with_it() -> None:
    # What `_Matches` takes from the text it ends with rests on this: each dated form looks
    # back less than _DATED_CONTEXT characters (its lookbehinds, and `shift_before`'s 80).
    for _, pattern in written.WRITTEN_TIMES:
        width = _lookbehind_width(sre_parser.parse(pattern.pattern, pattern.flags))
        assert width + 80 < deadline._DATED_CONTEXT, (width, pattern.pattern[:60])
    assert "start - 80" in inspect.getsource(written.shift_before)
    assert "start - 24" in inspect.getsource(written.shift_before)


@settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_BODIES, st.integers(min_value=0, max_value=400), st.booleans())
def test_the_dated_times_taken_from_a_text_it_ends_with_are_its_own(
    body: str, cut: int, dated: bool
) -> None:
    text = f"Spot Droplet reclaim notice\n{body}"
    cut = min(cut, len(text) - 1)
    sent = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc) if dated else None
    zone = None if sent is None else sent.tzinfo
    _forget()
    deadline._dated_in(text[cut:], sent, zone)
    taken = deadline._dated_in(text, sent, zone), sorted(deadline._matches(text).dated_spans)
    _forget()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "_DATED_CONTEXT", 10**9)
        own = deadline._dated_in(text, sent, zone), sorted(deadline._matches(text).dated_spans)
    assert taken == own


def test_a_shift_written_across_where_the_first_reading_starts_is_read_in_the_whole() -> None:
    # "30 minutes before" moves the time after it; cut anywhere in the first 200 characters,
    # the whole text's dated times (and their words) are read as when read alone. Taken from
    # the text it ends with without the context, 58 of these 200 cuts read differently.
    sent = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc)
    text = "Spot Droplet reclaim notice\nDroplet gpu-spot-1 will be reclaimed.\n" + (
        "30 minutes before 14:00 UTC on December 3, " * 50
    )
    _forget()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "_DATED_CONTEXT", 10**9)
        own = deadline._dated_in(text, sent, sent.tzinfo)
    for cut in range(1, 200):
        _forget()
        deadline._dated_in(text[cut:], sent, sent.tzinfo)
        assert deadline._dated_in(text, sent, sent.tzinfo) == own, cut
        assert any(tail is not None for tail in deadline._matches(text).tails), cut


def test_loading_the_mail_reader_compiles_no_dated_time_pattern() -> None:
    # Every xdist worker imports the mail tests to collect them, and the dated forms' patterns
    # (~0.5 CPU-s of compiling) were built as `written` loaded, whether or not the process
    # then read a mail. They are built at their first use, and the watcher builds them where
    # it loads the parser (`watch._mail`, in a thread off the loop, before the first mail).
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import forewarn.providers.digitalocean.mail\n"
            "from forewarn.providers.digitalocean import watch, written\n"
            "print('WRITTEN_TIMES' in vars(written), written.written_times.cache_info().currsize)\n"
            "watch._mail()\n"
            "print(written.written_times.cache_info().currsize)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["False", "0", "1"]
    assert written.WRITTEN_TIMES is written.written_times()
