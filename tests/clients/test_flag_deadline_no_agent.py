"""A flag file with a deadline, taken by the guard itself (no agent with the local provider
runs): as the agent does with it, the drain saves once and stays in force, and the job saves
again and exits within its exit margin of the deadline (the machine goes then)."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.guard_flag import _read_flag, _read_flag_deadline
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.local.watch import flag_report
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import eventually


def job(flag: Path, margin: float) -> CheckpointGuard:
    return CheckpointGuard(
        notices=False, handle_signals=False, flag_file=flag, agree=False, exit_margin=margin
    )


def test_a_flag_deadline_saves_then_exits_within_the_margin(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=1.0)
    try:
        deadline = utcnow() + timedelta(seconds=2.5)
        flag.write_text(format_time(deadline) + "\n")
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        first = guard.saved(1, 0.01)
        assert first.reasons == ("flag",) and not first.exit
        assert not flag.exists()
        step = 1

        # Trained on past the save, the job never exited: the machine went at the deadline
        # with every step since the save lost.
        def exits() -> bool:
            nonlocal step
            step += 1
            time.sleep(0.01)
            return guard.due(step)

        eventually(exits, timeout=5, what="the exit before the flag's deadline")
        result = guard.saved(step, 0.01)
        assert result.exit
        assert utcnow() < deadline
        assert guard.exit_code == 143
    finally:
        guard.close()


def test_a_flag_whose_deadline_is_within_the_margin_saves_once_and_exits(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=30.0)
    try:
        flag.write_text("10s\n")  # a duration, counted from when the file was written
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        # Seen by the ticker that took the flag, or the next one: the exit may come a tick later.
        eventually(lambda: guard.should_exit, timeout=2, what="the exit")
        result = guard.saved(1, 0.01)
        assert result.exit and "flag" in result.reasons
    finally:
        guard.close()


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=300))
def test_the_guard_reads_a_flag_deadline_as_the_agent_does(tmp_path: Path, content: bytes) -> None:
    flag = tmp_path / "checkpoint-now"
    flag.write_bytes(content)
    mtime_ns = flag.stat().st_mtime_ns
    agents = flag_report(flag, content.decode(errors="replace"), mtime_ns)
    assert _read_flag_deadline(flag) == agents.deadline
    # Both hold a duration (`5m`) on the boot clock, and a time as that time.
    assert _read_flag(flag)[:2] == (agents.deadline, agents.deadline_is_duration)


def test_a_flag_written_again_during_the_save_is_kept_and_its_deadline_read(
    tmp_path: Path,
) -> None:
    """A flag written again while the job saved for the first one (a deadline added: the
    machine goes in ten seconds) was removed by that save unread: the job trained on into the
    deadline. As the agent keeps a flag written again since its drain, it stays and counts."""
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=30.0)
    try:
        flag.write_text("")
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        flag.write_text("10s\n")
        written = flag.stat()  # a new mtime, whatever the filesystem's clock granularity
        os.utime(flag, ns=(written.st_atime_ns, written.st_mtime_ns + 1_000_000))
        assert not guard.saved(1, 0.01).exit
        assert flag.exists(), "the flag written again was removed by the save for the first"
        eventually(lambda: guard.should_exit, timeout=5, what="the exit for the new deadline")
    finally:
        guard.close()


def _steps_past(deadline_at: float, guard: CheckpointGuard) -> bool:
    """Step the job until `deadline_at` (monotonic) has passed; True when it was told to exit
    on the way (a flag's own save is made and trained past)."""
    step = 1
    while time.monotonic() < deadline_at:
        step += 1
        if guard.due(step) and guard.saved(step, 0.01).exit:
            return True
        time.sleep(0.02)
    return False


def test_a_flag_removed_by_hand_before_the_save_drops_its_deadline(tmp_path: Path) -> None:
    """Removed by hand before the job saved for it, the agent clears the flag's drain: no
    terminate comes at its deadline. The guard kept the deadline and saved-and-exited (143) at
    it, ending a job the operator had called the request off for."""
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=0.5)
    try:
        flag.write_text("2s\n")
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        flag.unlink()  # the operator calls it off before the job saved
        assert not _steps_past(time.monotonic() + 2.5, guard), "exited at a withdrawn deadline"
        assert not guard.should_exit
    finally:
        guard.close()


