"""A duration's unit words in the case people write them: `2 Hours`, `10 Min`, `90S`."""

from __future__ import annotations

import re

import pytest
from forewarn.agent.config import ConfigError, load_settings
from forewarn.protocol.timefmt import parse_deadline, parse_duration
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

# Each unit of a duration with every way it is written, and its seconds (as in
# test_config_and_time), less the lone `m`: `M` is a month to systemd and ISO 8601.
_UNIT_WORDS = [
    (["w", "wk", "wks", "week", "weeks"], 7 * 86400),
    (["d", "day", "days"], 86400),
    (["h", "hr", "hrs", "hour", "hours"], 3600),
    (["min", "mins", "minute", "minutes"], 60),
    (["s", "sec", "secs", "second", "seconds"], 1),
    (["ms"], 0.001),
]


def _recase(draw: st.DrawFn, word: str) -> str:
    flags = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(char.upper() if up else char for char, up in zip(word, flags, strict=True))


@st.composite
def _durations_in_any_case(draw: st.DrawFn) -> tuple[str, float]:
    chosen = draw(st.lists(st.booleans(), min_size=6, max_size=6).filter(any))
    parts: list[str] = []
    seconds = 0.0
    for (words, per), used in zip(_UNIT_WORDS, chosen, strict=True):
        if used:
            count = draw(st.integers(0, 999))
            gap = draw(st.sampled_from(["", " "]))
            parts.append(f"{count}{gap}{_recase(draw, draw(st.sampled_from(words)))}")
            seconds += count * per
    return draw(st.sampled_from(["", " "])).join(parts), seconds


@settings(max_examples=examples(300), deadline=None)
@given(_durations_in_any_case())
@example(("2 Hours", 7200.0))
@example(("10 Min", 600.0))
@example(("90S", 90.0))
@example(("1H 30Min", 5400.0))
@example(("250MS", 0.25))
def test_a_unit_word_reads_in_any_case(drawn: tuple[str, float]) -> None:
    """`--deadline "2 Hours"` and `FOREWARN_EXIT_MARGIN="10 Min"` were refused as not a
    duration, while provider names, log levels and section names are read in any case."""
    text, seconds = drawn
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-9)
    assert parse_duration(text) == parse_duration(text.lower())


def test_a_capital_m_alone_is_refused_naming_both_readings() -> None:
    """`M` is a month to systemd and ISO 8601 and a minute to `m`: neither is guessed."""
    for text in ("1M", "2h 30M", "30 M"):
        with pytest.raises(ValueError, match=re.escape("'M'") + ".*m or min.*month"):
            parse_duration(text)
    with pytest.raises(ConfigError, match=r"exit_margin: .*'M'"):
        load_settings(exit_margin="1M")


def test_a_deadline_and_a_config_key_read_a_unit_in_any_case() -> None:
    assert load_settings(exit_margin="2 Minutes").exit_margin == 120
    start = parse_deadline("0s")
    later = parse_deadline("2 Hours")
    assert 7199 < (later - start).total_seconds() < 7300
