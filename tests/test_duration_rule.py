"""One rule for every duration a person types: a flag of any command (`forewarn wait
--timeout`, `drill --lead`, a simulator's `--*-after`, `checkpoint --wait`) reads a value as
a config key of seconds reads it (`exit_margin` in the file, `FOREWARN_*`, `--set`). A bare
number is seconds as TOML and Python write a number (`1_000`, `1e3`, `0x10`); a number before
a unit takes digits, `_` between them, and a point (`1_000ms`, `1.5h`). The flags kept a
stricter reading: `--timeout 1_000` and `--lead 1e3` were refused where the key took them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import pytest
from forewarn.agent.checkpoint_cli import _wait
from forewarn.agent.cli import _duration
from forewarn.protocol.timefmt import duration_arg, typed_duration
from forewarn.providers.settings import seconds
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from support import examples

FLAGS: dict[str, Callable[[str], float]] = {
    "duration_arg": duration_arg,
    "forewarn --exit-margin style": _duration("--exit-margin"),
    "checkpoint --wait": _wait,
}

_TEXT = st.text(alphabet="0123456789._eExo+- smhdw", max_size=14)


def _key(text: str) -> float | None:
    """What a config key of seconds takes of `text` (before its own bounds), or None."""
    try:
        value = seconds(text)
    except ValueError:
        return None
    if not isinstance(value, (int, float)):
        return None  # blank: the key is left unset, where a flag refuses it
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


@pytest.mark.parametrize("flag", sorted(FLAGS))
@hypothesis_settings(max_examples=examples(200))
@given(text=_TEXT)
@example(text="1_000")
@example(text="1e3")
@example(text="0x10")
@example(text="1_000ms")
@example(text="1.5_0h")
@example(text="+5")
@example(text="-5")
@example(text="inf")
@example(text="1__0s")
@example(text="_1s")
def test_a_flag_reads_a_duration_as_a_config_key_does(flag: str, text: str) -> None:
    parse = FLAGS[flag]
    wanted = _key(text)
    try:
        got = parse(text)
    except argparse.ArgumentTypeError as error:
        assert wanted is None, f"{flag} refused {text!r} ({error}), the key took {wanted}"
    else:
        assert wanted is not None, f"{flag} took {text!r} as {got}, the key refused it"
        assert math.isclose(got, wanted), (text, got, wanted)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1_000", 1000.0),
        ("1e3", 1000.0),
        ("0x10", 16.0),
        ("+5", 5.0),
        ("1_000ms", 1.0),
        ("1_000.5s", 1000.5),
        ("2h 1_0m", 7800.0),
    ],
)
def test_a_typed_duration_follows_the_number_rule(text: str, want: float) -> None:
    assert typed_duration(text) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-5", "0 or more"),
        ("inf", "not a number of seconds"),
        ("nan", "not a number of seconds"),
        ("1e400", "too large"),
        ("1__0s", "not a duration"),
        ("1_s", "not a duration"),
        ("1e3s", "exponent"),
    ],
)
def test_a_typed_duration_refuses_by_name(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        typed_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("1_000", 1000.0), ("1e3", 1000.0), ("1_0m", 600.0), ("0x3c", 60.0)]
)
def test_a_flag_s_duration_field_follows_the_rule_too(text: str, seconds: float) -> None:
    # `--fault hang,seconds=1e3` and `drill aws --duration 1_0m` read their durations by the
    # stricter rule the flags had: refused where `--timeout` takes them.
    from forewarn.providers.aws.drill import fis_duration
    from forewarn.providers.sim_faults import parse_fault_flag

    assert parse_fault_flag(f"hang,seconds={text}")["seconds"] == seconds
    minutes, rest = divmod(int(seconds), 60)
    assert fis_duration(text) == "PT" + (f"{minutes}M" if minutes else "") + (
        f"{rest}S" if rest else ""
    )
