"""A process that reads a DataLoader with two workers and prints one line per batch; it leaves
from inside the loop at batch `STOP_AT` (the way a job exits after its final save)."""

from __future__ import annotations

import json
import os
import sys
import time

import torch
from forewarn.clients import worker_init_fn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset[int]):
    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int) -> int:
        time.sleep(0.02)
        return index


def main() -> int:
    guarded = sys.argv[1] == "guarded"
    stop_at = int(sys.argv[2])
    loader = DataLoader(
        Slow(),
        batch_size=None,
        num_workers=2,
        worker_init_fn=worker_init_fn() if guarded else None,
    )
    batches = iter(loader)
    pids = [worker.pid for worker in batches._workers]  # type: ignore[attr-defined]
    for index in batches:
        # From batch 2 on both workers have started (and run their worker_init_fn).
        print(json.dumps({"batch": int(index), "workers": pids if index >= 2 else []}), flush=True)
        if index >= stop_at:
            print(json.dumps({"leaving": time.time()}), flush=True)
            return 0
    return 1


if __name__ == "__main__":
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
