"""A process forked from one with an open CheckpointGuard (multiprocessing's "fork" start: a
Pool's workers, a helper process, a forked rank) inherits the guard's SIGTERM and SIGINT
handlers. One that never uses the guard ends on them as it would without it; one that runs its
loop with the guard is asked to save and exit, as its parent is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("guard_fork_children.py")


def run(case: str, tmp_path: Path) -> tuple[int, str, dict[str, int]]:
    """The job's exit code, its stderr and its line; in a session of its own, whose processes
    are killed afterwards (a child left running holds no pipe of the test's open)."""
    job = subprocess.Popen(
        [sys.executable, str(SCRIPT), case],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        out, err = job.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        out, err = "", "the job did not exit"
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    lines = out.splitlines()
    return job.returncode, err, json.loads(lines[0]) if lines else {}


@pytest.mark.parametrize("case", ["idle", "stacked", "instant"])
def test_a_forked_child_that_never_uses_the_guard_ends_on_sigterm(
    tmp_path: Path, case: str
) -> None:
    """The guard's handler in the child only asked the child's copy of the guard (run by no
    loop) to save: `terminate()` did not end it, nor did a job-wide SIGTERM. `instant`: one
    that reaches the child as it is forked is handled amid the after-fork hooks, before the
    one that marks the guard's copies: the copy is known by the process id it was made in."""
    _, err, ended = run(case, tmp_path)
    assert ended == {"exitcode": -15}, err


def test_a_job_leaving_a_daemonic_forked_child_running_exits(tmp_path: Path) -> None:
    """multiprocessing's exit handler stops daemonic children with SIGTERM and waits for them:
    a child forked while the guard was open ignored it, and the job never exited (its run
    counted as hung, killed at the platform's limit, and retried)."""
    code, err, _ = run("daemon", tmp_path)
    assert code == 0, err


def test_a_forked_rank_running_its_loop_with_the_guard_is_asked_to_exit(tmp_path: Path) -> None:
    _, err, ended = run("looping", tmp_path)
    assert ended == {"exitcode": 7}, err


def test_a_forked_rank_with_a_guard_of_its_own_saves_on_ctrl_c(tmp_path: Path) -> None:
    """The rank's guard stands over the copy of its parent's: it handed the signal to that
    copy, which handed it on as the rank's own, and the rank's guard took it for a second
    Ctrl-C, the user insisting: KeyboardInterrupt, no save."""
    _, err, ended = run("own", tmp_path)
    assert ended == {"exitcode": 7}, err


def test_a_forked_ranks_workers_outlive_a_job_wide_sigterm_under_the_guard_it_inherited(
    tmp_path: Path,
) -> None:
    """A forked rank running its loop with the guard it inherited saves on SIGTERM, but its
    DataLoader workers read a byte of its own that said no guard handles SIGTERM: they died
    of a job-wide SIGTERM, and the loop raised `DataLoader worker ... exited unexpectedly`
    before the save (measured with two fork workers: exit 1, no save)."""
    _, err, byte = run("workers", tmp_path)
    assert byte == {"workers": 1}, err
