"""A script that makes its CheckpointGuard at module level and its loop under
`if __name__ == "__main__":`, with a protected spawn or forkserver worker (given
`worker_init_fn()`, as a DataLoader worker is): the worker imports this module, guard
included, before its init. Prints one JSON object from the worker: its SIGTERM handler's name,
and whether its copy of the guard subscribes to the agent, reads the flag file or handles
signals.

    guard_in_worker_import.py spawn|forkserver
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from forewarn.clients import CheckpointGuard
from forewarn.clients.workers import worker_init_fn

guard = CheckpointGuard(every_steps=100)


def worker(init: Callable[[int], None], done: Any) -> None:
    init(0)
    time.sleep(0.6)  # the guard's ticker looks at its handlers every 0.25 s
    handler = signal.getsignal(signal.SIGTERM)
    print(
        json.dumps(
            {
                "handler": getattr(handler, "__name__", str(handler)),
                "notices": guard.notices is not None,
                "flag_file": guard.flag_file is not None,
                "signals": sorted(guard._watched),
            }
        ),
        flush=True,
    )
    done.set()


if __name__ == "__main__":
    context = multiprocessing.get_context(sys.argv[1])
    done = context.Event()
    process = context.Process(target=worker, args=(worker_init_fn(), done))
    process.start()
    assert done.wait(60)
    process.join(30)
    guard.close()
