"""A DataLoader whose worker runs torch in a daemon thread of its own (a dataset's prefetch or
decode thread), left mid-epoch: the worker ends while that thread is inside a torch op, which
releases the GIL. Prints the worker's exit code.

    spinning_worker_job.py spawn|forkserver ATEXIT_FILE

ATEXIT_FILE: the worker's atexit handler writes it (a dataset that flushes at its exit).
"""

from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path

import torch
from forewarn.clients import worker_init_fn
from torch.utils.data import DataLoader, Dataset


def spin() -> None:
    matrix = torch.randn(300, 300)
    while True:
        matrix @ matrix  # each op releases the GIL while it runs


class Spinning(Dataset[int]):
    def __init__(self, atexit_file: str) -> None:
        self.atexit_file = atexit_file
        self.started = False

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        if not self.started:
            self.started = True
            atexit.register(Path(self.atexit_file).write_text, "ran")
            threading.Thread(target=spin, daemon=True).start()
        return index


def main() -> None:
    loader = DataLoader(
        Spinning(sys.argv[2]),
        batch_size=2,
        num_workers=1,
        multiprocessing_context=sys.argv[1],
        worker_init_fn=worker_init_fn(),
    )
    batches = iter(loader)
    for _ in range(3):
        next(batches)
    worker = batches._workers[0]  # type: ignore[attr-defined]
    del batches  # left mid-epoch: the DataLoader stops its worker
    worker.join(60)
    print(f"worker exit code {worker.exitcode}", flush=True)


if __name__ == "__main__":
    main()
