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
from job_session import end_session, every_worker_ends, start_in_session
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
