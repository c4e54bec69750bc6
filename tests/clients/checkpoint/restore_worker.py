"""One rank of a job that saves, then restores, a torch model and optimizer on the gloo
backend (run by test_ranks.py): where `store.restore` resumes it.

    restore_worker.py RANK WORLD URL

Each rank trains a small model, saves its training state at steps 10 and 20 (one multi-rank
generation each), rank 1 then flips a byte of its own step-20 file (the sizes stay right),
and every rank restores into a fresh model. Prints one JSON line: the step restored and
whether the weights are those saved at it.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from forewarn.clients.checkpoint import (
    CheckpointStore,
    load_training_state,
    save_training_state,
)


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def main() -> None:
    rank, world, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", rank=rank, world_size=world)
    store = CheckpointStore(url)
    torch.manual_seed(rank)
    model, optimizer = build()
    weights = {}
    for step in (10, 20):
        model(torch.randn(3, 4)).pow(2).sum().backward()
        optimizer.step()
        with store.save(step) as gen:
            save_training_state(gen, model=model, optimizer=optimizer)
        weights[step] = [p.detach().clone() for p in model.parameters()]
    if rank == 1:
        key = "step-000000000020/training_state.rank00001.pt"
        with store.backend.open_read(key) as stream:
            raw = bytearray(stream.read())
        raw[len(raw) // 2] ^= 0xFF
        with store.backend.writer(key) as stream:
            stream.write(bytes(raw))
    dist.barrier()
    fresh, fresh_optimizer = build()
    restored = store.restore(
        lambda generation: load_training_state(generation, model=fresh, optimizer=fresh_optimizer)
    )
    assert restored is not None
    generation, state = restored
    same = all(
        torch.equal(got, want)
        for got, want in zip(fresh.parameters(), weights[generation.step], strict=True)
    )
    print(
        json.dumps(
            {"rank": rank, "step": generation.step, "state_step": state.step, "weights_match": same}
        ),
        flush=True,
    )
    store.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
