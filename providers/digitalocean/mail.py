"""Judging a DigitalOcean mail: whether it announces, moves or cancels this droplet's reclaim,
and the event it raises. Pure functions.

A mail is a reclaim notice for this droplet when its From address matches the sender
pattern, its Subject matches the subject pattern, and its subject or body names this
droplet's id or name. Its deadline is the first time written in the mail (see
`find_deadline` for the forms understood and which of several on a line), from the line
naming this droplet on, that is not before the mail was sent; without one
it is the mail's Date plus the configured lead.

The parts: `message` reads the raw mail, `written` the forms of a time, `deadline` which
time is the reclaim's, and `cancel` which statements cancel or move it.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

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
from .deadline import (
    AMBIGUOUS,
    SENTENCE_END,
    early_by,
    find_deadline,
    join_label_lines,
    overlap_test,
    shifted,
    sooner_than_lead,
)
from .message import DRILL_HEADER, Mail, read_mail
from .written import AMBIGUOUS_ZONES, EARLIER, SHIFT, amount_hours

PROVIDER = "digitalocean"
# The verdict of a mail from the reclaim sender, with a reclaim subject, that does not name
# this droplet: the watcher tells it apart from the others (`watch._said_cut`).
NAMES_NEITHER = "names neither this droplet's id nor its name"


@dataclass(frozen=True)
class MatchRules:
    sender: re.Pattern[str]
    subject: re.Pattern[str]
    droplet_id: str | None
    droplet_name: str | None
    lead: timedelta
    max_age: timedelta
    require_dkim: bool = False
    # When this machine started: a reclaim due before then was of another machine (one of
    # the same name reclaimed, whose replacement this is) or did not happen.
    booted: datetime | None = None

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
        booted: datetime | None = None,
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
            booted=booted,
        )


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
    # The headers of the mail read cut at the parser's limits (`Mail.cut_headers`).
    cut_headers: tuple[str, ...] = ()


def _droplet_patterns(rules: MatchRules) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return _patterns_naming(rules.droplet_id, rules.droplet_name)


# Built once per droplet, not for each of the three searches of every mail.
@functools.lru_cache(maxsize=8)
def _patterns_naming(
    droplet_id: str | None, name: str | None
) -> tuple[tuple[str, re.Pattern[str]], ...]:
    found: list[tuple[str, re.Pattern[str]]] = []
    if droplet_id:
        found.append(("id", re.compile(rf"(?<!\d){re.escape(droplet_id)}(?!\d)")))
    if name:
        # Droplet names may hold dots: "web-1.example.com" is another droplet than "web-1",
        # while "web-1." ends a sentence.
        # A plain-text mail wrapped at 72 columns may break the name at a hyphen ("gpu-spot-"
        # then "1"): not found, the notice was not this droplet's and nothing was raised.
        escaped = re.escape(name).replace(r"\-", r"-(?:[^\S\n]*\n[^\S\n]*)?")
        found.append(("name", re.compile(rf"(?<![\w.-]){escaped}(?![\w-]|\.[\w-])", re.I)))
    return tuple(found)


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


# An id written right after a droplet's name: "gpu-spot-1 (ID 111111111)", ", ID #111111111",
# or on the next line ("Droplet: gpu-spot-1" then "ID: 111111111").
_ID_AFTER_NAME = re.compile(
    r"[^\S\n]*[(\[,]?[^\S\n]*(?:\n[^\S\n]*)?(?:droplet[^\S\n]+)?id\b[^\S\n]*[:#=]?[^\S\n]*"
    r"(?P<id>[0-9]{6,})(?![0-9])",
    re.IGNORECASE,
)


def _another_id(text: str, rules: MatchRules) -> str | None:
    """The id written with this droplet's name when every mention of the name has one and it
    is not this droplet's: another droplet of the same name. DigitalOcean lets droplets share
    a name, and a replacement is often named as the droplet reclaimed: on its first start it
    reads that droplet's reclaim mail (within max_age) and, without this, stopped at once."""
    if not rules.droplet_id or not rules.droplet_name:
        return None
    name = dict(_droplet_patterns(rules))["name"]
    # Called only when this droplet's id is written nowhere in the mail.
    ids = [_ID_AFTER_NAME.match(text, match.end()) for match in name.finditer(text)]
    if not ids or any(found is None for found in ids):
        return None
    return min(found.group("id") for found in ids if found is not None)


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
# "deferred", and "has been updated" or "extended" too: read as a further notice, the old
# time stood beside the new one, and the drain's deadline came hours before the reclaim
# ("was deferred from 14:30 UTC to 17:00 UTC" gave 14:30).
# "New reclaim time: 17:00 UTC (was 14:30 UTC)" and "will now be reclaimed at 17:00 UTC
# instead of 14:30 UTC" too: read as further notices, the old time stood and the job was told
# to exit 2.5 h early. "will now be reclaimed" only with "instead of" in its sentence: alone,
# it may say no more than a first notice does.
_RESCHEDULED = re.compile(
    r"\b(?:reschedul\w*|postponed|deferred|brought\s+forward|pushed\s+(?:back|out)"
    r"|(?:(?:has|have|had)\s+been|was|were|is|are)\s+(?:now\s+)?"
    r"(?:moved|changed|delayed|updated|extended)"
    r"|(?:has|have)\s+(?:now\s+)?moved"
    r"|new\s+(?:(?:spot\s+)?(?:reclaim|reclamation)\s+)?(?:time|deadline|date)"
    r"|will\s+now\s+be\s+reclaimed(?=[^.!?;]{0,200}?\binstead\s+of\b))\b",
    re.I,
)
# "at 17:00 instead of 15:30 UTC": the zone written after the old time is the new one's too.
# Without it the new time did not read, and the old one was the deadline.
_SHARES_ZONE = re.compile(
    r"(?<![\d:.])[0-9]{1,2}[:.][0-5][0-9](?:[^\S\n]*[ap]\.?m\.?)?"
    r"(?=\s+instead\s+of\s+(?:at\s+)?[0-9]{1,2}[:.][0-5][0-9](?:[^\S\n]*[ap]\.?m\.?)?"
    r"[^\S\n]*(?P<zone>(?i:UTC|GMT)|[A-Z]{3,4})\b)",
    re.I,
)


