"""Which time written in a mail is the reclaim's deadline: pure functions. Of the times
`written` finds, the first from the line naming this droplet on that is not before the mail
was sent, preferring the one written right after the reclaim's own words and in a sentence
of the reclaim (see `find_deadline`).
"""

from __future__ import annotations

import bisect
import collections
import functools
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from .written import (
    ABOUT_RECLAIM,
    AMOUNT,
    DAY_AFTER,
    DAY_BEFORE,
    EPOCH,
    PAST_SLACK,
    RELATIVE,
    TIME_ONLY,
    WEEKDAYS,
    amount_hours,
    is_year_of_a_date,
    less_tolerance,
    relative_day,
    shift_before,
    tolerance_at,
    written_time,
    written_times,
)

# Marks the words of a deadline whose numeric date has two readings (day or month first).
AMBIGUOUS = "ambiguous date:"
_FUTURE_LIMIT = timedelta(days=30)
# The same said in a sentence of its own: "Droplet gpu-1 will be reclaimed at 14:00 UTC. It may
# be reclaimed up to 50 minutes early." The deadline was 14:00, late by the 50 minutes.
_EARLY_BY = re.compile(
    r"\b(?:up\s+to|as\s+much\s+as|at\s+most|no\s+more\s+than)\s+"
    + AMOUNT
    + r"\s+(?:earlier|early|sooner"
    r"|(?:ahead\s+of|before)\s+(?:that|then|this(?:\s+time)?|schedule|time"
    r"|the\s+(?:scheduled|stated|announced|planned)\s+(?:time|deadline)))\b",
    re.IGNORECASE,
)


def early_by(text: str, begin: int, stop: int, words: str) -> tuple[timedelta, str] | None:
    """The most that a sentence of the reclaim between `begin` and `stop` says it may come
    early, unless the deadline's own `words` already said so."""
    most: tuple[timedelta, str] | None = None
    for match in _EARLY_BY.finditer(text, begin, stop):
        if match.group(0) in words:
            continue
        back = max(begin, match.start() - 120)
        ends = [m.end() for m in SENTENCE_END.finditer(text, back, match.start())]
        start = ends[-1] if ends else back
        if not (
            _RECLAIM_WORD.search(text, start, match.start())
            or _IT_FIRST.match(text, start, match.start())
        ):
            continue
        parts = {k: v for k, v in match.groupdict().items() if v is not None}
        try:
            amount = timedelta(hours=amount_hours(parts))
        except OverflowError:
            continue
        if most is None or amount > most[0]:
            most = amount, match.group(0)
    return most


# (position, -length, time, end of its window, words, whether it may be past, where its words
# end): sorted, the first written comes first, and of two at one place the longer.
_Candidate = tuple[int, int, datetime, datetime, str, bool, int]


def _dated_candidates(text: str, sent: datetime | None) -> tuple[_Candidate, ...]:
    """The times with a date in `text`, read once for the readings of one mail that scan
    the same text (see `_Matches`). Keyed on `sent`'s zone too: one moment in two offsets
    is one datetime to `==` and `hash`, but two calendars, and the writer's calendar says
    which day a time is on."""
    return _dated_in(text, sent, None if sent is None else sent.tzinfo)


@functools.lru_cache(maxsize=4)
def _dated_in(text: str, sent: datetime | None, zone: tzinfo | None) -> tuple[_Candidate, ...]:
    return tuple(
        candidate
        for form in _dated_by_form(text, sent, zone)
        for each in form
        for candidate in each
    )


# Of each form of a dated time, the candidates of each match, in the order found.
_ByForm = tuple[tuple[tuple[_Candidate, ...], ...], ...]


@functools.lru_cache(maxsize=4)
def _dated_by_form(text: str, sent: datetime | None, zone: tzinfo | None) -> _ByForm:
    found = _matches(text)
    base = found.base
    theirs = None if base is None else _dated_by_form(base.text, sent, zone)
    forms: list[tuple[tuple[_Candidate, ...], ...]] = []
    for index, own in enumerate(found.dated_by_form):
        each = [_dated_readings(text, match, sent) for match in own]
        tail = found.tails[index]
        if theirs is not None and tail is not None:
            offset = found.offset
            each.extend(
                tuple((c[0] + offset, *c[1:6], c[6] + offset) for c in readings)
                for readings in theirs[index][tail:]
            )
        forms.append(tuple(each))
    return tuple(forms)


