"""Recognising a DigitalOcean reclaim email and finding its deadline: pure functions.

A mail is a reclaim notice for this droplet when its From address matches the sender
pattern, its Subject matches the subject pattern, and its subject or body names this
droplet's id or name. Its deadline is the first time written in the mail (see
`find_deadline` for the forms understood and which of several on a line), from the line
naming this droplet on, that is not before the mail was sent; without one
it is the mail's Date plus the configured lead.
"""

from __future__ import annotations

import bisect
import contextlib
import email
import email.policy
import functools
import html
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from email.message import EmailMessage
from email.utils import getaddresses, parsedate_to_datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from forewarn.protocol.fields import stable_id
from forewarn.protocol.timefmt import format_time
from forewarn.providers.report import Report

from ..base import ParseError
from .cancel import (
    CANCELLED_BODY,
    CANCELLED_SUBJECT,
    counts,
    counts_in_subject,
    moves,
    moves_in_subject,
)

PROVIDER = "digitalocean"
DRILL_HEADER = "X-Forewarn-Drill"
# A time written in a mail earlier than its Date by more than this is some other time
# (when the droplet was created, say), not the reclaim deadline.
_PAST_SLACK = timedelta(minutes=10)
# Marks the words of a deadline whose numeric date has two readings (day or month first).
AMBIGUOUS = "ambiguous date:"
_FUTURE_LIMIT = timedelta(days=30)


@dataclass(frozen=True)
class MatchRules:
    sender: re.Pattern[str]
    subject: re.Pattern[str]
    droplet_id: str | None
    droplet_name: str | None
    lead: timedelta
    max_age: timedelta
    require_dkim: bool = False

    @classmethod
    def build(
        cls,
        *,
        sender: str,
        subject: str,
        droplet_id: str | None,
        droplet_name: str | None,
        lead: float,
        max_age: float,
        require_dkim: bool = False,
    ) -> MatchRules:
        if not droplet_id and not droplet_name:
            raise ValueError("a droplet id or name is needed to recognise its reclaim emails")
        return cls(
            sender=re.compile(sender),
            subject=re.compile(subject),
            droplet_id=droplet_id or None,
            droplet_name=droplet_name or None,
            lead=timedelta(seconds=lead),
            max_age=timedelta(seconds=max_age),
            require_dkim=require_dkim,
        )


@dataclass(frozen=True)
class Mail:
    """The parts of an email that matter here, decoded."""

    sender: str  # the From address, lower-cased
    subject: str
    date: datetime | None
    message_id: str | None
    text: str  # the text/plain body, then the text of the HTML body
    auth_results: tuple[str, ...]
    drill: bool
    # The mail this one forwards (attached, or inline under a "Forwarded message" line),
    # judged in its place when this mail's own sender does not match.
    forwarded: Mail | None = None


@dataclass(frozen=True)
class Verdict:
    """What one mail amounts to: a report to raise, or why it raises nothing."""

    report: Report | None
    why: str
    # This mail takes the place of every earlier notice for this droplet: a cancellation
    # (report None: they are withdrawn) or a new time (report: it stands instead of them).
    replaces: bool = False
    # A cancellation's own id (a new time has its report's): the watcher records it, so a
    # mail read again (a rebuilt folder, another mailbox key) withdraws nothing the second
    # time, such as a reclaim announced after it.
    cancel_id: str | None = None
    # A new time given only as a shift of the old one ("brought forward by 1 hour"): the
    # watcher applies it to the earliest reclaim standing for this droplet.
    shift: timedelta | None = None


def read_mail(raw: bytes) -> Mail:
    """Decode an RFC 5322 message; ParseError when it cannot be read at all."""
    if not raw.strip():
        raise ParseError("the message is empty")
    try:
        message = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        return _mail_of(message)
    except ParseError:
        raise
    except Exception as error:  # the email package raises many kinds on malformed input
        raise ParseError(f"unreadable message: {type(error).__name__}: {error}") from None


def _sender_of(value: str) -> str:
    addresses = getaddresses([value])
    return addresses[0][1].strip().lower() if addresses else ""


def _mail_of(message: EmailMessage, depth: int = 0) -> Mail:
    sender = _sender_of(", ".join(str(value) for value in message.get_all("From", [])))
    subject = str(message.get("Subject", "") or "")
    date = _header_date(message.get("Date"))
    message_id = str(message.get("Message-ID", "") or "").strip() or None
    auth = tuple(str(value) for value in message.get_all("Authentication-Results", []))
    drill = message.get(DRILL_HEADER) is not None
    text = _body_text(message)
    forwarded: Mail | None = None
    if depth < 3:  # a forward of a forward of a forward; deeper is not followed
        for part in message.walk():
            if part is not message and part.get_content_type() == "message/rfc822":
                inner = part.get_content()
                if isinstance(inner, EmailMessage):
                    forwarded = _mail_of(inner, depth + 1)
                    break
        else:
            forwarded = _inline_forward(text, date)
    return Mail(sender, subject, date, message_id, text, auth, drill, forwarded)


# A forward written into the body: a separator line, then the original's header lines
# (Gmail, Outlook, Apple Mail, Thunderbird), then its text.
_FORWARD_START = re.compile(
    r"(?im)^[ \t]*(?:-{3,}[ \t]*(?:Forwarded message|Original Message)[ \t]*-{3,}"
    r"|Begin forwarded message:|_{10,})[ \t]*\n"
)
_HEADER_LINE = re.compile(r"[ \t]*(?P<key>[A-Za-z-]+):[ \t]*(?P<value>[^\n]*)\n?")


def _inline_forward(text: str, date: datetime | None) -> Mail | None:
    start = _FORWARD_START.search(text)
    if start is None:
        return None
    headers: dict[str, str] = {}
    at = start.end()
    while (blank := re.compile(r"[^\S\n]*\n").match(text, at)) is not None:
        at = blank.end()  # an HTML forward leaves empty lines before the header lines
    while (line := _HEADER_LINE.match(text, at)) is not None and line.end() > at:
        headers.setdefault(line.group("key").lower(), line.group("value").strip())
        at = line.end()
    if "from" not in headers:
        return None
    written = headers.get("date") or headers.get("sent")
    # Forwarding clients write the date in their own way; when it is not RFC 5322 the
    # forward's own Date stands in (a rule forwards within seconds).
    sent = _header_date(written) if written else None
    return Mail(
        _sender_of(headers["from"]),
        headers.get("subject", ""),
        sent or date,
        None,
        text[at:],
        (),
        False,
    )