def _zone_shared(block: str) -> tuple[str, Callable[[int], int]]:
    """`block` with the zone of "instead of 15:30 UTC" written after the time before it, and
    where a place in `block` is in the text returned."""
    inserted: list[tuple[int, int]] = []
    parts: list[str] = []
    last = 0
    for match in _SHARES_ZONE.finditer(block):
        zone = " " + match.group("zone")
        parts += [block[last : match.end()], zone]
        last = match.end()
        inserted.append((match.end(), len(zone)))
    if not inserted:
        return block, lambda at: at
    parts.append(block[last:])

    def moved(at: int) -> int:
        return at + sum(length for where, length in inserted if where <= at)

    return "".join(parts), moved


# Another droplet named near a cancellation: a number as long as a droplet id, or a word
# with a letter and a digit (`gpu-spot-7`, `web1.example.com`). Zones, DigitalOcean's
# region slugs (`nyc2`), size slugs (`gpu-h100x1-80gb`, `s-2vcpu-4gb`) and GPU models (`H100`)
# are not droplets.
_OTHER_DROPLET = re.compile(r"(?<![\w.-])(?:\d{6,}|[A-Za-z][\w.-]*?\d[\w.-]*?)(?=[.-]?(?![\w.-]))")
_NOT_A_DROPLET = re.compile(
    r"(?i:[a-z]{3}\d)"  # a region: nyc2
    r"|[A-Z]{1,3}\d{2,4}[A-Z]?"  # a GPU model: H100, L40S, MI300X
)
# A zone at the start of the word, or a size slug's part anywhere in it. Searched for, not
# matched as `.*(?:vcpu|\d+gb|\d+x\d+).*` against the whole word: that backtracked over
# every split of a long word, and a mail of one run of 16,000 digits took 5 CPU-s to judge
# (the 256 KiB fetched, about 20 minutes). The same words: a word is of `[\w.-]`, no line
# break, which `.` would not have matched.
_NOT_A_DROPLET_PART = re.compile(r"(?i:\A(?:UTC|GMT)[+-]?\d|vcpu|\dgb|\dx\d)")