def test_a_flag_removed_by_hand_while_another_job_saves_drops_its_deadline(
    tmp_path: Path,
) -> None:
    """Two jobs: the first saved, the second still saving, and the operator removes the file:
    as the agent clears a drain removed before every client flushed, the deadline goes."""
    flag = tmp_path / "checkpoint-now"
    first, second = job(flag, margin=0.5), job(flag, margin=0.5)
    try:
        flag.write_text("2s\n")
        eventually(lambda: first.due(1), timeout=5, what="the first job's save")
        eventually(lambda: second.due(1), timeout=5, what="the second job's flag")
        assert not first.saved(1, 0.01).exit
        assert flag.exists()  # the second job has not saved yet
        flag.unlink()
        assert not _steps_past(time.monotonic() + 2.5, first), "exited at a withdrawn deadline"
    finally:
        first.close()
        second.close()


def test_a_flag_removed_by_the_last_jobs_save_keeps_its_deadline(tmp_path: Path) -> None:
    """The file removed by the other job's save (every job saved) is the flag handled, not a
    removal by hand: the deadline stands for both, as the agent keeps such a drain."""
    flag = tmp_path / "checkpoint-now"
    first, second = job(flag, margin=0.5), job(flag, margin=0.5)
    try:
        flag.write_text("2s\n")
        eventually(lambda: first.due(1), timeout=5, what="the first job's save")
        eventually(lambda: second.due(1), timeout=5, what="the second job's flag")
        assert not first.saved(1, 0.01).exit
        assert not second.saved(1, 0.01).exit
        assert not flag.exists()
        assert _steps_past(time.monotonic() + 3.0, first), "no exit at the flag's deadline"
    finally:
        first.close()
        second.close()


def test_a_flag_removed_by_hand_during_its_background_save_drops_its_deadline(
    tmp_path: Path,
) -> None:
    """The file goes once the background save is durable; removed by hand before that, the
    save's commit found it gone and the deadline stood, as a save of its own had removed it."""
    flag = tmp_path / "checkpoint-now"
    guard = job(flag, margin=0.5)
    try:
        flag.write_text("1h\n")
        eventually(lambda: guard.due(1), timeout=5, what="the flag's save")
        guard._record(1, 0.01, durable=False)  # what a background save records at its snapshot
        flag.unlink()
        guard._flag_saved(True)  # its commit, before the ticker looked
        assert guard._flag_deadline is None
    finally:
        guard.close()


def test_a_flag_duration_follows_a_step_of_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`echo 5m > checkpoint-now` with no agent: the guard counted the five minutes from the
    file's mtime on the wall clock, so NTP stepping the clock forward 25 min right after the
    save made the job exit at once, 5 minutes early by the machine's end (a step back made it
    train on past it, the steps since its save lost). Held on the boot clock, a step moves it
    with the wall clock: the job trains on; a deadline written as a time stays that time."""
    from forewarn.clients import guard_flag

    for content, exits in (("5m\n", False), (format_time(utcnow() + timedelta(minutes=5)), True)):
        flag = tmp_path / "checkpoint-now"
        guard = job(flag, margin=30.0)
        try:
            flag.write_text(content + "\n")
            eventually(lambda guard=guard: guard.due(1), timeout=5, what="the flag's save")
            assert not guard.saved(1, 0.01).exit
            stepped = utcnow() + timedelta(minutes=25)
            monkeypatch.setattr(guard_flag, "utcnow", lambda stepped=stepped: stepped)
            guard._check_flag_deadline()  # as its ticker does, after the step
            assert guard.should_exit == exits, content
        finally:
            monkeypatch.undo()
            guard.close()
