"""A duration in a flag file (`5m`) the guard takes itself (no agent with the local provider
runs) counts from the file's mtime, unless a step of the wall clock since the writing shows,
as the agent's watcher counts it (`written_anchor`): an mtime more than 2 s in the future,
before the guard's last look that found no file, or before this boot counts from the first
read."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from flag_guard import looked, save_for_flag
from forewarn.clients import CheckpointGuard, guard_flag, proctime
from forewarn.protocol.flagfile import FLAG_CLOCK_SLACK, written_anchor
from forewarn.protocol.timefmt import format_time, utcnow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import eventually, examples


def job(flag: Path, margin: float = 30.0) -> CheckpointGuard:
    return CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=margin
    )


@pytest.mark.parametrize("step", [-2, 2], ids=["written-then-forward", "written-then-back"])
def test_a_flag_duration_counts_from_the_read_where_the_mtime_shows_a_step(
    tmp_path: Path, step: int
) -> None:
    """The guard looked and found no file; `echo 10m > checkpoint-now` on the clock before
    NTP's step (its mtime 2 h before that look, or 2 h ahead of now); the guard's next look.
    Counted from the mtime, the deadline was 1 h 50 min past (the job saved and exited at
    once) or 2 h 10 min away: counted from the read, as the agent does, it is 10 min away."""
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=30.0)
    try:
        looked(guard)
        written = time.time() + step * 3600
        flag.write_text("10m\n")
        os.utime(flag, (written, written))
        save_for_flag(guard)
        deadline = guard._flag_deadline
        assert deadline is not None
        assert abs((deadline - utcnow()).total_seconds() - 600) < 30, deadline
        assert not guard.should_exit
    finally:
        guard.close()


@pytest.mark.parametrize("outlives", [False, True], ids=["tmpfs", "persistent"])
def test_a_flag_duration_written_before_this_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outlives: bool
) -> None:
    """A `5m` flag left over from before a reboot (a runtime directory that outlived it) was
    past at once: the new job saved and exited at its first step. Then it counted from the
    read, a fresh 5 min: the job saved and exited 4.5 min later for a reclaim long gone,
    where a time written so was "a flag file left over", saved for once. On a filesystem
    that outlives a boot it is the writing plus 5 min, judged as that time: no deadline, one
    save, training goes on. On a tmpfs the file is this boot's, its mtime before the boot a
    step of the clock (NTP's first sync): it counts from the read."""
    up = proctime.boot_seconds()
    if up is None:
        pytest.skip("no boot clock here")
    monkeypatch.setattr(guard_flag, "outlives_boot", lambda path: outlives)
    flag = tmp_path / "checkpoint-now"
    flag.write_text("5m\n")
    before_boot = time.time() - up - 3600
    os.utime(flag, (before_boot, before_boot))
    guard = job(flag, margin=30.0)
    try:
        save_for_flag(guard)
        if outlives:
            assert guard._flag_deadline is None
        else:
            assert guard._flag_deadline is not None
            assert abs((guard._flag_deadline - utcnow()).total_seconds() - 300) < 30
        assert not guard.should_exit
    finally:
        guard.close()


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    written_off=st.floats(-1e6, 1e6, allow_nan=False),
    empty_for=st.one_of(st.none(), st.floats(0, 1e5)),
    minutes=st.integers(1, 120),
    outlives=st.booleans(),
)
def test_the_guards_duration_deadline_is_the_agents(
    monkeypatch: pytest.MonkeyPatch,
    written_off: float,
    empty_for: float | None,
    minutes: int,
    outlives: bool,
) -> None:
    """Whatever the mtime and the guard's last look without a file, the guard counts a
    duration from the anchor the agent's watcher takes (`written_anchor`): never from before
    the last look that found no file nor from the future."""
    now = datetime(2026, 12, 6, 3, 0, tzinfo=timezone.utc)
    up = 5e5
    monkeypatch.setattr(guard_flag, "utcnow", lambda: now)
    monkeypatch.setattr(guard_flag, "boot_seconds", lambda: up)
    monkeypatch.setattr(guard_flag, "outlives_boot", lambda path: outlives)
    guard = guard_flag.FlagFileRequests.__new__(guard_flag.FlagFileRequests)
    guard.flag_file = Path("/nonexistent/checkpoint-now")
    guard._flag_empty_at = None if empty_for is None else up - empty_for
    written = now - timedelta(seconds=written_off)
    mtime_ns = int(written.timestamp() * 1e9)
    read_written = datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc)
    duration = timedelta(minutes=minutes)
    deadline = guard._anchor(mtime_ns) + duration
    anchor = written_anchor(read_written, now, up, guard._flag_empty_at, lambda: outlives)
    assert deadline == anchor + duration
    since = empty_for if empty_for is not None else up
    slack = timedelta(seconds=FLAG_CLOCK_SLACK)
    if empty_for is None and outlives:
        # Found at the first look on a filesystem that outlives a boot: the mtime may be an
        # earlier boot's, however long before this one.
        assert deadline - duration in (read_written, now)
        return
    assert now - timedelta(seconds=since) - slack - timedelta(milliseconds=1) <= deadline - duration
    assert deadline - duration <= now + slack


def test_a_flag_time_written_before_a_step_back_of_the_clock_stands_as_for_the_agent(
    tmp_path: Path,
) -> None:
    """`date -d +30min > checkpoint-now` on a clock 2 h ahead, then NTP's step back: the
    mtime is 2 h in the future, and the time in the file 30 min from now. The agent judges
    the time against its first read (`written_anchor`) and keeps it; the guard judged it
    against the mtime, "past already when the file was written", and dropped the deadline:
    the job saved once and trained on until the machine went."""
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=30.0)
    try:
        looked(guard)
        wanted = utcnow() + timedelta(minutes=30)
        flag.write_text(format_time(wanted) + "\n")
        written = time.time() + 2 * 3600
        os.utime(flag, (written, written))
        save_for_flag(guard)
        deadline = guard._flag_deadline
        assert deadline is not None
        assert abs((deadline - wanted).total_seconds()) < 1, deadline
    finally:
        guard.close()


@pytest.mark.parametrize("time_line", [False, True], ids=["duration", "time"])
@pytest.mark.parametrize("past_boot", [-100.0, 60.0], ids=["before-boot", "after-boot"])
def test_an_earlier_boots_flag_deadline_that_passed_before_this_boot_is_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, time_line: bool, past_boot: float
) -> None:
    """`echo 5m > checkpoint-now` on a persistent runtime directory, then a reboot 2 min ago:
    its deadline passed 100 s before this boot began (220 s ago, within the 300 s a deadline
    read late stands). The job took it for a terminate due at once, saved and exited at its
    first step, where the agent (`test_local_flag_steps`) and a kept deadline of an earlier
    boot call it dead: one save, training goes on. One that passed after this boot began
    (60 s ago) stands, as the agent's does: the job saves and exits."""
    monkeypatch.setattr(guard_flag, "outlives_boot", lambda path: True)
    monkeypatch.setattr(guard_flag, "boot_seconds", lambda: 120.0)
    now = time.time()
    deadline = now - 120 + past_boot
    flag = tmp_path / "checkpoint-now"
    flag.write_text(
        format_time(datetime.fromtimestamp(deadline, timezone.utc)) + "\n" if time_line else "5m\n"
    )
    os.utime(flag, (deadline - 300, deadline - 300))
    guard = job(flag, margin=30.0)
    try:
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        if past_boot < 0:
            assert guard._flag_deadline is None
        assert guard.saved(1, 0.01).exit == (past_boot > 0)
    finally:
        guard.close()
