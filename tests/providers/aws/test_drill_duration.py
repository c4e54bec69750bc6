"""`forewarn drill aws --duration` as people write a duration (`5m`, `2m30s`, `300`), as every
other duration flag takes it, besides FIS's own ISO 8601 (`PT5M`)."""

from __future__ import annotations

import argparse

import pytest
from forewarn.protocol.errors import UsageError
from forewarn.providers.aws import drill
from hypothesis import example, given
from hypothesis import strategies as st

INSTANCE = "i-0123456789abcdef0"
ROLE = "arn:aws:iam::123456789012:role/fis-spot"


def _plan(duration: str) -> drill.Plan:
    parser = argparse.ArgumentParser()
    drill.add_arguments(parser)
    args = parser.parse_args(
        [
            "--instance-id",
            INSTANCE,
            "--role-arn",
            ROLE,
            "--region",
            "eu-west-1",
            "--duration",
            duration,
        ]
    )
    return drill.make_plan(args, lambda: None)


@st.composite
def _written(draw: st.DrawFn) -> tuple[str, int]:
    seconds = draw(st.integers(drill.MIN_SECONDS, drill.MAX_SECONDS))
    minutes, rest = divmod(seconds, 60)
    forms = [f"{seconds}", f"{seconds}s", f"{seconds} sec", f"PT{seconds}S", f"pt{seconds}s"]
    if rest == 0:
        forms += [f"{minutes}m", f"{minutes} min", f"{minutes} Minutes", f"PT{minutes}M"]
    else:
        forms += [f"{minutes}m{rest}s", f"{minutes}m {rest}s", f"PT{minutes}M{rest}S"]
    return draw(st.sampled_from(forms)), seconds


@given(_written())
@example(("5m", 300))
@example(("2m30s", 150))
@example(("PT2M", 120))
def test_a_duration_as_written_becomes_fis_iso_8601(drawn: tuple[str, int]) -> None:
    """`--duration 5m` was 'not an ISO 8601 duration such as PT2M'."""
    text, seconds = drawn
    plan = _plan(text)
    assert drill.duration_seconds(plan.duration) == seconds
    assert plan.duration.startswith("PT") and plan.duration == plan.duration.upper()
    template = plan.template()
    action = next(iter(template["actions"].values()))
    assert action["parameters"]["durationBeforeInterruption"] == plan.duration


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1m", "2 to 15 minutes"),
        ("16m", "2 to 15 minutes"),
        ("2.5s", "whole seconds"),
        ("150.5", "whole seconds"),
        ("two minutes", "not a duration"),
        ("P1D", "not a duration"),
    ],
)
def test_a_duration_fis_cannot_take_is_refused_naming_the_flag(text: str, says: str) -> None:
    with pytest.raises(UsageError, match="--duration: .*" + says):
        _plan(text)