def _header_date(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        moment = parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:  # RFC 5322 "-0000": the zone is unknown, UTC is the best guess
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _body_text(message: EmailMessage) -> str:
    # Both forms of a multipart/alternative: a text part may be only "view this mail in an
    # HTML-capable client" while the notice is in the HTML part.
    texts = []
    for kind in ("plain", "html"):
        part = message.get_body(preferencelist=(kind,))
        if part is None:
            continue
        try:
            content = part.get_content()
        except (LookupError, UnicodeError):
            # A charset Python does not know or cannot use (`charset=""`, `undefined`): the
            # droplet's name and the
            # times are ASCII, so decoding as UTF-8 still finds them; refusing lost the mail.
            content = part.get_payload(decode=True)
        text = content if isinstance(content, str) else content.decode("utf-8", "replace")
        if kind == "html":
            text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", text)
            # <time datetime="2026-12-01T13:10:00Z">: its words may have no zone ("1:10 PM")
            # or no time ("soon"), so Date + lead stood in; the machine-readable time is read.
            text = _TIME_TAG.sub(lambda m: f" {m.group('when')} ", text)
            text = _without_blockquotes(text)
            # A line break in the source is a space once rendered (outside <pre>): Outlook
            # writes "<br>" and a newline, and Word wraps text, which split the header lines
            # of a forward apart.
            text = re.sub(r"(?is)(<pre\b.*?</pre\s*>)|\s*\n\s*", lambda m: m.group(1) or " ", text)
            # Outlook separates an HTML forward from the original with <hr> (from Word: a
            # div with a top border) where its text form has a "____" line: without one, the
            # forward was not recognised and the notice in it was lost.
            text = re.sub(
                r"(?i)<hr\b[^>]*>|<div\b[^>]*\bborder-top:[^>]*>", "\n" + "_" * 32 + "\n", text
            )
            # Rows, paragraphs and breaks end lines: a table of droplets stays one per line.
            text = re.sub(r"(?i)<br\b[^>]*>|</(?:tr|p|div|li|h[1-6]|table)\s*>", "\n", text)
            text = html.unescape(re.sub(r"<[^>]+>", " ", text))
        texts.append(_zoned_under_heading(_zoned_on_line(_QUOTED_LINE.sub("", text))))
    return "\n".join(texts)


# A heading that gives the zone of the times under it ("Reclaim times (UTC):", a table's
# "Reclaim time (UTC)" column, "All times are in UTC"): the bare times of the lines after it,
# up to a blank line, were skipped, and Date + lead stood in.
_ZONE_HEADING = re.compile(r"[(\[](?P<z>UTC|GMT)[)\]]|\b(?:in|are)\s+(?P<z2>UTC|GMT)\b", re.I)
_DIGIT = re.compile(r"[0-9]")
_BLANK_LINE = re.compile(r"\n[^\S\n]*(?:\n|\Z)")
_EMPTY_LINE = re.compile(r"\n[^\S\n]*(?=\n)")
_CLOCK_NO_ZONE = (
    r"(?<![\d:.])(?:[01]?[0-9]|2[0-4]):[0-5][0-9](?::[0-5][0-9])?(?:[^\S\n]*[aApP]\.?[mM]\.?)?"
    r"(?![0-9]|[^\S\n]*[(\[]?(?:UTC|GMT|Z\b|[+-][0-9]|[A-Z]{2,5}\b|[A-Z][a-z]+/)"
)
# A time marked local is in a zone the mail has not named: a note of the mail's zone ("all
# times UTC except where noted") is not its zone. "8:10 local time" read as 8:10 UTC was
# tomorrow's, later than Date + lead; only a note of the local zone places it.
_BARE_CLOCK = re.compile(_CLOCK_NO_ZONE + r"|[^\S\n]*local\b)")
_BARE_OR_LOCAL_CLOCK = re.compile(_CLOCK_NO_ZONE + ")")
_OF_LOCAL_TIME = re.compile(r"\blocal[^\S\n]*\Z", re.I)


def _zoned_under_heading(text: str) -> str:
    """`text` with the zone of a heading written after each bare time under it. In linear
    time: each line is checked once, and each block of lines under a heading read once."""
    kept: list[str] = []
    at = 0  # where the text not yet copied starts
    checked = -1  # the start of the last line checked for being a heading
    for heading in _ZONE_HEADING.finditer(text):
        if heading.start() < at:
            continue
        begin = text.rfind("\n", 0, heading.start()) + 1
        if begin == checked:
            continue
        checked = begin
        end = text.find("\n", heading.end())
        if end < 0 or _DIGIT.search(text, begin, end) is not None:
            continue  # a line with figures is a time's own line, no heading
        # Blank lines right after it first ("All times are in UTC." then a blank line).
        first = end
        while (empty := _EMPTY_LINE.match(text, first)) is not None:
            first = empty.end()
        blank = _BLANK_LINE.search(text, first)
        stop = blank.start() if blank else len(text)
        zone = (heading.group("z") or heading.group("z2")).upper()
        kept.append(text[at:end])
        kept.append(_BARE_CLOCK.sub(rf"\g<0> {zone}", text[end:stop]))
        at = stop
    kept.append(text[at:])
    return "".join(kept)


# A note on a time's own line that gives its zone ("13:10 (all times UTC)", "13:10. All
# times are UTC.", "13:10 (time zone: UTC)", "Time (UTC): 13:10"): its bare times were
# skipped, and Date + lead stood in. Only such notes: "at 9:00 (14:00 in UTC)" is no note.
_ZONE_NOTE = re.compile(
    # Also "(times in UTC)", "(tz: UTC)", "(in UTC)", found in the hunt.
    r"\b(?:all\s+times\s+(?:are\s+)?(?:(?:shown|given|listed|stated|quoted)\s+)?(?:in\s+)?"
    r"|times\s+(?:are\s+)?(?:(?:shown|given|listed|stated|quoted)\s+)?in\s+)(?P<z>UTC|GMT)\b"
    r"|\b(?:time[\s-]*zone\s*(?:is\s+)?[:=]?|tz\s*[:=])\s*(?P<z2>UTC|GMT)\b"
    r"|[(\[]in\s+(?P<z4>UTC|GMT)[)\]]"
    r"|\b(?:times?|date|when|deadline)\s*[(\[](?P<z3>UTC|GMT)[)\]]\s*:"
    # "13:10 server time (UTC)": Date + lead stood in.
    r"|\b(?:server|system)\s+time\s*[(\[](?P<z5>UTC|GMT)[)\]]",
    re.I,
)


def _zoned_on_line(text: str) -> str:
    """`text` with the zone of a note written after each bare time on the note's line.
    Each line is rewritten once, however many notes it holds."""
    kept: list[str] = []
    at = 0
    for note in _ZONE_NOTE.finditer(text):
        if note.start() < at:
            continue  # a second note on a line already rewritten
        begin = text.rfind("\n", 0, note.start()) + 1
        end = text.find("\n", note.end())
        end = len(text) if end < 0 else end
        # A note on a line of its own is of the line above too ("... at 13:10." then "All
        # times are UTC."): Date + lead stood in.
        if begin > 0 and _DIGIT.search(text, begin, end) is None:
            above = text.rfind("\n", 0, begin - 1) + 1
            begin = above if above >= at else begin
        zone = next(z for z in note.group("z", "z2", "z3", "z4", "z5") if z).upper()
        # "Local time zone: UTC" names the zone of local times too.
        local = _OF_LOCAL_TIME.search(text, max(begin, note.start() - 12), note.start())
        clock = _BARE_CLOCK if local is None else _BARE_OR_LOCAL_CLOCK
        kept.append(text[at:begin])
        kept.append(clock.sub(rf"\g<0> {zone}", text[begin:end]))
        at = end
    kept.append(text[at:])
    return "".join(kept)


# Up to the next "<" or ">": a mail of thousands of "<time" without an end is read in linear time.
_TIME_TAG = re.compile(
    r"(?i)<time\b[^<>]*?\bdatetime\s*=\s*[\"']?(?P<when>[^\"'<>\s]+)[\"']?[^<>]*>"
)


# A reply quotes the mail it answers: an older notice, whose droplet and time are not this
# mail's. Quoted lines (">"), HTML blockquotes and the "On ... wrote:" line are not read.
_QUOTED_LINE = re.compile(r"(?m)^[ \t]*>.*$|^[ \t]*On\b[^\n]{0,200}\bwrote:[ \t]*$")
_BLOCKQUOTE_TAG = re.compile(r"(?i)<(?P<close>/)?blockquote(?(close)\s*|\b[^>]*)>")


def _without_blockquotes(text: str) -> str:
    """`text` with each blockquote, nested ones in it, replaced by a space; an opening tag
    without its end stays. In one pass: removing the innermost quote again and again took
    seconds for a mail of thousands of nested ones."""
    opened: list[int] = []
    quoted: list[tuple[int, int]] = []  # outermost spans, in order
    for tag in _BLOCKQUOTE_TAG.finditer(text):
        if tag.group("close") is None:
            opened.append(tag.start())
        elif opened:
            start = opened.pop()
            while quoted and quoted[-1][0] >= start:  # the quotes inside this one
                quoted.pop()
            quoted.append((start, tag.end()))
    if not quoted:
        return text
    kept, at = [], 0
    for start, end in quoted:
        kept.append(text[at:start])
        at = end
    kept.append(text[at:])
    return " ".join(kept)


# Times in the text. Every form needs a zone (UTC, GMT, Z or an offset): a time without one
# cannot be placed and is skipped. Their figures are ASCII digits ([0-9]): `\d` took digits of
# any script, which int() reads, so "December 4, 2026 UTC" in Arabic-Indic digits was the
# clock 20:26. A digit of any script still bounds one ((?<!\d), (?!\d)), and the year
# before a zone is still told from a clock whatever its digits (_DATE_BEFORE).
_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<mon>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<d>[0-9]{1,2})(?:st|nd|rd|th)?"
# No year after a date without one. Four digits after a date are a year when they can be
# one (19xx, 20xx: "December 4, 2026", the form with a year), else a clock ("December 4,
# 1600 UTC"), and always with hrs or Z ("December 4 2000Z").
_YEAR_AFTER_DATE = r",?\s*(?:19|20)[0-9]{2}(?!\s*(?:hrs|hours|z)\b)"
_NO_YEAR = r"(?!" + _YEAR_AFTER_DATE + ")"
_DAY_NO_YEAR = r"(?P<d>[0-9]{1,2})(?!\d)(?:st|nd|rd|th)?(?![a-z])" + _NO_YEAR
_DATES = {
    # "2026-12-01", "2026/12/1", "2026.12.01".
    "iso": r"(?<![\d./-])(?P<y>[0-9]{4})(?P<sep>[-/.])(?P<m>[0-9]{1,2})(?P=sep)(?P<d>[0-9]{1,2})"
    r"(?!\d)",
    # "12/01/2026", "01.12.2026", "1-12-2026": day or month first, which cannot be told
    # apart; each reading is tried, the earliest first. Skipped before, so the time was
    # read without its date or Date + lead stood in, which could be later than the reclaim.
    # A two-digit year ("12/01/26", as US mail and Excel write it) is of this century: not
    # read as a date, its time was taken for today's or Date + lead stood in.
    "numeric": r"(?<![\d./-])(?P<a>[0-9]{1,2})(?P<sep>[-/.])(?P<b>[0-9]{1,2})(?P=sep)"
    r"(?P<y>[0-9]{4}|[0-9]{2})(?![\d./-]?\d)",
    "mdy": _MONTH + r"\s+" + _DAY + r",?\s+(?P<y>[0-9]{4})",
    "dmy": _DAY + r"\s+(?:of\s+)?" + _MONTH + r",?\s+(?P<y>[0-9]{4})",
    # "December 4", "Dec. 4th", "4 December", "4th of December": no year, as DigitalOcean's
    # templates and people write them; the next such date not before the mail's Date (less
    # the slack). Not read before: its time was taken for the day of the mail, a day or more
    # before the reclaim. Never followed by a year: that is the form above.
    "md": r"\b" + _MONTH + r"\s+" + _DAY_NO_YEAR,
    "dm": r"(?<![\w./:-])" + _DAY_NO_YEAR + r"\s+(?:of\s+)?" + _MONTH + r"(?![a-z])" + _NO_YEAR,
}
_NAMED_ZONES = {
    # US (Central is US Central, not China), Europe, Asia-Pacific; ambiguous ones such as
    # IST are left out: a time in them is skipped.
    **{"EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7},
    **{"AKST": -9, "AKDT": -8, "HST": -10, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2},
    **{"EET": 2, "EEST": 3, "SGT": 8, "JST": 9, "KST": 9, "AEST": 10, "AEDT": 11},
}
# US zones written without standard or daylight ("9:30 AM ET"), as US mail writes them:
# read by the zone's rules on that day. Skipped before, so Date + lead stood in, later than
# the reclaim whenever less notice was given.
_US_ZONES = {
    "ET": "America/New_York",
    "CT": "America/Chicago",
    "MT": "America/Denver",
    "PT": "America/Los_Angeles",
}
# In words: by the zone's rules on that day, but "Daylight" at its fixed offset, the earlier
# reading when it is written in winter (a deadline read late loses work). "Standard" by the
# rules too: in summer they give daylight time, again the earlier reading.
_WORD_ZONES = {
    "eastern": "ET",
    "central": "CT",
    "mountain": "MT",
    "pacific": "PT",
}
# Minutes may be left out with AM/PM ("at 1 PM UTC"): such a time was skipped, and Date +
# lead stood in, an hour or more after it.
# "14h30" is how much of Europe writes 14:30, and "14.30" how British mail does: each was
# skipped, and Date + lead stood in, later than the reclaim when less notice was given.
# "1600 UTC", "1600Z", "1600 hrs UTC": four digits without a colon, as military and
# operations mail writes them; skipped before, so Date + lead stood in.
# "noon", "12 noon", "midnight": 12:00 and 00:00. Midnight is the start of the day written
# ("midnight UTC on December 4" is 00:00 on the 4th), the earlier of its two readings: a
# deadline read late loses work, one read early does not.
_CLOCK = (
    r"(?:\b(?:12\s*)?(?P<word{n}>noon|midday|midnight)\b"
    r"|(?<![\d:.])(?P<H{n}>[0-9]{{1,2}})"
    # "1 10 PM", "1,10 PM", "1, 10 PM" and "110 PM": its hour, a blank, a comma (and a blank)
    # or nothing, its minutes, then AM/PM. The "10 PM" alone was read, nine hours late;
    # "110 PM" was skipped. "13 h 10 UTC", and "13 10 UTC" with the zone in letters right
    # after: skipped, Date + lead stood in.
    r"(?:(?::|[^\S\n]?h[^\S\n]?|\.|(?<=[0-9]{{2}})"
    r"|(?:,[^\S\n]?|[^\S\n])?(?=[0-9]{{2}}[^\S\n]*[ap]\.?[^\S\n]?m\.?(?![a-z]))"
    r"|[^\S\n](?=[0-5][0-9][^\S\n]*(?:UTC|GMT)\b))"
    # "131000" of "20261201T131000Z": seconds without a colon after four figures.
    r"(?P<M{n}>[0-9]{{2}})(?:(?::|(?<=[0-9]{{4}}))(?P<S{n}>[0-9]{{2}})(?:\.[0-9]+)?)?"
    # "14:30 hrs UTC", as British and military mail writes it: skipped before; so were
    # "13:10h UTC" and "13.10h UTC".
    r"(?:\s*(?:hrs|hours|h(?![a-z]))\.?)?"
    # "13h UTC": the hour alone, as French mail writes it; skipped before.
    r"|(?P<hh{n}>[^\S\n]?h(?![a-z0-9])))?"
    # "1:10 in the afternoon UTC": skipped, and Date + lead stood in. So was "1:10 P M UTC".
    r"\s*(?P<ampm{n}>[ap]\.?[^\S\n]?m\.?(?![a-z])|in\s+the\s+(?:morning|afternoon|evening)\b)?)"
)
# A window ("between 14:00 and 16:00 UTC", "14:00-16:00 UTC") shares the zone written after
# its end; its start is the deadline. Without this, "-16:00" was read as a UTC offset.
_WINDOW = (
    r"(?:(?<=between\s)(?P<between>))?"
    + _CLOCK.format(n="")
    # The zone may be written on the start instead ("between 14:00 UTC and midnight"): the
    # end was not read, so a window open when the mail was sent was taken for one closed,
    # and its start was read on the next day.
    + r"(?:(?:{start_zone})?\s*(?:-|\u2013|\u2014|to|and|until)\s*"
    + _CLOCK.format(n="2")
    + r"(?(M2)|(?(word2)|(?(ampm2)|(?!)))))?"
    # A clock without minutes needs AM/PM, its own or, in a window, the end's (or the end
    # is noon or midnight: "between 10 and noon").
    + r"(?(M)|(?(word)|(?(ampm)|(?(hh)|(?(ampm2)|(?(word2)|(?!)))))))"
)


_UNIT_AFTER = r"[^\S\n]*(?:minutes?|mins?|m|hours?|hrs?|h)\b"


def _zone(name: str | None) -> str:
    """A zone written after a time (or a date), as the group `name` (None: no group)."""
    group = f"?P<{name}>" if name else "?:"
    return (
        # After a comma too, when named ("between 14:00 and midnight, UTC"): such a time
        # was skipped, and Date + lead stood in. Not an offset or "Z": those after a comma
        # are more likely something else than the zone of the time before it.
        r"(?:,(?=\s*\(?[A-Za-z]{2}))?"
        # "UTC+1" and "GMT-05:00" are offsets from UTC: read as plain UTC they were an hour
        # or more off. So was "GMT-05: 00", a space after its colon: a plain UTC or GMT is
        # not one with an offset touching it, and such an offset is read when its minutes
        # are those of real offsets (00, 30, 45).
        # A minus sign touches its hours: "14:00 UTC - 16:00 UTC" is a window written with a
        # zone on each end, and its "- 16:00" read as an offset put the deadline 16 hours
        # late; "UTC + 1" stays an offset (a plus starts no window). Hours beyond those of
        # real zones (UTC-12 to UTC+14) are no offset, nor is one followed by a zone of its
        # own: "14:00 UTC-16:00 UTC" and "10:00 UTC-12:00 UTC" are windows, read 16 and 12
        # hours late before.
        # In brackets too ("13:10 [UTC]"), as some templates write it: skipped before.
        # Nor is a minus before an amount: "14:00 UTC-1 min" is a margin, read as UTC-1 it
        # was an hour late.
        rf"\s*[(\[]?({group}(?:UTC|GMT)\s*"
        rf"(?:-(?=(?:1[0-2]|0?[0-9])(?:[0-9]{{2}})?(?![0-9]|{_UNIT_AFTER}))|\+\s*)"
        r"(?:[0-9]{2}:[^\S\n](?:00|30|45)(?![0-9])|(?:1[0-4]|0?[0-9])(?::?[0-9]{2})?)"
        r"(?![0-9]|\s*\(?(?:UTC|GMT)\b)"
        # UTC stays plain before a window's end that has a zone of its own, and before a
        # dash that no real offset follows ("13:00 UTC-14:00").
        r"|(?:UTC|GMT)(?=-[0-9]{1,2}:?[0-9]{2}\s*\(?(?:UTC|GMT)\b"
        rf"|-(?!(?:1[0-2]|0?[0-9])(?::?[0-9]{{2}}|:[^\S\n](?:00|30|45))?"
        rf"(?![0-9]|{_UNIT_AFTER}))"
        r"|(?![+-][0-9]))|Z"
        # "13:10 U.T.C.": skipped, and Date + lead stood in.
        r"|(?:U\.T\.C|G\.M\.T)\.?"
        rf"|[+-][0-9]{{2}}:?[0-9]{{2}}"
        # A named zone: a common abbreviation (fixed offset, as written), or an IANA name
        # (its daylight-saving rules apply). Skipped before, so Date + lead stood in for it.
        r"|"
        + "|".join(sorted(_NAMED_ZONES, key=len, reverse=True))
        # "ET", "PT": in capitals only, so that French "10h30 et 12h00" is no zone.
        + r"|(?-i:"
        + "|".join(_US_ZONES)
        # Zones in words, as people write them ("9am Eastern", "14:00 Coordinated
        # Universal Time"): skipped before, so Date + lead stood in.
        + r"|(?:Eastern|Central|Mountain|Pacific)(?:\s+(?:Standard|Daylight))?(?:\s+Time)?"
        + r"|(?:Coordinated\s+)?Universal\s+(?:Coordinated\s+)?Time|Greenwich\s+Mean\s+Time"
        # "13:10 Zulu", as aviation and military mail writes UTC: Date + lead stood in.
        + r"|Zulu"
        + r")"
        + r"|[A-Z][A-Za-z_]+/[A-Za-z0-9_/+-]+"
        # A colon may end the sentence's first part ("at 16:00 UTC: please save your
        # work"): refused, such a time was not read and Date + lead stood in, later than
        # the reclaim. Not a colon touching more ("GMT-05:00" is one offset) or before a
        # figure ("UTC: 2026-12-01"): the zone labels what follows, not the time before.
        r")(?!\w|:\S|:\s*\d)[)\]]?"
    )


# Followed by a space: "10:30 UTC-0130" is an offset from UTC, not a window to 01:30.
# Not before a dash and "0:30": "14:00 UTC -0:30" is an early margin, as "14:00 UTC-0:30" is
# (13:30; _TOLERANCES); read as a window to 00:30, its start was half an hour late.
_WINDOW = _WINDOW.replace(
    "{start_zone}",
    _zone("szone")
    + r"(?=\s)(?![^\S\n]*[-\u2212\u2013][^\S\n]*0:[0-5][0-9]"
    + r"(?![0-9:]|[^\S\n]*[(\[]?(?:[ap]\.?m\b|UTC\b|GMT\b|Z\b)))",
)
# A zone on the window's start stands for the whole window. With a zone on its end too, it
# is a window only after "between": "moved from 16:00 UTC to 13:30 UTC" is two times, the
# old and the new.
_TIME_ZONE = f"(?:{_zone('zone')})?" + (
    # Nor is an end that starts a date: "from 16:00 UTC to 2026-12-01 13:30 UTC".
    r"(?(szone)(?(zone)(?(between)|(?!))|(?!" + _zone(None) + r"|[-/.]\d))|)"
)
# The zone may come first ("UTC 13:10", "GMT 1:10 PM", "UTC 1 10 PM"), before a clock with
# its minutes or AM/PM (not "UTC 2026-12-01", a year): such a time was skipped, and Date +
# lead stood in.
_ZONE_FIRST = (
    r"(?:(?<![\w.])(?P<pzone>UTC|GMT)[^\S\n]+"
    r"(?=[0-9]{1,2}(?:[:.h][0-9]{2}(?![0-9]|\.[0-9])"
    r"|(?:,?[^\S\n]?[0-9]{2})?[^\S\n]*[ap]\.?m\b)))?"
)
_TIME = _ZONE_FIRST + _WINDOW + _TIME_ZONE + r"(?(zone)|(?(szone)|(?(pzone)|(?!))))"
# A date and its time may be parted by "@", "|" or a dash ("2026-12-01 @ 14:00 UTC"), or a
# weekday in parentheses ("2026-12-01 (Tue) 14:00 UTC"), and a weekday may be short ("14:00
# UTC, Tue 1 Dec"): unread, such a time was skipped off a line not about the reclaim
# ("When: ..."), and Date + lead stood in, later than the reclaim.
_DATE_THEN_TIME = (
    r"(?:T|,?\s+(?:(?:at|between|from)\s+)?"
    r"|[^\S\n]*(?:[@|\u2013\u2014]|(?<=\s)-|,)[^\S\n]*(?:(?:at|between|from)\s+)?"
    r"|\s+\([a-z]{2,9}\.?\)\s+)"
)
_WEEKDAY = r"(?:[a-z]+day|mon|tues?|wed|thu(?:rs?)?|fri|sat|sun)\.?"
_TIME_THEN_DATE = r",?\s+(?:on\s+)?(?:" + _WEEKDAY + r",?\s+)?"
# The zone may follow the date instead of the time: "at 16:00 on December 4, 2026 UTC",
# "December 4, 2026 (UTC) at 16:00". The year then stood before the only zone, so it was
# rightly no clock (20:26), and the time without a zone was not read: Date + lead stood in.
_DATE_ZONE = f"(?:{_zone('dzone')})?"
# Or come before the date ("UTC 2026-12-01 13:10"), as before a time.
_ZONE_BEFORE_DATE = r"(?:(?<![\w.])(?P<pzone>UTC|GMT)[^\S\n]+)?"
# With two, the time's is used.
_SOME_ZONE = r"(?(zone)|(?(szone)|(?(dzone)|(?!))))"
_SOME_ZONE_OR_FIRST = r"(?(zone)|(?(szone)|(?(dzone)|(?(pzone)|(?!)))))"
# The year after the clock, as C's ctime() and `date` write it ("Tue Dec 1 14:00:00 2026
# UTC"): not read as one, "2026 UTC" was the clock 20:26, six hours late.
_CTIME_YEAR = r"\s+(?P<y>(?:19|20)[0-9]{2})(?!\d)" + _TIME_ZONE + r"(?(zone)|(?!))"
_CTIMES = (
    r"\b" + _MONTH + r"\s+" + _DAY + r"\s+" + _WINDOW + _CTIME_YEAR,
    r"(?<![\w./:-])" + _DAY + r"\s+" + _MONTH + r"\s+" + _WINDOW + _CTIME_YEAR,
)
# The first character of a match, looked at before the pattern is tried: the engine tries a
# pattern at every position of the text, and failing on one character class there, rather
# than on the pattern's branches, made the longest single search of a 256 KiB mail several
# times shorter. The judging thread holds the interpreter's lock for a whole search, so the
# agent's heartbeats and replies waited on it.
_CLOCK_FIRST = r"(?=[0-9nm])"  # a clock's figures, or noon, midday, midnight
_MONTH_FIRST = "[" + "".join(sorted({name[0] for name in _MONTHS})) + "]"
_DATE_FIRST = {  # UTC or GMT (`_ZONE_BEFORE_DATE`), then the date's day, year or month
    name: "(?=[ug0-9])" if name in ("iso", "numeric", "dmy", "dm") else f"(?=[ug]|{_MONTH_FIRST})"
    for name in _DATES
}
# Each form with what it needs somewhere in the mail: its date, or a month's name. Searched
# for once per mail: a time-then-date form tried at every time of a 256 KiB mail of times
# without any date cost a quarter of a second each, most of the mail's CPU.
_MONTH_NAME = re.compile(f"(?={_MONTH_FIRST})" + _MONTH, re.IGNORECASE)
_NEEDS: dict[str, re.Pattern[str] | None] = {
    "iso": re.compile(_DATES["iso"]),
    "numeric": re.compile(_DATES["numeric"]),
    "mdy": _MONTH_NAME,
    "dmy": _MONTH_NAME,
    "md": _MONTH_NAME,
    "dm": _MONTH_NAME,
}


def _written_time_patterns(margin: str) -> list[tuple[re.Pattern[str] | None, re.Pattern[str]]]:
    """The patterns of a time with its date, each with the pattern a text must hold for it to
    be tried; `margin`, a tolerance that may stand between a time and the date after it."""
    patterns: list[tuple[re.Pattern[str] | None, re.Pattern[str]]] = [
        (_NEEDS[name], re.compile(pattern, re.IGNORECASE))
        for name, date in _DATES.items()
        for pattern in (
            _DATE_FIRST[name]
            + _ZONE_BEFORE_DATE
            + date
            + _DATE_ZONE
            + _DATE_THEN_TIME
            + _WINDOW
            + _TIME_ZONE
            + _SOME_ZONE_OR_FIRST,
            _CLOCK_FIRST
            + _WINDOW
            + _TIME_ZONE
            + f"(?P<margin>{margin})?"
            + _TIME_THEN_DATE
            + date
            + _DATE_ZONE
            + _SOME_ZONE,
        )
    ] + [
        (_MONTH_NAME, re.compile(f"(?={_MONTH_FIRST}|[0-9])" + pattern, re.IGNORECASE))
        for pattern in _CTIMES
    ]
    # ISO 8601's basic form, "20261204T131000Z": its time alone was read, on the mail's day.
    patterns.append(
        (
            None,
            re.compile(
                r"(?<![0-9])(?P<y>(?:19|20)[0-9]{2})(?P<m>[01][0-9])(?P<d>[0-3][0-9])T"
                + _WINDOW
                + _TIME_ZONE
                + r"(?(zone)|(?(szone)|(?!)))",
                re.IGNORECASE,
            ),
        )
    )
    return patterns


# A time with its zone and no date ("at 14:30 UTC", "today between 14:00 and 16:00 UTC"):
# its next occurrence from the mail's Date. Read as Date + lead it was late by up to a
# day whenever DigitalOcean gave less notice than the lead.
# Also a label of a new or old time ("Old: 16:00 UTC" then "New: 13:15 UTC", under a
# notice that the reclaim was rescheduled): such times were skipped, and Date + lead stood
# in for the new one, later than it.
_ABOUT_RECLAIM = re.compile(
    r"reclaim|interrupt|preempt|terminat|shut\s*down|stop|power|window|deadline|schedul"
    r"|\b(?:new|old|previous|original|updated|revised)(?:\s+(?:time|date))?\s*:",
    re.I,
)
_TIME_FIRST = r"(?=[ug0-9nm])"  # UTC or GMT (`_ZONE_FIRST`), or the clock (`_CLOCK_FIRST`)
_TIME_ONLY = re.compile(_TIME_FIRST + r"(?<![\d:.])" + _TIME, re.IGNORECASE)
# The year of a date written without a time ("December 4, 2026 UTC") is no clock (20:26).
_ANY_MONTH = _MONTH.replace("(?P<mon>", "(?:")
_DATE_BEFORE = re.compile(
    r"(?:\b" + _ANY_MONTH + r"(?:\s+\d{1,2}(?:st|nd|rd|th)?)?"
    r"|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?" + _ANY_MONTH + r")\Z",
    re.IGNORECASE,
)
_YEAR_AFTER = re.compile(_YEAR_AFTER_DATE, re.IGNORECASE)
# A weekday, or "the day after tomorrow", next to a time without a date: read as the time's
# next occurrence, it was days early ("at 14:00 UTC on Thursday" in a mail of Tuesday was
# Tuesday's 14:00), and the mail's own weekday with a time already past a day late. A
# weekday is its next date from the mail's (the mail's own day included), in the time's
# zone; a short one ("Thu") only after "on".
_WEEKDAYS = {
    name: number
    for number, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
_FULL_WEEKDAYS = [name for name in _WEEKDAYS if name.endswith("day")]  # Monday first
_SHORT_WEEKDAYS = sorted(set(_WEEKDAYS) - set(_FULL_WEEKDAYS), key=len, reverse=True)
# "next Saturday" said on a Tuesday may mean either Saturday ahead: the first, never late,
# and never the mail's own day. "on the 3rd": the next such day of a month. "tmrw": as
# "tomorrow". Each was read as the time's next occurrence, days early.
_DAY_WORD = (
    r"today|tomorrow|tmrw|(?:the\s+)?day\s+after\s+tomorrow"
    r"|next\s+(?:" + "|".join(_FULL_WEEKDAYS + _SHORT_WEEKDAYS) + r")\b\.?"
    r"|(?:(?:on|this)\s+)?(?:" + "|".join(_FULL_WEEKDAYS) + r")"
    r"|on\s+(?:" + "|".join(_SHORT_WEEKDAYS) + r")\b\.?"
    r"|(?:on\s+)?the\s+(?:3[01]|[12][0-9]|0?[1-9])(?:st|nd|rd|th)\b"
)


def _relative_day(words: str) -> str:
    """The day `words` matched by `_DAY_WORD` say: "today", "tomorrow", "day after tomorrow",
    a weekday's full name, "next " and one, or "the " and a day of the month."""
    said = words.lower().rstrip(".").split()
    if said[-1] in _WEEKDAYS:
        full = _FULL_WEEKDAYS[_WEEKDAYS[said[-1]]]
        return f"next {full}" if said[0] == "next" else full
    if said[-1][0].isdigit():
        return "the " + said[-1][:-2]  # "3rd": "the 3"
    if said[-1] == "tmrw":
        return "tomorrow"
    return "day after tomorrow" if "after" in said else said[-1]


def _on_relative_day(moment: datetime, relative_day: str) -> datetime | None:
    """`moment`, a time on the mail's day, on the day `relative_day` (`_relative_day`) says;
    None if no month has that day."""
    if relative_day == "tomorrow":
        return moment + timedelta(days=1)
    if relative_day == "day after tomorrow":
        return moment + timedelta(days=2)
    if relative_day in _WEEKDAYS:
        return moment + timedelta(days=(_WEEKDAYS[relative_day] - moment.weekday()) % 7)
    if relative_day.startswith("next "):
        ahead = (_WEEKDAYS[relative_day[5:]] - moment.weekday()) % 7
        return moment + timedelta(days=ahead or 7)
    if relative_day.startswith("the "):
        return _next_day_of_month(moment, int(relative_day[4:]))
    return moment  # today, or no day said


def _next_day_of_month(moment: datetime, day: int) -> datetime | None:
    """`moment` moved to the first date on `day` of a month not before its own date (within a
    year), or None if no month has that day."""
    year, month = moment.year, moment.month
    for _ in range(13):
        if day >= (moment.day if (year, month) == (moment.year, moment.month) else 1):
            with contextlib.suppress(ValueError):  # no such day in this month
                return moment.replace(year=year, month=month, day=day)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


# "tomorrow" next to a time without a date: read as the time's next occurrence, the
# deadline was a day early whenever that time of day was still to come on the Date's day.
# "today": read so, a time already past was tomorrow's, a day after the reclaim; it is the
# Date's day, past or not (a past deadline asks clients to act at once).
# Across a line break too, where the sentence wraps ("reclaimed tomorrow at" then
# "16:00 UTC."): a time starts with a digit or in lowercase, after a lowercase word or a
# comma (`_carries_on`).
_DAY_BEFORE = re.compile(
    r"\b(?P<day>" + _DAY_WORD + r")[^\S\n]*,?(?:[^\S\n]+|[^\S\n]*\n[^\S\n]*)"
    r"(?:(?:at|between|from|by|around|until)(?:[^\S\n]+|[^\S\n]*\n[^\S\n]*))?\Z",
    re.IGNORECASE,
)
# One run of blanks, then an optional comma: two runs side by side are tried in every split
# of a long run of spaces after a time (seconds for 20,000 spaces, minutes for 256 KiB).
_DAY_AFTER = re.compile(
    r"[^\S\n]*(?:,[^\S\n]*)?(?P<day>" + _DAY_WORD + r")(?:(?<=\.)|\b)", re.IGNORECASE
)


# A year after a clock ("14:00:00 2026 UTC", ctime's order) is no clock either.
_CLOCK_BEFORE = re.compile(r"[0-9]:[0-9]{2}(?::[0-9]{2})?(?:\s*[ap]\.?m\.?)?\s+\Z", re.I)


def _is_year_of_a_date(text: str, match: re.Match[str]) -> bool:
    if _YEAR_AFTER.match(text, match.start()) is None:
        return False
    if _CLOCK_BEFORE.search(text, max(0, match.start() - 20), match.start()) is not None:
        return True
    end = match.start()
    while end > 0 and text[end - 1] in ", \t\n":
        end -= 1
    return _DATE_BEFORE.search(text, max(0, end - 40), end) is not None


# "in the next 30 minutes", "in less than 2 hours", "in two hours", "30 minutes from now",
# "in 2-3 hours" (its first figure): missed before, they left Date + lead (2 h) as the
# deadline, later than the reclaim.
_WORD_NUMBERS = {
    "a": 1.0,
    "an": 1.0,
    "one": 1.0,
    "half an": 0.5,
    "two": 2.0,
    "three": 3.0,
    "four": 4.0,
    "five": 5.0,
    "six": 6.0,
    "ten": 10.0,
    "fifteen": 15.0,
    "twenty": 20.0,
    "thirty": 30.0,
    "forty-five": 45.0,
    "ninety": 90.0,
    # Read as no amount, Date + lead (2 h) stood in: "in seven minutes", "in one and a half
    # hours", "in a couple of hours". Not "a few" nor "several": a shift "brought forward by
    # a few hours" read as one hour would be late.
    "seven": 7.0,
    "eight": 8.0,
    "nine": 9.0,
    "eleven": 11.0,
    "twelve": 12.0,
    "forty": 40.0,
    "fifty": 50.0,
    "sixty": 60.0,
    "one and a half": 1.5,
    "a couple of": 2.0,
    "a couple": 2.0,
    "a half": 0.5,
    "a quarter of an": 0.25,
    "three quarters of an": 0.75,
    # "in 1/2 hour", "in \u00bd hour", "in half hour": Date + lead (2 h) stood in.
    "1/2": 0.5,
    "1/2 an": 0.5,
    "\u00bd": 0.5,
    "\u00bd an": 0.5,
    "half": 0.5,
    "1/4": 0.25,
    "\u00bc": 0.25,
    "3/4": 0.75,
    "\u00be": 0.75,
    # "thirty-five", "forty five": Date + lead (2 h) stood in.
    **{
        f"{tens}{joint}{unit}": float(tens_value + unit_value)
        for tens, tens_value in (("twenty", 20), ("thirty", 30), ("forty", 40), ("fifty", 50))
        for unit_value, unit in enumerate(
            ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine"), start=1
        )
        for joint in ("-", " ")
    },
}
_AMOUNT = (
    # "1 1/2 hours", "1\u00bd hours": read as no amount, Date + lead (2 h) stood in.
    r"(?P<n>[0-9]+(?:\.[0-9]+)?(?:[^\S\n]*(?:1/2|\u00bd)(?![0-9]))?|"
    + "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True)).replace(" ", r"\s+")
    # "a 30-minute notice": a hyphen before the unit. "in 40'": a prime for minutes. "in 40+
    # minutes", "in 40 mn": at least that, the French unit. Each was read as no amount, and
    # Date + lead stood in.
    + r")(?:\s*(?:-|\u2013|to|or|and)\s*[0-9]+(?:\.[0-9]+)?)?\+?(?:\s*|-)(?:(?P<unit>hours?|hrs?|h)"
    # Hours, then minutes ("1 hour and 30 minutes", "1h30m", "2 hours and a half"): read as
    # the hours alone, the deadline was early by the minutes; "1h30m" was not read at all.
    r"(?:\s*,?\s*(?:and\s+)?(?P<mins>[0-9]{1,2})\s*(?:minutes?|mins?|m)|\s+and\s+(?P<half>a\s+half))?"
    # "90m": minutes as "1h30m" writes them; Date + lead (2 h) stood in for it.
    r"|(?P<unit_m>minutes?|mins?|mn|m|(?<=[0-9])['\u2032](?=[^\w'\u2032]|\Z))"
    r"|(?P<unit_s>seconds?|secs?))"
    r"(?:(?<=['\u2032])|\b)"
)
_COUNTDOWN_LABEL = (
    r"(?:time\s+(?:remaining|left)|remaining\s+time|count\s*down|eta|grace\s+period)"
    r"[^\S\n]*[:=][^\S\n]*"
)
_RELATIVE = re.compile(
    # "You have 30 minutes to save your work": Date + lead (2 h) stood in.
    r"\b(?:(?:(?:in|within)\s+(?:the\s+(?:next|coming)\s+)?|(?:over|during)\s+the\s+next\s+"
    r"|you\s+have\s+"
    # A countdown's label ("Time remaining: 40 minutes", "ETA: 40 min", "Grace period: 30
    # minutes"): Date + lead stood in.
    r"|"
    + _COUNTDOWN_LABEL
    # "in T-30 minutes", "T minus 30 minutes", as launch countdowns write it.
    + r"|(?-i:T)[^\S\n]*(?:[-\u2212\u2013][^\S\n]*(?:minus\s+)?|minus\s+))"
    # "in approx. 45 minutes", "in just 45 minutes", "in \u224845 minutes": Date + lead stood in.
    r"(?:(?:about|approximately|approx\.?|roughly|around|less\s+than|fewer\s+than|under"
    r"|as\s+little\s+as|no\s+more\s+than|no\s+less\s+than|at\s+most|up\s+to|just|only"
    # "in no later than 40 minutes": Date + lead stood in.
    r"|(?:no|not)\s+later\s+than"
    r"|between)\s+|[~\u2248]\s*)?"
    + _AMOUNT
    + r"|"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>2>", _AMOUNT)
    # "1 hour from the time of this email", "30 minutes after this notice": as "from now".
    # "40 minutes from receipt of this email" too: Date + lead stood in.
    + r"\s+(?:from\s+now|(?:from\s+(?:(?:the\s+)?(?:time|date|sending|receipt)\s+of\s+)?|after\s+)"
    r"this\s+(?:e-?mail|message|notice|notification|mail))\b"
    # "within the hour", "in the next hour": with no figure, Date + lead (2 h) stood in, an
    # hour after the reclaim.
    r"|\b(?:in|within)\s+the\s+(?:next\s+)?(?P<the_hour>hour)\b"
    # "with 30 minutes' notice", "with only 45 minutes of notice": Date + lead stood in.
    r"|\bwith\s+(?:a\s+)?(?:(?:only|just|about|approximately|roughly|around|less\s+than)\s+)?"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>3>", _AMOUNT)
    + r"['\u2019]?s?\s+(?:of\s+)?(?:advance\s+|prior\s+)?notice\b"
    # "after a 30-minute grace period": Date + lead stood in. So did "following ...", "at
    # the end of ..." and "you have a 30-minute grace period".
    r"|\b(?:after|following|at\s+the\s+end\s+of|you\s+have)\s+(?:a\s+|the\s+)?"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>4>", _AMOUNT)
    + r"\s+(?:grace\s+period|delay|waiting\s+period|notice\s+period)\b"
    # A countdown as a clock ("in 0:40", "in 00:40:00"): Date + lead stood in. Not a time of
    # day: no zone or AM/PM after it, and under ten hours. Also "in 0h40", and after a
    # countdown's label ("Time left: 0:40", "Countdown: 00:40:00").
    r"|\b(?:in\s+|" + _COUNTDOWN_LABEL + r")"
    r"(?P<count_h>0?[0-9])(?::|h)(?P<count_m>[0-5][0-9])(?::[0-5][0-9])?"
    r"(?![0-9:]|[^\S\n]*(?:[ap]\.?m\.?(?![a-z])|[(\[]?(?:UTC|GMT|Z)\b|[+-][0-9]"
    r"|(?-i:[A-Z]{2,5})\b|in\s+the\b))"
    # Said to be at once, with no amount ("in a few minutes", "reclaimed immediately",
    # "now being reclaimed"): Date + lead (2 h) stood in. Read as the Date: a terminate at
    # once, the only reading that is never late.
    r"|\b(?P<at_once>(?:in|within|over)\s+(?:the\s+(?:next|coming)\s+)?(?:(?:a\s+few|few|several)"
    r"\s+(?:seconds|minutes|moments)|a\s+moment|moments|seconds|minutes)\b"
    r"|(?:reclaim|terminat|interrupt|pre-?empt|evict)\w*\s+(?:now|immediately|right\s+(?:now"
    r"|away)|at\s+once|momentarily|imminently|any\s+(?:minute|moment))\b"
    r"|now\s+being\s+(?:reclaimed|terminated|interrupted|pre-?empted|evicted)\b"
    r"|(?:reclaim|termination|interruption|pre-?emption|eviction)\w*\s+is\s+imminent\b"
    r"|immediate\s+(?:reclaim|reclamation|termination|interruption|pre-?emption|eviction)\b))",
    re.IGNORECASE,
)


# A Unix time ("at 1796220600", "epoch 1796220600", "@1796220600"), as scripts and monitoring
# write it: Date + lead stood in. Ten digits, after a word that says it is a time; the 30 days
# a deadline may be ahead keep a phone number or an id out.
_EPOCH = re.compile(
    r"(?:\b(?:(?:unix\s+)?(?:epoch|time(?:stamp)?)|at)[^\S\n]*[:=]?[^\S\n]*|(?<![\w@])@)"
    r"(?P<epoch>[0-9]{10})(?:\.[0-9]+)?(?![0-9])",
    re.IGNORECASE,
)


# A new time given as a shift of the old one: "postponed by 2 hours", "brought forward by
# 30 minutes". Without a time in it, Date + lead stood in: for a reclaim brought forward,
# after the reclaim, and the earlier notice, at the right old time, was withdrawn.
_SHIFT = re.compile(
    r"\bby\s+(?:(?:about|approximately|roughly|around)\s+|~\s*)?" + _AMOUNT, re.IGNORECASE
)
_EARLIER = re.compile(r"\b(?:brought\s+forward|earlier|moved\s+up|advanced|sooner)\b", re.I)


# A margin written as a clock ("14:00 UTC (± 0:30)", "(up to 1:15 earlier)"): each such form
# was read as 14:00, late by the margin. Not a time of day after it.
_CLOCK_AMOUNT = (
    r"(?P<ch>[0-9]{1,2}):(?P<cm>[0-5][0-9])"
    r"(?![0-9:]|[^\S\n]*[(\[]?(?:[ap]\.?m\b|UTC\b|GMT\b|Z\b))"
)
_SOME_AMOUNT = "(?:" + _AMOUNT + "|" + _CLOCK_AMOUNT + ")"
# A time given with a tolerance: "at 14:00 UTC +/- 30 minutes", "16:00 UTC (± 2h)". Read as
# the time written, the reclaim could come up to the tolerance before it: late by that much.
# After a comma too ("14:00 UTC, give or take half an hour"), and said as how much earlier
# it may come ("14:00 UTC, or up to 30 minutes earlier"): read as 14:00, late by that much.
_TOLERANCES = [
    re.compile(
        r"\s*(?:,\s*)?(?:[(\[]\s*)?(?:\u00b1|\+\s*/\s*[-\u2212]|\+-|plus\s+or\s+minus|give\s+or\s+take)\s*"
        r"(?:(?:about|approximately|roughly|around|up\s+to)\s+|~\s*)?" + _SOME_AMOUNT + r"\)?\]?",
        re.IGNORECASE,
    ),
    re.compile(
        r"\s*(?:,\s*)?(?:[(\[]\s*)?(?:(?:or|and|but|possibly|perhaps|maybe|though)\s+)*"
        r"(?:up\s+to|as\s+much\s+as|at\s+most|no\s+more\s+than)\s+"
        + _SOME_AMOUNT
        + r"\s+(?:earlier|before|sooner|early|ahead)\b\)?\]?",
        re.IGNORECASE,
    ),
    # "14:00 UTC, 30 minutes earlier at the latest": read as 14:00, late by the 30 minutes. In
    # brackets too ("14:00 UTC (or 30 minutes earlier)"): read as 14:00.
    re.compile(
        r"[^\S\n]*(?:,|[(\[])[^\S\n]*(?:(?:or|possibly|perhaps|maybe)\s+)*"
        + _SOME_AMOUNT
        + r"\s+(?:earlier|sooner)\b(?:\s+at\s+the\s+(?:latest|most))?[^\S\n]*[)\]]?",
        re.IGNORECASE,
    ),
]


# Written as the compact "14:00 UTC (-30/+0 min)": read as 14:00, late by the 30 minutes.
_TOLERANCES.append(
    re.compile(
        r"[^\S\n]*[(\[][^\S\n]*(?:\+[^\S\n]*[0-9]+(?:\.[0-9]+)?[^\S\n]*[a-z]*[^\S\n]*/[^\S\n]*)?"
        r"[-\u2212][^\S\n]*(?P<n>[0-9]+(?:\.[0-9]+)?)[^\S\n]*(?:(?P<uh1>h|hrs?|hours?)|m|mins?|minutes?)?"
        r"(?:[^\S\n]*/[^\S\n]*\+[^\S\n]*[0-9]+(?:\.[0-9]+)?)?[^\S\n]*"
        r"(?:(?P<uh2>h|hrs?|hours?)|m|mins?|minutes?)?[^\S\n]*[)\]]",
        re.IGNORECASE,
    )
)
# Or as a margin without brackets: "14:00 UTC -30min" was read as 14:00. A unit is needed:
# "14:00 UTC-3" is an offset, read with the time, and "14:00 UTC - 16:00 UTC" a window.
# Also in words, after a comma or in brackets: "14:00 UTC minus 30 minutes", "14:00 UTC, -30
# min", "14:00 UTC (minus 30 minutes)"; found in the hunt, each was read as 14:00.
_TOLERANCES.append(
    re.compile(
        r"[^\S\n]*(?:,[^\S\n]*)?(?:[(\[][^\S\n]*)?(?:[-\u2212\u2013]|minus\s)[^\S\n]*(?=[0-9])"
        + _AMOUNT
        + r"[^\S\n]*[)\]]?",
        re.IGNORECASE,
    )
)
# Or as a clock of no hours: "14:00 UTC - 0:30" was read as 14:00 (a window to 00:30, before).
_TOLERANCES.append(
    re.compile(
        r"[^\S\n]*[-\u2212\u2013][^\S\n]*0:(?P<n>[0-5][0-9])"
        r"(?![0-9:]|[^\S\n]*[(\[]?(?:[ap]\.?m\b|UTC\b|GMT\b|Z\b))",
        re.IGNORECASE,
    )
)
# In brackets: "14:00 UTC (-0:30)", "(- 00:30)" was read as 14:00. Only of no hours: "09:00
# EST (-05:00)" restates the zone's offset, and no zone is between UTC-1 and UTC.
_TOLERANCES.append(
    re.compile(r"[^\S\n]*[(\[][^\S\n]*[-\u2212\u2013][^\S\n]*0?0:(?P<n>[0-5][0-9])[^\S\n]*[)\]]")
)
# A tolerance between a time and its date ("14:00 UTC (± 30 min) on December 3", "14:00 UTC
# -30min on December 3"): the date was lost, and the time read on the mail's day, days early.
_WRITTEN_TIMES = _written_time_patterns(
    "|".join(re.sub(r"\(\?P<\w+>", "(?:", tolerance.pattern) for tolerance in _TOLERANCES)
)
# The same said in a sentence of its own: "Droplet gpu-1 will be reclaimed at 14:00 UTC. It may
# be reclaimed up to 50 minutes early." The deadline was 14:00, late by the 50 minutes.
_EARLY_BY = re.compile(
    r"\b(?:up\s+to|as\s+much\s+as|at\s+most|no\s+more\s+than)\s+"
    + _AMOUNT
    + r"\s+(?:earlier|early|sooner"
    r"|(?:ahead\s+of|before)\s+(?:that|then|this(?:\s+time)?|schedule|time"
    r"|the\s+(?:scheduled|stated|announced|planned)\s+(?:time|deadline)))\b",
    re.IGNORECASE,
)


def _early_by(text: str, begin: int, stop: int, words: str) -> tuple[timedelta, str] | None:
    """The most that a sentence of the reclaim between `begin` and `stop` says it may come
    early, unless the deadline's own `words` already said so."""
    most: tuple[timedelta, str] | None = None
    for match in _EARLY_BY.finditer(text, begin, stop):
        if match.group(0) in words:
            continue
        back = max(begin, match.start() - 120)
        ends = [m.end() for m in _SENTENCE_END.finditer(text, back, match.start())]
        start = ends[-1] if ends else back
        if not (
            _RECLAIM_WORD.search(text, start, match.start())
            or _IT_FIRST.match(text, start, match.start())
        ):
            continue
        parts = {k: v for k, v in match.groupdict().items() if v is not None}
        try:
            amount = timedelta(hours=_amount_hours(parts))
        except OverflowError:
            continue
        if most is None or amount > most[0]:
            most = amount, match.group(0)
    return most


def _tolerance_at(text: str, end: int) -> re.Match[str] | None:
    """The tolerance written at `end`, if one is."""
    return next((m for t in _TOLERANCES if (m := t.match(text, end)) is not None), None)


def _less_tolerance(
    found: re.Match[str] | None, end: int, written: tuple[datetime, datetime]
) -> tuple[tuple[datetime, datetime], int]:
    """`written` moved earlier by the tolerance `found` (`_tolerance_at` at `end`), and where
    its words end."""
    if found is None:
        return written, end
    parts = {k: v for k, v in found.groupdict().items() if v is not None}
    if "uh1" in parts or "uh2" in parts:  # "(-1/+0 h)": the unit of either figure
        parts["unit"] = "h"
    try:
        return (written[0] - timedelta(hours=_amount_hours(parts)), written[1]), found.end()
    except OverflowError:  # a tolerance past what a datetime holds: not one
        return written, end


# A time given as an amount before or after a time: "30 minutes before 14:00 UTC" was read as
# 14:00, late by the amount; "2 hours after 12:00 UTC", in a mail sent at 12:30, as 12:00
# tomorrow (past, so its next occurrence), 22 hours late.
_SHIFTED_FROM = re.compile(
    _AMOUNT + r"\s+(?P<way>before|prior\s+to|ahead\s+of|earlier\s+than|after|later\s+than|past)"
    r"\s+(?:the\s+)?$",
    re.IGNORECASE,
)


_SHIFT_WAY = re.compile(
    r"(?:before|prior\s+to|ahead\s+of|earlier\s+than|after|later\s+than|past)\s+(?:the\s+)?$",
    re.IGNORECASE,
)


def _shift_before(text: str, start: int) -> tuple[timedelta, int]:
    """The shift an amount written right before the time at `start` says, and where its words
    start (no shift: zero and `start`)."""
    # The direction word first, in a few characters: the amount's pattern, searched at every
    # time of a 256 KiB mail of times, doubled the time the mail took to read.
    if _SHIFT_WAY.search(text, max(0, start - 24), start) is None:
        return timedelta(0), start
    found = _SHIFTED_FROM.search(text, max(0, start - 80), start)
    if found is None:
        return timedelta(0), start
    parts = {k: v for k, v in found.groupdict().items() if v is not None}
    try:
        amount = timedelta(hours=_amount_hours(parts))
    except OverflowError:  # past what a datetime holds: no shift of a real notice
        return timedelta(0), start
    later = found.group("way").lower() in ("after", "later than", "past")
    return (amount if later else -amount), found.start()


def _amount_hours(parts: dict[str, str]) -> float:
    """The hours of an `_AMOUNT` or `_CLOCK_AMOUNT` match's groups."""
    if "cm" in parts:
        return int(parts["ch"]) + int(parts["cm"]) / 60
    amount = parts["n"].lower()
    number = _WORD_NUMBERS.get(" ".join(amount.split()))
    halves = re.fullmatch(r"([0-9.]+)\s*(?:1/2|\u00bd)", amount)
    if number is None and halves is not None:
        number = float(halves.group(1)) + 0.5
    value = float(amount) if number is None else number
    hours = value if "unit" in parts else value / (3600 if "unit_s" in parts else 60)
    return hours + int(parts.get("mins", 0)) / 60 + (0.5 if "half" in parts else 0.0)


def _hour(hour: int, ampm: str) -> int | None:
    if not ampm:
        return hour
    if not 1 <= hour <= 12:
        return None
    return hour % 12 + (12 if ampm == "pm" else 0)


def _written_time(
    match: re.Match[str],
    sent: datetime | None = None,
    *,
    order: str = "mdy",
    relative_day: str = "",
    shift: timedelta = timedelta(0),
) -> tuple[datetime, datetime] | None:
    """The time written, and for a window its end (else the time again), in UTC. A time
    without a date is its first occurrence whose end is not before `sent` (less the slack),
    or with `relative_day` "today" the one on `sent`'s day, with "tomorrow" the one on the day
    after, "day after tomorrow" two days after, a weekday's name the next such day from
    `sent`'s ("next " and one: after `sent`'s), "the " and a day of the month the next such
    date (each in the time's zone), and a date
    without a year ("December 4") the first such date. A numeric date
    ("12/01/2026") is read in `order`: month first ("mdy"), day first ("dmy"), or, with a
    two-digit year, year first ("ymd": "26/12/01")."""
    parts = match.groupdict()
    dated = parts.get("y") is not None
    yearless = not dated and parts.get("mon") is not None
    if not dated and sent is None:
        return None
    month = day = year = 0
    if dated:
        year = int(parts["y"]) + (2000 if len(parts["y"]) == 2 else 0)
    if dated and parts.get("a") is not None:
        first, second = int(parts["a"]), int(parts["b"])
        month, day = (second, first) if order == "dmy" else (first, second)
        if order == "ymd":
            year, month, day = 2000 + first, second, int(parts["y"])
    elif dated or yearless:
        month = int(parts["m"]) if parts.get("m") else _MONTHS[parts["mon"].lower()]
        day = int(parts["d"])
    start = _clock(parts, "")
    end = _clock(parts, "2") if parts["H2"] is not None or parts["word2"] else None
    ampm, ampm2 = start[3], end[3] if end else ""
    clock_to_clock = end is not None and parts["H2"] is not None and parts["H"] is not None
    if clock_to_clock and ampm2 and not ampm:
        # "1:30-3:30 PM": the start takes the end's half of the day, or the other half when
        # it would come after the end ("11:00 - 1:00 PM").
        assert end is not None
        later = start[0] % 12 <= end[0] % 12
        ampm = ampm2 if later else ("am" if ampm2 == "pm" else "pm")
    word2 = (parts["word2"] or "").lower()
    if word2 and parts["H"] is not None and not (parts["M"] or ampm) and start[0] <= 12:
        # "between 10 and noon" is the morning, "between 10 and midnight" the evening.
        ampm = "pm" if word2 == "midnight" else "am"
    start_hour = _hour(start[0], ampm)
    if start_hour is None:
        return None
    written_zone = parts["szone"] or parts["zone"] or parts.get("dzone") or parts.get("pzone")
    if written_zone is None:
        return None
    zone = re.sub(r"^(?:UTC|GMT)|\s", "", written_zone.upper().replace(".", ""))
    words = written_zone.lower().split()
    spelt_utc = words[-1] == "time" and words[0] in ("coordinated", "universal", "greenwich")
    if spelt_utc or words == ["zulu"]:
        zone = ""
    elif words[0] in _WORD_ZONES:
        written_zone = _WORD_ZONES[words[0]]
        if "daylight" in words:
            zone = written_zone[0] + "DT"
    tz: tzinfo
    try:
        if "/" in written_zone:
            tz = ZoneInfo(written_zone)
        elif zone in _NAMED_ZONES:
            tz = timezone(timedelta(hours=_NAMED_ZONES[zone]))
        elif written_zone in _US_ZONES:
            tz = ZoneInfo(_US_ZONES[written_zone])
        elif zone in ("", "Z"):
            tz = timezone.utc
        else:
            hours, _, minutes = zone[1:].partition(":")
            if not minutes and len(hours) > 2:  # +0130
                hours, minutes = hours[:-2], hours[-2:]
            offset = timedelta(hours=int(hours), minutes=int(minutes or 0))
            # No zone lies between UTC-1 and UTC: "14:00 UTC-0:30" is an early margin, read
            # as 13:30. As the offset it is not, it was 14:30, half an hour late.
            early_margin = timedelta(0) < offset < timedelta(hours=1)
            tz = timezone(offset if zone[0] == "+" or early_margin else -offset)
        end_clock: tuple[int, int, int] | None = None
        if end is not None:
            # Noon and midnight take no half of the day from the start.
            end_hour = _hour(end[0], ampm2 or ("" if word2 else ampm))
            if end_hour is None:
                return None
            end_clock = (end_hour, end[1], end[2])
        clock = (start_hour, start[1], start[2])
        if yearless:
            assert sent is not None
            found = _next_date(month, day, clock, end_clock, tz, sent)
            return None if found is None else (found[0] + shift, found[1] + shift)
        if dated:
            moment = datetime(year, month, day, *clock, 0, tz)
        else:
            assert sent is not None
            moment = sent.astimezone(tz).replace(
                hour=clock[0], minute=clock[1], second=clock[2], microsecond=0
            )
            on_the_day = _on_relative_day(moment, relative_day)
            if on_the_day is None:
                return None
            moment = on_the_day
        until = _window_end(moment, end_clock)
        # Before the next occurrence is chosen: "2 hours after 12:00 UTC" in a mail sent at
        # 12:30 is 14:00 today, not tomorrow.
        moment, until = moment + shift, until + shift
        if not dated and not relative_day and sent is not None and until < sent - _PAST_SLACK:
            moment, until = moment + timedelta(days=1), until + timedelta(days=1)
        return moment.astimezone(timezone.utc), until.astimezone(timezone.utc)
    # 31 February, 25:00, an offset of +99:00, no such zone; OverflowError: in UTC it falls
    # before the year 1 or after 9999.
    except (ValueError, OverflowError, ZoneInfoNotFoundError):
        return None


def _clock(parts: dict[str, str | None], n: str) -> tuple[int, int, int, str]:
    """Hour, minute, second and am/pm of the clock `n` of a `_TIME` match."""
    word = parts[f"word{n}"]
    if word is not None:
        return (0 if word.lower() == "midnight" else 12), 0, 0, ""
    hour, minute, second = (parts[f"{key}{n}"] for key in "HMS")
    assert hour is not None
    ampm = (parts[f"ampm{n}"] or "").lower().replace(".", "")
    if ampm.startswith("in"):  # "in the morning", "in the afternoon", "in the evening"
        ampm = "am" if ampm.endswith("morning") else "pm"
    ampm = "".join(ampm.split())  # "P M"
    if n and int(hour) == 24 and not int(minute or 0) and not int(second or 0) and not ampm:
        return 0, 0, 0, ""  # "until 24:00": the end of the day, as midnight ends a window
    return int(hour), int(minute or 0), int(second or 0), ampm


def _window_end(moment: datetime, end: tuple[int, int, int] | None) -> datetime:
    if end is None:
        return moment
    until = moment.replace(hour=end[0], minute=end[1], second=end[2])
    # "between 23:00 and 01:00": the window ends the next day; "between 00:00 and midnight"
    # is the whole day.
    if until <= moment:
        until += timedelta(days=1)
    return until


def _next_date(
    month: int,
    day: int,
    clock: tuple[int, int, int],
    end: tuple[int, int, int] | None,
    tz: tzinfo,
    sent: datetime,
) -> tuple[datetime, datetime] | None:
    """The first `month`/`day` at `clock` whose window has not ended before `sent` less
    the slack: of the year before the mail's (a mail sent just after New Year about a
    window that began on 31 December), its own, or a later one (29 February)."""
    base = sent.astimezone(tz).year
    for year in range(base - 1, base + 9):
        try:
            moment = datetime(year, month, day, *clock, 0, tz)
            until = _window_end(moment, end)
            if until >= sent - _PAST_SLACK:
                return moment.astimezone(timezone.utc), until.astimezone(timezone.utc)
        except (ValueError, OverflowError):  # no 29 February that year; year 0 or 10000
            continue
    return None


def _candidates(
    text: str, sent: datetime | None, *, anywhere: bool = False
) -> Iterator[tuple[int, int, datetime, datetime, str, bool, int]]:
    """(position, -length, time, end of its window, words, whether it may be past, where
    its words end) of each time in `text`; with `anywhere`, times without a date on lines
    not about the reclaim too."""
    dated: list[tuple[int, int]] = []
    present: dict[re.Pattern[str], bool] = {}
    for needed, pattern in _WRITTEN_TIMES:
        if needed is not None:
            if needed not in present:
                present[needed] = needed.search(text) is not None
            if not present[needed]:
                continue
        for match in pattern.finditer(text):
            dated.append(match.span())
            orders: tuple[str, ...] = ("mdy",)
            if match.groupdict().get("a") is not None:
                orders = ("mdy", "dmy", "ymd") if len(match.group("y")) == 2 else ("mdy", "dmy")
            shift, first = _shift_before(text, match.start())
            readings = sorted(
                {
                    written
                    for order in orders
                    if (written := _written_time(match, sent, order=order, shift=shift)) is not None
                }
            )
            # After the date, or between the time and its date.
            margin = match.groupdict().get("margin")
            at = match.end() if margin is None else match.start("margin")
            tolerance = _tolerance_at(text, at)
            for reading in readings:
                written, words_end = _less_tolerance(tolerance, at, reading)
                if margin is not None:
                    words_end = match.end()
                words = text[first:words_end]
                if len(readings) > 1:
                    # find_deadline takes the first reading that can be the deadline, so
                    # the earliest: a deadline read late loses work, one read early does not.
                    dates = " or ".join(f"{start:%Y-%m-%d}" for start, _ in readings)
                    words += f" ({AMBIGUOUS} {dates}, read as {reading[0]:%Y-%m-%d}, the earliest"
                    words += " that can be the deadline)"
                yield match.start(), -len(match.group(0)), *written, words, False, words_end
    if sent is not None:
        # Both tests in log or constant time per time found: scanning every dated span and
        # the whole line for each time held the agent's event loop for 2 s on a 10 KiB mail
        # of "14:30 UTC " repeated, and for minutes on a 256 KiB one.
        within_dated = _overlap_test(sorted(dated))
        # Per start of a line (with the lines wrapping onto it): how far it was searched
        # for the reclaim's words, and whether they were found. Searched on from there, not
        # from its start again: a mail of thousands of wrapped lines of times was quadratic.
        about_reclaim: dict[int, tuple[int, bool]] = {}
        line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        sentence_starts: dict[int, int] = {}  # line: where the sentence it wraps from starts
        for match in _TIME_ONLY.finditer(text):
            # The time of a dated form, read again without its date, is not another time.
            if within_dated(match.start(), match.start() + 1):
                continue
            if _is_year_of_a_date(text, match):
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
                    about = _ABOUT_RECLAIM.search(text, again, end) is not None
                    about_reclaim[begin] = (end, about)
                if not about:
                    continue
            # "tomorrow at 16:00 UTC", "at 16:00 UTC tomorrow": the day after the Date's;
            # "today at 11:00 UTC": the Date's day.
            start, stop = match.span()
            ahead = _DAY_BEFORE.search(text, max(0, start - 40), start)
            behind = None if ahead else _DAY_AFTER.match(text, stop)
            at = behind.end() if behind else stop
            tolerance = _tolerance_at(text, at)
            # "at 16:00 UTC (± 30 min) tomorrow": the day after the margin was lost, and the
            # time read on the mail's day, a day early.
            after_margin = None
            if tolerance is not None and not ahead and not behind:
                after_margin = _DAY_AFTER.match(text, tolerance.end())
            said = ahead or behind or after_margin
            day = _relative_day(said.group("day")) if said else ""
            # From "today" on, so that "previously scheduled for today at 16:00 UTC" is the
            # time a new time replaces (`_is_old_time`).
            first = ahead.start() if ahead else start
            shift, shifted_from = _shift_before(text, first)
            first = min(first, shifted_from)
            as_written = _written_time(match, sent, relative_day=day, shift=shift)
            if as_written is not None:
                written, words_end = _less_tolerance(tolerance, at, as_written)
                if after_margin is not None:
                    words_end = after_margin.end()
                yield (
                    first,
                    -len(match.group(0)),
                    *written,
                    text[first:words_end],
                    # May be past: the mail's own day.
                    day == "today" or day in _WEEKDAYS or day.startswith("the "),
                    words_end,
                )
        for match in _EPOCH.finditer(text):
            try:
                moment = datetime.fromtimestamp(int(match.group("epoch")), timezone.utc)
            except (OverflowError, ValueError, OSError):
                continue
            yield (
                match.start(),
                -len(match.group(0)),
                moment,
                moment,
                match.group(0),
                False,
                match.end(),
            )
        for match in _RELATIVE.finditer(text):
            parts = {k.rstrip("234"): v for k, v in match.groupdict().items() if v is not None}
            hours = 1.0 if "the_hour" in parts else 0.0 if "at_once" in parts else None
            if "count_h" in parts:
                hours = int(parts["count_h"]) + int(parts["count_m"]) / 60
            if hours is None:
                hours = _amount_hours(parts)
            try:
                moment = sent + timedelta(hours=hours)
            except OverflowError:  # past what a datetime holds: far beyond _FUTURE_LIMIT too
                continue
            yield (
                match.start(),
                -len(match.group(0)),
                moment,
                moment,
                match.group(0),
                False,
                match.end(),
            )


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
    digits (`1600 UTC`, `1600Z`, `1600 hrs UTC`), `noon` or `midnight` (the start of its day).
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
    earliest = _shifted(sent, -_PAST_SLACK) if sent is not None else None
    latest = _shifted(sent, _FUTURE_LIMIT) if sent is not None else None
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
    if not (last > after and (text[last - 1].islower() or text[last - 1] == ",")):
        return last > 0 and text[last - 1].isalnum() and _JOINING.match(following) is not None
    return bool(following) and (following[0].islower() or following[0] in "0123456789")


_JOINING = re.compile(r"(?:or|and|but|possibly|perhaps|maybe)\b")


# The time a new time replaces: "moved from 16:00 UTC to 13:30 UTC", "(was 14:00 UTC)",
# "previously scheduled for ...", "Old time: ...". Read as the deadline, a reclaim moved
# earlier kept its old, later time.
_OLD_TIME = re.compile(
    r"(?:\b(?:from|was|were|previously|originally|formerly|instead\s+of)"
    r"(?:\s+(?:scheduled|planned|set|due))?(?:\s+(?:for|at|on))?"
    r"|\b(?:old|previous|original|former|earlier)"
    r"(?:\s+(?:time|deadline|date|window|schedule)\s*:?|\s*:))"
    r"[\s(]*$",
    re.I,
)


def _is_old_time(text: str, start: int, words: str) -> bool:
    before = text[text.rfind("\n", 0, start) + 1 : start]
    old = _OLD_TIME.search(before)
    if old is None:
        return False
    # "from 14:00 to 16:00 UTC" is a window, its own "from".
    return not (
        old.group(0).lower().startswith("from") and re.search(r"\b(?:to|until|and)\b", words)
    )


def _shifted(moment: datetime, delta: timedelta) -> datetime | None:
    """`moment + delta`, or None (no bound) when that is before the year 1 or after 9999."""
    try:
        return moment + delta
    except OverflowError:
        return None


def _droplet_patterns(rules: MatchRules) -> list[tuple[str, re.Pattern[str]]]:
    found: list[tuple[str, re.Pattern[str]]] = []
    if rules.droplet_id:
        found.append(("id", re.compile(rf"(?<!\d){re.escape(rules.droplet_id)}(?!\d)")))
    name = rules.droplet_name
    if name:
        # Droplet names may hold dots: "web-1.example.com" is another droplet than "web-1",
        # while "web-1." ends a sentence.
        # A plain-text mail wrapped at 72 columns may break the name at a hyphen ("gpu-spot-"
        # then "1"): not found, the notice was not this droplet's and nothing was raised.
        escaped = re.escape(name).replace(r"\-", r"-(?:[^\S\n]*\n[^\S\n]*)?")
        found.append(("name", re.compile(rf"(?<![\w.-]){escaped}(?![\w-]|\.[\w-])", re.I)))
    return found


def _names_droplet(text: str, rules: MatchRules) -> tuple[str, int] | None:
    """What names this droplet (id first, then name) and where it is first named."""
    found: list[tuple[str, int]] = []
    for what, pattern in _droplet_patterns(rules):
        match = pattern.search(text)
        if match:
            found.append((what, match.start()))
    if not found:
        return None
    return found[0][0], min(at for _, at in found)


_DKIM_PASS = re.compile(r"\bdkim=pass\b[^;]*?\bheader\.[di]=@?(?P<domain>[a-z0-9.-]+)", re.I)


def _dkim_passes(mail: Mail) -> bool:
    domain = mail.sender.rpartition("@")[2]
    for header in mail.auth_results:
        for match in _DKIM_PASS.finditer(header):
            signer = match.group("domain").lower().rstrip(".")
            if domain == signer or domain.endswith("." + signer):
                return True
    return False


# "has been moved" and also "was moved", "has moved", "is now moved", "brought forward",
# "pushed back": read as a further notice, "was moved from 16:00 UTC to 13:30 UTC" kept the
# old time (the one after "from"), and the reclaim came two and a half hours before it. An
# active "has changed" is not one: "as demand has changed, ... will be reclaimed".
_RESCHEDULED = re.compile(
    r"\b(?:reschedul\w*|postponed|brought\s+forward|pushed\s+(?:back|out)"
    r"|(?:(?:has|have|had)\s+been|was|were|is|are)\s+(?:now\s+)?(?:moved|changed|delayed)"
    r"|(?:has|have)\s+(?:now\s+)?moved)\b",
    re.I,
)


# Another droplet named near a cancellation: a number as long as a droplet id, or a word
# with a letter and a digit (`gpu-spot-7`, `web1.example.com`). Zones, DigitalOcean's
# region slugs (`nyc2`), size slugs (`gpu-h100x1-80gb`, `s-2vcpu-4gb`) and GPU models (`H100`)
# are not droplets.
_OTHER_DROPLET = re.compile(r"(?<![\w.-])(?:\d{6,}|[A-Za-z][\w.-]*?\d[\w.-]*?)(?=[.-]?(?![\w.-]))")
_NOT_A_DROPLET = re.compile(
    r"(?i:(?:UTC|GMT)[+-]?\d.*|[a-z]{3}\d|.*(?:vcpu|\d+gb|\d+x\d+).*)"
    r"|[A-Z]{1,3}\d{2,4}[A-Z]?"  # a GPU model: H100, L40S, MI300X
)
_SENTENCE_END = re.compile(r"\n|[.!?;](?=\s)")
# Another droplet named without a digit ("trainer", "web"): by the place of a name, after
# "Droplet" or "the reclaim of", as a label starting a line of a digest, or as the owner of
# a reclaim ("trainer's reclaim"). Seen as no droplet, "The reclaim of trainer has been
# cancelled" was taken to be about the droplet named before it, ours, and withdrew our
# reclaim; so were "Trainer: the reclaim has been cancelled" (a label with a capital) and
# "trainer's reclaim has been cancelled". A label that is no droplet ("Note:") and is not
# in _NOT_A_NAME keeps our reclaim: a needless drain costs a checkpoint, a lost one work.
# The reclaim's other nouns are no names either: "Spot Droplet interruption cancelled" read
# "interruption" as another droplet, so the cancellation of ours kept the reclaim.
_NAME_SLOT = re.compile(
    r"(?i:\b(?:reclaims?\s+of(?:\s+(?:the\s+)?droplets?)?|droplets?)\s*:?\s+"
    r"(?:(?:named|called)\s+)?)[\"'\u201c\u2018`]?(?P<name>[A-Za-z0-9](?:[\w.-]*\w)?)"
    r"|(?m:^[ \t]*(?:[-*\u2022][ \t]*)?(?P<label>[A-Za-z](?:[\w.-]*[A-Za-z0-9])?)[ \t]*:(?![\d/]))"
    r"|(?<![\w.-])(?P<owner>[A-Za-z0-9](?:[\w.-]*\w)?)['\u2019]s\s+(?i:(?:[a-z-]+\s+){0,2}"
    r"(?:reclaim|reclamation|interruption|termination|preemption|shutdown))"
)
_NOT_A_NAME = frozenset(
    re.findall(
        r"\w+",
        """
        a an the your our their its my this that these those which who whose it they you we has
        have had is are was were be been being will would shall should may might can could must
        do does did and or but nor not no of in on at to for from with by as via per into about
        after before id ids named called listed below above following mentioned affected
        scheduled reclaim reclaims reclaimed reclamation droplet droplets spot gpu cpu instance
        now still also already soon today tomorrow notice update status note reason time date
        when deadline window region size name important details action subject info summary
        cancelled canceled rescheduled postponed moved new old previous original updated revised
        hello hi dear good news update updates warning attention reminder fyi ps re fw fwd
        sent cc bcc reply hostname location zone tags state result here there message
        description comment comments notes explanation text content type event notification
        alert account project team customer thanks regards greetings
        interruption interruptions preemption preemptions termination terminations shutdown
        shutdowns reclamations eviction evictions notices maintenance
        correction corrections corrected clarification amendment erratum
        """,
    )
)


def _droplet_mentions(text: str, rules: MatchRules) -> list[tuple[int, int, bool]]:
    """(start, end, is this droplet) of every droplet named in `text`."""
    ours = sorted(
        m.span() for _, pattern in _droplet_patterns(rules) for m in pattern.finditer(text)
    )
    found = [(start, end, True) for start, end in ours]
    overlaps_ours = _overlap_test(ours)
    for match in _OTHER_DROPLET.finditer(text):
        start, end = match.span()
        if _NOT_A_DROPLET.fullmatch(match.group(0)):
            continue
        if overlaps_ours(start, end):
            continue
        found.append((start, end, False))
    overlaps_found = _overlap_test(sorted((start, end) for start, end, _ in found))
    for match in _NAME_SLOT.finditer(text):
        group = next(g for g in ("name", "label", "owner") if match.group(g) is not None)
        start, end = match.span(group)
        name = match.group(group)
        if name.lower() in _NOT_A_NAME or _NOT_A_DROPLET.fullmatch(name):
            continue
        if overlaps_found(start, end):
            continue
        found.append((start, end, False))
    return sorted(found)


def _overlap_test(spans: list[tuple[int, int]]) -> Callable[[int, int], bool]:
    """Whether a span overlaps one of `spans` (sorted), in log time: a 256 KiB mail naming
    thousands of droplets took seconds on the event loop when each was checked against all."""
    begins = [begin for begin, _ in spans]
    reach = list(itertools.accumulate((end for _, end in spans), max))

    def overlaps(start: int, end: int) -> bool:
        before = bisect.bisect_left(begins, end)
        return before > 0 and reach[before - 1] > start

    return overlaps


def _about_this_droplet(
    text: str,
    body_at: int,
    mentions: list[tuple[int, int, bool]],
    in_subject: re.Pattern[str],
    in_body: re.Pattern[str],
    kept: Callable[[re.Match[str]], bool] = lambda statement: True,
    kept_in_subject: Callable[[re.Match[str]], bool] = lambda statement: True,
) -> re.Match[str] | None:
    """The statement in `text` (the subject, a line break, the body from `body_at`) that is
    about this droplet: a cancellation, or a new time. A digest cancels (or moves) one
    droplet's reclaim and lists another's time: taken as a whole it withdrew (or moved)
    ours. So a statement counts when its sentence names this droplet; one naming only
    other droplets does not; one naming none is about the droplet named nearest before it
    (else the first after it), and counts only when that is this one.
    """
    statements: list[re.Match[str]] = []
    subject = next((m for m in in_subject.finditer(text, 0, body_at) if kept_in_subject(m)), None)
    if subject:
        statements.append(subject)
    statements.extend(m for m in in_body.finditer(text, body_at + 1) if kept(m))
    # Found by bisection (mentions do not overlap, so they are sorted by end too): a mail of
    # thousands of statements took seconds on the event loop when each scanned the text.
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    starts = [start for start, _, _ in mentions]
    for statement in statements:
        begin, end = _sentence(text, statement, ends)
        first, last = bisect.bisect_left(starts, begin), bisect.bisect_left(starts, end)
        inside = [ours for _, _, ours in mentions[first:last]]
        if first > 0 and mentions[first - 1][1] > begin:
            inside.append(mentions[first - 1][2])
        if inside:
            if any(inside):
                return statement
            continue
        before = mentions[first - 1][2] if first > 0 else None
        later = mentions[last][2] if last < len(mentions) else False
        if before if before is not None else later:
            return statement
    return None


def _sentence(
    text: str, statement: re.Match[str], ends: list[int] | None = None
) -> tuple[int, int]:
    if ends is None:
        ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, statement.start())]
    before = bisect.bisect_right(ends, statement.start())
    after = _SENTENCE_END.search(text, statement.end())
    return ends[before - 1] if before else 0, after.start() if after else len(text)


