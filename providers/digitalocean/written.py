"""How a time is written in a mail, and the moment it names: the patterns of dates, clocks,
zones, windows, relative times, margins and shifts, and their reading. Pure; the choice of
which time is the reclaim's is `deadline`'s.
"""

from __future__ import annotations

import contextlib
import functools
import re
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# A time written in a mail earlier than its Date by more than this is some other time
# (when the droplet was created, say), not the reclaim deadline.
PAST_SLACK = timedelta(minutes=10)


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
_NAMED_ZONES: dict[str, float] = {
    # US (Central is US Central, not China), Europe, Asia-Pacific.
    **{"EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7},
    **{"AKST": -9, "AKDT": -8, "HST": -10, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2},
    **{"EET": 2, "EEST": 3, "SGT": 8, "JST": 9, "KST": 9, "AEST": 10, "AEDT": 11},
    # CET and CEST as German mail writes them: skipped before, so Date + lead stood in,
    # later than the reclaim whenever less notice was given.
    **{"MEZ": 1, "MESZ": 2},
    # IST is India's (+05:30), Israel's (+02:00) and Ireland's (+01:00): read as India's, the
    # earliest of the three, as an ambiguous date is read at its earliest (a deadline read
    # late loses work, one read early a checkpoint), and said (AMBIGUOUS_ZONES). Skipped, Date
    # + lead stood in: for India's, hours after the reclaim.
    "IST": 5.5,
}
_CAPITALS_ONLY = frozenset({"IST"})
# Zones that name more than one offset: the verdict says which was taken.
AMBIGUOUS_ZONES = {"IST": "India +05:30, Israel +02:00, Ireland +01:00"}
# US zones written without standard or daylight ("9:30 AM ET"), as US mail writes them:
# read by the zone's rules on that day. Skipped before, so Date + lead stood in, later than
# the reclaim whenever less notice was given.
_US_ZONES = {
    "ET": "America/New_York",
    "CT": "America/Chicago",
    "MT": "America/Denver",
    "PT": "America/Los_Angeles",
}
# A city's time ("14:00 Amsterdam time"), for the cities of DigitalOcean's regions, by its
# zone's rules: skipped before, so Date + lead stood in, for Singapore seven and a half hours
# after the time written. Only with "time" after the city: "13:15 London" says no zone.
_CITY_ZONES = {
    "new york": "America/New_York",
    "atlanta": "America/New_York",
    "toronto": "America/Toronto",
    "san francisco": "America/Los_Angeles",
    "london": "Europe/London",
    "amsterdam": "Europe/Amsterdam",
    "frankfurt": "Europe/Berlin",
    "bangalore": "Asia/Kolkata",
    "bengaluru": "Asia/Kolkata",
    "singapore": "Asia/Singapore",
    "sydney": "Australia/Sydney",
}
# Case-insensitive wherever it stands: "21:00 SINGAPORE TIME".
CITY_TIME = r"(?i:(?:" + "|".join(city.replace(" ", r"\s+") for city in _CITY_ZONES) + r")\s+time)"
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
    r"|(?P<hh{n}>[^\S\n]?h(?![a-z0-9]))"
    # "at 13 UTC": a bare 24-hour hour, after "at" or "by" and before UTC or GMT; skipped
    # before, so Date + lead stood in. Not without them: "13 UTC-synced regions".
    r"|(?P<bare{n}>(?:(?<=\bat[^\S\n][0-9])|(?<=\bby[^\S\n][0-9])"
    r"|(?<=\bat[^\S\n][0-9]{{2}})|(?<=\bby[^\S\n][0-9]{{2}}))"
    r"(?=[^\S\n]*[(\[]?(?:UTC|GMT)\b)))?"
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
    + r"(?(M)|(?(word)|(?(ampm)|(?(hh)|(?(bare)|(?(ampm2)|(?(word2)|(?!))))))))"
)


_UNIT_AFTER = r"[^\S\n]*(?:minutes?|mins?|m|hours?|hrs?|h)\b"