def _dated_readings(
    text: str, match: re.Match[str], sent: datetime | None
) -> tuple[_Candidate, ...]:
    """The candidates of one match of a dated form: one per reading of its date. Looks at
    most _DATED_CONTEXT characters before the match."""
    found: list[_Candidate] = []
    orders: tuple[str, ...] = ("mdy",)
    if match.groupdict().get("a") is not None:
        orders = ("mdy", "dmy", "ymd") if len(match.group("y")) == 2 else ("mdy", "dmy")
    shift, first = shift_before(text, match.start())
    readings = sorted(
        {
            written
            for order in orders
            if (written := written_time(match, sent, order=order, shift=shift)) is not None
        }
    )
    # After the date, or between the time and its date.
    margin = match.groupdict().get("margin")
    at = match.end() if margin is None else match.start("margin")
    tolerance = tolerance_at(text, at)
    for reading in readings:
        written, words_end = less_tolerance(tolerance, at, reading)
        if margin is not None:
            words_end = match.end()
        words = text[first:words_end]
        if len(readings) > 1:
            # find_deadline takes the first reading that can be the deadline, so
            # the earliest: a deadline read late loses work, one read early does not.
            dates = " or ".join(f"{start:%Y-%m-%d}" for start, _ in readings)
            words += f" ({AMBIGUOUS} {dates}, read as {reading[0]:%Y-%m-%d}, the earliest"
            words += " that can be the deadline)"
        found.append((match.start(), -len(match.group(0)), *written, words, False, words_end))
    return tuple(found)


def _candidates(
    text: str, sent: datetime | None, *, anywhere: bool = False
) -> Iterator[_Candidate]:
    """Each time in `text`; with `anywhere`, times without a date on lines not about the
    reclaim too."""
    yield from _dated_candidates(text, sent)
    found = _matches(text)
    if sent is not None:
        # Both tests in log or constant time per time found: scanning every dated span and
        # the whole line for each time held the agent's event loop for 2 s on a 10 KiB mail
        # of "14:30 UTC " repeated, and for minutes on a 256 KiB one.
        within_dated = overlap_test(sorted(found.dated_spans))
        # Per start of a line (with the lines wrapping onto it): how far it was searched
        # for the reclaim's words, and whether they were found. Searched on from there, not
        # from its start again: a mail of thousands of wrapped lines of times was quadratic.
        about_reclaim: dict[int, tuple[int, bool]] = {}
        line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        sentence_starts: dict[int, int] = {}  # line: where the sentence it wraps from starts
        for match in found.times:
            # The time of a dated form, read again without its date, is not another time.
            if within_dated(match.start(), match.start() + 1):
                continue
            if is_year_of_a_date(text, match):
                continue
            # Without a date, only a time on a line about the reclaim, or on the first line
            # (`judge` starts the text at the line naming the droplet): support hours in a
            # footer ("09:00-17:00 UTC") would otherwise be read as tomorrow's deadline.
            # A line a sentence wrapped onto is read with the lines before it ("will be
            # reclaimed at" then "16:00 UTC."): alone, such a time was skipped and Date + lead
            # stood in, later than the reclaim.
            begin = _sentence_start(
                text,
                line_starts,
                bisect.bisect_right(line_starts, match.start()) - 1,
                sentence_starts,
            )
            # To the end of the line where the time ends (`\s` in a time spans lines).
            after = bisect.bisect_right(line_starts, match.end())
            end = line_starts[after] - 1 if after < len(line_starts) else len(text)
            if begin > 0 and not anywhere:
                searched, about = about_reclaim.get(begin, (begin, False))
                if not about and end > searched:
                    # Back a little: words may straddle where the last search stopped.
                    again = max(begin, searched - 32)
                    about = ABOUT_RECLAIM.search(text, again, end) is not None
                    about_reclaim[begin] = (end, about)
                if not about:
                    continue
            # "tomorrow at 16:00 UTC", "at 16:00 UTC tomorrow": the day after the Date's;
            # "today at 11:00 UTC": the Date's day.
            start, stop = match.span()
            ahead = DAY_BEFORE.search(text, max(0, start - 40), start)
            behind = None if ahead else DAY_AFTER.match(text, stop)
            at = behind.end() if behind else stop
            tolerance = tolerance_at(text, at)
            # "at 16:00 UTC (± 30 min) tomorrow": the day after the margin was lost, and the
            # time read on the mail's day, a day early.
            after_margin = None
            if tolerance is not None and not ahead and not behind:
                after_margin = DAY_AFTER.match(text, tolerance.end())
            said = ahead or behind or after_margin
            day = relative_day(said.group("day")) if said else ""
            # From "today" on, so that "previously scheduled for today at 16:00 UTC" is the
            # time a new time replaces (`_is_old_time`).
            first = ahead.start() if ahead else start
            shift, shifted_from = shift_before(text, first)
            first = min(first, shifted_from)
            as_written = written_time(match, sent, relative_day=day, shift=shift)
            if as_written is not None:
                written, words_end = less_tolerance(tolerance, at, as_written)
                if after_margin is not None:
                    words_end = after_margin.end()
                yield (
                    first,
                    -len(match.group(0)),
                    *written,
                    text[first:words_end],
                    # May be past: the mail's own day.
                    day == "today" or day in WEEKDAYS or day.startswith("the "),
                    words_end,
                )
        for match in found.epochs:
            try:
                moment = datetime.fromtimestamp(int(match.group("epoch")), timezone.utc)
            except (OverflowError, ValueError, OSError):
                continue
            yield _at_once(match, moment)
        for match in found.relative:
            parts = {k.rstrip("234"): v for k, v in match.groupdict().items() if v is not None}
            hours = 1.0 if "the_hour" in parts else 0.0 if "at_once" in parts else None
            if "count_h" in parts:
                hours = int(parts["count_h"]) + int(parts["count_m"]) / 60
            if hours is None:
                hours = amount_hours(parts)
            try:
                moment = sent + timedelta(hours=hours)
            except OverflowError:  # past what a datetime holds: far beyond _FUTURE_LIMIT too
                continue
            yield _at_once(match, moment)


