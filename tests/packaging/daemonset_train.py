"""A torch training loop as a DaemonSet-mode training pod runs it (test_shared_sockets.py):
DataLoader workers, CheckpointGuard, an atomic save to $CKPT, exit with guard.exit_code."""

from __future__ import annotations

import os
import sys
import time

import torch
from forewarn.clients import CheckpointGuard, worker_init_fn
from torch.utils.data import DataLoader, TensorDataset

CKPT = os.environ["CKPT"]
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def save(step: int) -> float:
    began = time.monotonic()
    torch.save({"step": step, "model": model.state_dict()}, CKPT + ".tmp")
    os.replace(CKPT + ".tmp", CKPT)
    print(f"saved step {step}", flush=True)
    return time.monotonic() - began


def main() -> int:
    data = TensorDataset(torch.randn(4096, 8), torch.randn(4096, 1))
    loader = DataLoader(
        data, batch_size=8, num_workers=2, worker_init_fn=worker_init_fn(), persistent_workers=True
    )
    guard = CheckpointGuard(every_steps=1_000_000)  # saves only when told
    step = 0
    guard.resumed(step)
    print("started", flush=True)
    while True:
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            step += 1
            time.sleep(0.01)  # the scenario: a step that takes a while
            if guard.due(step) and guard.saved(step, save(step)).exit:
                return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
