"""The README's training loop on a real torch model whose batches come from DataLoader workers
given no `worker_init_fn` (as most users write it), saving where the next run resumes from.

    readme_loader_loop.py CHECKPOINT persistent|restarted [[default:]fork|spawn|forkserver]

Prints `resumed N` and then `step N` after each completed step. The first workers start before
the guard is made; an epoch is 8 steps, and without persistent workers the DataLoader starts
new ones at each. Workers start the default way unless told; `default:METHOD` makes METHOD the
default start method (`multiprocessing.set_start_method`, as Python 3.14 makes forkserver the
default on Linux) and gives the DataLoader none."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Iterator

import torch
from forewarn.clients import CheckpointGuard
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.03)  # the loop waits on its workers, as data-bound loops do
        return torch.full((4,), float(index)), torch.tensor([float(index)])


def main() -> int:
    checkpoint = sys.argv[1]
    start_method = sys.argv[3] if len(sys.argv) > 3 else None
    if start_method is not None and start_method.startswith("default:"):
        multiprocessing.set_start_method(start_method.removeprefix("default:"), force=True)
        start_method = None
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(
        Pairs(),
        batch_size=2,
        num_workers=2,
        persistent_workers=sys.argv[2] == "persistent",
        multiprocessing_context=start_method,
    )
    # Started before the guard is made, as a job sets up its data first.
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(loader)

    def train_one_step() -> None:
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    def resume() -> int:
        if not os.path.exists(checkpoint):
            return 0
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])

    def save(step: int) -> None:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)

    # The README's lines from here on.
    total_steps = 100_000
    guard = CheckpointGuard(every_steps=600)
    step = resume()
    print("resumed", step, flush=True)
    guard.resumed(step)
    if guard.due(step) and guard.save(step, save).exit:
        return guard.exit_code
    while step < total_steps:
        train_one_step()
        step += 1
        print("step", step, flush=True)
        if guard.due(step):
            save(step)
            if guard.saved(step).exit:
                break
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
