"""One rank of a tiny distributed "training" run for the rank-agreement tests (gloo, CPU).

Prints one JSON line per save: {"rank", "step", "reasons", "exit"}; exits 0 when told to exit.
EVERY_STEPS adds periodic saves; EXIT_AT="RANK:STEP" makes that rank `request(exit=True)` after
that step (as a notice at its node's agent would).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from forewarn.clients import CheckpointGuard


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    every = os.environ.get("EVERY_STEPS")
    guard = CheckpointGuard(
        every_steps=int(every) if every else None,
        agree_every=int(os.environ.get("AGREE_EVERY", "4")),
    )
    exit_rank, _, exit_step = os.environ.get("EXIT_AT", "-1:-1").partition(":")
    weights = torch.zeros(4)
    step = 0
    print(json.dumps({"rank": rank, "event": "started"}), flush=True)
    while step < 100_000:
        time.sleep(0.01)
        weights += 1
        dist.all_reduce(weights)  # the "gradient" exchange a real step would do
        step += 1
        if rank == int(exit_rank) and step == int(exit_step):
            guard.request("manual", exit=True)
        if guard.due(step):
            dist.barrier()  # a collective save: every rank must be here at the same step
            result = guard.saved(step, 0.001)
            print(
                json.dumps(
                    {
                        "rank": rank,
                        "event": "saved",
                        "step": step,
                        "reasons": list(result.reasons),
                        "exit": result.exit,
                    }
                ),
                flush=True,
            )
            if result.exit:
                break
    guard.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
