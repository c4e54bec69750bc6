"""Which statements in a DigitalOcean mail cancel a reclaim: pure functions.

A passive "is cancelled" or "was canceled" is as much a cancellation as "has been
cancelled", but the same words end sentences that cancel something else ("your scheduled
backups were cancelled", "pending jobs are cancelled") in a notice whose reclaim stands.
So a passive one counts only when what is cancelled is the reclaim: the words before it,
back to a reclaim noun, are only those of a noun phrase naming it ("The scheduled reclaim
of Droplet gpu-spot-1 (ID 424242424) at 14:30 UTC"). Nor does one count under a condition
("If the reclaim is cancelled, ..."), reported ("we said the reclaim was cancelled") or
undone ("... cancelled by mistake"). A statement missed costs a needless drain, one misread
costs the work since the last checkpoint: anything not recognised keeps the reclaim.

A new time ("rescheduled", "has been moved") is refused on the same grounds when the words
before it name something else ("Your backups have been moved to 18:00 UTC"): read as the
reclaim's, it put the deadline hours late. Refused, the mail is a further notice, raised
beside the earlier ones, and the earliest deadline still stands.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections.abc import Callable, Iterator

_VERB = r"(?:cancel+ed|withdrawn|rescinded|revoked|called\s+off)"
# The reclaim's own words, as the head of what is cancelled.
_RECLAIM_HEADS = frozenset(
    re.findall(
        r"\w+",
        "reclaim reclaims reclamation reclamations preemption interruption termination shutdown",
    )
)
# The droplet as the head of "will no longer be reclaimed": one droplet, not a class of
# them ("Droplets with reserved capacity will not be reclaimed" is an aside).
_DROPLET_HEADS = frozenset(re.findall(r"\w+", "droplet it instance server"))

# The reclaim named after "by", "from", "for" or "to": "by the reclaim", "from today's
# reclaim list", "for reclaim", "to be reclaimed".
_OF_THE_RECLAIM = (
    r"(?:(?:the|this|that|these|a|any|its|your|our|today['\u2019]s|upcoming|scheduled|planned"
    r"|pending|announced|spot|droplet|gpu)\s+){0,3}"
    r"(?:reclaims?|reclamations?|preemptions?|interruptions?|terminations?|shutdowns?"
    r"|be\s+reclaimed)\b"
)
_BODY_STATEMENTS = (
    # Active: "We have cancelled the reclaim of ...", not "we have cancelled its snapshots".
    r"\bwe(?:\s+have|['\u2019]ve)?\s+(?:now\s+)?" + _VERB + r"\s+"
    r"(?:(?:the|this|that|your|its|our)\s+)?"
    r"(?:(?:scheduled|planned|upcoming|pending|announced|earlier|previous|spot|droplet|gpu)\s+){0,3}"
    r"(?:reclaims?|reclamations?|preemption|interruption|termination|shutdown)\b"
    # Passive, the reclaim its subject: checked by `counts`.
    r"|(?P<reclaim>(?:(?:has|have)\s+been|is|are|was|were)\s+(?:now\s+)?"
    + _VERB
    + r"|will\s+no\s+longer\s+(?:take\s+place|go\s+ahead|happen|proceed)"
    r"|(?:will\s+not|won['\u2019]t)\s+(?:take\s+place|go\s+ahead|happen|proceed)"
    r"|is\s+no\s+longer\s+(?:going\s+ahead|happening|taking\s+place))\b"
    # Passive, the droplet its subject. "is no longer scheduled" for something other than
    # its reclaim ("... for backups", "... for 14:30 UTC") withdrew the reclaim before.
    r"|(?P<droplet>will\s+(?:no\s+longer|not)\s+be\s+reclaimed"
    r"|is\s+no\s+longer\s+scheduled(?!\s+(?:for|to)\s+(?!" + _OF_THE_RECLAIM + r")))\b"
    # The droplet, never the reclaim, its subject: "Droplet gpu-spot-1 is not affected (by
    # the reclaim)", "... has been removed from the reclaim (list)". Read before as further
    # notices: the job drained for a reclaim that was not coming. Not affected by something
    # else ("... by the billing change"), or with more said after a comma ("..., however, by
    # the price change"), says nothing of the reclaim.
    r"|(?P<spared>(?:(?:(?:is|are)\s+(?:not|no\s+longer)|(?:will\s+not|won['\u2019]t)\s+be)"
    r"\s+affected|(?:is|are)\s+unaffected)"
    r"(?=[^\S\n]*(?:[.!?;)]|$)|[^\S\n]*\n(?!\s*by\b)|\s+by\s+" + _OF_THE_RECLAIM + r")"
    r"|(?:(?:has|have)\s+been|is|are|was|were)\s+(?:now\s+)?(?:removed|excluded|taken\s+off)"
    r"\s+from\s+" + _OF_THE_RECLAIM + r")"
)
CANCELLED_BODY = re.compile(_BODY_STATEMENTS, re.IGNORECASE)
# A subject says what the body says, or says it in brief: "Spot Droplet reclaim cancelled",
# "Cancelled: reclaim of gpu-spot-1". Any of these words in it was a cancellation before, so
# "Re: cancelled backups - your Droplet will be reclaimed" withdrew the reclaim it announced;
# `counts_in_subject` now asks the bare word for the reclaim as what is cancelled.
CANCELLED_SUBJECT = re.compile(
    _BODY_STATEMENTS
    + r"|(?P<bare>\b(?:cancel+(?:ed|ation)|withdrawn|rescinded|revoked|called\s+off)\b)",
    re.IGNORECASE,
)

# Words of the noun phrase between the reclaim and its verb: determiners, prepositions,
# "Droplet", "scheduled", its notice ("reclaim notice", "reclaim notification": the
# latter, not among them, kept a reclaim withdrawn) and those of a time ("at 2:30 PM UTC
# on Friday, December 4"). Never a head: "the backup notice was cancelled" is not ours.
_PHRASE_WORDS = frozenset(
    re.findall(
        r"\w+",
        """
    the a an this that these those your our its their of for on at in to by from and
    droplet droplets spot gpu cpu id named called scheduled planned upcoming pending
    announced earlier previous previously original originally notice notices notification
    notifications today tomorrow
    tonight utc gmt z am pm noon midnight midday between until
    jan january feb february mar march apr april may jun june jul july aug august sep sept
    september oct october nov november dec december mon monday tue tues tuesday wed
    wednesday thu thur thurs thursday fri friday sat saturday sun sunday
    est edt cst cdt mst mdt pst pdt akst akdt hst wet west bst cet cest eet eest sgt jst kst
    aest aedt et ct mt pt
    """,
    )
)
# Before the reclaim, in its clause: a condition, or how often it happens ("In rare cases
# the reclaim is cancelled"), which says how cancelling works, not that it was.
# Or what was said before ("Earlier we said the reclaim was cancelled; that was a mistake",
# "You may have heard that ..."): reported, not told now. Past forms only: "We are writing to
# tell you that the reclaim has been cancelled" is a cancellation.
_CONDITIONS = re.compile(
    r"\b(?:if|unless|whether|when|whenever|once|until|should|in\s+case|provided|otherwise"
    r"|sometimes|occasionally|usually|generally|typically|normally|rarely|often"
    r"|in\s+(?:rare|some|most|many|few)\s+cases"
    r"|said|told|heard|reported|stated|mentioned|claimed|wrote|written|suggested|indicated"
    r"|thought|believed|assumed|rumou?red)\b",
    re.IGNORECASE,
)
# Right after the verb, on its line or the next (a wrapped line): "... if you migrate",
# "... automatically if you delete it", "... only when capacity frees up", or for whom
# ("... for droplets with reserved capacity").
_CONDITION_AFTER = re.compile(
    r"[^\S\n]*,?(?:[^\S\n]*\n)?[^\S\n]*(?:[a-z]+ly\s+)?"
    r"(?:(?:only\s+)?(?:if|unless|provided|should|in\s+case)|only\s+(?:when|once|after)"
    r"|for\s+(?:(?:all|any|some|every)\s+)?(?:spot\s+)?(?:droplets|instances|customers|users)"
    r")\b",
    re.IGNORECASE,
)
# Right after a cancellation's verb, what undoes it: "... by mistake and is now back on",
# "... in error", "..., then rescheduled to 14:10 UTC", "... and replaced by this one". Each
# withdrew the reclaim the same mail announced.
_UNDONE_AFTER = re.compile(
    r"[^\S\n]*,?(?:[^\S\n]*\n)?[^\S\n]*"
    r"(?:by\s+(?:mistake|accident|error)|in\s+error|erroneously|mistakenly|wrongly"
    r"|accidentally|incorrectly"
    r"|(?:and\s+|then\s+|but\s+)+(?:then\s+|later\s+|has\s+been\s+|was\s+)?"
    r"(?:reschedul\w*|postponed|moved|replaced|reinstated|restored|reissued))\b",
    re.IGNORECASE,
)
# Before the verb, a relative pronoun ("any reclaim that is cancelled"), or before the
# reclaim an article of any reclaim ("a reclaim is withdrawn"): said of reclaims in
# general, not of this one.
_RELATIVES = frozenset(("that", "which"))
_ANY_ONE = frozenset(("a", "an", "any", "every", "each", "all", "some"))
_BEFORE_HEAD = frozenset(re.findall(r"\w+", "spot droplet gpu scheduled planned upcoming pending"))
_PLURAL_HEAD = re.compile(r"(?:reclaims|reclamations|interruptions|terminations)\b", re.IGNORECASE)
_THIS_ONE = frozenset(re.findall(r"\w+", "the your these those our its their both my this"))
# Where a clause cannot reach across: a sentence's end, a blank line, or a line break
# before a line that does not carry on the one before (a wrapped line starts lowercase).
_CLAUSE_START = re.compile(r"[.!?;](?=\s)|\n[^\S\n]*\n|\n(?=[^\S\n]*[^a-z\s])")
_TOKEN = re.compile(r"\d(?:[\w:./-]*\w)?|[^\W\d_](?:[\w.'\u2019-]*\w)?|[^\w\s]")
# Punctuation inside a noun phrase: "gpu-spot-1 (ID 424242424)", "'trainer'", commas.
_PHRASE_MARKS = frozenset("()[]'\"\u2018\u2019\u201c\u201d`,-")
_PREPOSITIONS = frozenset(re.findall(r"\w+", "of for on at in to by from"))
_TAG_MARKS = frozenset("()[]:")
_SEPARATOR = re.compile(r"(?<=\s)[-|/\u2013\u2014](?=\s)|:(?=\s)")
_BRACKETS = frozenset(
    "()[]'\"`\u2018\u2019\u201c\u201d"
)  # "[Cancelled] Spot reclaim", "Cancelled: reclaim of ..."
_REACH = 300  # characters back from the verb: a noun phrase is never longer


def counts(
    text: str,
    statement: re.Match[str],
    is_mention: Callable[[int, int], bool],
    begin: int = 0,
) -> bool:
    """Whether `statement` (a CANCELLED_BODY match in `text`) cancels the reclaim, not
    something else, and not under a condition. `is_mention` tells whether a span of `text`
    names a droplet; nothing before `begin` (a subject above the body) is read as the
    statement's own words."""
    if _condition_or_undone_after(text, statement.end()):
        return False
    kind = next((k for k in ("reclaim", "droplet", "spared") if statement.group(k)), None)
    head = statement.start()
    if kind is not None:
        found = _head(text, statement.start(), kind, is_mention, begin)
        if found is None or _in_general(text, found, statement.start()):
            return False
        head = found
    return _CONDITIONS.search(text, _clause(text, head, begin), head) is None


