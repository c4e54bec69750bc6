"""One rank of a torchrun job that saves by itself, as the README's "lines to add to a training
loop" do: each rank writes its own file, rank 1 more slowly (SLOW_RANK_SAVE_SECONDS; rank 0
SAVE_SECONDS). Every rank prints one JSON line per event with its rank and the wall time.

Run by torchrun as a script: `--dir DIR`."""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from forewarn.clients import CheckpointGuard


def say(event: str, **fields: object) -> None:
    line = {"event": event, "rank": dist.get_rank(), "t": time.time(), **fields}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> int:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    directory = sys.argv[sys.argv.index("--dir") + 1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = float(os.environ.get("SLOW_RANK_SAVE_SECONDS", "0"))
    seconds = slow if rank == 1 else float(os.environ.get("SAVE_SECONDS", "0"))
    weights = torch.zeros(4)

    def save(step: int) -> float:
        started = time.monotonic()
        say("saving", step=step)
        time.sleep(seconds)  # the rank's own write, slower on rank 1
        path = os.path.join(directory, f"rank{rank}.pt")
        torch.save({"weights": weights, "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)
        say("saved", step=step)
        return time.monotonic() - started

    guard = CheckpointGuard(every_steps=100000, agree_every=2)
    step = 0
    guard.resumed(step)
    say("started", step=step)
    while step < 100000:
        dist.all_reduce(weights)  # the step's collective, as DDP's
        time.sleep(0.05)
        step += 1
        say("step", step=step)
        if guard.due(step) and guard.saved(step, save(step)).exit:
            break
    say("exit", step=step, code=guard.exit_code)
    return guard.exit_code


if __name__ == "__main__":
    sys.exit(main())
