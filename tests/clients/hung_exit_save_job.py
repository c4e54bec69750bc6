"""One rank of `forewarn.clients.demo_torch` whose checkpoint write, on rank HANG_RANK, does
not return: after writing its state it opens the FIFO at HANG_FIFO for writing, which no
process reads (a write into a hung mount, without FUSE).

Run by torchrun as a script; takes demo_torch's flags."""

from __future__ import annotations

import os
import sys
from typing import Any

import forewarn.clients.checkpoint as checkpoint
from forewarn.clients import demo_torch

_save_training_state = checkpoint.save_training_state


def _hanging_save(gen: Any, **state: Any) -> Any:
    saved = _save_training_state(gen, **state)
    if os.environ.get("RANK") == os.environ["HANG_RANK"]:
        with open(os.environ["HANG_FIFO"], "wb") as stuck:  # blocks: no reader
            stuck.write(b"never")
    return saved


# demo_torch imports it from the package when it starts.
checkpoint.save_training_state = _hanging_save

if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.exit(demo_torch.main())