def _condition_or_undone_after(text: str, end: int) -> bool:
    """Whether a cancellation's verb ending at `end` is followed by a condition ("... if you
    migrate") or by what undoes it ("... by mistake")."""
    return bool(_CONDITION_AFTER.match(text, end) or _UNDONE_AFTER.match(text, end))


def _in_general(text: str, head: int, verb: int) -> bool:
    """Whether the passive verb at `verb`, its subject starting at `head`, is said of
    reclaims in general: after a relative pronoun, or of "a"/"any" reclaim."""
    last = next(_tokens_back(text, head, verb), None)
    if last is not None and last.group(0).lower() in _RELATIVES:
        return True
    # The few words before the reclaim: "a", "any", past "Spot", "scheduled", "Droplet".
    # Of reclaims, any other word: "Previous reclaims were postponed", "Other reclaims ...",
    # not "Your reclaims" nor "The reclaims of gpu-spot-1 and gpu-spot-7".
    plural = _PLURAL_HEAD.match(text, head) is not None
    for token in _tokens_back(text, max(0, head - 40), head):
        lower = token.group(0).lower()
        if lower not in _BEFORE_HEAD:
            if lower in _ANY_ONE:
                return True
            return plural and lower[0].isalpha() and lower not in _THIS_ONE
    return False


