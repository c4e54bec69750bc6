"""What judging a mail costs: linear in its size, whatever its sentences (a mail is judged
before the next is read, so a slow one delays the reclaim mail behind it)."""

from __future__ import annotations

import bisect
import email
import email.policy
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from email.headerregistry import BaseHeader, HeaderRegistry
from email.message import EmailMessage

import pytest
from do_support import RULES, verdict
from forewarn.providers.digitalocean import cancel, deadline
from forewarn.providers.digitalocean import mail as mail_module
from forewarn.providers.digitalocean import message as mail_message
from forewarn.providers.digitalocean.message import read_mail
from forewarn.providers.digitalocean.written import written_times
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

# A digest line of cancellations and new times without a sentence's end.
STATEMENT = "the reclaim of droplet gpu-spot-1 has been cancelled, then rescheduled to "


def test_a_line_of_thousands_of_statements_is_judged_in_linear_time() -> None:
    """Each new-time statement's clause was read to the end of its line: a line of 1,600 of
    them without a full stop (120 KB) took 7 s to judge, a mail of 256 KiB (all that is
    fetched) 28 s, during which no later mail, the reclaim among them, was read. The clause
    is read within CLAUSE_REACH characters: 0.6 s here."""
    started = time.process_time()
    found = verdict(STATEMENT * 1600)
    took = time.process_time() - started
    assert found.report is not None and found.report.action == "drain"
    assert took < 2.5, took


_PHRASES = st.sampled_from(
    [
        "The reclaim of Droplet gpu-spot-1 has been rescheduled to 16:00 UTC",
        "the reclaim was postponed last week",
        "Your backups have been moved to 18:00 UTC",
        "The reclaim of gpu-spot-7 (ID 111111111) is cancelled",
        "it has been postponed before",
        "we have rescheduled the reclaim",
        "Droplet gpu-spot-1 will be reclaimed at 14:10 UTC",
        "Rescheduling is not possible",
        "the reclaim has been moved, then rescheduled to 15:00 UTC",
    ]
)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(_PHRASES, min_size=1, max_size=8), st.sampled_from([". ", ", ", "\n", " "]))
def test_the_reach_changes_no_verdict_on_a_mail_of_ordinary_clauses(
    phrases: list[str], joint: str
) -> None:
    # Clauses of a real mail are far shorter than the reach: reading them whole (a reach
    # past the mail's end) gives the same verdict.
    body = joint.join(phrases) + "."
    reached = verdict(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cancel, "CLAUSE_REACH", 10**9)
        whole = verdict(body)
    assert reached == whole


class _Counted:
    """A pattern that notes each text it is asked to scan."""

    def __init__(self, pattern: re.Pattern[str], scanned: list[str]) -> None:
        self._pattern = pattern
        self._scanned = scanned

    def finditer(self, text: str, *bounds: int) -> Iterator[re.Match[str]]:
        self._scanned.append(text)
        return self._pattern.finditer(text, *bounds)


def test_a_mail_without_a_usable_time_is_scanned_for_times_once_per_text() -> None:
    """Of the three readings of a mail whose times cannot be the deadline (from the line
    naming the droplet, the whole mail, and the whole mail for a time before Date + lead),
    the last two scanned the same text with every pattern again: a hostile 130 KB mail of
    such times took 3 CPU-s to judge, a third of it reading the same matches again."""
    body = "Droplet gpu-spot-1 will be reclaimed.\n" + "14:00 UTC (-0:30) on December 3, " * 50
    scans: dict[str, list[str]] = {}
    deadline._matches.cache_clear()  # the text's matches as another test found them
    deadline._dated_in.cache_clear()

    def counted(name: str, pattern: re.Pattern[str]) -> _Counted:
        return _Counted(pattern, scans.setdefault(name, []))

    with pytest.MonkeyPatch.context() as patch:
        dated = [
            (needed, counted(f"dated {n}", p)) for n, (needed, p) in enumerate(written_times())
        ]
        patch.setattr(deadline, "written_times", lambda: dated)
        for name in ("TIME_ONLY", "EPOCH", "RELATIVE"):
            patch.setattr(deadline, name, counted(name, getattr(deadline, name)))
        found = verdict(body)
    assert found.report is not None
    assert found.report.detail["deadline_source"] == "date+lead"  # every reading was made
    assert scans["TIME_ONLY"], scans.keys()
    for name, texts in scans.items():
        again = len(texts) - len(set(texts))
        assert again == 0, (name, [len(text) for text in texts])


