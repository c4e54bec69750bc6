"""Which forms of a dated time a mail's text is searched for: only those whose date is in it.
Each form is one long pattern tried at every time of the mail, so a form whose date cannot
be there must not be tried; and leaving a form out must never lose a time it would find."""

from __future__ import annotations

import re

from forewarn.providers.digitalocean.deadline import _Matches
from forewarn.providers.digitalocean.written import written_times
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples


def _tried(text: str) -> list[re.Pattern[str]]:
    return [pattern for needed, pattern in written_times() if needed is None or needed.search(text)]


def _both_ways(date: str) -> list[str]:
    """`date` after its time and before it."""
    return [f"14:00 UTC on {date}", f"{date} at 14:00 UTC"]


_WITH_YEAR = [*_both_ways("December 3, 2026"), *_both_ways("3 December 2026")]
_WITHOUT_YEAR = [*_both_ways("December 3"), *_both_ways("3 December")]


def test_a_mail_whose_dates_have_no_year_is_not_searched_for_dates_with_one() -> None:
    """A month's name was all a form with a year needed: a mail of "14:00 UTC (-0:30) on
    December 3, " repeated 4,000 times (130 KB) had the two forms of "December 3, 2026" and the
    two of "3 December 2026" tried at each of its 8,000 times, none matching: 5.5 CPU-s to
    judge it (3.4 s with only the forms its dates have), past the test's 5 s bound on a loaded
    machine."""
    text = "Droplet gpu-spot-1 will be reclaimed.\n" + "14:00 UTC (-0:30) on December 3, " * 40
    tried = _tried(text)
    with_year = {
        pattern
        for _needed, pattern in written_times()
        if any(pattern.search(text) for text in _WITH_YEAR)
        and not any(pattern.search(text) for text in _WITHOUT_YEAR)
    }
    assert len(with_year) == 4  # the forms with a year, each side of its time ...
    tried_with_year = set(tried) & with_year
    assert not tried_with_year, f"{len(tried_with_year)} forms with a year tried"


_FRAGMENTS = st.sampled_from(
    [
        "14:00 UTC",
        " at 9:30 am ",
        "December 3",
        "Dec. 3rd, 2026",
        "3 December 2026",
        "3rd of December",
        "2026-12-03",
        "12/03/2026",
        "03.12.26",
        " on ",
        ", ",
        " (-0:30) ",
        " between 13:00 and 15:00 GMT ",
        "\n",
        "noon ",
        "20261203T131000Z",
        "Thursday ",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_FRAGMENTS, max_size=12))
def test_leaving_out_the_forms_whose_date_is_absent_finds_every_time(parts: list[str]) -> None:
    """What each form's needed pattern leaves out could never have matched: the times found
    are those of every form tried on the whole text."""
    text = "".join(parts)
    everything = [
        (index, *match.span())
        for index, (_needed, pattern) in enumerate(written_times())
        for match in pattern.finditer(text)
    ]
    assert list(_Matches(text).dated_by_place) == everything