def judge(mail: Mail, rules: MatchRules, key: str, now: datetime) -> Verdict:
    """Decide what `mail` raises. `key` identifies the mail when it has no Message-ID."""
    if not rules.sender.search(mail.sender):
        # A mail rule that forwards DigitalOcean's mail makes the user the sender. The
        # forwarded sender can be forged as easily as From, but not vouched for by DKIM.
        if mail.forwarded is not None and not rules.require_dkim:
            inner = judge(mail.forwarded, rules, key, now)
            if inner.report is not None or rules.sender.search(mail.forwarded.sender):
                return _forwarded_by(mail, inner)
        return Verdict(None, f"sender {mail.sender!r} does not match")
    if not rules.subject.search(mail.subject):
        return Verdict(None, f"subject {mail.subject!r} does not match")
    if rules.require_dkim and not _dkim_passes(mail):
        return Verdict(None, f"no dkim=pass for {mail.sender!r} in Authentication-Results")
    text = f"{mail.subject}\n{mail.text}"
    naming = _names_droplet(text, rules)
    if naming is None:
        return Verdict(None, "names neither this droplet's id nor its name")
    named, at = naming
    sent = mail.date
    if sent is not None and now - sent > rules.max_age:
        return Verdict(None, f"dated {format_time(sent)}, older than max_age")
    mentions = _droplet_mentions(text, rules)
    body_at = len(mail.subject)
    is_mention = _overlap_test([(start, end) for start, end, _ in mentions])
    cancelled = _about_this_droplet(
        text,
        body_at,
        mentions,
        CANCELLED_SUBJECT,
        CANCELLED_BODY,
        # The body's first line does not go on with the subject: "Spot Droplet reclaim
        # notice" above "was withdrawn" withdrew the reclaim the part beside it announced.
        lambda statement: counts(text, statement, is_mention, body_at + 1),
        lambda statement: counts_in_subject(mail.subject, statement, is_mention),
    )
    if cancelled:
        return Verdict(
            None,
            f"cancels the reclaim of this droplet ({cancelled.group(0)!r})",
            replaces=True,
            cancel_id=stable_id(PROVIDER, "cancel", mail.message_id or key),
        )
    rescheduled = _about_this_droplet(
        text,
        body_at,
        mentions,
        _RESCHEDULED,
        _RESCHEDULED,
        lambda statement: moves(text, statement, is_mention, body_at + 1),
        lambda statement: moves_in_subject(mail.subject, statement, is_mention),
    )
    # Where other droplets are named: a time after one is not this droplet's.
    other_starts = [start for start, _, ours in mentions if not ours]
    our_starts = [start for start, _, ours in mentions if ours]
    # A digest lists several droplets, each with its time (a table row, a line, a block):
    # the time for this droplet is the first one from the line naming it on, or, when the
    # line names another droplet before it, from the sentence naming it. Only when none
    # follows is it a time written before, such as a heading for all of them.
    begin = text.rfind("\n", 0, at) + 1
    others = [stop for start, stop, ours in mentions if not ours and begin <= start < at]
    if others:
        ends = [m.end() for m in _SENTENCE_END.finditer(text, others[-1], at)]
        begin = ends[-1] if ends else at
    found = None
    shift: timedelta | None = None
    # A time later than this is the deadline only when its sentence is the reclaim's.
    until = _shifted(sent or now, rules.lead)
    if rescheduled:
        # The new time is the first from its sentence on (a new time in the subject: from
        # this droplet's line on) that is not the one it replaces, before the next droplet
        # named: a new time read as the old one kept a reclaim moved earlier at its later
        # time, and one read past the next droplet could be that droplet's.
        if rescheduled.start() >= body_at:
            begin = _sentence(text, rescheduled)[0]
        sentence_end = _SENTENCE_END.search(text, max(begin, rescheduled.end()))
        after = sentence_end.end() if sentence_end else len(text)
        stop = min(
            (start for start, _, ours in mentions if not ours and start >= after), default=None
        )
        block = text[begin:stop]
        # The sentence of the new time is the reclaim's ("gpu-spot-1: rescheduled to 16:00
        # UTC"), as is any naming this droplet.
        ours = [at - begin for at in our_starts if begin <= at < len(block) + begin]
        ours += [rescheduled.start() - begin] if rescheduled.start() >= begin else []
        found = find_deadline(
            block, sent, new_only=True, ours=ours, elsewhere_until=until
        ) or find_deadline(
            block,
            sent,
            others=[at - begin for at in other_starts if at >= begin],
            ours=ours,
            elsewhere_until=until,
        )
        by = _SHIFT.search(block) if found is None else None
        if by is not None:
            parts = {k: v for k, v in by.groupdict().items() if v is not None}
            sign = -1 if _EARLIER.search(block) else 1
            with contextlib.suppress(OverflowError):
                shift = timedelta(hours=sign * _amount_hours(parts))
    if shift is None:
        found = (
            found
            or find_deadline(
                text[begin:],
                sent,
                others=[at - begin for at in other_starts],
                ours=[at - begin for at in our_starts if at >= begin],
                elsewhere_until=until,
            )
            or find_deadline(
                text, sent, others=other_starts, ours=our_starts, elsewhere_until=until
            )
        )
    if found is None and shift is None and sent is not None:
        found = _sooner_than_lead(text, sent, rules.lead)
    if found is not None:
        deadline, words = found
        source = f"text: {words.strip()}"
    else:
        after_lead = _shifted(sent or now, rules.lead)
        if after_lead is None:
            raise ParseError(f"Date {format_time(sent or now)} plus lead is after the year 9999")
        deadline = after_lead
        source = "date+lead" if sent is not None else "received+lead"
    if shift is None:
        stop = min((start for start in other_starts if start > begin), default=len(text))
        early = _early_by(text, begin, stop, source)
        if early is not None:
            with contextlib.suppress(OverflowError):
                deadline -= early[0]
                source += f"; {early[1]}"
    detail: dict[str, Any] = {
        "from": mail.sender,
        "subject": mail.subject,
        "date": format_time(sent) if sent is not None else None,
        "message_id": mail.message_id,
        "matched": named,
        "deadline_source": source,
    }
    if rescheduled:
        detail["rescheduled"] = rescheduled.group(0)
    if shift is not None:
        detail["shift_seconds"] = shift.total_seconds()
    if sent is not None:
        # The mail's Date is when DigitalOcean gave notice: the agent's detection delay
        # (metrics) is measured from it.
        detail["notice_time"] = format_time(sent)
    report = Report(
        id=stable_id(PROVIDER, "reclaim", mail.message_id or key),
        action="drain",
        reason="drill" if mail.drill else "reclaim",
        provider=PROVIDER,
        deadline=deadline,
        noticed_at=now,
        detail=detail,
    )
    what = "new time for the reclaim" if rescheduled else "reclaim notice"
    why = f"{what} naming this droplet's {named}"
    if AMBIGUOUS in source:
        why += f"; deadline from {source.removeprefix('text: ')}"
    return Verdict(report, why, replaces=bool(rescheduled), shift=shift)