def _not_a_droplet(word: str) -> bool:
    """Whether `word`, a name's place or a word with a letter and a digit, is no droplet: a
    zone, a region, a size slug or a GPU model."""
    if _NOT_A_DROPLET.fullmatch(word):
        return True
    return "\n" not in word and _NOT_A_DROPLET_PART.search(word) is not None


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
        alert account project team customer thanks regards greetings what where who why how
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
    overlaps_ours = overlap_test(ours)
    for match in _OTHER_DROPLET.finditer(text):
        start, end = match.span()
        if _not_a_droplet(match.group(0)):
            continue
        if overlaps_ours(start, end):
            continue
        found.append((start, end, False))
    overlaps_found = overlap_test(sorted((start, end) for start, end, _ in found))
    for match in _NAME_SLOT.finditer(text):
        group = next(g for g in ("name", "label", "owner") if match.group(g) is not None)
        start, end = match.span(group)
        name = match.group(group)
        if name.lower() in _NOT_A_NAME or _not_a_droplet(name):
            continue
        if overlaps_found(start, end):
            continue
        found.append((start, end, False))
    return sorted(found)


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
    subject = next((m for m in in_subject.finditer(text, 0, body_at) if kept_in_subject(m)), None)
    # Each in turn, up to the first about this droplet and kept: judging all of them first (a
    # 250 kB line of 3,700 new times, each read up to CLAUSE_REACH characters on) took
    # twice what the whole mail took before that form was a new time. A body statement is
    # judged (`kept`) only once its sentence is found to be about this droplet (two
    # bisections): judged first, the 14,700 new times of a 1 MB line for another droplet
    # made that mail cost 1.2x a plain one. The subject's first kept statement stands as
    # before (a subject is short).
    statements = itertools.chain(
        [(subject, True)] if subject else [],
        ((m, False) for m in in_body.finditer(text, body_at + 1)),
    )
    # Found by bisection (mentions do not overlap, so they are sorted by end too): a mail of
    # thousands of statements took seconds on the event loop when each scanned the text.
    # Each sentence's end found once (searched from each statement to the mail's end, and
    # its mentions listed, a line of 3,700 new times for another droplet took 16 CPU-s).
    marks = [m.start() for m in SENTENCE_END.finditer(text)]
    ends = [mark + 1 for mark in marks]  # a sentence's end is one character
    starts = [start for start, _, _ in mentions]
    # How many of the mentions before each one are this droplet's.
    ours_before = list(itertools.accumulate((ours for _, _, ours in mentions), initial=0))
    for statement, judged in statements:
        after = bisect.bisect_left(marks, statement.end())
        begin, end = _sentence(text, statement, ends, marks[after] if after < len(marks) else None)
        first, last = bisect.bisect_left(starts, begin), bisect.bisect_left(starts, end)
        straddles = first > 0 and mentions[first - 1][1] > begin
        if last > first or straddles:
            about = ours_before[last] > ours_before[first] or (straddles and mentions[first - 1][2])
        else:
            before = mentions[first - 1][2] if first > 0 else None
            later = mentions[last][2] if last < len(mentions) else False
            about = before if before is not None else later
        if about and (judged or kept(statement)):
            return statement
    return None


def _sentence(
    text: str, statement: re.Match[str], ends: list[int] | None = None, after: int | None = -1
) -> tuple[int, int]:
    """Where the sentence of `statement` begins and ends; `ends`, the ends of the sentences
    before it, and `after`, where the next sentence end starts (None: there is none), when
    they are known."""
    if ends is None:
        ends = [m.end() for m in SENTENCE_END.finditer(text, 0, statement.start())]
    before = bisect.bisect_right(ends, statement.start())
    if after == -1:
        found = SENTENCE_END.search(text, statement.end())
        after = found.start() if found else None
    return ends[before - 1] if before else 0, len(text) if after is None else after