def _clause(text: str, at: int, begin: int) -> int:
    """Where the clause holding `at` starts, within `_REACH` and not before `begin`."""
    window = max(begin, at - _REACH)
    # Searched one character past `at`: a search ending at `at` cannot look at the line the
    # break before it starts, and "reclaim notice\nWAS WITHDRAWN" read as one clause.
    # Tried only where a match can start (the marks found once for the mail), each as
    # `_CLAUSE_START.finditer(text, window, at + 1)` would try it, past the last match:
    # searched over the 300 characters before each of the 3,700 new times of a 250 kB line
    # for another droplet, with their words split, it took a third of the mail's judging.
    marks = _clause_index(text)[0]
    start, resume = window, window
    for mark in itertools.islice(marks, bisect.bisect_left(marks, window), None):
        if mark > at:
            break
        if mark < resume:
            continue
        found = _CLAUSE_START.match(text, mark, at + 1)
        if found is not None:
            resume = found.end()
            if found.end() <= at:
                start = found.end()
    return start


_SPACE = re.compile(r"\s")
_TOKENS_STEP = 48  # characters of words split at a time, back from the end


def _tokens_back(text: str, start: int, stop: int) -> Iterator[re.Match[str]]:
    """`reversed(list(_TOKEN.finditer(text, start, stop)))`, split a few words at a time
    back from `stop`: the reader of a clause wants its last few words. No token holds a
    space, so the tokens after a space are the ones found searching from just after it, and
    those before it the ones found searching up to it."""
    while stop > start:
        space = (
            _SPACE.search(text, stop - _TOKENS_STEP, stop) if stop - start > _TOKENS_STEP else None
        )
        cut = start if space is None else space.end()
        yield from reversed(list(_TOKEN.finditer(text, cut, stop)))
        if space is None:
            return
        stop = space.start()


