"""The one whole-number flag type (`forewarn.protocol.wholenumber`): whatever is written, a
whole number in range or one clear line naming what was written, never a traceback; and each
flag that uses it keeps the words it said before it was one type."""

from __future__ import annotations

import argparse
import re
import string

import pytest
from forewarn.agent import checkpoint_cli, cli
from forewarn.agent.plan import cli as plan_cli
from forewarn.protocol.wholenumber import whole_number
from forewarn.providers import sim_cli
from forewarn.providers.digitalocean import simulate as do_simulate
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

COUNT = whole_number(minimum=1, maximum=1000)


@settings(max_examples=examples(300))
@given(st.one_of(st.text(), st.from_regex(r"\A\s*[+-]?[0-9_,.eE]{0,60}\s*\Z")))
@example("١٢")
@example("1,000")
@example("1e3")
@example("9" * 5000)
@example("-0")
@example("")
@example("true")
@example("5min")
def test_any_text_is_a_number_in_range_or_one_line_naming_it(text: str) -> None:
    try:
        value = COUNT(text)
    except argparse.ArgumentTypeError as error:
        message = str(error)
        assert len(message.splitlines()) == 1 and len(message) < 500, message
        written = text.strip(string.whitespace)
        # As Python writes a whole number: a sign, digits 0-9, `_` between two of them.
        if re.fullmatch(r"[+-]?[0-9](?:_?[0-9])*", written) and len(written) <= 40:
            assert f"got {int(written)}" in message, message
        elif re.fullmatch(r"[+-]?[0-9](?:_?[0-9])*", written):
            assert f"got {written[:40]}..." in message, message
        else:
            assert "not a whole number: " + repr(text[:40])[:-1] in message, message
        return
    assert 1 <= value <= 1000 and text.strip(string.whitespace).isascii()
    assert value == int(text)


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("١٢", "not a whole number: '١٢' (write it in the digits 0-9)"),
        ("1,000", "not a whole number: '1,000' (write it without the commas)"),
        ("1e3", "not a whole number: '1e3' (a whole number in digits, such as 1000)"),
        ("2.0", "not a whole number: '2.0' (a whole number in digits, such as 1000)"),
        ("-0", "must be 1 or more, got 0"),
        ("", "not a whole number: ''"),
        ("true", "not a whole number: 'true'"),
        ("1" * 50, "must be at most 1000, got " + "1" * 40 + "..."),
        ("-" + "1" * 50, "must be 1 or more, got -" + "1" * 39 + "..."),
    ],
)
def test_a_number_written_another_way_says_how_to_write_it(written: str, said: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        COUNT(written)
    assert str(caught.value) == said


def test_digits_int_reads_but_nobody_types_are_refused() -> None:
    # `int` read Arabic-Indic and full-width digits: `watch --count ١٢` waited for 12 notices.
    for written in ("١٢", "\uff11\uff12", "٣"):  # the middle one full-width
        with pytest.raises(argparse.ArgumentTypeError, match="digits 0-9"):
            cli._positive_int(written)


@pytest.mark.parametrize(
    ("parse", "written", "said"),
    [
        (cli._positive_int, "-3", "must be 1 or more, got -3"),
        (cli._positive_int, "two", "not a whole number: 'two'"),
        (cli._pid, str(2**31), f"not a process id: {2**31}"),
        (cli._step, "-1", "must be 0 or more (at most 2**63-1), got -1"),
        (checkpoint_cli._step, "x", "'x' is not a step number"),
        (checkpoint_cli._step, "-1", "a step is not negative (got -1)"),
        (checkpoint_cli._keep, "-1", "must keep at least 1 generation (got -1)"),
        (checkpoint_cli._keep, "two", "'two' is not a whole number"),
        (do_simulate._droplet_id, "-5", "a droplet id is 1 or more, got -5"),
        (sim_cli._port, "99999", "a port is 0-65535 (0: a free one), got 99999"),
        (sim_cli._port, "http", "not a port number: 'http'"),
        (plan_cli._count, "0", "must be positive (got '0')"),
        (plan_cli._count, str(2**53 + 1), f"too large (at most 2**53, got '{2**53 + 1}')"),
    ],
)
def test_each_flag_keeps_its_words(parse: object, written: str, said: str) -> None:
    assert callable(parse)
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(written)
    assert str(caught.value) == said


def test_a_number_with_space_and_underscores_is_read_as_int_reads_it() -> None:
    assert cli._step(" 1_000\n") == 1000
    assert cli._step("+7") == 7
