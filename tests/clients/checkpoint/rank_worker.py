"""One rank of a two-rank job on the gloo backend (run as a subprocess by test_ranks.py).

Prints one JSON line per event so the test can see what each rank saw.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from forewarn.clients.checkpoint import (
    CheckpointStore,
    CommitError,
    load_training_state,
    save_training_state,
)


def main() -> None:
    rank, world = int(sys.argv[1]), int(sys.argv[2])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for url in sys.argv[3:]:
        run(url, rank, world)
    dist.destroy_process_group()


def run(url: str, rank: int, world: int) -> None:
    def say(**fields: object) -> None:
        print(json.dumps({"url": url, **fields}), flush=True)

    store = CheckpointStore(url, keep=2)
    torch.manual_seed(100 + rank)
    model = torch.nn.Linear(4, 2)

    with store.save(10, metadata={"epoch": 1}) as gen:
        assert (gen.rank, gen.world_size) == (rank, world)
        gen.write_bytes(f"shard-{rank}.bin", bytes([rank]) * (1000 + rank))
        save_training_state(gen, model=model, extra={"rank": rank})
    assert gen.committed is not None
    say(event="committed", rank=rank, step=gen.committed.step, files=sorted(gen.committed.files))

    # Rank 1 fails mid-save: nobody commits, every rank learns it.
    try:
        with store.save(20) as gen:
            gen.write_bytes(f"shard-{rank}.bin", b"x")
            if rank == 1:
                raise RuntimeError("disk full on rank 1")
    except (CommitError, RuntimeError) as exc:
        say(event="failed", rank=rank, error=f"{type(exc).__name__}: {exc}")

    # Both ranks write the same name: rank 0 refuses to commit.
    try:
        with store.save(30) as gen:
            gen.write_bytes("same.bin", bytes([rank]))
    except CommitError as exc:
        say(event="collision", rank=rank, error=str(exc))

    latest = store.latest(verify="checksums")
    assert latest is not None
    expected = model.weight.detach().clone()
    torch.nn.init.zeros_(model.weight)
    state = load_training_state(latest, model=model)
    say(
        event="resumed",
        rank=rank,
        step=latest.step,
        extra=state.extra,
        weights_match=bool(torch.equal(model.weight, expected)),
    )


if __name__ == "__main__":
    main()