def test_each_header_of_a_mail_is_parsed_once() -> None:
    """email's default policy parses a header again at every look (a new class and parse
    tree each time): reading a mail of a text and an HTML part parsed its Content-Type and
    the other MIME headers 33 times for 7 headers, three quarters of a small mail's verdict."""
    message = EmailMessage()
    message["From"] = "DigitalOcean <no-reply@digitalocean.com>"
    message["Subject"] = "Spot Droplet reclaim notice"
    message["Date"] = "Tue, 01 Dec 2026 12:30:00 +0000"
    message.set_content("Droplet gpu-spot-1 will be reclaimed at 14:00 UTC.")
    message.add_alternative("<p>Droplet gpu-spot-1 will be reclaimed at 14:00 UTC.</p>", "html")
    raw = bytes(message)
    parsed: list[tuple[str, str]] = []
    parse = HeaderRegistry.__call__

    def counted(registry: HeaderRegistry, name: str, value: str) -> BaseHeader:
        parsed.append((name.lower(), value))
        return parse(registry, name, value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeaderRegistry, "__call__", counted)
        mail = read_mail(raw)
    assert mail.subject == "Spot Droplet reclaim notice" and "14:00 UTC" in mail.text
    again = sorted({(name, parsed.count((name, value))) for name, value in parsed})
    assert len(parsed) == len(set(parsed)), again


def test_the_policy_that_parses_once_still_serves_every_use_of_a_policy() -> None:
    # email asks the policy's header factory for a header's class too (how many of it a
    # message may hold, when a header is set): a bare function there raised TypeError.
    message = EmailMessage(policy=mail_message._parsing_once())
    message["Subject"] = "Spot Droplet reclaim notice"
    with pytest.raises(ValueError, match="at most 1 Subject"):
        message["Subject"] = "another"
    message.set_content("Droplet gpu-spot-1 will be reclaimed at 14:00 UTC.")
    assert read_mail(bytes(message)).subject == "Spot Droplet reclaim notice"


def test_the_times_read_for_one_moment_in_two_offsets_are_not_shared() -> None:
    # 03:00 UTC on a Friday is 22:00 on Thursday at -0500: equal datetimes (the same key to
    # a cache), but the writer's calendar decides which day "Friday" or "tomorrow" is.
    utc = datetime(2026, 12, 4, 3, 0, tzinfo=timezone.utc)
    text = "Droplet gpu-spot-1 will be reclaimed on Friday, 4 December at 14:00 UTC."
    deadline._dated_in.cache_clear()
    deadline.find_deadline(text, utc)
    deadline.find_deadline(text, utc.astimezone(timezone(timedelta(hours=-5))))
    assert deadline._dated_in.cache_info().misses == 2


def _parsed_lengths(raw: bytes) -> tuple[list[int], mail_message.Mail]:
    """The length of each header value email's registry parsed while `raw` was read."""
    parsed: list[int] = []
    parse = HeaderRegistry.__call__

    def counted(registry: HeaderRegistry, name: str, value: str) -> BaseHeader:
        parsed.append(len(value))
        return parse(registry, name, value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeaderRegistry, "__call__", counted)
        mail = read_mail(raw)
    return parsed, mail


def _mail_with(headers: list[tuple[str, str]]) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return (lines + "\r\nDroplet gpu-spot-1 will be reclaimed at 14:00 UTC.\r\n").encode()


_BASE_HEADERS = [
    ("From", "DigitalOcean <no-reply@digitalocean.com>"),
    ("Subject", "Spot Droplet reclaim notice"),
    ("Date", "Tue, 01 Dec 2026 12:30:00 +0000"),
    ("Content-Type", "text/plain; charset=utf-8"),
]


