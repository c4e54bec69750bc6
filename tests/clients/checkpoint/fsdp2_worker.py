"""One rank of an FSDP2 (`fully_shard`) job on CPU with gloo, run under torchrun by
test_dcp_fsdp2.py: its model and optimizer state saved and loaded through the store's DCP
path (`save_dcp`, `load_dcp`) as a `Stateful`, as torch's DCP recipe does.

    fsdp2_worker.py save URL STEPS FULL   train STEPS steps, save_dcp as generation STEPS;
                                          rank 0 writes the full state to FULL (torch.save)
    fsdp2_worker.py train URL FULL        train until a SIGTERM (torchrun passes it on); the
                                          guard's agreed drain saves with save_dcp; rank 0
                                          writes the full state saved to FULL
    fsdp2_worker.py load URL FULL         load_dcp the newest generation onto this world;
                                          rank 0 says whether the full state equals FULL

Prints one JSON line per rank.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.dcp import load_dcp, save_dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import fully_shard


class AppState(Stateful):
    """The model's and optimizer's sharded state, as DCP's FSDP2 recipe keeps it."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optim": optimizer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )


def say(line: dict[str, Any]) -> None:
    """One JSON line on stdout in one write: the ranks share torchrun's stdout, and a print
    (its text, then its newline, two writes unbuffered) let the other rank's line in between
    (check 50c: `{"rank": 0, …}{"rank": 1, …}` on one line)."""
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Every rank takes part; rank 0 gets the whole state, on the CPU."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    return {"model": model_state, "optim": optim_state}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return bool(a == b)


def main() -> None:
    mode, url, full_path = sys.argv[1], sys.argv[2], sys.argv[-1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    store = CheckpointStore(url)
    model, optimizer = build()
    if mode == "save":
        steps = int(sys.argv[3])
        generator = torch.Generator().manual_seed(100 + rank)
        for _ in range(steps):
            model(torch.randn(4, 8, generator=generator)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        generation = save_dcp(store, steps, {"app": AppState(model, optimizer), "step": steps})
        full = full_state(model, optimizer)
        if rank == 0:
            torch.save(full, full_path)
        say({"rank": rank, "saved": generation.step})
    elif mode == "train":
        from forewarn.clients import CheckpointGuard

        guard = CheckpointGuard(notices=False, flag_file=None, agree_every=1)
        generator = torch.Generator().manual_seed(100 + rank)
        step = 0
        while True:
            model(torch.randn(4, 8, generator=generator)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            say({"rank": rank, "step": step})
            if guard.due(step):
                save_dcp(store, step, {"app": AppState(model, optimizer), "step": step})
                if guard.saved(step).exit:
                    break
        full = full_state(model, optimizer)
        if rank == 0:
            torch.save(full, full_path)
        say({"rank": rank, "trained": step, "saved": step})
        guard.close()
    else:
        generation = store.latest()
        assert generation is not None
        state: dict[str, Any] = {"app": AppState(model, optimizer), "step": -1}
        load_dcp(generation, state)
        full = full_state(model, optimizer)
        equal = same(full, torch.load(full_path)) if rank == 0 else None
        line = {"rank": rank, "world": world, "loaded": state["step"], "equal": equal}
        say(line)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    os._exit(0)  # as dcp_worker.py: no interpreter finalization under gloo's threads