# Words between a new time's verb and what it moved that say nothing of what that is.
_AUXILIARIES = frozenset(re.findall(r"\w+", "has have had been was were is are be being will now"))
# Who moved it, in the active voice ("We have rescheduled the reclaim"): what moved follows.
_ACTORS = frozenset(("we", "we've", "we\u2019ve", "they", "digitalocean"))
# Before a new time's verb, it says what may happen, not what did.
_MODALS = frozenset(
    ("may", "might", "can", "could", "cannot", "can't", "can\u2019t", "would", "should", "must")
)
# Rescheduling as a noun says what happened only when nothing denies it: "Rescheduling is
# not possible" withdrew the earlier reclaims (an earlier time among them) for the mail's.
_NOUNS = frozenset(("rescheduling", "reschedule", "reschedules"))
_DENIALS = frozenset(
    ("not", "no", "never", "cannot", "unable", "impossible", "unavailable", "unsupported")
)
# After a new time's verb, in its clause, a time long past: "The reclaim was postponed last
# week", "... has been postponed before", "... two weeks ago". Not "previously": "(previously
# 14:10 UTC)" names the time replaced.
# How far a clause after a statement is read: a clause of a mail runs to a few hundred
# characters; the one in a line without a sentence's end may run to the mail's end.
CLAUSE_REACH = 2000
_LONG_PAST = re.compile(
    r"\b(?:last\s+(?:week|month|year|time|night|\w+day)|yesterday|\w+\s+ago|in\s+the\s+past"
    r"|earlier\s+this\s+(?:week|month|year)|before\s*$|on\s+(?:previous|other)\s+occasions)\b",
    re.IGNORECASE,
)
# What says a droplet moved somewhere ("moved", "changed"), not that its reclaim did, unless a
# time follows: a figure, a time's word, a weekday or a month.
_PLACED = re.compile(r"\b(?:moved|changed|updated|extended)\b", re.IGNORECASE)
_WHEN = re.compile(
    r"(?<![a-z])[0-9]|\b(?:noon|midnight|midday|today|tomorrow|tonight|later|earlier|sooner"
    r"|hours?|minutes?|time|date|(?:mon|tues|wednes|thurs|fri|satur|sun)day|jan(?:uary)?"
    r"|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
    r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b",
    re.IGNORECASE,
)
# A label before a colon that heads what follows, not something else that moved.
_LABELS = frozenset(
    re.findall(r"\w+", "update updated note notice reminder important attention fyi correction")
)
# A reclaim's time as what moved: "the reclaim time has been moved".
_TIME_WORDS = frozenset(re.findall(r"\w+", "time times date deadline schedule window"))