def judge(
    mail: Mail, rules: MatchRules, key: str, now: datetime, received: datetime | None = None
) -> Verdict:
    """Decide what `mail` raises. `key` identifies the mail when it has no Message-ID;
    `received`, when the server received it, stands in for a Date header missing or
    unreadable."""
    if not rules.sender.search(mail.sender):
        # A mail rule that forwards DigitalOcean's mail makes the user the sender. The
        # forwarded sender can be forged as easily as From, but not vouched for by DKIM.
        if mail.forwarded is not None and not rules.require_dkim:
            inner = judge(mail.forwarded, rules, key, now, received)
            if inner.report is not None or rules.sender.search(mail.forwarded.sender):
                return _forwarded_by(mail, inner)
        return Verdict(None, f"sender {mail.sender!r} does not match")
    if not rules.subject.search(mail.subject):
        return Verdict(None, f"subject {mail.subject!r} does not match")
    if rules.require_dkim and not _dkim_passes(mail):
        return Verdict(None, f"no dkim=pass for {mail.sender!r} in Authentication-Results")
    text = f"{mail.subject}\n{join_label_lines(mail.text)}"
    naming = _names_droplet(text, rules)
    if naming is None:
        return Verdict(None, NAMES_NEITHER)
    named, at = naming
    other_id = _another_id(text, rules) if named == "name" else None
    if other_id is not None:
        return Verdict(None, f"names this droplet's name with another droplet's id ({other_id})")
    # Without a Date, when the server received it: its bare times ("at 01:00 UTC") were
    # read as no time at all, and the time the agent read it plus the lead stood in, after
    # the reclaim (01:30 for a mail of 23:25 read at 23:30); read late, later still.
    sent = mail.date if mail.date is not None else received
    by_receipt = sent_by_receipt(mail.date, received)
    if by_receipt is not None:
        sent = by_receipt
    if sent is not None and now - sent > rules.max_age:
        return Verdict(None, f"dated {format_time(sent)}, older than max_age")
    mentions = _droplet_mentions(text, rules)
    body_at = len(mail.subject)
    is_mention = overlap_test([(start, end) for start, end, _ in mentions])
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
        ends = [m.end() for m in SENTENCE_END.finditer(text, others[-1], at)]
        begin = ends[-1] if ends else at
    found = None
    shift: timedelta | None = None
    # A time later than this is the deadline only when its sentence is the reclaim's.
    until = shifted(sent or now, rules.lead)
    if rescheduled:
        # The new time is the first from its sentence on (a new time in the subject: from
        # this droplet's line on) that is not the one it replaces, before the next droplet
        # named: a new time read as the old one kept a reclaim moved earlier at its later
        # time, and one read past the next droplet could be that droplet's.
        if rescheduled.start() >= body_at:
            begin = _sentence(text, rescheduled)[0]
        sentence_end = SENTENCE_END.search(text, max(begin, rescheduled.end()))
        after = sentence_end.end() if sentence_end else len(text)
        stop = min(
            (start for start, _, ours in mentions if not ours and start >= after), default=None
        )
        block = text[begin:stop]
        # The sentence of the new time is the reclaim's ("gpu-spot-1: rescheduled to 16:00
        # UTC"), as is any naming this droplet.
        ours = [at - begin for at in our_starts if begin <= at < len(block) + begin]
        ours += [rescheduled.start() - begin] if rescheduled.start() >= begin else []
        zoned, moved = _zone_shared(block)
        found = find_deadline(
            zoned, sent, new_only=True, ours=[moved(at) for at in ours], elsewhere_until=until
        ) or find_deadline(
            block,
            sent,
            others=[at - begin for at in other_starts if at >= begin],
            ours=ours,
            elsewhere_until=until,
        )
        by = SHIFT.search(block) if found is None else None
        if by is not None:
            parts = {k: v for k, v in by.groupdict().items() if v is not None}
            sign = -1 if EARLIER.search(block) else 1
            with contextlib.suppress(OverflowError):
                shift = timedelta(hours=sign * amount_hours(parts))
    if shift is None:
        found = found or find_deadline(
            text[begin:],
            sent,
            others=[at - begin for at in other_starts],
            ours=[at - begin for at in our_starts if at >= begin],
            elsewhere_until=until,
        )
        if found is None:
            # A time before this droplet's line: one above every droplet named (a heading
            # for all of them), or one in this droplet's block. A time after another droplet
            # and before this one was that droplet's: "Droplet: gpu-spot-7" then "Reclaim:
            # 16:00 UTC" then "Droplet: gpu-spot-1", with no time of its own, was 16:00.
            first_other = min((start for start in other_starts if start < begin), default=None)
            heading = text if first_other is None else text[:first_other]
            found = _earlier(
                find_deadline(
                    heading, sent, others=other_starts, ours=our_starts, elsewhere_until=until
                ),
                _above_in_block(text, begin, mentions, sent, until),
                until,
            )
    if found is None and shift is None and sent is not None:
        found = sooner_than_lead(text, sent, rules.lead)
    if found is not None:
        deadline, words = found
        source = f"text: {words.strip()}"
    else:
        after_lead = shifted(sent or now, rules.lead)
        if after_lead is None:
            raise ParseError(f"Date {format_time(sent or now)} plus lead is after the year 9999")
        deadline = after_lead
        source = "date+lead" if mail.date is not None and by_receipt is None else "received+lead"
    if shift is None:
        stop = min((start for start in other_starts if start > begin), default=len(text))
        early = early_by(text, begin, stop, source)
        if early is not None:
            with contextlib.suppress(OverflowError):
                deadline -= early[0]
                source += f"; {early[1]}"
    # Date + lead is in the Date's own offset: a deadline goes out in UTC.
    deadline = deadline.astimezone(timezone.utc)
    # A mail sent since this machine started that names its id is this machine's whatever
    # its time (no other machine had the id by then): a deadline before the start is a
    # misreading or DigitalOcean's slip, raised past (clients act at once), not dropped.
    booted = rules.booted
    ours_since_start = booted is not None and named == "id" and sent is not None and sent >= booted
    if booted is not None and deadline < booted and not ours_since_start:
        return Verdict(
            None,
            f"its deadline {format_time(deadline)} came before this machine started "
            f"({format_time(booted)}): another machine's, or it did not happen",
        )
    detail: dict[str, Any] = {
        "from": mail.sender,
        "subject": mail.subject,
        "date": format_time(mail.date) if mail.date is not None else None,
        "message_id": mail.message_id,
        "matched": named,
        "deadline_source": source,
    }
    if rescheduled:
        detail["rescheduled"] = rescheduled.group(0)
    if shift is not None:
        detail["shift_seconds"] = shift.total_seconds()
    if by_receipt is not None and mail.date is not None:
        detail["date_after_receipt_seconds"] = round((mail.date - by_receipt).total_seconds())
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
    for zone, offsets in AMBIGUOUS_ZONES.items():
        # Said with the mail, so the user can see which reading was taken and why.
        # Not when the offset is written beside it ("IST (+02:00)"): that one was taken.
        beside = r"(?![^\S\n]*\([^\S\n]*(?:UTC|GMT)?[^\S\n]*[+-][0-9])"
        if source.startswith("text: ") and re.search(rf"\b{zone}\b{beside}", source):
            why += f"; {zone} is ambiguous ({offsets}): read as the first, the earliest"
    if mail.unreadable_date is not None:
        since = (
            f"its receipt ({format_time(received)})" if received is not None else "when it was read"
        )
        why += (
            f"; its Date header {mail.unreadable_date!r} does not read as a date: its times are "
            f"counted from {since}"
        )
    if by_receipt is not None and mail.date is not None:
        ahead = (mail.date - by_receipt).total_seconds() / 3600
        why += (
            f"; its Date {format_time(mail.date)} is {ahead:.1f} h after the server received "
            f"it ({format_time(by_receipt)}): its times are counted from its receipt"
        )
    return Verdict(report, why, replaces=bool(rescheduled), shift=shift)


