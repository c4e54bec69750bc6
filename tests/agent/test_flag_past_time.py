"""A flag file whose time was already past when the file was written (a wrong year, a local
time written with `Z`): read as a deadline, the agent sent a terminate due years ago and every
job on the node exited at once, as did each job started after it, with nothing said. It is no
deadline: the drain stands without one (a checkpoint now, training goes on) and the log says
why. A time a few minutes past (the agent's notice grace) still stands, due now."""

from __future__ import annotations

import logging
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.guard_flag import _read_flag
from forewarn.clients.proctime import boot_seconds
from forewarn.protocol.flagfile import (
    PAST_AT_READING_SECONDS,
    PAST_AT_WRITING_SECONDS,
    flag_deadline,
    past_when_read,
)
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.local.watch import flag_report, unread_deadline
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, eventually, examples

pytestmark = pytest.mark.usefixtures("forked_agents")

WRITTEN = datetime(2026, 12, 6, 4, 0, tzinfo=timezone.utc)


def mtime_ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


def test_a_time_years_before_the_writing_is_no_deadline_and_says_why() -> None:
    text = "2020-01-01T00:00:00Z\n"
    report = flag_report(Path("/tmp/flag"), text, mtime_ns(WRITTEN))
    assert report.action == "drain" and report.deadline is None
    assert report.detail["note"] == text.strip()
    assert flag_deadline(text, mtime_ns(WRITTEN)) is None
    why = unread_deadline(text, WRITTEN)
    assert why is not None
    assert "'2020-01-01T00:00:00Z' was past already when the file was written" in why, why


def test_a_time_minutes_before_the_writing_still_stands_due_now() -> None:
    moment = WRITTEN - timedelta(seconds=60)
    report = flag_report(Path("/tmp/flag"), format_time(moment), mtime_ns(WRITTEN))
    assert report.deadline == moment
    assert unread_deadline(format_time(moment), WRITTEN) is None


@settings(max_examples=examples(150))
@given(st.floats(min_value=-3e8, max_value=3e8, allow_nan=False))
def test_a_time_stands_unless_it_was_past_by_more_than_the_grace_at_writing(
    offset: float,
) -> None:
    moment = WRITTEN + timedelta(seconds=round(offset))
    text = format_time(moment)
    report = flag_report(Path("/tmp/flag"), text, mtime_ns(WRITTEN))
    stands = (moment - WRITTEN).total_seconds() >= -PAST_AT_WRITING_SECONDS
    assert (report.deadline == moment) is stands
    assert (report.deadline is None) is not stands
    assert (unread_deadline(text, WRITTEN) is None) is stands
    assert (flag_deadline(text, mtime_ns(WRITTEN)) is not None) is stands


@settings(max_examples=examples(150))
@given(
    st.floats(min_value=-3e8, max_value=3e8, allow_nan=False),
    st.floats(min_value=0, max_value=3e8, allow_nan=False),
)
def test_a_time_read_more_than_the_grace_after_it_is_no_deadline(
    offset: float, later: float
) -> None:
    """A flag file left over, read long after its deadline (a runtime directory that is no
    tmpfs): no deadline, whatever it was when the file was written."""
    moment = WRITTEN + timedelta(seconds=round(offset))
    read = WRITTEN + timedelta(seconds=round(later))
    text = format_time(moment)
    report = flag_report(Path("/tmp/flag"), text, mtime_ns(WRITTEN), read=read)
    stands = (moment - WRITTEN).total_seconds() >= -PAST_AT_WRITING_SECONDS and (
        read - moment
    ).total_seconds() <= PAST_AT_READING_SECONDS
    assert (report.deadline == moment) is stands
    assert (unread_deadline(text, WRITTEN, read) is None) is stands
    assert (past_when_read(moment, read) is None) is ((read - moment).total_seconds() <= 300)


def test_the_guard_reads_it_as_no_deadline_too(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    flag.write_text("2020-01-01T00:00:00Z\n")
    assert _read_flag(flag)[0] is None
    flag.write_text(format_time(utcnow() + timedelta(minutes=5)) + "\n")
    assert _read_flag(flag)[0] is not None


def test_the_agent_raises_a_drain_without_it_and_warns(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent, agent.subscriber() as sub:
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("2020-01-01T00:00:00Z\n")
        now = utcnow().timestamp()
        os.utime(flag, (now, now))
        notice = sub.notice(timeout=5)
        assert (notice["action"], notice["deadline"]) == ("drain", None), notice
        eventually(
            lambda: "was past already when the file was written" in agent.output(),
            what="the warning",
        )
        status = agent.control({"op": "status"})
        assert [entry["action"] for entry in status["active"]] == ["drain"]


def test_a_job_with_no_agent_saves_for_it_goes_on_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # With no agent the guard took the same file for a terminate due years ago and exited at
    # once; and no line it could not read as a deadline was said at all (the agent warns).
    flag = tmp_path / "checkpoint-now"
    guard = CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=5.0
    )
    try:
        with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
            flag.write_text("2020-01-01T00:00:00Z\n")
            eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
            result = guard.saved(1, 0.01)
            assert result.reasons == ("flag",) and not result.exit
            assert not any(guard.due(step) for step in range(2, 6))
        warned = [r.getMessage() for r in caplog.records if "checkpoint-now" in r.getMessage()]
        assert any("was past already when the file was written" in m for m in warned), warned
        assert guard.exit_code == 0
    finally:
        guard.close()


# A flag file left over: written this long ago (after this machine booted: one older is read as
# written before a step of the clock), its deadline this long past, more than the grace.
WRITTEN_AGO = 900.0
PAST_BY = 600.0


def test_a_leftover_flag_long_past_its_deadline_stops_no_job_of_the_agent(
    tmp_path: Path,
) -> None:
    """Written with a right time 15 minutes ago (a runtime directory that is no tmpfs; days
    past as well), its deadline 10 minutes past: the agent sent a terminate due at once, and
    every job connected exited at its first step. The drain stands without a deadline, and
    the log names the file and the time."""
    if (boot_seconds() or 0.0) < WRITTEN_AGO + 60:
        pytest.skip("this machine booted too recently to hold a flag written before")
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    past = format_time(utcnow() - timedelta(seconds=PAST_BY))
    flag.write_text(past + "\n")
    written = time.time() - WRITTEN_AGO
    os.utime(flag, (written, written))
    agent = AgentProcess(tmp_path, env=env)
    with agent, agent.subscriber() as sub:
        drain = sub.notice(timeout=5)
        assert (drain["action"], drain["deadline"]) == ("drain", None), drain
        job = CheckpointGuard(
            events=agent.events,
            control=agent.control_endpoint,
            flag_file=flag,
            handle_signals=False,
            exit_margin=5.0,
        )
        try:
            eventually(lambda: job.due(1), timeout=5, what="the job's save for the drain")
            assert not job.saved(1, 0.01).exit
            assert not any(job.due(step) for step in range(2, 20))
            assert not job.should_exit
        finally:
            job.close()
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed at the flush")
        warning = "more than 300 s past when the file was read"
        eventually(lambda: warning in agent.output(), timeout=5, what="the warning")
        assert str(flag) in agent.output() and past in agent.output()