def moves(
    text: str,
    statement: re.Match[str],
    is_mention: Callable[[int, int], bool],
    begin: int = 0,
) -> bool:
    """Whether `statement` (a new time: "rescheduled", "postponed", "has been moved") in
    `text` moved the reclaim: False when words of something else say what moved ("Billing
    has been postponed", "We have rescheduled your backups"), and, as for a cancellation,
    under a condition, of reclaims in general or after a modal ("A reclaim may be
    rescheduled"), as a noun its clause denies ("Rescheduling is not possible"), long past
    ("... postponed last week"), or of the droplet moved with no time after it ("Droplet
    gpu-spot-1 has been moved to nyc3"); a bare "Rescheduled to 16:00 UTC" still counts.
    Nothing before `begin` is read."""
    if _CONDITION_AFTER.match(text, statement.end()):
        return False  # "... is postponed automatically if capacity frees up"
    stop = _clause_end(text, statement.end())
    rest = text[statement.end() : stop]
    if _long_past(text, statement.end(), stop):
        return False  # "The reclaim was postponed last week": not this time
    verb = statement.start()
    clause = _clause(text, verb, begin)
    denied = statement.group(0).lower() in _NOUNS and _denied(rest)
    # "Droplet gpu-spot-1 has been moved to nyc3": the droplet went somewhere, its reclaim
    # did not move, unless a time follows.
    placed = _PLACED.search(statement.group(0)) is not None and _WHEN.search(rest) is None
    labelled = False
    for token in _tokens_back(text, clause, verb):
        lower = token.group(0).lower()
        if lower in _AUXILIARIES or token.group(0) == ":":  # "gpu-spot-1: rescheduled"
            labelled = token.group(0) == ":"
            continue
        if labelled and lower in _LABELS:
            # "Update: New reclaim time for gpu-spot-1: ...": read as words of something
            # else, the mail was a further notice at the old time.
            return not denied
        labelled = False
        if lower in _MODALS:
            return False  # "A reclaim may be rescheduled": it was not
        if lower in _ACTORS:
            moved = _moved_after(text, statement.end(), is_mention) is not False
            return moved and not _condition_between(text, clause, verb)
        named = _names_the_reclaim(token, is_mention)
        if named and (
            _in_general(text, token.start(), verb)
            or _condition_between(text, clause, token.start())
        ):
            return False  # "Any reclaim that is rescheduled", "If the reclaim is moved"
        if named is not None:
            droplet = token.group(0).lower() in _DROPLET_HEADS or is_mention(
                token.start(), token.end()
            )
            return named and not denied and not (droplet and placed)
    return not denied


# Where _CLAUSE_START can match (its first character), and where a word that each of
# _LONG_PAST's forms holds starts (same flags: the same letters fold alike).
_CLAUSE_MARKS = re.compile(r"[.!?;\n]")
_LONG_PAST_WORDS = re.compile(
    r"(?=last|yesterday|ago|past|earlier|before|occasions)", re.IGNORECASE
)
_SHORTEST_LONG_PAST_WORD = 3
# A word that each of _CONDITIONS' forms holds.
_CONDITION_WORDS = re.compile(
    r"(?=if|unless|whether|when|once|until|should|in|provided|otherwise|sometimes|occasionally"
    r"|usually|generally|typically|normally|rarely|often|said|told|heard|reported|stated"
    r"|mentioned|claimed|wrote|written|suggested|indicated|thought|believed|assumed|rumo)",
    re.IGNORECASE,
)
_SHORTEST_CONDITION_WORD = 2


@functools.lru_cache(maxsize=8)
def _clause_index(text: str) -> tuple[list[int], list[int], list[int]]:
    """Where in `text` a clause may end and where a long past's word starts, found once for
    a mail and bisected for each of its statements: searched from each statement over
    CLAUSE_REACH characters, a 250 kB line of 3,700 new times was scanned 7 million
    characters twice."""
    marks = [m.start() for m in _CLAUSE_MARKS.finditer(text)]
    words = [m.start() for m in _LONG_PAST_WORDS.finditer(text)]
    conditions = [m.start() for m in _CONDITION_WORDS.finditer(text)]
    return marks, words, conditions