# The offset a named zone is written with ("17:00 IST (+05:30)", "14:10 CST (UTC+8)"): it
# says which of the zone's readings is meant. Unread, IST (+02:00), Israel's, was read as
# India's, 3.5 h early: a time already past, so the next day's, 20.5 h late; CST (+08:00),
# China's, as US Central, 14 h late.
OFFSET_BESIDE = (
    r"(?:[^\S\n]*\([^\S\n]*(?:UTC|GMT)?[^\S\n]*[+-](?:1[0-4]|0?[0-9])(?::?[0-5][0-9])?"
    r"[^\S\n]*\))?"
)
_BESIDE = re.compile(r"\((?:UTC|GMT)?(?P<sign>[+-])(?P<h>[0-9]{1,2}):?(?P<m>[0-9]{2})?\)\Z")


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
        # After "in" too ("at 13:10 in UTC"): skipped before, and Date + lead stood in.
        rf"\s*[(\[]?(?:in[^\S\n]+(?=UTC|GMT))?({group}(?:UTC|GMT)\s*"
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
        r"|(?:"
        + "|".join(sorted(set(_NAMED_ZONES) - _CAPITALS_ONLY, key=len, reverse=True))
        # "ET", "PT": in capitals only, so that French "10h30 et 12h00" is no zone; IST so
        # that German "um 14:10 ist" is none.
        + r"|(?-i:"
        + "|".join((*_US_ZONES, *sorted(_CAPITALS_ONLY)))
        + r"))"
        + OFFSET_BESIDE
        + r"|(?-i:"
        # Zones in words, as people write them ("9am Eastern", "14:00 Coordinated
        # Universal Time"): skipped before, so Date + lead stood in.
        + r"(?:Eastern|Central|Mountain|Pacific)(?:\s+(?:Standard|Daylight))?(?:\s+Time)?"
        + r"|(?:Coordinated\s+)?Universal\s+(?:Coordinated\s+)?Time|Greenwich\s+Mean\s+Time"
        # "13:10 Zulu", as aviation and military mail writes UTC: Date + lead stood in. In
        # any case ("13:10 ZULU"): only its capitalised form was read.
        + r"|(?i:zulu)"
        + r")"
        + r"|[A-Z][A-Za-z_]+/[A-Za-z0-9_/+-]+"
        + r"|"
        + CITY_TIME
        # A colon may end the sentence's first part ("at 16:00 UTC: please save your
        # work"): refused, such a time was not read and Date + lead stood in, later than
        # the reclaim. Not a colon touching more ("GMT-05:00" is one offset) or before a
        # figure ("UTC: 2026-12-01"): the zone labels what follows, not the time before.
        + r")(?!\w|:\S|:\s*\d)[)\]]?"
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
# Each form with what it needs somewhere in the mail: its date, which every match of the
# form holds (so a mail without it cannot match). Searched for once per mail: a time-then-date
# form tried at every time of a 256 KiB mail of times without any date cost a quarter of a
# second each, most of the mail's CPU; a month's name alone let a mail of "14:00 UTC (-0:30)
# on December 3, " repeated try the forms with a year at every time (5.9 CPU-s for 130 KB).
_MONTH_NAME = re.compile(f"(?={_MONTH_FIRST})" + _MONTH, re.IGNORECASE)
_NEEDS: dict[str, re.Pattern[str] | None] = {
    name: re.compile(
        ("(?=[0-9])" if name in ("iso", "numeric", "dmy", "dm") else f"(?={_MONTH_FIRST})") + date,
        re.IGNORECASE,
    )
    for name, date in _DATES.items()
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
ABOUT_RECLAIM = re.compile(
    r"reclaim|interrupt|preempt|terminat|shut\s*down|stop|power|window|deadline|schedul"
    r"|\b(?:new|old|previous|original|updated|revised)(?:\s+(?:time|date))?\s*:",
    re.I,
)
_TIME_FIRST = r"(?=[ug0-9nm])"  # UTC or GMT (`_ZONE_FIRST`), or the clock (`_CLOCK_FIRST`)
TIME_ONLY = re.compile(_TIME_FIRST + r"(?<![\d:.])" + _TIME, re.IGNORECASE)
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
WEEKDAYS = {
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
_FULL_WEEKDAYS = [name for name in WEEKDAYS if name.endswith("day")]  # Monday first
_SHORT_WEEKDAYS = sorted(set(WEEKDAYS) - set(_FULL_WEEKDAYS), key=len, reverse=True)
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


def relative_day(words: str) -> str:
    """The day `words` matched by `_DAY_WORD` say: "today", "tomorrow", "day after tomorrow",
    a weekday's full name, "next " and one, or "the " and a day of the month."""
    said = words.lower().rstrip(".").split()
    if said[-1] in WEEKDAYS:
        full = _FULL_WEEKDAYS[WEEKDAYS[said[-1]]]
        return f"next {full}" if said[0] == "next" else full
    if said[-1][0].isdigit():
        return "the " + said[-1][:-2]  # "3rd": "the 3"
    if said[-1] == "tmrw":
        return "tomorrow"
    return "day after tomorrow" if "after" in said else said[-1]


def _on_relative_day(moment: datetime, relative_day: str) -> datetime | None:
    """`moment`, a time on the mail's day, on the day `relative_day` (`relative_day`) says;
    None if no month has that day."""
    if relative_day == "tomorrow":
        return moment + timedelta(days=1)
    if relative_day == "day after tomorrow":
        return moment + timedelta(days=2)
    if relative_day in WEEKDAYS:
        return moment + timedelta(days=(WEEKDAYS[relative_day] - moment.weekday()) % 7)
    if relative_day.startswith("next "):
        ahead = (WEEKDAYS[relative_day[5:]] - moment.weekday()) % 7
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
DAY_BEFORE = re.compile(
    r"\b(?P<day>" + _DAY_WORD + r")[^\S\n]*,?(?:[^\S\n]+|[^\S\n]*\n[^\S\n]*)"
    r"(?:(?:at|between|from|by|around|until)(?:[^\S\n]+|[^\S\n]*\n[^\S\n]*))?\Z",
    re.IGNORECASE,
)
# One run of blanks, then an optional comma: two runs side by side are tried in every split
# of a long run of spaces after a time (seconds for 20,000 spaces, minutes for 256 KiB).
DAY_AFTER = re.compile(
    r"[^\S\n]*(?:,[^\S\n]*)?(?P<day>" + _DAY_WORD + r")(?:(?<=\.)|\b)", re.IGNORECASE
)


# A year after a clock ("14:00:00 2026 UTC", ctime's order) is no clock either.
_CLOCK_BEFORE = re.compile(r"[0-9]:[0-9]{2}(?::[0-9]{2})?(?:\s*[ap]\.?m\.?)?\s+\Z", re.I)


def is_year_of_a_date(text: str, match: re.Match[str]) -> bool:
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
    # "in 3/4 of an hour", "in three-quarters of an hour", "in a quarter hour": Date + lead
    # (2 h) stood in.
    "1/2 of an": 0.5,
    "\u00bd of an": 0.5,
    "1/4 of an": 0.25,
    "\u00bc of an": 0.25,
    "3/4 of an": 0.75,
    "\u00be of an": 0.75,
    "three-quarters of an": 0.75,
    "a quarter": 0.25,
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
AMOUNT = (
    # "1 1/2 hours", "1\u00bd hours": read as no amount, Date + lead (2 h) stood in.
    r"(?P<n>[0-9]+(?:\.[0-9]+)?(?:[^\S\n]*(?:1/2|\u00bd)(?![0-9]))?|"
    + "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True)).replace(" ", r"\s+")
    # "forty (40) minutes": the words restated in figures, as formal notices write them;
    # read as no amount, Date + lead stood in. The words are read.
    + r")(?:[^\S\n]*\([0-9]+(?:\.[0-9]+)?\))?"
    # "a 30-minute notice": a hyphen before the unit. "in 40'": a prime for minutes. "in 40+
    # minutes", "in 40 mn": at least that, the French unit. Each was read as no amount, and
    # Date + lead stood in.
    + r"(?:\s*(?:-|\u2013|to|or|and)\s*[0-9]+(?:\.[0-9]+)?)?\+?(?:\s*|-)(?:(?P<unit>hours?|hrs?|h)"
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
# The first characters a relative time can start with (as `_CLOCK_FIRST`): the engine tried
# RELATIVE's branches at every position of a mail, a third of a hostile 130 KB mail's CPU and
# the longest single search of a plain 256 KiB one (1.4 s). Of a case-insensitive pattern a
# branch is entered before its first letter is compared; one class fails first, at once.
# tests/providers/digitalocean/test_digitalocean_mail_speed.py checks it holds every
# character a match can start with.
_RELATIVE_FIRST = "0-9acdefghinoprstwy\u00bc-\u00be"
_RELATIVE = (
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
    + AMOUNT
    + r"|"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>2>", AMOUNT)
    # "1 hour from the time of this email", "30 minutes after this notice": as "from now".
    # "40 minutes from receipt of this email" too: Date + lead stood in.
    + r"\s+(?:from\s+now|(?:from\s+(?:(?:the\s+)?(?:time|date|sending|receipt)\s+of\s+)?|after\s+)"
    r"this\s+(?:e-?mail|message|notice|notification|mail))\b"
    # "within the hour", "in the next hour": with no figure, Date + lead (2 h) stood in, an
    # hour after the reclaim.
    r"|\b(?:in|within)\s+the\s+(?:next\s+)?(?P<the_hour>hour)\b"
    # "with 30 minutes' notice", "with only 45 minutes of notice": Date + lead stood in.
    r"|\bwith\s+(?:a\s+)?(?:(?:only|just|about|approximately|roughly|around|less\s+than)\s+)?"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>3>", AMOUNT)
    + r"['\u2019]?s?\s+(?:of\s+)?(?:advance\s+|prior\s+)?notice\b"
    # "after a 30-minute grace period": Date + lead stood in. So did "following ...", "at
    # the end of ..." and "you have a 30-minute grace period".
    r"|\b(?:after|following|at\s+the\s+end\s+of|you\s+have)\s+(?:a\s+|the\s+)?"
    + re.sub(r"\(\?P<(\w+)>", r"(?P<\g<1>4>", AMOUNT)
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
    r"|immediate\s+(?:reclaim|reclamation|termination|interruption|pre-?emption|eviction)\b))"
)
RELATIVE = re.compile(f"(?=[{_RELATIVE_FIRST}])(?:{_RELATIVE})", re.IGNORECASE)


# A Unix time ("at 1796220600", "epoch 1796220600", "@1796220600"), as scripts and monitoring
# write it: Date + lead stood in. Ten digits, after a word that says it is a time; the 30 days
# a deadline may be ahead keep a phone number or an id out.
EPOCH = re.compile(
    r"(?:\b(?:(?:unix\s+)?(?:epoch|time(?:stamp)?)|at)[^\S\n]*[:=]?[^\S\n]*|(?<![\w@])@)"
    r"(?P<epoch>[0-9]{10})(?:\.[0-9]+)?(?![0-9])",
    re.IGNORECASE,
)


# A new time given as a shift of the old one: "postponed by 2 hours", "brought forward by
# 30 minutes". Without a time in it, Date + lead stood in: for a reclaim brought forward,
# after the reclaim, and the earlier notice, at the right old time, was withdrawn.
SHIFT = re.compile(
    r"\bby\s+(?:(?:about|approximately|roughly|around)\s+|~\s*)?" + AMOUNT, re.IGNORECASE
)
EARLIER = re.compile(r"\b(?:brought\s+forward|earlier|moved\s+up|advanced|sooner)\b", re.I)


# A margin written as a clock ("14:00 UTC (± 0:30)", "(up to 1:15 earlier)"): each such form
# was read as 14:00, late by the margin. Not a time of day after it.
_CLOCK_AMOUNT = (
    r"(?P<ch>[0-9]{1,2}):(?P<cm>[0-5][0-9])"
    r"(?![0-9:]|[^\S\n]*[(\[]?(?:[ap]\.?m\b|UTC\b|GMT\b|Z\b))"
)
_SOME_AMOUNT = "(?:" + AMOUNT + "|" + _CLOCK_AMOUNT + ")"
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
        + AMOUNT
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
# Of hours too after UTC, GMT or Z, whose offset is none, so the bracket restates nothing:
# "14:00 UTC (-1:00)" was read as 14:00, an hour late.
_TOLERANCES.append(
    re.compile(
        r"(?:(?<=UTC|GMT)|(?<=[^a-z]Z)|(?<=[(\[]UTC[)\]])|(?<=[(\[]GMT[)\]]))"
        r"[^\S\n]*[(\[][^\S\n]*[-\u2212\u2013][^\S\n]*(?P<ch>1[0-2]|0?[0-9]):(?P<cm>[0-5][0-9])"
        r"[^\S\n]*[)\]]",
        re.IGNORECASE,
    )
)


# A tolerance between a time and its date ("14:00 UTC (± 30 min) on December 3", "14:00 UTC
# -30min on December 3"): the date was lost, and the time read on the mail's day, days early.
# Built at the first mail read, not as this module loads: compiling them is ~0.5 CPU-s, paid
# before by every process that imported the mail reader (each pytest worker collecting the
# mail tests) whether or not it read a mail. `WRITTEN_TIMES` names the same list.
@functools.cache
def written_times() -> list[tuple[re.Pattern[str] | None, re.Pattern[str]]]:
    """The patterns of a time with its date, each with the pattern a text must hold for it
    to be tried (`_written_time_patterns`, with the tolerances as the margin)."""
    return _written_time_patterns(
        "|".join(re.sub(r"\(\?P<\w+>", "(?:", tolerance.pattern) for tolerance in _TOLERANCES)
    )


def __getattr__(name: str) -> Any:
    if name == "WRITTEN_TIMES":
        return written_times()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tolerance_at(text: str, end: int) -> re.Match[str] | None:
    """The tolerance written at `end`, if one is."""
    return next((m for t in _TOLERANCES if (m := t.match(text, end)) is not None), None)


def less_tolerance(
    found: re.Match[str] | None, end: int, written: tuple[datetime, datetime]
) -> tuple[tuple[datetime, datetime], int]:
    """`written` moved earlier by the tolerance `found` (`tolerance_at` at `end`), and where
    its words end."""
    if found is None:
        return written, end
    parts = {k: v for k, v in found.groupdict().items() if v is not None}
    if "uh1" in parts or "uh2" in parts:  # "(-1/+0 h)": the unit of either figure
        parts["unit"] = "h"
    try:
        return (written[0] - timedelta(hours=amount_hours(parts)), written[1]), found.end()
    except OverflowError:  # a tolerance past what a datetime holds: not one
        return written, end


# A time given as an amount before or after a time: "30 minutes before 14:00 UTC" was read as
# 14:00, late by the amount; "2 hours after 12:00 UTC", in a mail sent at 12:30, as 12:00
# tomorrow (past, so its next occurrence), 22 hours late.
_SHIFTED_FROM = re.compile(
    AMOUNT + r"\s+(?P<way>before|prior\s+to|ahead\s+of|earlier\s+than|after|later\s+than|past)"
    r"\s+(?:the\s+)?$",
    re.IGNORECASE,
)


_SHIFT_WAY = re.compile(
    r"(?:before|prior\s+to|ahead\s+of|earlier\s+than|after|later\s+than|past)\s+(?:the\s+)?$",
    re.IGNORECASE,
)


def shift_before(text: str, start: int) -> tuple[timedelta, int]:
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
        amount = timedelta(hours=amount_hours(parts))
    except OverflowError:  # past what a datetime holds: no shift of a real notice
        return timedelta(0), start
    later = found.group("way").lower() in ("after", "later than", "past")
    return (amount if later else -amount), found.start()


def amount_hours(parts: dict[str, str]) -> float:
    """The hours of an `AMOUNT` or `_CLOCK_AMOUNT` match's groups."""
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


def written_time(
    match: re.Match[str],
    sent: datetime | None = None,
    *,
    order: str = "mdy",
    relative_day: str = "",
    shift: timedelta = timedelta(0),
) -> tuple[datetime, datetime] | None:
    """The moment the time `match` writes (see `_read_time`), read once for each form of it:
    a hostile mail of thousands of the same few times read each again, 2 of the 6 CPU-s it
    took to judge. The reading depends only on the match's groups and the arguments; `sent`
    is keyed with its zone and fold too, which `==` ignores and the reading does not."""
    at = None if sent is None else (sent.replace(tzinfo=None), sent.fold, sent.tzinfo)
    # Keyed on the pattern's id, not the pattern: a pattern's hash is its compiled code's,
    # tens of KB hashed again at each call. `_GROUP_NAMES` holds the pattern, so the id is
    # not another's.
    form = id(match.re)
    if form not in _GROUP_NAMES:
        _GROUP_NAMES[form] = match.re, tuple(match.re.groupindex.items())
    return _read_time(form, match.groups(), sent, at, order, relative_day, shift)


_GROUP_NAMES: dict[int, tuple[re.Pattern[str], tuple[tuple[str, int], ...]]] = {}


@functools.lru_cache(maxsize=4096)
def _read_time(
    form: int,
    groups: tuple[str | None, ...],
    sent: datetime | None,
    at: tuple[datetime, int, tzinfo | None] | None,  # the key: `sent` as written
    order: str,
    relative_day: str,
    shift: timedelta,
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
    parts: dict[str, Any] = {name: groups[index - 1] for name, index in _GROUP_NAMES[form][1]}
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
    # "at 24:00 UTC": the midnight that ends the day. As hour 24 (no datetime) it was no
    # time at all, and Date + lead stood in, 00:30 for a mail of 22:30.
    ends_the_day = start == (24, 0, 0, "")
    if ends_the_day:
        start = (0, 0, 0, "")
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
    beside = _BESIDE.search(zone)
    words = written_zone.lower().split()
    spelt_utc = words[-1] == "time" and words[0] in ("coordinated", "universal", "greenwich")
    if spelt_utc or words == ["zulu"]:
        zone = ""
    elif words[-1] == "time" and (city := " ".join(words[:-1])) in _CITY_ZONES:
        written_zone = _CITY_ZONES[city]
    elif words[0] in _WORD_ZONES:
        written_zone = _WORD_ZONES[words[0]]
        if "daylight" in words:
            zone = written_zone[0] + "DT"
    tz: tzinfo
    try:
        if beside is not None:
            offset = timedelta(hours=int(beside["h"]), minutes=int(beside["m"] or 0))
            tz = timezone(-offset if beside["sign"] == "-" else offset)
        elif "/" in written_zone:
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
            found = _next_date(month, day, clock, end_clock, tz, sent, ends_the_day)
            if found is None:
                return None
            return _earliest(found[0] + shift), _earliest(found[1] + shift)
        if dated:
            moment = datetime(year, month, day, *clock, 0, tz) + timedelta(days=ends_the_day)
        else:
            assert sent is not None
            moment = sent.astimezone(tz).replace(
                hour=clock[0], minute=clock[1], second=clock[2], microsecond=0
            )
            on_the_day = _on_relative_day(moment, relative_day)
            if on_the_day is None:
                return None
            # Before the mail's own day is weighed: the end of the day, not its start.
            moment = on_the_day + timedelta(days=ends_the_day)
            if relative_day:
                moment = _on_the_mail_s_day(moment, sent, relative_day, end_clock, shift)
            if (
                not ends_the_day
                and relative_day == "today"
                and clock == (0, 0, 0)
                and end_clock is None
            ):
                moment = _midnight_ending_today(moment, sent, shift)
        until = _window_end(moment, end_clock)
        # Before the next occurrence is chosen: "2 hours after 12:00 UTC" in a mail sent at
        # 12:30 is 14:00 today, not tomorrow.
        moment, until = moment + shift, until + shift
        if not dated and not relative_day and sent is not None and until < sent - PAST_SLACK:
            moment, until = moment + timedelta(days=1), until + timedelta(days=1)
        return _earliest(moment), _earliest(until)
    # 31 February, 25:00, an offset of +99:00, no such zone; OverflowError: in UTC it falls
    # before the year 1 or after 9999.
    except (ValueError, OverflowError, ZoneInfoNotFoundError):
        return None


def _earliest(moment: datetime) -> datetime:
    """`moment` in UTC; a wall time its zone's clocks skip or repeat (a change to or from
    summer time) is the earlier of its two readings. Read with the offset before the change,
    02:30 in New York on the day clocks go from 02:00 EST to 03:00 EDT was 07:30 UTC, an
    hour after its other reading; repeated, the first was already taken (fold 0)."""
    readings = (moment.replace(fold=0), moment.replace(fold=1))
    return min(reading.astimezone(timezone.utc) for reading in readings)


def _midnight_ending_today(moment: datetime, sent: datetime, shift: timedelta) -> datetime:
    """ "today at midnight" (`moment`, the start of the day): the midnight that ends the day
    when that one is nearer than the start is past, and the start is past by more than the
    slack. Read as the start, a mail of 22:30 UTC said the reclaim was 22.5 h before it: a
    machine started since passed it over as another machine's (no notice), or, naming its
    id, stopped the job at once, 1.5 h early. A mail a little after midnight is a late one,
    at once as before."""
    past_by = sent - (moment + shift)
    later = moment + timedelta(days=1)
    if past_by > PAST_SLACK and later + shift - sent < past_by:
        return later
    return moment


def _on_the_mail_s_day(
    moment: datetime,
    sent: datetime,
    relative_day: str,
    end: tuple[int, int, int] | None,
    shift: timedelta,
) -> datetime:
    """`moment`, a time on the day `relative_day` says in the time's own zone, or that time on
    the day it says in the calendar of the mail's Date, when the Date has another offset and
    `moment` is past (its window's end before `sent`, less the slack) by more than that one is
    ahead, or `moment` is not past and that one is earlier and not past either. "today at
    01:00 UTC" in a mail sent at 18:30 -0500 (23:30 UTC) is 01:00 UTC on New York's day, 1.5
    h on, not 22.5 h before the mail: read so, a machine started since passed it over as
    another machine's reclaim, and the job heard nothing. "tomorrow at 14:00 UTC" in a mail
    sent at 20:00 -0500 (01:00 UTC) is 14:00 UTC on New York's tomorrow, not a day later: of
    two readings the earlier, as for an ambiguous date (one read late loses work). Never
    later than `moment`, and a time only a little past is still read at once (a late mail)."""
    offset = sent.utcoffset()
    past_by = sent - (_window_end(moment, end) + shift)
    if not offset or offset == moment.utcoffset():
        return moment
    on_the_day = _on_relative_day(sent, relative_day)  # in the Date's own offset
    if on_the_day is None:
        return moment
    day = on_the_day.date()
    for days in (-1, 0, 1):
        other = moment.replace(year=day.year, month=day.month, day=day.day) + timedelta(days=days)
        if other.astimezone(sent.tzinfo).date() != day:
            continue
        ahead_by = _window_end(other, end) + shift - sent
        if ahead_by < -PAST_SLACK:
            continue
        if ahead_by < past_by if past_by > PAST_SLACK else other < moment:
            return other
    return moment


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
    ends_the_day: bool = False,
) -> tuple[datetime, datetime] | None:
    """The first `month`/`day` at `clock` (with `ends_the_day`, the midnight at its end)
    whose window has not ended before `sent` less the slack: of the year before the mail's
    (a mail sent just after New Year about a window that began on 31 December), its own, or
    a later one (29 February)."""
    base = sent.astimezone(tz).year
    for year in range(base - 1, base + 9):
        try:
            moment = datetime(year, month, day, *clock, 0, tz) + timedelta(days=ends_the_day)
            until = _window_end(moment, end)
            if until >= sent - PAST_SLACK:
                return moment, until
        except (ValueError, OverflowError):  # no 29 February that year; year 0 or 10000
            continue
    return None


__all__ = [
    "ABOUT_RECLAIM",
    "AMBIGUOUS_ZONES",
    "AMOUNT",
    "CITY_TIME",
    "DAY_AFTER",
    "DAY_BEFORE",
    "EARLIER",
    "EPOCH",
    "PAST_SLACK",
    "RELATIVE",
    "SHIFT",
    "TIME_ONLY",
    "WEEKDAYS",
    "amount_hours",
    "is_year_of_a_date",
    "less_tolerance",
    "relative_day",
    "shift_before",
    "tolerance_at",
    "written_time",
    "written_times",
]