# How far before a dated time its reading looks (`shift_before`, 80 characters) and its
# form's lookbehinds (8, checked by a test), with room to spare: past this many characters
# from its start, a text's dated times are found and read as in any text that ends with it.
_DATED_CONTEXT = 128


class _Matches:
    """Where each form of a time matches in one text, each scanned for once: a mail whose
    times cannot be the deadline is read again as a whole, then for a time before Date +
    lead, and a hostile 130 KB mail spent a third of its 3 CPU-s finding the same matches
    again. The forms without a date are scanned for only when asked (a mail with a Date).

    A text that ends with one scanned just before (`judge` reads from the line naming the
    droplet, then the whole mail) is scanned for dated times only until its scan meets one
    of that text's matches past _DATED_CONTEXT: from there on, the matches (`tails`) and
    their readings (`_dated_by_form`) are that text's. A hostile 100 KB mail spent 0.66 CPU-s
    on each of the two readings, nearly all of it on dated times."""

    def __init__(self, text: str) -> None:
        self.text = text
        base = next(
            (
                seen
                # A copy, taken at once: two judging threads may meet (a watcher restarted
                # while its judgement runs on), and a deque changed while iterated raises.
                for seen in tuple(_recent)
                if seen.base is None and len(seen.text) < len(text) and text.endswith(seen.text)
            ),
            None,
        )
        self.base: _Matches | None = base
        offset = len(text) - len(base.text) if base is not None else 0
        self.offset: int = offset
        present: dict[re.Pattern[str], bool] = {}
        forms: list[tuple[re.Match[str], ...]] = []
        tails: list[int | None] = []
        scanned: list[bool] = []
        for index, (needed, pattern) in enumerate(written_times()):
            if needed is not None:
                if needed not in present:
                    present[needed] = needed.search(text) is not None
                if not present[needed]:
                    forms.append(())
                    tails.append(None)
                    scanned.append(False)
                    continue
            theirs = base.starts[index] if base is not None and base.scanned[index] else None
            own: list[re.Match[str]] = []
            tail = None
            for match in pattern.finditer(text):
                if theirs is not None and match.start() >= offset + _DATED_CONTEXT:
                    at = theirs.get(match.start() - offset, -1)
                    mine = base.dated_by_form[index] if base is not None else ()
                    if at >= 0 and mine[at].end() + offset == match.end():
                        tail = at
                        break
                own.append(match)
            forms.append(tuple(own))
            tails.append(tail)
            scanned.append(True)
        # Of each form: the matches found in this text, the index in the base's from which
        # on they are the base's, and whether the form was scanned for at all.
        self.dated_by_form: tuple[tuple[re.Match[str], ...], ...] = tuple(forms)
        self.tails: tuple[int | None, ...] = tuple(tails)
        self.scanned: tuple[bool, ...] = tuple(scanned)
        _recent.append(self)

    @functools.cached_property
    def starts(self) -> tuple[dict[int, int], ...]:
        """Of each form, where each of its matches starts: the index of that match."""
        return tuple({m.start(): i for i, m in enumerate(form)} for form in self.dated_by_form)

    @functools.cached_property
    def dated_by_place(self) -> tuple[tuple[int, int, int], ...]:
        """(the form's index, start, end) of every dated time in this text, form by form and
        in the order found: its own matches, then those taken from the base."""
        found: list[tuple[int, int, int]] = []
        base, offset = self.base, self.offset
        for index, own in enumerate(self.dated_by_form):
            found.extend((index, *m.span()) for m in own)
            tail = self.tails[index]
            if base is not None and tail is not None:
                found.extend(
                    (index, m.start() + offset, m.end() + offset)
                    for m in base.dated_by_form[index][tail:]
                )
        return tuple(found)

    @property
    def dated_spans(self) -> list[tuple[int, int]]:
        """Where every dated time is, in this text."""
        return [(start, end) for _, start, end in self.dated_by_place]

    @functools.cached_property
    def times(self) -> tuple[re.Match[str], ...]:
        return tuple(TIME_ONLY.finditer(self.text))

    @functools.cached_property
    def epochs(self) -> tuple[re.Match[str], ...]:
        return tuple(EPOCH.finditer(self.text))

    @functools.cached_property
    def relative(self) -> tuple[re.Match[str], ...]:
        return tuple(RELATIVE.finditer(self.text))


