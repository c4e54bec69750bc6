"""A torch training loop with a CheckpointGuard whose DataLoader (or process pool: a Pool, a
ProcessPoolExecutor) feeds it from two workers whose batches are slow, so that the prefetched
ones run out within a few steps; run by hand in a terminal. It records each step, each save
and its exit code in a file (the terminal is gone by then)
and ends with `sys.exit(guard.exit_code)`.

    hangup_loader_job.py RECORD loader|pool|executor fork|spawn|forkserver [INIT [prints]]

INIT, the DataLoader's worker_init_fn: none (the default), ignore_job_signals (given
uncalled, as people write it) or worker_init_fn() (the README's spelling). `prints`: each
DataLoader worker prints a line for each item it loads (a dataset's own progress or warnings).
Once a file `long-tasks` is in the working directory, each pool task takes a minute, and
first leaves a file `long-task-<its worker's pid>` there. Given a file `hold-a-start` there, a
spawn or forkserver worker (a pool's or the DataLoader's) other than the first to start is held
as it imports this module (before its protection, its signals still blocked), first leaving a
file `held-<its pid>`: it reads the FIFO `release` there until the test closes its end
(job_session.HeldStart).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import torch
from forewarn.clients import CheckpointGuard, worker_init_fn
from forewarn.clients.workers import ignore_job_signals
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset[int]):
    def __init__(self, prints: bool = False) -> None:
        self.prints = prints

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int) -> int:
        time.sleep(0.05)  # the scenario: a slow batch, so the prefetch runs out
        if self.prints:
            print(f"loaded item {index}", flush=True)
        return index


def square(x: int) -> int:
    time.sleep(0.01)  # the scenario: a pool task's work
    if os.path.exists("long-tasks"):  # the test's: from here on a task takes a minute
        with open(f"long-task-{os.getpid()}", "w"):
            pass
        time.sleep(60)
    return x * x


def hold_a_later_start() -> None:
    """The test's: a spawn or forkserver worker that is not the first to start waits here, in
    its import of the main module, as one still importing torch does on a loaded machine."""
    try:
        with open("first-start", "x"):
            return
    except FileExistsError:
        pass
    with open(f"held-{os.getpid()}", "w"):
        pass
    with open("release", "rb") as release:
        release.read()  # the end of the FIFO: once the test closes its write end


if __name__ == "__mp_main__" and os.path.exists("hold-a-start"):
    hold_a_later_start()


def main() -> int:
    record = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115 (open for the whole run)
    kind, method = sys.argv[2], sys.argv[3]
    init = {"none": None, "ignore_job_signals": ignore_job_signals}.get(
        sys.argv[4] if len(sys.argv) > 4 else "none", worker_init_fn()
    )
    guard = CheckpointGuard(every_steps=100_000, notices=False)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    context = multiprocessing.get_context(method)
    if kind in ("pool", "executor"):
        pool = context.Pool(2) if kind == "pool" else ProcessPoolExecutor(2, mp_context=context)
        batches = iter(
            lambda: torch.tensor(list(pool.map(square, range(4))), dtype=torch.float), None
        )
    else:
        loader = DataLoader(
            Slow(prints=sys.argv[5:6] == ["prints"]),
            batch_size=2,
            num_workers=2,
            multiprocessing_context=context,
            worker_init_fn=init,
        )
        batches = (batch.float() for batch in loader)
    for step, batch in enumerate(batches, start=1):
        loss = model(batch.view(-1, 1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}", flush=True)
        record.write(json.dumps({"step": step}) + "\n")
        if guard.due(step):
            record.write(json.dumps({"saved": step}) + "\n")
            if guard.saved(step).exit:
                break
    record.write(json.dumps({"exit": guard.exit_code}) + "\n")
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
