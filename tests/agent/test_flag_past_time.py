"""A flag file whose time was already past when the file was written (a wrong year, a local
time written with `Z`): read as a deadline, the agent sent a terminate due years ago and every
job on the node exited at once, as did each job started after it, with nothing said. It is no
deadline: the drain stands without one (a checkpoint now, training goes on) and the log says
why. A time a few minutes past (the agent's notice grace) still stands, due now."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.guard_flag import _read_flag
from forewarn.protocol.flagfile import PAST_AT_WRITING_SECONDS, flag_deadline
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.local.watch import flag_report, unread_deadline
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, examples

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
