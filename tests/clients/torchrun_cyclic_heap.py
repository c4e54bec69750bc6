"""One rank of `forewarn.clients.demo_torch` (DDP, gloo, DataLoader workers, an evaluation
pass, the guard and a CheckpointStore) holding garbage in a reference cycle whose finalizer
takes CYCLE_FINALIZER_SECONDS: the work Python's exit does in its final collection of the
heap, which took a torchrun rank 2.5-5 s on the loaded 2-core machine (a faulthandler dump:
"Garbage-collecting"), made long enough to outlast any lead whatever the load.

Run by torchrun as a script; takes demo_torch's flags."""

from __future__ import annotations

import os
import sys
import time

from forewarn.clients import demo_torch


class _CycleWithFinalizer:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.itself = self  # only the cyclic collector ever frees it

    def __del__(self) -> None:
        time.sleep(self.seconds)


# Held until the exit: then only the final collection frees it.
HELD = _CycleWithFinalizer(float(os.environ.get("CYCLE_FINALIZER_SECONDS", "0")))

if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    sys.exit(demo_torch.main())