# A few: `judge` reads one mail's text, the part from the droplet's line and a heading.
_matches = functools.lru_cache(maxsize=4)(_Matches)
# The texts scanned last, each a possible `_Matches.base` of the next.
_recent: collections.deque[_Matches] = collections.deque(maxlen=4)


def _at_once(match: re.Match[str], moment: datetime) -> _Candidate:
    """The candidate of a time that is one moment, not a window, and never past: an epoch
    or a time relative to the mail's Date."""
    return (match.start(), -len(match.group(0)), moment, moment, match.group(0), False, match.end())


def _sentence_start(text: str, line_starts: list[int], line: int, known: dict[int, int]) -> int:
    """Where the line `line` starts, or the first of the lines whose sentence wraps onto it
    (`_carries_on`); `known` keeps the answers, so that a mail of many wrapped lines is
    walked back once."""
    walked = []
    while line > 0 and line not in known and _carries_on(text, line_starts[line] - 1):
        walked.append(line)
        line -= 1
    begin = known.get(line, line_starts[line])
    for each in (*walked, line):
        known[each] = begin
    return begin


def find_deadline(
    text: str,
    sent: datetime | None,
    *,
    new_only: bool = False,
    others: Sequence[int] = (),
    ours: Sequence[int] = (),
    elsewhere_until: datetime | None = None,
) -> tuple[datetime, str] | None:
    """The time written in `text` that can be the deadline, with the words it came from.

    Understood forms (case-insensitive; each needs UTC, GMT, Z, a numeric offset or one
    after UTC or GMT such as `UTC+1`, after the time or after its date), and a
    window of them (`between 14:00 and 16:00 UTC`, `14:00-16:00 UTC`) whose start is the
    deadline:
    RFC 3339 (`2026-12-01T14:30:00Z`), RFC 2822 (`Tue, 01 Dec 2026 14:30:00 +0000`),
    `2026-12-01 14:30 UTC`, `at 14:30 UTC on 2026-12-01`, `on 2026-12-01 at 14:30 UTC`,
    `December 1, 2026 at 2:30 PM UTC`, `1 Dec 2026 14:30 GMT`,
    `12/01/2026 14:30 UTC` or `12/01/26 14:30 UTC` (day
    or month first: the earliest reading that can be the deadline), and, relative to the mail's
    Date, `in about 2 hours` / `within the next 90 minutes` / `30 minutes from now` /
    `in 1 hour and 30 minutes`, a date without a year (`December 4 at 16:00 UTC`,
    `at 16:00 UTC on Friday, 4th of December`: the next such date) and a
    time without a date (`at 13:30 UTC`, its next occurrence; `tomorrow at 13:30 UTC`, on
    the day after the Date's; `today at 13:30 UTC`, on the Date's day). A clock may be four
    digits (`1600 UTC`, `1600Z`, `1600 hrs UTC`), `noon` or `midnight` (the start of its day;
    `today at midnight`, of the two midnights of the Date's day the nearer).
    A time more than 10 minutes before the mail was sent (but for a window already open or
    a time today), or more than 30 days after, is not the deadline and is passed over.

    Of the times left, the first is taken, but for the other times on its line (and the
    lines a sentence wrapped onto), before the next droplet named (`others`: where each
    other droplet is named): a time written right after the reclaim's own words ("will be
    reclaimed today at 16:00 UTC", "reclaim is scheduled for ...") comes first, the earliest
    of them not past; else the earliest not past. Of the times written right after such
    words, those whose sentence is the reclaim's (`_of_the_reclaim`: "Billing stops today
    at 13:00 UTC" is not) come first. A time today already past that is not the reclaim's
    ("created today at 09:00 UTC") gives way to any other time, and one whose sentence is
    not the reclaim's is never the deadline; nor is one later than `elsewhere_until` (the
    mail's Date + lead) whose sentence is not the reclaim's. `ours`: where this droplet is
    named.

    With `new_only`, a time written as the one a new time replaces (`from`, `was`,
    `previously`, `instead of`, `old time:`) is passed over too, and the first time left
    is the new one.
    """
    earliest = shifted(sent, -PAST_SLACK) if sent is not None else None
    latest = shifted(sent, _FUTURE_LIMIT) if sent is not None else None
    found = sorted(_candidates(text, sent), key=lambda c: c[:2])
    # How far the words of the times written so far reach: a time starting inside another's
    # words ("2000 Z" of "20:01 on January 2, 2000 Z") is part of it, not one after it.
    starts = [candidate[0] for candidate in found]
    reach = list(itertools.accumulate((candidate[6] for candidate in found), max))
    usable: list[_Usable] = []
    of_the_reclaim = _ReclaimSentences(text, ours)
    for start, _length, moment, until, words, today, stop in found:
        if usable and usable[-1].start == start:
            continue  # one reading of a place: the first that can be (the earliest)
        # A window that had begun when the mail was sent still counts: its start is the
        # deadline, already past; so does a time today, past or not.
        past = earliest is not None and until < earliest
        if (past and not today) or (latest is not None and moment > latest):
            continue
        # A time today already past in a sentence about something else ("Your maintenance
        # window starts today at 09:00 UTC. Droplet gpu-1 will be reclaimed soon.") was the
        # deadline when no other time was written: a terminate at once, hours before the
        # reclaim. Date + lead stands in instead.
        if past and not of_the_reclaim(start, stop):
            continue
        # Nor is a later one ("... will be reclaimed. Backups run daily at 18:00 UTC."): the
        # deadline was hours after Date + lead, and the work since the drain was lost.
        later = elsewhere_until is not None and moment > elsewhere_until
        if later and not of_the_reclaim(start, stop):
            continue
        if new_only and _is_old_time(text, start, words):
            continue
        usable.append(_Usable(start, moment, words, past, stop))
    if not usable:
        return None
    if new_only:
        return usable[0].moment, usable[0].words
    bound = min((at for at in others if at > usable[0].start), default=len(text))

    @functools.cache
    def attached(at: int) -> bool:
        # Asked only of the times that may be taken: a mail of thousands of times is judged
        # on the agent's event loop.
        before = bisect.bisect_left(starts, at)
        return not (before and reach[before - 1] > at) and _attached(text, at)

    # Another time of the reclaim, past or not, stands before a time today already past
    # that is not the reclaim's (when the droplet was created, when the mail was written):
    # taken first, it asked clients to stop at once hours before the reclaim.
    if any(c.start < bound and (not c.past or attached(c.start)) for c in usable):
        usable = [c for c in usable if not c.past or attached(c.start)]
    first = usable[0]
    # From where its words end: a time may itself be wrapped ("at 16:00" then "UTC. ...").
    end = min(_line_end(text, first.stop), bound)
    near = [c for c in usable if c.start < end]
    not_past = [c for c in near if not c.past]

    def own(c: _Usable) -> bool:
        return attached(c.start) and of_the_reclaim(c.start, c.stop)

    for group, earliest_first in (
        # The earliest: a deadline read late loses work, one read early does not. A time
        # after a word of the reclaim ("stops") in a sentence about something else
        # ("Billing stops today at 13:00 UTC.") comes after the reclaim's own: taken as the
        # earliest of them, it was the deadline wherever it stood on the reclaim's line.
        ([c for c in not_past if own(c)], True),
        ([c for c in not_past if attached(c.start)], True),
        ([c for c in near if own(c)], False),
        ([c for c in near if attached(c.start)], False),
        (not_past, True),
        (near, False),
    ):
        if group:
            chosen = min(group, key=lambda c: c.moment) if earliest_first else group[0]
            # The reclaim's own time said again, earlier, before the next droplet named ("at
            # 15:00 UTC." then "Correction: the reclaim time is 13:00 UTC"): the earliest.
            # Taken from the first line alone, the reclaim came two hours before its deadline.
            # Only those earlier are asked whether they are the reclaim's own: a mail of
            # thousands of times is judged on the event loop.
            sooner = [
                c
                for c in usable
                if c.start < bound and not c.past and c.moment < chosen.moment and own(c)
            ]
            if sooner:
                chosen = min(sooner, key=lambda c: c.moment)
            # A window's end written above its start ("Window end: 16:00 UTC" then "Window
            # start: 14:00 UTC"): the start, before the next droplet named. The end was the
            # deadline, two hours late.
            if _labelled(text, chosen.start, _END_LABEL):
                starts_after = [
                    c
                    for c in usable
                    if c.start < bound
                    and c.moment < chosen.moment
                    and _labelled(text, c.start, _START_LABEL)
                ]
                if starts_after:
                    chosen = min(starts_after, key=lambda c: c.moment)
            return chosen.moment, chosen.words
    return None


