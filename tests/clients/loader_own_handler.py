"""A job with no guard whose DataLoader's `worker_init_fn` installs the worker's own SIGTERM
handler (one that writes OUT_DIR/flushed-PID and exits), as a worker that flushes what it
writes does. Worker 0 is sent SIGTERM by this, its main process; worker 1 by another process.
Prints the worker pids, then exits once both have ended.

    loader_own_handler.py OUT_DIR [guarded-spawn]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import forewarn.clients  # noqa: F401  # imported, as a job that uses it does; no guard made
import torch
from torch.utils.data import DataLoader, Dataset

OUT = Path(sys.argv[1])


class Slow(Dataset[int]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> int:
        time.sleep(0.01)
        return index

    def __reduce__(self) -> tuple[object, ...]:
        return (unpickled_in_worker, ())


def unpickled_in_worker() -> Slow:
    """A spawn worker unpickles the dataset before its init: start a thread there, as
    libraries do on import (OpenBLAS), with the signal mask the worker started with."""
    threading.Thread(target=threading.Event().wait, name="library", daemon=True).start()
    return Slow()


def flush_on_sigterm(worker_id: int) -> None:
    def flush(signum: int, frame: object) -> None:
        (OUT / f"flushed-{os.getpid()}").write_text("flushed")
        os._exit(0)

    signal.signal(signal.SIGTERM, flush)


def guarded_spawn() -> None:
    """Under a guard, one spawn worker is sent SIGTERM by another process, five times, then
    read 40 more batches: prints the worker's pid, and "read" if they came."""
    from forewarn.clients import CheckpointGuard

    guard = CheckpointGuard(notices=False, flag_file=None)
    loader = DataLoader(
        Slow(),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
        worker_init_fn=flush_on_sigterm,
    )
    batches = iter(loader)
    next(batches)
    print(json.dumps([batches._workers[0].pid]), flush=True)  # type: ignore[attr-defined]
    for _ in range(5):
        subprocess.run(["kill", "-TERM", str(batches._workers[0].pid)], check=True)  # type: ignore[attr-defined]
    for _ in range(40):
        next(batches)
    print("read", flush=True)
    guard.close()
    os._exit(0)


def main() -> None:
    if sys.argv[2:] == ["guarded-spawn"]:
        guarded_spawn()
    loader = DataLoader(
        Slow(),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
        worker_init_fn=flush_on_sigterm,
    )
    batches = iter(loader)
    for _ in range(4):  # both workers have run their init
        next(batches)
    workers = [worker.pid for worker in batches._workers]  # type: ignore[attr-defined]
    print(json.dumps(workers), flush=True)
    os.kill(workers[0], signal.SIGTERM)
    subprocess.run(["kill", "-TERM", str(workers[1])], check=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(
        worker.is_alive()
        for worker in batches._workers  # type: ignore[attr-defined]
    ):
        time.sleep(0.01)
    os._exit(0)  # not the DataLoader's shutdown: the workers are gone or stuck


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
