"""A job whose protected fork DataLoader worker (given `worker_init_fn()`, as the guard gives
every torch worker) is starting a program whenever the job exits: the README's loop, its
checkpoint the last step it saved.

    worker_in_program_job.py CHECKPOINT sigterm|done

The worker runs programs with `os.system` in a loop, which keeps it inside forewarn's start of
a program while the program runs (a `subprocess.Popen` is inside it from its fork to the
program's exec only: the same, for a shorter time). The job prints `in-program` once the
worker is in one, then `step N` for each step; with `sigterm` it trains until SIGTERM comes,
with `done` it ends after its first step, exiting 0.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event
from pathlib import Path

from forewarn.clients import CheckpointGuard
from forewarn.clients.workers import worker_init_fn

# Not the job's stdout: a program left running would hold it open.
PROGRAM = "exec sleep 30 >/dev/null 2>&1"


def work(init: Callable[[int], None], ready: Event) -> None:
    init(0)
    ready.set()
    while True:
        os.system(PROGRAM)


def in_a_program(pid: int) -> bool:
    # The worker has a child only while it starts (or, with os.system, runs) a program.
    return bool(Path(f"/proc/{pid}/task/{pid}/children").read_text().split())


def main() -> int:
    checkpoint, end = sys.argv[1], sys.argv[2]
    ready = multiprocessing.get_context("fork").Event()
    worker = multiprocessing.get_context("fork").Process(
        target=work, args=(worker_init_fn(), ready), daemon=True
    )
    guard = CheckpointGuard(every_steps=600)
    worker.start()
    ready.wait(30)
    assert worker.pid is not None
    deadline = time.monotonic() + 30
    while not in_a_program(worker.pid) and time.monotonic() < deadline:
        time.sleep(0.005)
    print("in-program", flush=True)
    step = 0
    while step < 100_000:
        time.sleep(0.01)  # a step
        step += 1
        print("step", step, flush=True)
        if end == "done" and step == 1:
            break
        if guard.due(step):
            Path(checkpoint).write_text(str(step))
            if guard.saved(step).exit:
                break
    guard.close()
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