_END_LABEL = re.compile(
    r"\b(?:ends?|ending|close[sd]?|closing|until|finish(?:es)?|latest)(?:\s+(?:time|at|by))?"
    r"[^\S\n]*:?[^\S\n]*\Z",
    re.IGNORECASE,
)
_START_LABEL = re.compile(
    r"\b(?:starts?|starting|begins?|beginning|opens?|opening|earliest|from)(?:\s+(?:time|at))?"
    r"[^\S\n]*:?[^\S\n]*\Z",
    re.IGNORECASE,
)


def _labelled(text: str, start: int, label: re.Pattern[str]) -> bool:
    """Whether the words just before `start`, on its line, are `label`'s: a few characters
    only, so that a long line of times is not searched again for each."""
    line = text.rfind("\n", max(0, start - 40), start) + 1
    return label.search(text, max(line, start - 40), start) is not None


@dataclass(frozen=True)
class _Usable:
    """A time that can be the deadline, where it is written, and how."""

    start: int
    moment: datetime
    words: str
    past: bool  # a time today before the mail's Date (less the slack)
    stop: int  # where its words end


# The reclaim's own words, to which its time is attached: "Your Droplet gpu-spot-1, created
# today at 09:00 UTC, will be reclaimed today at 16:00 UTC" was read as 09:00, the first
# time on the line, and clients were asked to stop at once, hours before the reclaim.
_RECLAIM_WORD = re.compile(
    r"\b(?:reclaim\w*|reclamation\w*|interrupt\w*|pre-?empt\w*|terminat\w*|evict\w*"
    r"|shut(?:s|ting)?[\s-]*down|shutdown\w*|stop(?:s|ped|ping)?|power(?:s|ed|ing)?[\s-]+off"
    r"|deadline)\b",
    re.IGNORECASE,
)
# The words that may stand between them and the time: the droplet, its id, the verb, a
# preposition ("The reclaim of Droplet gpu-spot-1 (ID 424242424) is scheduled for ...").
# Any other word ("reclaim notice was sent at", "reclaimed as demand changes (last update
# ...") says the time is something else's.
_LINK_WORDS = frozenset(
    re.findall(
        r"\w+",
        """
        the a an this that your its our their of for droplet droplets spot gpu id it
        is are was were will would be been being now currently then scheduled planned set
        expected due estimated anticipated to take takes place happen happens occur occurs
        begin begins start starts starting beginning process window period time date
        at on by around about approximately approx roughly between from after before no not
        later earlier than today tomorrow tonight in within next as early soon shortly utc gmt
        mon monday tue tues tuesday wed wednesday thu thur thurs thursday fri friday
        sat saturday sun sunday
        possibly perhaps maybe may might could can even but and or latest earliest least
        """,
    )
)
_GAP_TOKEN = re.compile(r"[\w'\u2019-]+|[^\w\s]")
_GAP_MARKS = frozenset("()[],:-\u2013\u2014'\"\u2018\u2019\u201c\u201d")
# Where a time's sentence starts: a sentence's end, a blank line, or a line break before a
# line that does not carry on the one before (a wrapped line starts lowercase).
_CLAUSE_START = re.compile(r"[.!?;](?=\s)|\n[^\S\n]*\n|\n(?=[^\S\n]*[^a-z\s])")
_REACH = 200  # characters back from a time to the reclaim's word


