"""An exit's save on course to end before the terminate's deadline is not said to run in a
lead shorter than it needs: a real agent's terminate, a real torch job whose store writes at a
slow disk's pace, its background save timed before the terminate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from forewarn.testing import eventually, start_agent
from support import requires

JOB = """
import logging, sys, time
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import DelegatingBackend

RATE = 4 << 20  # bytes a second: the slow disk of the scenario


class Slow(DelegatingBackend):
    def writer(self, key, on_done=None):
        writer = self.inner.writer(key, on_done)
        write = writer.write

        def slow(data):
            time.sleep(memoryview(data).nbytes / RATE)  # the scenario: a slow disk
            return write(data)

        writer.write = slow
        return writer


logging.basicConfig(level=logging.INFO, stream=sys.stdout)
store = CheckpointStore(backend=Slow(CheckpointStore(sys.argv[1]).backend))
state = {"w": torch.zeros(2 << 20)}  # 8 MiB: about 2 s a save
guard = CheckpointGuard(every_steps=10**9, store=store, background=True, flag_file=None)
step = 0
while True:
    state["w"] += 1
    step += 1
    if step == 3:
        guard.request("timed")  # a background save, which times the store for the exit's
    if guard.due(step):
        if guard.save_state(step, state).exit:
            break
guard.close()
print("exit", guard.exit_code, flush=True)
sys.exit(guard.exit_code)
"""


@requires("torch")
def test_an_exit_save_on_course_for_its_deadline_is_not_said_to_need_more(
    tmp_path: Path,
) -> None:
    """found: a torch job (75 MiB state, a 40 MiB/s store) given a 10 s terminate while a
    background save uploaded: the final save (its estimate 3.2 s, started 7.2 s before the
    deadline) was said at 4.8 s before it to run "in a lead shorter than it needs; killed at
    the deadline, the job resumes from step 20", and committed 0.5 s later."""
    out = tmp_path / "job.out"
    with start_agent("local") as agent:
        with out.open("w") as sink:
            job = subprocess.Popen(
                [sys.executable, "-c", JOB, str(tmp_path / "ckpt")],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**os.environ, **agent.env},
                start_new_session=True,
            )
        try:
            eventually(lambda: "durable after" in out.read_text(), 120, "the timed save")
            agent.notify("terminate", "6s")
            assert job.wait(60) == 143, out.read_text()
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
    text = out.read_text()
    assert "final checkpoint at step" in text, text
    assert "has not ended" not in text, text
