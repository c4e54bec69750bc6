"""A reclaim of a torchrun job (2 gloo ranks) whose exit's save hangs on one rank, as a write
into a hung mount does: the rank stuck in its write cannot give it up (a kernel write is not
interrupted), and the other waits for its part in the commit's collectives. Both must say so
in their logs before the terminate's deadline, while the job can still say anything: the
platform's SIGKILL comes there."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually, free_port, requires

pytestmark = requires("torch")

JOB = Path(__file__).with_name("hung_exit_save_job.py")
LEAD = 15.0  # notice to SIGKILL


def marked_processes(mark: bytes) -> list[int]:
    """The live processes whose environment holds `mark` (torchrun, its ranks, their
    DataLoader workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            if mark in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_marked(mark: bytes) -> None:
    for pid in marked_processes(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow(45)
@pytest.mark.timeout(300)
def test_ranks_stuck_in_an_exit_save_say_so_before_the_deadline_and_nothing_half_written_is_read(
    tmp_path: Path, env: dict[str, str]
) -> None:
    store = tmp_path / "checkpoints"
    fifo = tmp_path / "hung-mount"
    os.mkfifo(fifo)
    mark = uuid.uuid4().hex
    job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", FOREWARN_TEST_JOB=mark)
    job_env.update(HANG_RANK="1", HANG_FIFO=str(fifo))
    log_path = tmp_path / "job.log"
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    argv += ["--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(free_port()), str(JOB), "--dir", str(store)]
    argv += ["--steps", "100000", "--step-time", "0.05", "--eval-every", "100000"]
    lines: queue.Queue[dict[str, Any]] = queue.Queue()
    with AgentProcess(tmp_path, env=env) as agent, log_path.open("w") as log:
        job = subprocess.Popen(
            argv,
            env=job_env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )

        def read() -> None:
            assert job.stdout is not None
            for line in job.stdout:
                if line.startswith("{"):
                    lines.put(json.loads(line))

        threading.Thread(target=read, daemon=True).start()
        try:
            while (event := lines.get(timeout=120))["event"] != "step" or event["step"] < 3:
                pass
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            sent = time.monotonic()
            assert agent.control(notice)["ok"]
            while (event := lines.get(timeout=LEAD))["event"] != "saving":
                pass
            step = event["step"]

            def said() -> list[str]:
                return [
                    line
                    for line in log_path.read_text().splitlines()
                    if f"the exit's save of step {step} " in line and "has not ended" in line
                ]

            eventually(lambda: len(said()) == 2, LEAD, "both ranks said their save hangs")
            told = time.monotonic() - sent
            assert job.poll() is None, "the job was to hang in its save"
        finally:
            kill_marked(mark.encode())  # the machine goes: SIGKILL to every process
            eventually(lambda: not marked_processes(mark.encode()), 30, "the job gone")
            job.wait(30)
    # Said while the job could still say it, before the platform's kill at the deadline.
    assert told < LEAD, (told, log_path.read_text()[-3000:])
    for line in said():
        assert "before the terminate's deadline" in line, line
        assert "resumes from no checkpoint" in line, line
    # Rank 0 never committed the generation half written: the next job finds nothing to read.
    reopened = CheckpointStore(str(store))
    assert reopened.latest() is None and reopened.generations() == []