def _sooner_than_lead(text: str, sent: datetime, lead: timedelta) -> tuple[datetime, str] | None:
    """The earliest time without a date on a line not about the reclaim ("Droplet gpu-1
    will be reclaimed." then "ETA: 13:10 UTC", "It will happen at 13:10 UTC.") that is
    before Date + lead, for a mail that names no other time. Such times were skipped, so
    Date + lead stood in, later than the reclaim. Only as the last resort, and only before
    Date + lead, so the deadline is never later than without it: taken first, a footer's
    "updates at 13:30 UTC" would beat the reclaim's own earlier time."""
    until = _shifted(sent, lead)
    soon = [
        (moment, words)
        for _, _, moment, _, words, _, _ in _candidates(text, sent, anywhere=True)
        if sent - _PAST_SLACK <= moment and (until is None or moment < until)
    ]
    return min(soon, default=None)


def _forwarded_by(mail: Mail, inner: Verdict) -> Verdict:
    why = f"{inner.why} (forwarded by {mail.sender})"
    if inner.report is None:
        return Verdict(None, why, replaces=inner.replaces, cancel_id=inner.cancel_id)
    detail = {**inner.report.detail, "forwarded_by": mail.sender}
    report = inner.report.model_copy(update={"detail": detail})
    return Verdict(report, why, inner.replaces, shift=inner.shift)


def reclaim_verdict(
    raw: bytes, rules: MatchRules, key: str, now: Callable[[], datetime] | datetime
) -> Verdict:
    """From the raw message to its verdict; ParseError when the message is unreadable."""
    moment = now() if callable(now) else now
    return judge(read_mail(raw), rules, key, moment)


__all__ = [
    "DRILL_HEADER",
    "Mail",
    "MatchRules",
    "Verdict",
    "find_deadline",
    "judge",
    "read_mail",
    "reclaim_verdict",
]
