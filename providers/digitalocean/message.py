"""Reading a DigitalOcean mail into a `Mail`: its sender, subject, Date, Message-ID and
body text, pure functions. The body is the plain part then the HTML part's text, quoted
replies and blockquotes left out, and a time without a zone given the zone of its heading
or its line; a forwarded mail (attached, or inline) is read as the one it forwards.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import html
import re
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage, MIMEPart
from email.utils import getaddresses, parsedate_to_datetime
from typing import Any

from ..base import ParseError
from .written import CITY_TIME

DRILL_HEADER = "X-Forewarn-Drill"


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
    # The Date header as written when it is there but does not read as a date (`date` is then
    # None, as without one): the verdict names it, so an operator learns why the times are
    # counted from the mail's receipt.
    unreadable_date: str | None = None
    # The headers whose value was read cut (HEADER_LIMIT, HEADERS_BUDGET), in the order met:
    # the watcher says so, since a reclaim whose Subject or From was cut may be passed over.
    cut_headers: tuple[str, ...] = ()


def read_mail(raw: bytes) -> Mail:
    """Decode an RFC 5322 message; ParseError when it cannot be read at all."""
    if not raw.strip():
        raise ParseError("the message is empty")
    try:
        registry = _ParsedOnce()
        policy = email.policy.default.clone(header_factory=registry)
        message = email.message_from_bytes(raw, policy=policy)
        assert isinstance(message, EmailMessage)
        mail = _mail_of(message)
        if registry.cut:
            mail = replace(mail, cut_headers=tuple(dict.fromkeys(registry.cut)))
        return mail
    except ParseError:
        raise
    except Exception as error:  # the email package raises many kinds on malformed input
        raise ParseError(f"unreadable message: {type(error).__name__}: {error}") from None


# How much of a mail's header values is parsed: of one value, and of all those read from one
# mail. email's header parser takes time superlinear in a value's length (a Subject of
# 50/100/200 KB took 0.44/1.04/2.91 s, a From of 25/50/100 KB 0.58/1.26/2.74 s), and a mail
# is anyone's text. The headers read (From, Subject, Date, Message-ID, Authentication-Results,
# the MIME headers) are a few hundred characters in a real mail; a value is read up to the
# limit, and once the budget is spent, further values are read as empty.
HEADER_LIMIT = 4096
HEADERS_BUDGET = 32768


class _ParsedOnce(HeaderRegistry):
    """email's header registry, but each header of one mail parsed once: the default
    parses a header again at every look (a new class and parse tree each time), and reading
    a mail of a text and an HTML part parsed 7 headers 33 times, three quarters of the CPU
    of a small mail's verdict. One per mail, so a hostile mailbox's headers do not pile up;
    header objects are immutable, so sharing one between looks changes nothing. A registry,
    not a bare function: the policy also asks it for a header's class (`max_count`).
    Each value is parsed up to HEADER_LIMIT characters, all of them up to HEADERS_BUDGET."""

    def __init__(self) -> None:
        super().__init__()
        self._parsed: dict[tuple[str, str], BaseHeader] = {}
        self._budget = HEADERS_BUDGET
        self.cut: list[str] = []  # names of the values read cut

    def __call__(self, name: str, value: str) -> BaseHeader:
        found = self._parsed.get((name, value))
        if found is None:
            kept = value[: max(0, min(HEADER_LIMIT, self._budget))]
            self._budget -= len(kept)
            if len(kept) < len(value):
                self.cut.append(name)
            found = self._parsed[(name, value)] = super().__call__(name, kept)
        return found


def _parsing_once() -> email.policy.EmailPolicy[EmailMessage]:
    return email.policy.default.clone(header_factory=_ParsedOnce())


def _sender_of(value: str) -> str:
    addresses = getaddresses([value])
    return addresses[0][1].strip().lower() if addresses else ""


def _mail_of(message: EmailMessage, depth: int = 0) -> Mail:
    sender = _sender_of(", ".join(str(value) for value in message.get_all("From", [])))
    subject = str(message.get("Subject", "") or "").translate(_TYPESET_SIGNS)
    written_date = message.get("Date")
    date = _header_date(written_date)
    unreadable_date = None
    if date is None and written_date is not None:
        unreadable_date = str(written_date).strip()[:80] or None
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
    return Mail(sender, subject, date, message_id, text, auth, drill, forwarded, unreadable_date)


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
    # In its own offset: the writer's calendar, which says what "today" in the mail is.
    return moment


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
        if isinstance(content, str) and "\ufffd" in content and _mislabelled(part):
            content = _undeclared(part, content)
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
        text = text.translate(_TYPESET_SIGNS)
        texts.append(_zoned_under_heading(_zoned_on_line(_QUOTED_LINE.sub("", text))))
    return "\n".join(texts)


def _mislabelled(part: MIMEPart) -> bool:
    """Whether `part`'s charset is one 8-bit text of another is sent under: none (US-ASCII),
    US-ASCII or UTF-8. Text under any other was written in it."""
    return part.get_content_charset() in (None, "us-ascii", "ascii", "utf-8", "utf8")


def _undeclared(part: MIMEPart, content: str) -> str:
    """The text of `part`, decoded to `content` with bytes its charset does not have (each a
    U+FFFD), in the charset its bytes are in: 8-bit text sent with no charset (US-ASCII) or a
    wrong one, as older tools and relays send it. A time written with a no-break space
    ("13:10\\xa0UTC") was no time, and Date + lead stood in, after the reclaim. UTF-8 when
    its bytes are UTF-8, else Windows-1252 (a superset of ISO-8859-1's printable text)."""
    raw = part.get_payload(decode=True)
    if not isinstance(raw, bytes) or "\ufffd".encode() in raw:
        return content  # a U+FFFD the sender wrote
    for charset in ("utf-8", "windows-1252"):
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode(charset)
    return raw.decode("windows-1252", "replace")  # one of its five unassigned bytes


# A typeset minus sign (U+2212, as word processors and HTML's &minus; write it) or a fullwidth
# or small sign before an offset is the ASCII sign: "10:40 UTC\u221203:00" was read as 10:40
# UTC, a day late for a reclaim at 13:40, and "16:40 UTC\uff0b03:00" as 16:40 UTC, three hours
# late; "\u22120300" and RFC 3339 with one were skipped. One character for one keeps every
# position in the text.
_TYPESET_SIGNS = str.maketrans(
    {"\u2212": "-", "\ufe63": "-", "\uff0d": "-", "\uff0b": "+", "\ufe62": "+"}
)


# A heading that gives the zone of the times under it ("Reclaim times (UTC):", a table's
# "Reclaim time (UTC)" column, "All times are in UTC"): the bare times of the lines after it,
# up to a blank line, were skipped, and Date + lead stood in.
_ZONE_HEADING = re.compile(r"[(\[](?P<z>UTC|GMT)[)\]]|\b(?:in|are)\s+(?P<z2>UTC|GMT)\b", re.I)
_DIGIT = re.compile(r"[0-9]")
_BLANK_LINE = re.compile(r"\n[^\S\n]*(?:\n|\Z)")
_EMPTY_LINE = re.compile(r"\n[^\S\n]*(?=\n)")
# Nor a city's time ("14:10 Amsterdam time"): given the heading's zone, it was read an hour or
# more late. AM or PM is a word of its own: the "Am" of "14:10 Amsterdam" was taken for it,
# and the zone written into the word ("14:10 Am UTCsterdam").
_CLOCK_NO_ZONE = (
    r"(?<![\d:.])(?:[01]?[0-9]|2[0-4]):[0-5][0-9](?::[0-5][0-9])?"
    r"(?:[^\S\n]*[aApP]\.?[mM]\.?(?![A-Za-z]))?"
    r"(?![0-9]|[^\S\n]*[(\[]?(?:UTC|GMT|Z\b|[+-][0-9]|[A-Z]{2,5}\b|[A-Z][a-z]+/"
    + r"|"
    + CITY_TIME
    + r"\b)"
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


__all__ = ["DRILL_HEADER", "HEADERS_BUDGET", "HEADER_LIMIT", "Mail", "read_mail"]
