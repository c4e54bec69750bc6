"""A process that reads a DataLoader and prints one line per batch; it leaves from inside the
loop at batch `STOP_AT` (the way a job exits after its final save).

    loader_job.py guarded|guard|plain STOP_AT [START_METHOD WORKERS [keep]]

`guarded`: the DataLoader is given `worker_init_fn()`; `guard`: it is given none, and the job
makes a CheckpointGuard (which handles SIGTERM) before it starts its workers; `plain`: neither.

Two workers started the default way unless told. A SIGTERM to the process itself does not end
it (the guard's handler would let it save first). With `keep` the loop's iterator is still
referenced when the job exits (as a module-level loader or an exception's traceback keeps it),
so multiprocessing's exit handler stops the workers, not the DataLoader. With LOADER_JOB_HOLD=PATH
a worker creates PATH while it starts (before its worker_init_fn) and waits there until PATH is
removed: a spawn or forkserver worker as it unpickles the dataset, a fork worker once torch's
worker loop has set its signal handlers (then seeds: the last of its start). With
LOADER_JOB_PRELOAD=MODULES the job calls `multiprocessing.set_forkserver_preload(MODULES)`
(comma-separated) before it starts its workers."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time

import torch
from forewarn.clients import CheckpointGuard, worker_init_fn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils import signal_handling


class Slow(Dataset[int]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> int:
        time.sleep(0.02)
        return index

    def __reduce__(self) -> tuple[object, ...]:
        return (unpickled_in_worker, ())


def unpickled_in_worker() -> Slow:
    """A spawn or forkserver worker unpickles the dataset before its worker_init_fn runs: start
    a thread there, as libraries do on import (OpenBLAS, CUDA). Like theirs, its signal mask is
    the one the worker started with."""
    threading.Thread(target=threading.Event().wait, name="library", daemon=True).start()
    hold_while_starting()  # as while it imports the main module
    return Slow()


def hold_while_starting() -> None:
    """Still starting: wait there until the test says."""
    hold = os.environ.get("LOADER_JOB_HOLD")
    if hold:
        with open(hold, "x"):
            pass
        while os.path.exists(hold):
            time.sleep(0.01)


def torch_worker_signal_handlers_then_hold() -> None:
    TORCH_WORKER_SIGNAL_HANDLERS()
    hold_while_starting()


TORCH_WORKER_SIGNAL_HANDLERS = signal_handling._set_worker_signal_handlers


KEPT: list[object] = []


def main() -> int:
    # As CheckpointGuard's handler does, a SIGTERM to this process only asks for an exit after
    # the save: the loop goes on to its planned end.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    guarded = sys.argv[1] == "guarded"
    if sys.argv[1] == "guard":
        CheckpointGuard(notices=False)  # its handler only asks for an exit: the loop goes on
    stop_at = int(sys.argv[2])
    start_method = sys.argv[3] if len(sys.argv) > 3 else None
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    if start_method == "fork":
        # A fork worker unpickles nothing: it holds where torch's worker loop goes on to seed.
        signal_handling._set_worker_signal_handlers = torch_worker_signal_handlers_then_hold
    loader = DataLoader(
        Slow(),
        batch_size=None,
        num_workers=workers,
        multiprocessing_context=start_method,
        worker_init_fn=worker_init_fn() if guarded else None,
    )
    preload = os.environ.get("LOADER_JOB_PRELOAD")
    if preload:
        # The job sets the fork server's preload itself (comma-separated modules), after
        # forewarn was imported and its guard made, before the first worker starts the server.
        multiprocessing.set_forkserver_preload(preload.split(","))
    batches = iter(loader)
    if sys.argv[5:] == ["keep"]:
        KEPT.append(batches)
    pids = [worker.pid for worker in batches._workers]  # type: ignore[attr-defined]
    for index in batches:
        # Batch i comes from worker i % workers: from batch `workers` on, every worker has
        # started (and run its worker_init_fn).
        started = index >= workers
        print(json.dumps({"batch": int(index), "workers": pids if started else []}), flush=True)
        if index >= stop_at:
            print(json.dumps({"leaving": time.time()}), flush=True)
            return 0
    return 1


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
