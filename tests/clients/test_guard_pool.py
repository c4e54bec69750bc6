"""A job whose loop uses a `multiprocessing.Pool` (fork start) under a CheckpointGuard, stopped
by a signal to its whole process group: the pool's workers keep serving the loop until the
guard's save, the job exits with the signal's code, and no worker is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("pool_job.py")


def session_processes(sid: int) -> list[str]:
    out = subprocess.run(
        ["ps", "-eo", "pid=,sid=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.split()[1] == str(sid)]


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_pool_keeps_serving_the_loop_through_a_group_signal_until_the_save(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    """Found walking a loop that maps over a Pool at each step: the group's SIGTERM ended the
    pool's idle workers, one of them holding the lock of the pool's task queue, and the job
    saved and then hung in the pool's finalizer at its exit (or, mapping before its save, in
    `pool.map`), until the platform's SIGKILL: exit 137, not 143, steps lost in the second."""
    checkpoint = tmp_path / "ckpt"
    job = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(checkpoint)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        steps = 0
        for line in job.stdout:
            steps = json.loads(line).get("step", steps)
            if steps >= 3:
                break
        assert steps >= 3, job.stderr.read() if job.stderr else ""
        os.killpg(job.pid, signum)
        try:
            out, err = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            out, err = "", "the job did not exit 60 s after the signal"
        left = session_processes(job.pid)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    events = [json.loads(line) for line in out.splitlines()]
    saved = [e["saved"] for e in events if "saved" in e]
    assert job.returncode == code, err
    assert saved and saved[-1] >= steps, err
    assert int(checkpoint.read_text()) == saved[-1]
    assert f"exiting at step {saved[-1]} on {signal.Signals(signum).name}" in err
    assert not left, left
