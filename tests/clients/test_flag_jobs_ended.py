"""The places in `<flag>.jobs/` of jobs that ended without leaving (killed, crashed): they
stopped counting at once, yet stayed in the directory for ever (one file per killed job) and
kept it after the last live job left. The next job that joins or leaves removes them, told
by the lock that went with their process, not by the pid in the name, which may be used
again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.flagjobs import FlagJobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples

GUARD_THEN_SLEEP = """
import sys, time
from forewarn.clients import CheckpointGuard
guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=sys.argv[1], agree=False)
print("ready", flush=True)
time.sleep(60)
"""


def _places(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))


def _killed_job(flag: Path) -> str:
    """A job that took its place and was killed (SIGKILL: no cleanup ran); its place's name."""
    job = subprocess.Popen(
        [sys.executable, "-c", GUARD_THEN_SLEEP, str(flag)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
        places = _places(flag.with_name(flag.name + ".jobs"))
        (place,) = [name for name in places if name.startswith(f"{job.pid}-")]
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=10)
    return place


def test_the_next_job_removes_the_places_of_killed_jobs(tmp_path: Path) -> None:
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    killed = _killed_job(flag)
    assert _places(directory) == [killed], "no job started or ended since"
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)
    try:
        (own,) = _places(directory)  # theirs gone at its start, no flag needed
        assert own.startswith(f"{os.getpid()}-"), own
    finally:
        guard.close()
    assert not directory.exists(), "the last job to leave removes the directory"


def test_a_leaving_job_removes_a_place_left_by_a_job_killed_after_it_started(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)
    try:
        _killed_job(flag)
        assert len(_places(directory)) == 2
    finally:
        guard.close()
    assert not directory.exists(), "a killed job's place kept the directory"


def test_a_place_whose_pid_runs_again_is_still_removed_once_unlocked(tmp_path: Path) -> None:
    """The pid in a place's name says nothing once its job is gone: a place named with this
    very process's pid (as after a pid was used again) but unlocked is a dead job's."""
    flag = tmp_path / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir(mode=0o1777)
    stale = directory / f"{os.getpid()}-deadbeef"
    stale.write_text("1 2 3\n")
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)
    try:
        assert not stale.exists()
        assert len(_places(directory)) == 1
    finally:
        guard.close()


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    names=st.sets(
        st.text(
            st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=20
        ).filter(lambda name: name not in {".", ".."}),
        max_size=6,
    ),
    content=st.binary(max_size=40),
)
def test_joining_removes_every_unlocked_place_and_keeps_the_dot_files(
    tmp_path_factory: pytest.TempPathFactory, names: set[str], content: bytes
) -> None:
    """Whatever the directory holds (a dead job's place of any name, an older version's, a
    record, a place being made), joining removes only the unlocked places, never a dot-file,
    and never fails."""
    flag = tmp_path_factory.mktemp("flag") / "checkpoint-now"
    directory = flag.with_name(flag.name + ".jobs")
    directory.mkdir(mode=0o1777)
    for name in names:
        (directory / name).write_bytes(content)
    live = FlagJobs(flag)
    mine = FlagJobs(flag)
    try:
        assert live.join() and mine.join()
        left = set(os.listdir(directory))
        assert left == {name for name in names if name.startswith(".")} | {
            live._name,
            mine._name,
        }
    finally:
        mine.leave()
        live.leave()


README_LOOP_EXIT = """
import sys
from forewarn.clients import CheckpointGuard
guard = CheckpointGuard(every_steps=600, notices=False, flag_file=sys.argv[1], agree=False)
step = 0
guard.resumed(step)
while step < 3:
    step += 1
    guard.due(step)
sys.exit(guard.exit_code)  # as the README's loop ends: no close()
"""


def test_a_job_that_ends_as_the_readme_loop_does_leaves_no_place_behind(tmp_path: Path) -> None:
    """The README's loop ends with `sys.exit(guard.exit_code)` and no `close()`: its place in
    `<flag>.jobs/` stayed, with the directory, until the next job on the node started (found:
    two torchrun ranks that saved and exited for a flag left `<pid>-<hex>` files behind)."""
    flag = tmp_path / "checkpoint-now"
    done = subprocess.run(
        [sys.executable, "-c", README_LOOP_EXIT, str(flag)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    directory = flag.with_name(flag.name + ".jobs")
    assert not directory.exists(), os.listdir(directory)