def _attached(text: str, start: int) -> bool:
    """Whether the time at `start` is written right after the reclaim's own words. Another
    time may stand between them ("reclaimed no later than 16:00 UTC, possibly as early as
    14:00 UTC"): refused, only the later one was the reclaim's, two hours late."""
    begin = max(0, start - _REACH)
    clauses = [
        m.end()
        for m in _CLAUSE_START.finditer(text, begin, start)
        if m.group(0) != "\n" or not _carries_on(text, m.start())
    ]
    words = list(_RECLAIM_WORD.finditer(text, clauses[-1] if clauses else begin, start))
    if not words:
        return False
    after = words[-1].end()
    for token in _GAP_TOKEN.findall(text, after, start):
        word = re.sub(r"['\u2019]s$", "", token.lower())
        if word in _LINK_WORDS or token in _GAP_MARKS or any(ch.isdigit() for ch in word):
            continue
        if "-" in word.strip("-"):  # a droplet's name: jupyter-box
            continue
        return False
    return True


# Words that make a sentence the reclaim's: its own nouns and verbs, the droplet, or "it"
# starting the sentence (the droplet named before it: "...; it will be shut down at 15:00
# UTC"). "stop", "shut down" and "power off" are not among them: "Billing stops" is not.
_OF_THE_RECLAIM = re.compile(
    r"\b(?:reclaim\w*|reclamation\w*|interrupt\w*|pre-?empt\w*|terminat\w*|evict\w*"
    r"|deadline|droplets?)\b",
    re.IGNORECASE,
)
_IT_FIRST = re.compile(r"[\W_]*(?:it|they)\b", re.IGNORECASE)
# A sentence of nothing but a time and such words ("Time: today at 11:00 UTC.") says nothing
# of anything else: it goes on with the reclaim's. Zones are in capitals (CET, ET).
_WORD = re.compile(r"[^\W\d_]+")
_BARE_WORDS = _LINK_WORDS | {
    "end",  # "Window end: 16:00 UTC", a window's own label as "start" is
    "ends",
    "ending",
    "until",
    # A new time's labels ("New time: 16:00 UTC", "Old:", "Revised:").
    "new",
    "old",
    "previous",
    "previously",
    "original",
    "originally",
    "updated",
    "revised",
    "when",
    "am",
    "pm",
    "m",
    "p",
    "hrs",
    "hours",
    "noon",
    "midday",
    "midnight",
}


