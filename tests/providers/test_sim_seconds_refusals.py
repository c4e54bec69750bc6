"""A simulator's notice field of seconds refused names the key, the value as written and the
forms it takes, with bounds as a user writes them: `--notice spot,lead=xyz` said "expected a
number of seconds from 0 to 3.1536e+08", and `after=31d` "... 2.592e+06 ... got 2678400.0"."""

from __future__ import annotations

import importlib

import pytest
from forewarn.protocol.errors import UsageError
from forewarn.providers.simulator import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples


def _start(provider: str, *args: str) -> Simulator:
    from forewarn.agent.cli import build_parser

    command = importlib.import_module(f"forewarn.providers.{provider}.simulate").COMMAND
    return command.start(build_parser("simulate").parse_args(["simulate", provider, *args]))


@pytest.mark.parametrize(
    ("provider", "notice", "key", "written", "most"),
    [
        ("aws", "spot,lead=xyz", "lead", "'xyz'", "3650d"),
        ("aws", "spot,lead=4000d", "lead", "'4000d'", "3650d"),
        ("gcp", "upcoming,window=soon", "window", "'soon'", "3650d"),
        ("azure", "Freeze,not_before_seconds=40d", "not_before_seconds", "'40d'", "30d"),
    ],
)
def test_a_field_of_seconds_refused_names_key_value_forms_and_bound(
    provider: str, notice: str, key: str, written: str, most: str
) -> None:
    extra = ["--vm-name", "vm-0"] if provider == "azure" else []
    with pytest.raises(UsageError) as refused:
        _start(provider, *extra, "--notice", notice)
    message = str(refused.value)
    assert f"{key}: expected a duration (90s, 15m, 2h, 1d) or a number of seconds" in message
    assert f"up to {most}; got {written}" in message
    assert "e+" not in message


def test_after_past_its_bound_is_named_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    from forewarn.agent.cli import main

    assert main(["simulate", "aws", "--port", "0", "--notice", "spot,after=31d"]) == 2
    error = capsys.readouterr().err
    assert "after: expected a duration (90s, 15m, 2h, 1d)" in error
    assert "up to 30d; got '31d'" in error
    assert "2678400" not in error and "e+" not in error


_VALUES = st.one_of(
    st.text(alphabet="0123456789.e+-smhdxyz ", max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**12), max_value=10**12).map(lambda n: f"{n}d"),
)


@settings(max_examples=examples(150), deadline=None)
@given(value=_VALUES)
def test_any_lead_is_taken_or_refused_naming_it(value: str) -> None:
    if "," in value or "=" in value:
        return
    try:
        _start("aws", "--notice", f"spot,lead={value}")
    except UsageError as error:  # the CLI's exit 2
        message = str(error)
        assert "lead" in message and "e+0" not in message.replace(repr(value.strip()), "")
    except SystemExit as exited:  # argparse refused the flag: also exit 2, naming it
        assert exited.code == 2