@pytest.mark.parametrize(
    ("name", "unit"),
    [
        ("Subject", "Spot Droplet reclaim notice "),
        ("From", "DigitalOcean <no-reply@digitalocean.com>, "),
        ("Content-Type", "text/plain; charset=utf-8; a=b"),
    ],
)
def test_a_long_header_is_parsed_only_to_the_limit(name: str, unit: str) -> None:
    """email's header parser takes time superlinear in a value's length (a Subject of
    50/100/200 KB: 0.44/1.04/2.91 s; a From of 25/50/100 KB: 0.58/1.26/2.74 s), and a mail
    is anyone's text: each value is parsed up to HEADER_LIMIT characters."""
    headers = [(n, (unit * (200_000 // len(unit))) if n == name else v) for n, v in _BASE_HEADERS]
    parsed, mail = _parsed_lengths(_mail_with(headers))
    assert max(parsed) <= 4096, sorted(parsed)[-3:]
    assert mail.sender == "no-reply@digitalocean.com"
    assert "14:00 UTC" in mail.text
    if name == "Subject":
        assert mail.subject.startswith("Spot Droplet reclaim notice Spot")


def test_many_long_headers_are_parsed_within_one_budget() -> None:
    # Cut one by one, 64 From headers of 4 KiB (all read, to find the sender) still cost as
    # much as one of 256 KiB did: the values of one mail are parsed up to HEADERS_BUDGET.
    # (Each value its own: the same value twice is parsed once.)
    many = [("From", f"n{n} <no-reply@digitalocean.com>, " * 128) for n in range(64)]
    many += [("Authentication-Results", f"mx{n}; dkim=pass header.d=a.b " * 128) for n in range(64)]
    parsed, mail = _parsed_lengths(_mail_with([*many, *_BASE_HEADERS[1:]]))
    assert sum(parsed) <= 40_000, sum(parsed)
    assert mail.sender == "no-reply@digitalocean.com"


_HEADER_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=200
) | st.sampled_from(
    [
        "=?utf-8?q?Spot_Droplet_reclaim_notice?=",
        "=?UTF-8?B?U3BvdCBEcm9wbGV0IHJlY2xhaW0gbm90aWNl?= for gpu-spot-1",
        "Spot Droplet reclaim notice: gpu-spot-1 (ID 424242424)",
        "DigitalOcean <no-reply@digitalocean.com>",
        '"Ops, DigitalOcean" <no-reply@digitalocean.com>',
    ]
)


@settings(max_examples=examples(150), deadline=None)
@given(_HEADER_TEXT, _HEADER_TEXT, st.integers(0, 4096 - 1000), st.booleans())
def test_a_header_under_the_limit_reads_as_email_reads_it(
    subject: str, sender: str, pad: int, folded: bool
) -> None:
    # Under the limit, a value (as written in the mail, encoded words and folds included) is
    # email's own reading, however it is written: a real mail's headers are a few hundred
    # characters.
    written = subject + ("\r\n " if folded else " ") + "x" * pad
    raw = _mail_with([("From", sender), ("Subject", written), *_BASE_HEADERS[2:]])
    plain = email.message_from_bytes(raw, policy=email.policy.default)
    mail = read_mail(raw)
    assert mail.subject == str(plain.get("Subject", "") or "")
    assert mail.sender == mail_message._sender_of(str(plain.get("From", "")))


class _SearchCounted:
    """A pattern that adds up how many characters each search is given."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self._pattern = pattern
        self.scanned = 0

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        self.scanned += min(endpos, len(text)) - pos
        return self._pattern.search(text, pos, endpos)

    def __getattr__(self, name: str) -> object:
        # Its other uses (finditer, match) as the pattern's own.
        return getattr(self._pattern, name)


# "New reclaim time: ... (was ...)" repeated on one line: the form of H229's new times.
NEW_TIMES = "New reclaim time: 17:00 UTC (was 14:30 UTC) for droplet gpu-spot-1, "


def test_the_time_a_new_time_replaces_is_looked_for_just_before_each_time() -> None:
    """Each time of a new time's block was checked for being the old one ("was 14:30 UTC")
    by searching its whole line up to it: a 250 kB line of such new times took 68 CPU-s to
    judge (0.6 before the check), during which no later mail was read. The words that can
    say so are looked for in the few words before the time."""
    body = "Droplet gpu-spot-1 will be reclaimed.\n" + NEW_TIMES * 200
    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    counted = _SearchCounted(deadline._OLD_TIME)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deadline, "_OLD_TIME", counted)
        found = verdict(body)
    assert found.report is not None
    assert found.report.detail["deadline_source"] == "text: 17:00 UTC"
    assert counted.scanned < 2 * len(body), (counted.scanned, len(body))


def _old_time_from_line_start(text: str, start: int, words: str) -> bool:
    """The check as it was: _OLD_TIME searched in the whole line up to the time."""
    old = deadline._OLD_TIME.search(text[text.rfind("\n", 0, start) + 1 : start])
    if old is None:
        return False
    return not (
        old.group(0).lower().startswith("from") and re.search(r"\b(?:to|until|and)\b", words)
    )


_OLD_TIME_WORD = st.sampled_from(
    [
        "from",
        "was",
        "previously",
        "originally",
        "instead",
        "of",
        "scheduled",
        "set",
        "for",
        "at",
        "old",
        "Previous",
        "reclaim",
        "reclamation",
        "time",
        "window",
        ":",
        "(",
        "((",
        "x",
        "14:30UTC",
        ",",
        "wasn't",
        "fromage",
    ]
)
_OLD_TIME_GAP = st.sampled_from([" ", "  ", "\t", "\n", "\u2028", "\u00a0", "(", " ( ", ""])
# A time's line: words of the old time's forms, with blanks and brackets between them.
_OLD_TIME_WORDS = st.lists(st.tuples(_OLD_TIME_WORD, _OLD_TIME_GAP), max_size=8).map(
    lambda pairs: "".join(word + gap for word, gap in pairs)
)
# The words of an old time's forms, in their order, each there or not.
_OLD_TIME_PHRASE = st.tuples(
    st.sampled_from(["from", "was", "previously", "instead of", "old", "Previous", "x"]),
    st.sampled_from(["", "reclaim", "scheduled", "set"]),
    st.sampled_from(["", "for", "at", "time", "window", ":"]),
    st.sampled_from(["", ":", "("]),
    st.lists(_OLD_TIME_GAP, min_size=4, max_size=4),
).map(lambda p: "".join(word + gap for word, gap in zip(p[:4], p[4], strict=True)))


@settings(max_examples=examples(300), deadline=None)
@given(
    _OLD_TIME_WORDS,
    _OLD_TIME_PHRASE,
    _OLD_TIME_WORDS,
    st.sampled_from(["17:00 UTC", "14:00 to 16:00 UTC"]),
    st.data(),
)
# The longest forms, of four words, with brackets and blanks after them.
@example("x ", "instead\u2028of scheduled  for ( (", "", "17:00 UTC", None)
@example("", "Previous reclaim\ttime :", "", "17:00 UTC", None)
def test_the_old_time_is_found_as_the_search_from_the_line_start_found_it(
    before: str, phrase: str, after: str, words: str, data: st.DataObject | None
) -> None:
    # A time's line: words and an old time's phrase, then the time (or anywhere else).
    text = before + phrase + after
    ends = st.just(len(before + phrase))
    start = len(text) if data is None else data.draw(ends | st.integers(0, len(text)))
    assert deadline._is_old_time(text, start, words) == _old_time_from_line_start(
        text, start, words
    )


def test_a_mail_of_new_times_is_judged_only_until_one_is_ours() -> None:
    """Every new time of a mail was judged (each `moves` reading up to CLAUSE_REACH
    characters after it) before the first about this droplet was taken: a 250 kB line of
    'New reclaim time: ... for droplet gpu-spot-1, ' cost 2.0 CPU-s to judge, 0.9 at
    615b2e25. The first one kept and about this droplet is the same one when they are
    judged in turn."""
    body = "Droplet gpu-spot-1 will be reclaimed.\n" + NEW_TIMES * 200
    judged: list[int] = []

    def counted(text: str, statement: re.Match[str], *args: object) -> bool:
        judged.append(statement.start())
        return cancel.moves(text, statement, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mail_module, "moves", counted)
        found = verdict(body)
    assert found.report is not None
    assert found.report.detail["deadline_source"] == "text: 17:00 UTC"
    assert len(judged) <= 2, len(judged)


# The same line for another droplet: each of its new times is judged, and none is ours.
OTHER_NEW_TIMES = NEW_TIMES.replace("gpu-spot-1", "gpu-spot-7")


@pytest.mark.parametrize("name", ["_LONG_PAST", "_CLAUSE_START", "_CONDITIONS"])
def test_the_clause_after_a_new_time_is_read_without_scanning_its_reach(name: str) -> None:
    """For each new time, the clause after it was searched for its end and for a time long
    past ("last week") over up to CLAUSE_REACH characters, and its clause before it for a
    condition: 2,000 and 300 characters for each of the 3,700 statements of a 250 kB line.
    Where a clause can end, and where the long past's and a condition's words are, are found
    once for the mail."""
    body = "Droplet gpu-spot-1 will be reclaimed at 14:30 UTC.\n" + OTHER_NEW_TIMES * 200
    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    counted = _SearchCounted(getattr(cancel, name))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cancel, name, counted)
        found = verdict(body)
    assert found.report is not None
    assert counted.scanned < 2 * len(body), (counted.scanned, len(body))


# Pieces of a clause after a new time: ends a clause can have or not ("1.5", ".\n", a
# wrapped line), each of the long past's words in any case (the long s and Kelvin sign fold
# to s and k), and their forms whole.
_CLAUSE_PIECE = st.sampled_from(
    [
        " ",
        "x",
        "the reclaim",
        ".",
        ". ",
        "1.5",
        ";",
        "!",
        "?\t",
        "\n",
        "\n\n",
        "\n \n",
        "\nWrapped",
        "\nwrapped",
        "\n  (",
        "last",
        "LAST week",
        "la\u017ft night",
        "yesterday",
        "ago",
        "two days ago",
        "chicago",
        "in the past",
        "pa\u017ft",
        "earlier this month",
        "before",
        "before \n",
        "on previous occasions",
        "OCCASIONS",
        "\u212a",
        "ast",
        "if",
        "IN case",
        "in rare cases",
        "whenever",
        "rumoured",
        "i",
        "\u0130f",
    ]
)


def _plain_clause_end(text: str, end: int) -> int:
    """Where the clause after `end` stops, searched as `moves` searched it before."""
    reach = min(len(text), end + cancel.CLAUSE_REACH)
    stop = cancel._CLAUSE_START.search(text, end, reach)
    return stop.start() if stop else reach


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(_CLAUSE_PIECE, max_size=30).map("".join), st.integers(0, 80), st.data())
def test_the_clause_after_a_statement_is_read_as_the_plain_search_read_it(
    text: str, reach: int, data: st.DataObject
) -> None:
    end = data.draw(st.integers(0, len(text)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cancel, "CLAUSE_REACH", reach)
        stop = cancel._clause_end(text, end)
        assert stop == _plain_clause_end(text, end)
    upto = data.draw(st.integers(end, len(text)))
    for clause in ((end, stop), (end, upto), (end, len(text)), (0, len(text))):
        plain = cancel._LONG_PAST.search(text[clause[0] : clause[1]]) is not None
        assert cancel._long_past(text, *clause) == plain, clause
        plain = cancel._CONDITIONS.search(text, *clause) is not None
        assert cancel._condition_between(text, *clause) == plain, clause


_KEPT_PIECE = st.sampled_from(
    [
        "New reclaim time: 17:00 UTC for droplet gpu-spot-1, ",
        "New reclaim time: 17:00 UTC for droplet gpu-spot-7, ",
        "The reclaim has been rescheduled. ",
        "Droplet gpu-spot-7 was postponed last week. ",
        "Droplet gpu-spot-1 ",
        "gpu-spot-7 ",
        "\n",
        ". ",
    ]
)


def _eager_about_this_droplet(
    text: str,
    body_at: int,
    mentions: list[tuple[int, int, bool]],
    kept: Callable[[re.Match[str]], bool],
) -> re.Match[str] | None:
    """mail._about_this_droplet as it was: every statement judged, then the first about this
    droplet taken."""
    statements = [m for m in mail_module._RESCHEDULED.finditer(text, 0, body_at) if kept(m)][:1]
    statements.extend(m for m in mail_module._RESCHEDULED.finditer(text, body_at + 1) if kept(m))
    ends = [m.end() for m in mail_module.SENTENCE_END.finditer(text)]
    starts = [start for start, _, _ in mentions]
    for statement in statements:
        begin, end = mail_module._sentence(text, statement, ends)
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


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(_KEPT_PIECE, max_size=3).map("".join),
    st.lists(_KEPT_PIECE, max_size=12).map("".join),
    st.data(),
)
def test_the_statement_about_this_droplet_is_the_one_judging_all_first_found(
    subject: str, body: str, data: st.DataObject
) -> None:
    # Whatever `moves` or `counts` keeps (drawn here per statement), judging them in turn
    # takes the statement that judging all of them first took.
    text = f"{subject}\n{body}"
    mentions = mail_module._droplet_mentions(text, RULES)
    drawn: dict[int, bool] = {}

    def kept(statement: re.Match[str]) -> bool:
        if statement.start() not in drawn:
            drawn[statement.start()] = data.draw(st.booleans())
        return drawn[statement.start()]

    eager = _eager_about_this_droplet(text, len(subject), mentions, kept)
    lazy = mail_module._about_this_droplet(
        text,
        len(subject),
        mentions,
        mail_module._RESCHEDULED,
        mail_module._RESCHEDULED,
        kept,
        kept,
    )
    assert (lazy and lazy.span()) == (eager and eager.span())


def test_the_sentence_of_each_statement_is_found_without_scanning_to_the_mail_end() -> None:
    """The end of each statement's sentence was searched from it to the mail's end: on a
    250 kB line of 3,700 new times for another droplet, none a sentence's end, that and
    listing the mentions in each sentence took 16 CPU-s (0.7 at 615b2e25, where that form
    was not a new time). The sentence ends are found once for the mail."""
    body = "Droplet gpu-spot-1 will be reclaimed at 14:30 UTC.\n" + OTHER_NEW_TIMES * 200
    counted = _SearchCounted(mail_module.SENTENCE_END)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mail_module, "SENTENCE_END", counted)
        found = verdict(body)
    assert found.report is not None
    assert counted.scanned < 2 * len(body), (counted.scanned, len(body))


class _FinditerCounted(_SearchCounted):
    """A pattern that adds up how many characters each finditer is given."""

    def finditer(
        self, text: str, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[str]]:
        self.scanned += min(endpos, len(text)) - pos
        return self._pattern.finditer(text, pos, endpos)


@pytest.mark.parametrize("name", ["_TOKEN", "_CLAUSE_START"])
def test_the_words_before_a_new_time_are_read_without_scanning_its_reach(name: str) -> None:
    """For each new time of another droplet's, the clause before it was found by searching
    the 300 characters before it, and all its words were split to read the last few: a
    256 kB line of them took 0.97 CPU-s to judge, 0.60 at 615b2e25. The clause's start is
    found among the marks found once for the mail, its words read back from the verb."""
    body = "Droplet gpu-spot-1 will be reclaimed at 14:30 UTC.\n" + OTHER_NEW_TIMES * 200
    deadline._matches.cache_clear()
    deadline._dated_in.cache_clear()
    counted = _FinditerCounted(getattr(cancel, name))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cancel, name, counted)
        found = verdict(body)
    assert found.report is not None
    assert counted.scanned < 2 * len(body), (counted.scanned, len(body))


def _plain_clause(text: str, at: int, begin: int) -> int:
    """Where the clause holding `at` starts, searched as `_clause` searched it before."""
    window = max(begin, at - cancel._REACH)
    starts = [m.end() for m in cancel._CLAUSE_START.finditer(text, window, at + 1) if m.end() <= at]
    return starts[-1] if starts else window


def _plain_in_general(text: str, head: int, verb: int) -> bool:
    """`_in_general` as it read every word before the verb and before the head."""
    before_verb = list(cancel._TOKEN.finditer(text, head, verb))
    if before_verb and before_verb[-1].group(0).lower() in cancel._RELATIVES:
        return True
    plural = cancel._PLURAL_HEAD.match(text, head) is not None
    for token in reversed(list(cancel._TOKEN.finditer(text, max(0, head - 40), head))):
        lower = token.group(0).lower()
        if lower not in cancel._BEFORE_HEAD:
            if lower in cancel._ANY_ONE:
                return True
            return plural and lower[0].isalpha() and lower not in cancel._THIS_ONE
    return False


# Pieces of the words before a statement: clause marks and line breaks (a wrapped line, a
# blank one), words of the reclaim and relatives in any case (the long s and Kelvin sign
# fold), tokens that hold what a space ends ("gpu-spot-1", "17:00", "it's"), other spaces.
_BEFORE_PIECE = st.sampled_from(
    [
        " ",
        "\t",
        "\u00a0",
        "\u2003",
        "x",
        "_",
        ".",
        ". ",
        "1.5",
        ";",
        "!",
        "?\t",
        "\n",
        "\n\n",
        "\n \n",
        "\nWrapped",
        "\nwrapped",
        "\n  (",
        "reclaim",
        "Reclaims",
        "RECLAIMS",
        "any",
        "ANY",
        "a",
        "that",
        "which",
        "Which",
        "other",
        "previous",
        "your",
        "the",
        "spot",
        "\u017fpot",
        "\u212aeep",
        "scheduled",
        "droplet",
        "gpu-spot-1",
        "17:00",
        "it's",
        "don\u2019t",
        "(",
        ",",
        "-",
    ]
)


_PLACE = st.integers(0, 500)


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(_BEFORE_PIECE, max_size=80).map("".join), _PLACE, _PLACE, _PLACE, _PLACE)
# A blank line's match takes the break a wrapped line would start at ("\n\n" then "\nx").
@example("\n\n\nx", 4, 0, 0, 0)
@example("\n \n\nWrapped", 5, 0, 1, 0)
def test_the_words_before_a_statement_are_read_as_the_plain_search_read_them(
    text: str, at: int, begin: int, head: int, start: int
) -> None:
    at, begin = min(at, len(text)), min(begin, len(text))
    head, start = min(head, at), min(start, at)
    assert cancel._clause(text, at, begin) == _plain_clause(text, at, begin)
    back = [(m.start(), m.end()) for m in cancel._tokens_back(text, start, at)]
    plain = [(m.start(), m.end()) for m in cancel._TOKEN.finditer(text, start, at)]
    assert back == plain[::-1]
    assert cancel._in_general(text, head, at) == _plain_in_general(text, head, at)


def test_a_new_time_for_another_droplet_is_not_judged_as_a_statement() -> None:
    """A 1 MB line of new times for another droplet ("New reclaim time: 17:00 UTC (was 14:30
    UTC) for droplet gpu-spot-7, ") cost ~1.2x the plain mail: each of its 14,700 new times
    was judged (`moves`: its clause, its words read back) before its sentence was found to
    name only other droplets, which rules it out at the cost of two bisections. The sentence
    is looked at first; only a statement about this droplet is judged."""
    body = "Droplet gpu-spot-1 will be reclaimed at 14:30 UTC.\n" + OTHER_NEW_TIMES * 200
    judged: list[int] = []
    moves = mail_module.moves

    def counted(text: str, statement: re.Match[str], *args: object) -> bool:
        judged.append(statement.start())
        return moves(text, statement, *args)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mail_module, "moves", counted)
        found = verdict(body)
    assert found.report is not None and not found.replaces, found.why
    assert judged == []
