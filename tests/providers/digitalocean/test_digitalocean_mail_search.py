"""The look at a match's first character, put before the time and date patterns to make a
large mail's searches shorter, changes nothing that they find."""

from __future__ import annotations

import re

from forewarn.providers.digitalocean import written
from hypothesis import given
from hypothesis import strategies as st

_LOOKS = sorted(
    {
        written._CLOCK_FIRST,
        *written._DATE_FIRST.values(),
        f"(?={written._MONTH_FIRST})",
        f"(?={written._MONTH_FIRST}|[0-9])",
        written._TIME_FIRST,
    },
    key=len,
    reverse=True,
)


def _without_look(pattern: re.Pattern[str]) -> re.Pattern[str]:
    look = next(look for look in _LOOKS if pattern.pattern.startswith(look))
    return re.compile(pattern.pattern[len(look) :], pattern.flags)


def _looked() -> list[re.Pattern[str]]:
    """The patterns that look at their first character before they are tried (the dated
    forms' built at the first use, not while collecting)."""
    return [
        pattern
        for pattern in (
            written._MONTH_NAME,
            written.TIME_ONLY,
            *(pattern for _, pattern in written.written_times()),
        )
        if pattern.pattern.startswith("(?=")
    ]


# A time and a date in either order, each part in several of the forms the patterns read.
_TIME = st.tuples(
    st.sampled_from(["", "UTC ", "GMT ", "between ", "at "]),
    st.sampled_from(["14:00", "2:30 PM", "noon", "12 noon", "Midnight", "midday", "1310", "13h"]),
    st.sampled_from(["", " - 16:00", " to midnight", " and 3 pm", ":00"]),
    st.sampled_from(["", " UTC", " gmt", " Z", " EST", " UTC+1", " (UTC)", " hrs"]),
    st.sampled_from(["", " (\u00b1 30 min)", " -0:30", " -30min"]),
).map("".join)
_DATE = st.tuples(
    st.sampled_from(["", "UTC ", "gmt ", "Tue "]),
    st.sampled_from(
        [
            "December 3, 2026",
            "Dec. 3rd",
            "3 December 2026",
            "4th of May",
            "SEPT 4",
            "2026-12-03",
            "12/01/2026",
            "01.12.26",
            "Dec 1",
        ]
    ),
).map("".join)
_PHRASE = st.one_of(
    st.tuples(_TIME, st.sampled_from([" on ", ", ", " ", "\n"]), _DATE).map("".join),
    st.tuples(_DATE, st.sampled_from([" at ", ", ", " ", "T"]), _TIME).map("".join),
    st.tuples(_DATE, st.just(" "), _TIME, st.just(" 2026 UTC")).map("".join),
    _TIME,
)


def test_every_pattern_with_a_look_is_checked() -> None:
    # All of the dated forms but the basic ISO one (its first figure needs no look), the
    # time alone and the month's name.
    assert len(_looked()) == len(written.written_times()) - 1 + 2


@given(st.lists(_PHRASE, min_size=1, max_size=4), st.sampled_from([" ", ". ", "\n", ""]))
def test_a_look_at_the_first_character_changes_no_match(phrases: list[str], joint: str) -> None:
    text = joint.join(phrases)
    for pattern in _looked():
        plain = _without_look(pattern)
        found = [(m.span(), m.groupdict()) for m in pattern.finditer(text)]
        assert found == [(m.span(), m.groupdict()) for m in plain.finditer(text)], (
            pattern.pattern[:60],
            text,
        )
