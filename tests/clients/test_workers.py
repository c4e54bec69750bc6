"""DataLoader workers under a job-wide SIGTERM: with `worker_init_fn()` they keep feeding the
loop (and still end with it); without it the loop dies, as systemd's control-group kill and
torchrun's process-group signal make it die."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support import requires

pytestmark = requires("torch")

SCRIPT = Path(__file__).with_name("loader_job.py")


def start(mode: str, stop_at: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), mode, str(stop_at)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )


def first_batch(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        event = json.loads(line)
        if event.get("workers"):
            return event


def test_guarded_workers_ignore_a_foreign_sigterm_and_end_with_the_job() -> None:
    proc = start("guarded", 150)
    try:
        workers = first_batch(proc)["workers"]
        for pid in workers:  # from this process: not the workers' parent
            os.kill(pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    batches = [json.loads(line) for line in out.splitlines()]
    assert batches[-1].get("leaving"), "the loop went on to its planned end"
    deadline = time.monotonic() + 15
    while any(os.path.exists(f"/proc/{pid}") for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}")]
    assert alive == [], "the workers end with the job"


def test_plain_workers_die_of_the_sigterm_and_take_the_loop_down() -> None:
    proc = start("plain", 10_000)
    try:
        workers = first_batch(proc)["workers"]
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "killed by signal: Terminated" in err, err[-2000:]
