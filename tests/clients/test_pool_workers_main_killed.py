"""A process pool's workers when only their main process is SIGKILLed (the kernel's OOM killer
takes the one process, no signal reaches the group): whatever they are doing, mid-task or
idle, they end within seconds, not at the end of a task of any length on the node the next
job is given. No SIGHUP here (tests/clients/test_guard_hangup_workers.py walks that)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
from job_session import HeldStart, end_session, every_worker_ends, start_in_session
from support import eventually, requires

pytestmark = requires("torch")

SCRIPT = Path(__file__).with_name("hangup_loader_job.py")


def _steps(record: Path) -> int:
    try:
        return sum(line.startswith('{"step"') for line in record.read_text().splitlines())
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("busy", [True, False], ids=["mid-task", "idle"])
def test_pool_workers_of_a_sigkilled_main_process_end_within_seconds(
    tmp_path: Path, method: str, busy: bool
) -> None:
    """Found walking an OOM kill of a guarded loop whose `Pool(2)` (fork or spawn) ran
    minute-long tasks: 40 s after the main process's SIGKILL both workers still ran their
    tasks (and a spawn pool's resource tracker waited on them); idle ones ended."""
    record = tmp_path / "record"
    job = start_in_session(tmp_path, [sys.executable, str(SCRIPT), str(record), "pool", method])
    try:
        eventually(lambda: _steps(record) >= 3, timeout=120, what="step 3")
        if busy:
            (tmp_path / "long-tasks").touch()  # each task from here on takes a minute
            eventually(
                lambda: len(list(tmp_path.glob("long-task-*"))) >= 2, timeout=30, what="2 tasks"
            )
        os.kill(job.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
        assert job.wait(30) == -signal.SIGKILL
        every_worker_ends(job.pid, timeout=10)
    finally:
        end_session(job)


@pytest.mark.parametrize("kind", ["pool", "executor", "loader"])
def test_a_forkserver_worker_still_starting_when_the_main_process_is_killed_ends(
    tmp_path: Path, kind: str
) -> None:
    """The forkserver start's variant of a worker still importing the main module (torch,
    seconds on a loaded node) when its main process alone is SIGKILLed: its parent is the fork
    server, which ends with the main process, so the worker is handed to the reaper before its
    init has read which process to watch. It ends once its start goes on, as a fork or spawn
    one does, and nothing of the job is left on the node."""
    record = tmp_path / "record"
    held = HeldStart(tmp_path)
    job = start_in_session(tmp_path, [sys.executable, str(SCRIPT), str(record), kind, "forkserver"])
    try:
        # Not a step: a DataLoader whose first worker is the one held waits for its batch.
        eventually(lambda: list(tmp_path.glob("held-*")), timeout=90, what="a held start")
        os.kill(job.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
        assert job.wait(30) == -signal.SIGKILL
        held.release()  # its import done, the held worker goes on with its start
        every_worker_ends(job.pid, timeout=30)
    finally:
        held.release()
        end_session(job)