# A Date later than this after the server received the mail is the sender's clock, not
# when the mail was sent: Dates of real mail come before its receipt, by its transit.
DATE_AFTER_RECEIPT = timedelta(minutes=5)


def sent_by_receipt(date: datetime | None, received: datetime | None) -> datetime | None:
    """When a mail dated `date` and received by the server at `received` (INTERNALDATE) was
    sent, where its Date cannot be it: `received`, in the Date's offset, when the Date is
    more than DATE_AFTER_RECEIPT after it; else None (the Date stands). A Date 5 h ahead put
    "in about 2 hours" 7 h after the mail came, and the terminate 5 h after the reclaim."""
    if date is None or received is None:
        return None
    try:
        if date - received <= DATE_AFTER_RECEIPT:
            return None
        return received.astimezone(date.tzinfo)
    except (OverflowError, ValueError):
        return None


def _above_in_block(
    text: str,
    begin: int,
    mentions: list[tuple[int, int, bool]],
    sent: datetime | None,
    until: datetime | None,
) -> tuple[datetime, str] | None:
    """The time written in this droplet's block above its line `begin`, after the line of
    the other droplet named last before it: a digest of blocks that give the time above the
    droplet ("Reclaim: 13:10 UTC" then "Droplet: gpu-spot-1"), whose first time, another
    droplet's, was taken for this one's, hours late."""
    before = [stop for start, stop, ours in mentions if not ours and start < begin]
    if not before:
        return None
    after_other = text.find("\n", before[-1])
    if after_other < 0 or after_other >= begin:
        return None
    return find_deadline(text[after_other:begin], sent, elsewhere_until=until)


