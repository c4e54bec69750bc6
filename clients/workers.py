"""DataLoader workers that outlive a SIGTERM aimed at the whole job.

systemd's `KillMode=control-group` sends SIGTERM to every process of the unit, and torchrun
forwards SIGTERM to each rank's whole process group: both reach the DataLoader's worker
processes too. A worker killed that way makes the training loop raise `RuntimeError:
DataLoader worker (pid …) is killed by signal: Terminated` at its next batch, before the
guard's save. Workers that ignore SIGINT, and SIGTERM from anyone but their own main process,
keep feeding the loop until it has saved; they still end with the main process (the
DataLoader and multiprocessing stop them with their own SIGTERM, and a worker exits when it
sees its parent gone) and with the platform's SIGKILL.

    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn())
    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn(my_seed_fn))
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

IGNORED_IN_WORKERS = (signal.SIGTERM, signal.SIGINT)


def ignore_job_signals(worker_id: int | None = None) -> None:
    """A `worker_init_fn`: this worker ignores SIGINT, and SIGTERM from anyone but its own main
    process. The main process's own SIGTERM still ends it: the DataLoader and
    multiprocessing's exit handler stop workers that way, and a worker deaf to them would hold
    the job's exit up. The sender is known from the signal's siginfo (`sigwaitinfo`, Linux);
    where that is not available SIGTERM is ignored outright."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not hasattr(signal, "sigwaitinfo"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return
    parent = os.getppid()
    # A handler inherited through fork (the guard's, in the main process) is not the worker's.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Blocked in this thread and in every thread started after it; one thread takes it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(
        target=_sigterm_from_parent_only, args=(parent,), name="forewarn-worker", daemon=True
    ).start()


def _sigterm_from_parent_only(parent: int) -> None:
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == parent or os.getppid() != parent:
            # From the main process (or the main process is gone): end now, as SIGTERM would.
            os._exit(128 + signal.SIGTERM)


class _Chained:
    """Picklable (workers may start with `spawn`): ignore the signals, then the user's own."""

    def __init__(self, then: Callable[[int], object] | None) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        ignore_job_signals(worker_id)
        if self.then is not None:
            self.then(worker_id)


def worker_init_fn(then: Callable[[int], object] | None = None) -> Callable[[int], None]:
    """A DataLoader `worker_init_fn` that makes the worker ignore SIGTERM and SIGINT, then
    calls `then(worker_id)` (your own init, e.g. seeding) when given."""
    return _Chained(then)


__all__ = ["IGNORED_IN_WORKERS", "ignore_job_signals", "worker_init_fn"]
