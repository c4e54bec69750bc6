"""Two jobs on one node with no agent, one flag file: each guard takes the file itself, and the
file goes once every job that reads it has saved for it (as the agent removes it once every
client acked), not at the first job's save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from forewarn.clients import CheckpointGuard
from forewarn.clients.flagjobs import FlagJobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import eventually, examples


def job(flag: Path) -> CheckpointGuard:
    return CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)


def test_the_flag_stays_until_the_second_job_has_saved_too(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    quick, slow = job(flag), job(flag)
    try:
        flag.write_text("")
        eventually(lambda: quick.due(1), timeout=5, what="the quick job's flag save")
        assert quick.saved(1, 0.01).reasons == ("flag",)
        # An operator's script waits for the file to go before the reboot: gone here, it told
        # them every job had saved while the slow one had not (nor, when the file went before
        # its ticker looked, ever would).
        assert flag.exists(), "removed at the first job's save"
        eventually(lambda: slow.due(7), timeout=5, what="the slow job's flag save")
        assert slow.saved(7, 0.01).reasons == ("flag",)
        assert not flag.exists()
        # Each saved once for it: the file counts once per job.
        assert not quick.due(2) and not slow.due(8)
    finally:
        quick.close()
        slow.close()


GUARD_THEN_SLEEP = """
import sys, time
from forewarn.clients import CheckpointGuard
guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=sys.argv[1], agree=False)
print("ready", flush=True)
time.sleep(60)
"""


def test_a_job_killed_before_its_save_does_not_hold_the_flag(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    other = subprocess.Popen(
        [sys.executable, "-c", GUARD_THEN_SLEEP, str(flag)], stdout=subprocess.PIPE, text=True
    )
    guard = job(flag)
    try:
        assert other.stdout is not None and other.stdout.readline() == "ready\n"
        flag.write_text("")
        eventually(lambda: guard.due(1), timeout=5, what="the flag save")
        guard.saved(1, 0.01)
        assert flag.exists(), "the other job has not saved yet"
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=5)
        # Its lock went with it: the job left counts no more, and the file goes.
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed")
        assert not guard.due(2)
    finally:
        other.kill()
        other.wait()
        guard.close()


def test_a_job_that_closes_without_saving_does_not_hold_the_flag(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    saver, leaver = job(flag), job(flag)
    try:
        flag.write_text("")
        eventually(lambda: saver.due(1), timeout=5, what="the flag save")
        saver.saved(1, 0.01)
        assert flag.exists()
        leaver.close()
        eventually(lambda: not flag.exists(), timeout=5, what="the flag removed")
    finally:
        saver.close()
        leaver.close()


def test_one_job_alone_removes_the_flag_at_its_save(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    guard = job(flag)
    try:
        flag.write_text("")
        eventually(lambda: guard.due(1), timeout=5, what="the flag save")
        guard.saved(1, 0.01)
        assert not flag.exists()
    finally:
        guard.close()


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(written=st.binary(max_size=80))
def test_a_running_jobs_file_counts_as_saved_only_for_exactly_that_flag(
    tmp_path: Path, written: bytes
) -> None:
    flag = tmp_path / "checkpoint-now"
    identity = (1, 2, 3)
    mine, other = FlagJobs(flag), FlagJobs(flag)
    assert mine.join() and other.join()
    try:
        assert other._fd is not None
        os.ftruncate(other._fd, 0)
        os.pwrite(other._fd, written, 0)
        assert mine.all_saved(identity) == (written == b"1 2 3\n")
        other.saved_for(identity)
        assert mine.all_saved(identity) and not mine.all_saved((1, 2, 4))
    finally:
        mine.leave()
        other.leave()
    assert not mine.directory.exists(), "the last job to leave removes the directory"


def test_a_process_forked_from_a_job_does_not_speak_for_it(tmp_path: Path) -> None:
    """A guard's place is its process's: a child forked from it (a forked rank) that saves
    and closes takes a place of its own, and neither says the parent saved nor removes the
    parent's place."""
    flag = tmp_path / "checkpoint-now"
    identity = (1, 2, 3)
    parent, other = FlagJobs(flag), FlagJobs(flag)
    assert parent.join() and other.join()
    try:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's exit code says how it went
            try:
                parent.saved_for(identity)
                parent.leave()
            finally:
                os._exit(0)
        assert os.waitpid(child, 0)[1] == 0
        assert not other.all_saved(identity), "the child spoke for its parent"
        parent.saved_for(identity)
        assert other.all_saved(identity)
    finally:
        parent.leave()
        other.leave()