def _clause_end(text: str, end: int) -> int:
    """Where the clause going on after `end` stops: _CLAUSE_START's first match after it,
    within CLAUSE_REACH (a line of thousands of statements without a sentence's end was
    scanned to its end for each of them: a 256 KiB mail took 28 s to judge). Tried only
    where a match can start, each as the search from `end` would try it."""
    reach = min(len(text), end + CLAUSE_REACH)
    marks = _clause_index(text)[0]
    for at in itertools.islice(marks, bisect.bisect_left(marks, end), None):
        if at >= reach:
            break
        stop = _CLAUSE_START.match(text, at, reach)
        if stop is not None:
            return stop.start()
    return reach


def _long_past(text: str, end: int, stop: int) -> bool:
    """Whether `text[end:stop]` says a time long past ("last week", "two days ago"): each of
    its forms holds one of the words found once for the mail, so only a clause holding one
    is searched."""
    words = _clause_index(text)[1]
    first = bisect.bisect_left(words, end)
    if first == len(words) or words[first] > stop - _SHORTEST_LONG_PAST_WORD:
        return False
    return _LONG_PAST.search(text[end:stop]) is not None


def _condition_between(text: str, start: int, stop: int) -> bool:
    """`_CONDITIONS.search(text, start, stop)`, searched only when one of its words is
    there: searched before each of the 3,700 new times of a 250 kB line, it took a third of
    the mail's judging."""
    words = _clause_index(text)[2]
    first = bisect.bisect_left(words, start)
    if first == len(words) or words[first] > stop - _SHORTEST_CONDITION_WORD:
        return False
    return _CONDITIONS.search(text, start, stop) is not None


def _denied(rest: str) -> bool:
    """Whether `rest`, the clause going on after a statement, denies what it is about
    ("... is not possible", "... cannot be accepted", "... isn't offered")."""
    for token in _TOKEN.finditer(rest):
        lower = token.group(0).lower()
        if lower in _DENIALS or lower.endswith(("n't", "n\u2019t")):
            return True
    return False


def moves_in_subject(
    subject: str, statement: re.Match[str], is_mention: Callable[[int, int], bool]
) -> bool:
    """`moves` for a statement in the subject, whose " - ", " | " and ": " part statements
    as a sentence's end does in the body ("Spot Droplet reclaim - backups rescheduled")."""
    return moves(_SEPARATOR.sub(".", subject), statement, is_mention)


def _moved_after(text: str, end: int, is_mention: Callable[[int, int], bool]) -> bool | None:
    """Whether the words after an active verb name the reclaim (True) or something else
    (False); None when its clause ends first."""
    for token in _TOKEN.finditer(text, end, min(len(text), end + _REACH)):
        if token.group(0) in ".!?;":
            return None
        named = _names_the_reclaim(token, is_mention)
        if named is not None:
            return named
    return None


def _names_the_reclaim(token: re.Match[str], is_mention: Callable[[int, int], bool]) -> bool | None:
    """Whether `token` names the reclaim or a droplet (True) or something else (False);
    None for a word of their noun phrase or of a time."""
    lower = token.group(0).lower()
    if lower in _RECLAIM_HEADS or lower in _DROPLET_HEADS:
        return True
    if is_mention(token.start(), token.end()):
        return True
    if lower in _TIME_WORDS or not _other_word(token, is_mention):
        return None
    return False


def counts_in_subject(
    subject: str, statement: re.Match[str], is_mention: Callable[[int, int], bool]
) -> bool:
    """Whether `statement` (a CANCELLED_SUBJECT match in `subject`) cancels the reclaim: one
    of the body's statements by the body's rule; a bare "cancelled" or "cancellation" when
    what it says is cancelled is the reclaim, named before it ("Spot Droplet reclaim
    cancelled", "Spot Droplet reclaim: Cancelled") or, with nothing before it but a tag,
    after it ("Cancelled: reclaim of gpu-spot-1", "Re: [Cancelled] Spot reclaim notice")."""
    if statement.group("bare") is None:
        # " - ", " | " and ": " part a subject as sentences part a body ("Spot Droplet
        # reclaim notice - backups were cancelled"); the same length, so spans still hold.
        return counts(_SEPARATOR.sub(".", subject), statement, is_mention)
    if _CONDITIONS.search(subject, 0, statement.start()) or _condition_or_undone_after(
        subject, statement.end()
    ):
        return False
    after = list(_TOKEN.finditer(subject, statement.end()))
    named_after = _reclaim_after(after, is_mention)
    if after and after[0].group(0).lower() == "of":
        return named_after is True  # "Cancellation of Droplet": of what follows, or nothing
    if after and after[0].group(0)[0].isalnum() and named_after is not None:
        # Said of the words right after it: "cancelled backups", "Cancellation of backups",
        # "cancelled pending jobs".
        return named_after
    before = list(_TOKEN.finditer(subject, 0, statement.start()))
    named_before = _reclaim_before(before, is_mention)
    if named_before is not None:
        return named_before
    return bool(named_after)


