"""One rank of a tiny distributed "training" run for the rank-agreement tests (gloo, CPU).

Prints one JSON line per save: {"rank", "step", "reasons", "exit"}; exits 0 when told to exit.
EVERY_STEPS adds periodic saves; EXIT_AT="RANK:STEP" makes that rank `request(exit=True)` after
that step (as a notice at its node's agent would). Each notice its guard receives is a line
{"rank", "event": "notice", "action", "id"}. HOLD_FILE: this rank takes no step while that file
exists, and every other rank waits for it in the step's all-reduce (a test's pause, so a notice
reaches every rank it was sent to before the ranks next agree).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from forewarn.clients import CheckpointGuard

_say_lock = threading.Lock()


def say(**fields: Any) -> None:
    # Notices are said from the guard's thread: one write per whole line, under a lock.
    with _say_lock:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def main() -> int:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    every = os.environ.get("EVERY_STEPS")
    guard = CheckpointGuard(
        every_steps=int(every) if every else None,
        agree_every=int(os.environ.get("AGREE_EVERY", "4")),
    )
    if guard.notices is not None:
        guard.notices.add_listener(
            lambda event: say(rank=rank, event="notice", action=event.action, id=event.id)
        )
    hold = os.environ.get("HOLD_FILE")
    exit_rank, _, exit_step = os.environ.get("EXIT_AT", "-1:-1").partition(":")
    weights = torch.zeros(4)
    step = 0
    say(rank=rank, event="started")
    while step < 100_000:
        time.sleep(0.01)
        while hold is not None and Path(hold).exists():
            time.sleep(0.01)
        weights += 1
        dist.all_reduce(weights)  # the "gradient" exchange a real step would do
        step += 1
        if rank == int(exit_rank) and step == int(exit_step):
            guard.request("manual", exit=True)
        if guard.due(step):
            dist.barrier()  # a collective save: every rank must be here at the same step
            result = guard.saved(step, 0.001)
            say(rank=rank, event="saved", step=step, reasons=list(result.reasons), exit=result.exit)
            if result.exit:
                break
    guard.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
