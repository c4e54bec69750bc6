"""A protected worker still running while the interpreter finalizes, and an object collected
then that calls its `terminate()` (as a DataLoader iterator's `__del__` does). Exits 0, and
prints nothing, once the interpreter is done.

    terminate_at_finalization.py
"""

from __future__ import annotations

import builtins
import multiprocessing
import signal
from collections.abc import Callable
from multiprocessing import process as mp_process
from typing import Any

from forewarn.clients.workers import worker_init_fn


def worker(init: Callable[[int], None], started: Any) -> None:
    init(0)
    started.set()
    while True:  # until a signal ends it (one a handler passes by returns here)
        signal.pause()


class StopsAtCollection:
    def __init__(self, child: Any) -> None:
        self.child = child

    def __del__(self) -> None:
        self.child.terminate()


if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    started = context.Event()
    child = context.Process(target=worker, args=(worker_init_fn(), started), daemon=True)
    child.start()
    assert started.wait(30)
    # Not stopped by multiprocessing's exit handler: still running as the interpreter finalizes.
    mp_process._children.discard(child)  # type: ignore[attr-defined]
    builtins.forewarn_test_holder = StopsAtCollection(child)  # type: ignore[attr-defined]