class _ReclaimSentences:
    """Whether the sentence of a time speaks of the reclaim or names this droplet (`ours`:
    where it is named). Sentences end as in `_attached`. The boundaries are found once, and
    each sentence searched once: a mail of thousands of times is judged on the event loop."""

    def __init__(self, text: str, ours: Sequence[int]) -> None:
        self._text = text
        self._ours = sorted(ours)
        self._bounds: list[int] | None = None
        self._known: dict[tuple[int, int], bool] = {}

    def __call__(self, start: int, stop: int) -> bool:
        text = self._text
        if self._bounds is None:
            self._bounds = [
                m.end()
                for m in _CLAUSE_START.finditer(text)
                if m.group(0) != "\n" or not _carries_on(text, m.start())
            ]
        bounds = self._bounds
        before = bisect.bisect_right(bounds, start)
        begin = bounds[before - 1] if before else 0
        # From where the time's words end: "2 a.m. UTC" holds a mark that ends a sentence.
        after = bisect.bisect_left(bounds, stop)
        end = bounds[after] if after < len(bounds) else len(text)
        known = self._known.get((begin, end))
        if known is None:
            first = bisect.bisect_left(self._ours, begin)
            known = (
                (first < len(self._ours) and self._ours[first] < end)
                or _OF_THE_RECLAIM.search(text, begin, end) is not None
                or _IT_FIRST.match(text, begin, end) is not None
                or all(
                    word.isupper() or word.lower() in _BARE_WORDS
                    for word in _WORD.findall(text, begin, end)
                )
            )
            self._known[(begin, end)] = known
        return known


def _line_end(text: str, at: int) -> int:
    """The end of the line at `at`, or of the lines a sentence on it wraps onto."""
    end = text.find("\n", at)
    while end >= 0 and _carries_on(text, end, at):
        end = text.find("\n", end + 1)
    return len(text) if end < 0 else end


def _carries_on(text: str, newline: int, after: int = 0) -> bool:
    """Whether the line break at `newline` only wraps a sentence: the line before it ends
    (after `after`) in a lowercase word or a comma, and the line after it starts in
    lowercase or a digit ("will be reclaimed at" then "16:00 UTC.", as plain-text mail
    wraps at 72-78 columns). A line ending in a zone ("at 16:00 UTC") carries on onto one
    starting with a joining word ("or even 13:30 UTC."): a time wrapped so was not read
    as the reclaim's, and an earlier one was lost."""
    last = newline
    while last > after and text[last - 1] in " \t\r":
        last -= 1
    following = text[newline + 1 : newline + 81].lstrip(" \t")
    if last > after and text[last - 1] == ":":
        # A label and its time on two lines ("New reclaim time:" then "17:00 UTC"), as
        # HTML turned to text and quoted-printable's soft breaks leave them: read as two
        # sentences, the time's was not the reclaim's, and Date + lead stood in.
        return following[:1] in tuple("0123456789")
    if not (last > after and (text[last - 1].islower() or text[last - 1] == ",")):
        return last > 0 and text[last - 1].isalnum() and _JOINING.match(following) is not None
    return bool(following) and (following[0].islower() or following[0] in "0123456789")


_JOINING = re.compile(r"(?:or|and|but|possibly|perhaps|maybe)\b")


# A label, one blank line, and a line starting with a digit: "Start time:", "", "2026-12-08
# 14:00 UTC", as a mail written a paragraph per line (or HTML with `<br><br>` turned to
# text) leaves them. The blank line made the time a sentence of its own, not the label's,
# and the mail's Date + lead stood in. Exactly one blank line (spaces and tabs allowed): two,
# or words before the time, and it is not the label's.
_LABEL_OVER_BLANK = re.compile(r"(:[^\S\n]*\n)[^\S\n]*\n(?=[^\S\n]*[0-9])")


