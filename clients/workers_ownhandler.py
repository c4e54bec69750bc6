"""The SIGTERM handler a worker's own init installed: run only for a SIGTERM it is to end on.

A protected worker's watching thread takes each SIGTERM first (`workers_protect`); one the
worker is to end on is handed to the handler its own `worker_init_fn` installed, if it did, as
it would have run without forewarn. Any other SIGTERM a thread of the worker took is passed by.
"""

from __future__ import annotations

import _thread
import signal
from collections.abc import Callable
from typing import Any

from . import _programs


def _to_workers_own_handler() -> bool:
    """Hand a SIGTERM the worker is to end on to the handler its own `worker_init_fn`
    installed (one that flushes what the worker writes, then exits), if it did: without
    forewarn that handler ran on it; this thread took it first, and the worker ended without.
    Run in the worker's main thread, as Python runs handlers, once it is back in Python (a
    wait for the next index: within a batch, or torch's 5 s status check when idle)."""
    handler = signal.getsignal(signal.SIGTERM)
    if not callable(handler) or handler is _programs.pass_by:
        # _protect's own, SIG_IGN, SIG_DFL, or one set outside Python
        return False
    if isinstance(handler, _Gated):
        handler.hand()
    _thread.interrupt_main(signal.SIGTERM)
    return True


class _Gated:
    """A SIGTERM handler the worker's own init installed, run only for a SIGTERM the watching
    thread hands it (_to_workers_own_handler). A thread the worker had before its init (a
    spawn or forkserver worker's, OpenBLAS's) may take a SIGTERM itself; Python then ran that
    handler in the main thread whoever sent it, and a job-wide SIGTERM under a guard ended
    the worker before the save. Such a SIGTERM is now passed by, as one ignored is."""

    def __init__(self, handler: Callable[[int, Any], object]) -> None:
        self.handler = handler
        # Two counts, each written by one thread only (no lock a handler could wait on): the
        # SIGTERMs the watching thread handed on, and those the main thread ran this for.
        self.handed = 0
        self.ran = 0

    def hand(self) -> None:
        self.handed += 1

    def __call__(self, signum: int, frame: Any) -> None:
        if self.ran < self.handed:
            self.ran += 1
            self.handler(signum, frame)


def _gate_workers_own_handler() -> None:
    handler = signal.getsignal(signal.SIGTERM)
    if (
        callable(handler)
        and handler is not _programs.pass_by
        and not isinstance(handler, _Gated)
        and hasattr(signal, "sigwaitinfo")
    ):
        signal.signal(signal.SIGTERM, _Gated(handler))
