"""A deadline far away (a maintenance scheduled weeks out, a flag file's date years off) is
shown the way an operator reads it, `in 300d 5h`, beside its absolute UTC time, wherever a
person reads the time left: `status`, `wait`, `watch`, the webhook's line, the client
library's log. A near one stays in seconds, to the second."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import format_time, utcnow
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess, run_forewarn

pytestmark = pytest.mark.usefixtures("forked_agents")

# 300 days, 5 hours and a half (the agent takes deadlines up to 366 days ahead): the half
# hour is below what is shown, so the seconds the test takes do not change the text.
FAR = timedelta(days=300, hours=5, minutes=30)


def test_status_and_wait_show_a_far_deadline_in_days_and_hours(tmp_path: Path) -> None:
    """Left by the last session: `status` showed `deadline ...Z (in 25939800s)`, a number
    nobody reads as ten months."""
    with AgentProcess(tmp_path) as agent:
        env = agent.env
        deadline = format_time(utcnow() + FAR)
        raised = run_forewarn("notify", "terminate", "--deadline", deadline, env=env)
        assert raised.returncode == 0, raised
        status = run_forewarn("status", env=env)
        assert status.returncode == 0, status
        (line,) = [row for row in status.stdout.splitlines() if "terminate" in row]
        assert f"deadline {deadline} (in 300d 5h)" in line, line
        # `wait` prints the notice in force, as `status` does.
        waited = run_forewarn("wait", "--for", "terminate", "--timeout", "20", env=env)
        assert waited.returncode == 0, waited
        assert f"deadline {deadline} (in 300d 5h)" in waited.stdout, waited.stdout


def test_wait_says_how_far_a_put_off_terminate_is(tmp_path: Path) -> None:
    """A terminate an earlier job acted on is put off to the exit margin before its deadline;
    wait said `(25939800s away)`."""
    with AgentProcess(tmp_path) as agent:
        env = agent.env
        deadline = format_time(utcnow() + FAR)
        raised = run_forewarn("notify", "terminate", "--deadline", deadline, env=env)
        assert raised.returncode == 0, raised
        notice_id = re.search(r"(local/manual/\S+)", raised.stdout)
        assert notice_id is not None, raised.stdout
        acked = run_forewarn("ack", notice_id.group(1), env=env)
        assert acked.returncode == 0, acked
        waited = run_forewarn("wait", "--for", "terminate", "--timeout", "3", env=env)
        assert waited.returncode == 1, waited
        assert "before its deadline (300d 5h away)" in waited.stderr, waited.stderr


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (42.4, "42s"),
        (599, "599s"),  # near: to the second, as before
        (600, "10m"),
        (3599.9, "59m 59s"),
        (3600 + 61, "1h 1m"),
        (86400 * 2 + 3600 * 3 + 59, "2d 3h"),
        (86400 * 365, "1y"),
        (96784166, "3y 25d"),
    ],
)
def test_span_text_examples(seconds: float, shown: str) -> None:
    from forewarn.protocol.timefmt import span_text

    assert span_text(seconds) == shown


_UNITS = {"y": 365 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}


@given(st.floats(min_value=0, max_value=400 * 365 * 86400, allow_nan=False))
def test_span_text_never_shows_more_time_than_there_is(seconds: float) -> None:
    """Near: whole seconds, rounded as before. Far: one or two units, largest first, the
    second the next smaller one, each rounded down: never more time than is left, and less
    by under one of the smaller unit."""
    from forewarn.protocol.timefmt import span_text

    shown = span_text(seconds)
    if seconds < 600:
        assert shown == f"{seconds:.0f}s"
        return
    parts = shown.split(" ")
    assert 1 <= len(parts) <= 2, shown
    values = [(int(part[:-1]), part[-1]) for part in parts]
    names = list(_UNITS)
    first = names.index(values[0][1])
    if len(values) == 2:
        assert names.index(values[1][1]) == first + 1, shown
        assert values[1][0] >= 1, shown
    total = sum(count * _UNITS[name] for count, name in values)
    smaller = _UNITS[names[min(first + 1, len(names) - 1)]]
    assert total <= seconds < total + smaller, shown


def test_the_webhook_line_says_a_far_deadline_in_days_and_hours() -> None:
    """The Slack line said `(25939800 s left)`; it says days and hours, as it says an age."""
    from forewarn.agent.notifications.webhook import slack_text
    from support import local_notice

    far = local_notice(1, "terminate").model_copy(update={"deadline": utcnow() + FAR})
    near = local_notice(2, "terminate").model_copy(
        update={"deadline": utcnow() + timedelta(seconds=300)}
    )
    assert "(300 d 5 h left)" in slack_text(far, "gpu-1"), slack_text(far, "gpu-1")
    assert re.search(r"\((29\d|300) s left\)", slack_text(near, "gpu-1")), slack_text(near, "gpu-1")