def _earlier(
    found: tuple[datetime, str] | None,
    above: tuple[datetime, str] | None,
    until: datetime | None,
) -> tuple[datetime, str] | None:
    """Of the mail's first time (`found`) and the one above this droplet in its block, the
    earlier; the latter never later than Date + lead (`until`) when it stands alone, so it
    can only bring the deadline forward: a block with no time of its own would otherwise
    take the one of the block above."""
    if above is None:
        return found
    if found is None:
        return above if until is not None and above[0] <= until else None
    return min(found, above, key=lambda time: time[0])


def _forwarded_by(mail: Mail, inner: Verdict) -> Verdict:
    why = f"{inner.why} (forwarded by {mail.sender})"
    if inner.report is None:
        return Verdict(None, why, replaces=inner.replaces, cancel_id=inner.cancel_id)
    detail = {**inner.report.detail, "forwarded_by": mail.sender}
    report = inner.report.model_copy(update={"detail": detail})
    return Verdict(report, why, inner.replaces, shift=inner.shift)


def reclaim_verdict(
    raw: bytes,
    rules: MatchRules,
    key: str,
    now: Callable[[], datetime] | datetime,
    *,
    received: datetime | None = None,
) -> Verdict:
    """From the raw message to its verdict; ParseError when the message is unreadable.
    `received`: when the server received it (IMAP INTERNALDATE), if known."""
    moment = now() if callable(now) else now
    mail = read_mail(raw)
    verdict = judge(mail, rules, key, moment, received)
    if mail.cut_headers:
        verdict = replace(verdict, cut_headers=mail.cut_headers)
    return verdict


__all__ = [
    "DATE_AFTER_RECEIPT",
    "DRILL_HEADER",
    "NAMES_NEITHER",
    "Mail",
    "MatchRules",
    "Verdict",
    "find_deadline",
    "judge",
    "read_mail",
    "reclaim_verdict",
    "sent_by_receipt",
]