def join_label_lines(text: str) -> str:
    """`text` with the blank line between a label and the time below it taken out, so that
    the label and its time are read together as when they are on two lines (`_carries_on`)."""
    return _LABEL_OVER_BLANK.sub(r"\1", text)


# The time a new time replaces: "moved from 16:00 UTC to 13:30 UTC", "(was 14:00 UTC)",
# "previously scheduled for ...", "Old time: ...". Read as the deadline, a reclaim moved
# earlier kept its old, later time.
_OLD_TIME = re.compile(
    r"(?:\b(?:from|was|were|previously|originally|formerly|instead\s+of)"
    r"(?:\s+(?:scheduled|planned|set|due))?(?:\s+(?:for|at|on))?"
    r"|\b(?:old|previous|original|former|earlier)"
    # "Old reclaim time: 15:30 UTC, new reclaim time: 17:00 UTC": the old one was the
    # deadline, 1.5 h early.
    r"(?:\s+(?:reclaim|reclamation))?"
    r"(?:\s+(?:time|deadline|date|window|schedule)\s*:?|\s*:))"
    r"[\s(]*$",
    re.I,
)


# The most words (runs of non-space) an _OLD_TIME match holds before its brackets and blanks:
# "instead of scheduled for", "old reclaim time :".
_OLD_TIME_WORDS = 4


def _old_time_reach(text: str, start: int) -> int:
    """Where an _OLD_TIME match ending at `start` can begin at the earliest: the start of the
    _OLD_TIME_WORDS-th word before the blanks and brackets ending at `start`, on its line.
    Searched from the line's start, a 250 kB line of new times, each with its old one ("New
    reclaim time: 17:00 UTC (was 14:30 UTC)"), took 68 CPU-s to judge."""
    at = start
    while at > 0 and text[at - 1] != "\n" and (text[at - 1].isspace() or text[at - 1] == "("):
        at -= 1
    for _ in range(_OLD_TIME_WORDS):
        while at > 0 and text[at - 1] != "\n" and text[at - 1].isspace():
            at -= 1
        while at > 0 and not text[at - 1].isspace():
            at -= 1
    return at


def _is_old_time(text: str, start: int, words: str) -> bool:
    # `$` matches at `start` (the end given), and `\b` sees the text before the reach.
    old = _OLD_TIME.search(text, _old_time_reach(text, start), start)
    if old is None:
        return False
    # "from 14:00 to 16:00 UTC" is a window, its own "from".
    return not (
        old.group(0).lower().startswith("from") and re.search(r"\b(?:to|until|and)\b", words)
    )


def shifted(moment: datetime, delta: timedelta) -> datetime | None:
    """`moment + delta`, or None (no bound) when that is before the year 1 or after 9999."""
    try:
        return moment + delta
    except OverflowError:
        return None


SENTENCE_END = re.compile(r"\n|[.!?;](?=\s)")


def overlap_test(spans: list[tuple[int, int]]) -> Callable[[int, int], bool]:
    """Whether a span overlaps one of `spans` (sorted), in log time: a 256 KiB mail naming
    thousands of droplets took seconds on the event loop when each was checked against all."""
    begins = [begin for begin, _ in spans]
    reach = list(itertools.accumulate((end for _, end in spans), max))

    def overlaps(start: int, end: int) -> bool:
        before = bisect.bisect_left(begins, end)
        return before > 0 and reach[before - 1] > start

    return overlaps


def sooner_than_lead(text: str, sent: datetime, lead: timedelta) -> tuple[datetime, str] | None:
    """The earliest time without a date on a line not about the reclaim ("Droplet gpu-1
    will be reclaimed." then "ETA: 13:10 UTC", "It will happen at 13:10 UTC.") that is
    before Date + lead, for a mail that names no other time. Such times were skipped, so
    Date + lead stood in, later than the reclaim. Only as the last resort, and only before
    Date + lead, so the deadline is never later than without it: taken first, a footer's
    "updates at 13:30 UTC" would beat the reclaim's own earlier time."""
    until = shifted(sent, lead)
    soon = [
        (moment, words)
        for _, _, moment, _, words, _, _ in _candidates(text, sent, anywhere=True)
        if sent - PAST_SLACK <= moment and (until is None or moment < until)
    ]
    return min(soon, default=None)


__all__ = [
    "AMBIGUOUS",
    "SENTENCE_END",
    "early_by",
    "find_deadline",
    "join_label_lines",
    "overlap_test",
    "shifted",
    "sooner_than_lead",
]