def _reclaim_before(
    before: list[re.Match[str]], is_mention: Callable[[int, int], bool]
) -> bool | None:
    """Whether the words before a bare "cancelled" say it of the reclaim (True) or of
    something else (False: "backups cancelled", "Droplet cancelled"); None when there is
    nothing before it but tags ("Re:", "[DigitalOcean]")."""
    seen = False
    for at in range(len(before) - 1, -1, -1):
        token = before[at]
        word = token.group(0)
        if word.lower() in _RECLAIM_HEADS:
            return True
        if not word[0].isalnum():
            # A separator after words of its own: "Spot reclaim notice - Droplet cancelled"
            # is said of the words after it.
            if seen and word not in _BRACKETS:
                return False
            continue
        other = _other_word(token, is_mention)
        if other and not seen and at + 1 < len(before) and before[at + 1].group(0) in ":]":
            return None  # a tag ends what the bare word can be said of
        if other:
            return False
        seen = True
    return False if seen else None


def _reclaim_after(
    after: list[re.Match[str]], is_mention: Callable[[int, int], bool]
) -> bool | None:
    """Whether the words after a bare "cancelled" name the reclaim (True) or something else
    (False); None when they, or the phrase they start, end first."""
    # "your cancelled Droplet": the droplet, before any preposition, is what is cancelled.
    droplet = preposition = False
    for token in after:
        word = token.group(0)
        lower = word.lower()
        if lower in _RECLAIM_HEADS:
            return True
        # Past the tag's own marks ("[Cancelled] ...", "Cancelled: ..."), not across a
        # separator: "Backups: cancelled - Spot Droplet reclaim", "cancelled Droplet: ...".
        if not word[0].isalnum():
            if word in _TAG_MARKS and token is after[0]:
                continue
            break
        if _other_word(token, is_mention):
            return False
        preposition = preposition or lower in _PREPOSITIONS
        droplet = droplet or (lower in _DROPLET_HEADS and not preposition)
    return False if droplet else None


def _other_word(token: re.Match[str], is_mention: Callable[[int, int], bool]) -> bool:
    """Whether `token` is a word of something other than the reclaim's noun phrase."""
    word = token.group(0)
    if word in _PHRASE_MARKS or word.lower() in _PHRASE_WORDS or word.lower() in _RECLAIM_HEADS:
        return False
    if is_mention(token.start(), token.end()) or any(ch.isdigit() for ch in word):
        return False
    return bool(re.match(r"\w", word))


def _head(
    text: str, verb: int, kind: str, is_mention: Callable[[int, int], bool], begin: int
) -> int | None:
    """Where the subject of the passive verb at `verb` starts, when it is the reclaim (or,
    for `kind` "droplet", this or that droplet; for "spared", only a droplet); None when it is
    something else."""
    for token in _tokens_back(text, _clause(text, verb, begin), verb):
        word = token.group(0)
        lower = word.lower()
        mention = is_mention(token.start(), token.end())
        if kind in ("droplet", "spared") and (mention or lower in _DROPLET_HEADS):
            return token.start()
        if lower in _RECLAIM_HEADS:
            # "The reclaim is not affected by the maintenance" does not withdraw it.
            return None if kind == "spared" else token.start()
        if mention or lower in _PHRASE_WORDS or word in _PHRASE_MARKS or word[0].isdigit():
            continue
        if any(ch.isdigit() for ch in word):  # H100, nyc2, gpu-h100x1-80gb
            continue
        return None
    return None


__all__ = [
    "CANCELLED_BODY",
    "CANCELLED_SUBJECT",
    "counts",
    "counts_in_subject",
    "moves",
    "moves_in_subject",
]
