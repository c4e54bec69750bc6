"""A notice's seconds written as a duration (`--notice spot,lead=2m`, `{"lead": "2m"}`), as
`after=2m` and every other duration of forewarn take it."""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest
from forewarn.protocol.timefmt import parse_duration, parse_time
from forewarn.providers.simulator import SimServer, Simulator, as_seconds
from hypothesis import example, given
from hypothesis import strategies as st


def _start(provider: str, *args: str) -> Simulator:
    from forewarn.agent.cli import build_parser

    command = importlib.import_module(f"forewarn.providers.{provider}.simulate").COMMAND
    return command.start(build_parser("simulate").parse_args(["simulate", provider, *args]))


def _from_now(moment: datetime) -> float:
    return (moment - datetime.now(timezone.utc)).total_seconds()


@given(st.from_regex(r"\A[0-9]{1,4}(\.[0-9]{1,2})?\s?(ms|s|sec|m|min|h|hours|d)\Z"))
@example("2m")
@example("1h 30m")
def test_a_duration_as_text_is_its_seconds(text: str) -> None:
    assert as_seconds(text) == parse_duration(text)


@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none()))
def test_anything_but_text_is_left_for_the_fields_own_check(value: Any) -> None:
    assert as_seconds(value) is value


@given(st.text(max_size=8).filter(lambda text: not _is_duration(text)))
def test_text_that_is_no_duration_is_left_for_the_fields_own_check(text: str) -> None:
    assert as_seconds(text) == text


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def test_aws_spot_lead_takes_a_duration() -> None:
    """`--notice spot,lead=2m` was 'lead: expected a number of seconds'."""
    sim = _start("aws", "--notice", "spot,lead=2m")
    assert abs(_from_now(parse_time(sim.state()["spot"]["time"])) - 120) < 3


def test_gcp_upcoming_window_takes_durations() -> None:
    sim = _start("gcp", "--notice", "upcoming,start_in=1h,window=10m")
    upcoming = sim.state()["upcoming-maintenance"]
    start = parse_time(upcoming["window_start_time"])
    assert (parse_time(upcoming["window_end_time"]) - start).total_seconds() == 600
    assert abs(_from_now(start) - 3600) < 3


def test_azure_not_before_and_duration_take_durations() -> None:
    sim = _start(
        "azure",
        "--vm-name",
        "vm-0",
        "--notice",
        "Freeze,not_before_seconds=5m,duration_seconds=1m",
    )
    (event,) = sim.state()["events"]
    assert event["DurationInSeconds"] == 60
    assert abs(_from_now(parsedate_to_datetime(event["NotBefore"])) - 300) < 3


def test_the_control_api_takes_a_duration_for_lead_and_after() -> None:
    with SimServer(_start("aws")) as server:
        answer = httpx.post(
            server.url + "/_sim/notices", json={"kind": "spot", "lead": "90s"}, trust_env=False
        )
        assert answer.status_code == 201, answer.text
        later = httpx.post(
            server.url + "/_sim/notices",
            json={"kind": "rebalance", "after": "10m"},
            trust_env=False,
        )
        assert later.status_code == 202, later.text
        state = httpx.get(server.url + "/_sim/state", trust_env=False).json()
    assert abs(_from_now(parse_time(state["spot"]["time"])) - 90) < 3


@pytest.mark.parametrize(
    ("provider", "argv", "says"),
    [
        ("aws", ["--notice", "spot,lead=soon"], "lead: expected a duration"),
        ("aws", ["--notice", "spot,lead=4000d"], "lead: expected a duration"),
        ("azure", ["--vm-name", "v", "--notice", "Freeze,duration_seconds=1.5s"], "whole number"),
    ],
)
def test_a_field_of_seconds_that_is_no_usable_duration_is_still_refused(
    provider: str, argv: list[str], says: str
) -> None:
    from forewarn.protocol.errors import UsageError

    with pytest.raises(UsageError, match=says):
        _start(provider, *argv)
