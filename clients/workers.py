"""DataLoader workers that outlive a SIGTERM aimed at the whole job.

systemd's `KillMode=control-group` sends SIGTERM to every process of the unit, and torchrun
forwards SIGTERM to each rank's whole process group: both reach the DataLoader's worker
processes too. A worker killed that way makes the training loop raise `RuntimeError:
DataLoader worker (pid …) is killed by signal: Terminated` at its next batch, before the
guard's save. Workers that ignore SIGTERM and SIGINT keep feeding the loop until it has saved;
they still end with the main process (the DataLoader shuts them down, and each worker exits
when it sees its parent gone) and with the platform's SIGKILL.

    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn())
    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn(my_seed_fn))
"""

from __future__ import annotations

import signal
from collections.abc import Callable

IGNORED_IN_WORKERS = (signal.SIGTERM, signal.SIGINT)


def ignore_job_signals(worker_id: int | None = None) -> None:
    """A `worker_init_fn`: this worker ignores SIGTERM and SIGINT (the main process acts)."""
    for signum in IGNORED_IN_WORKERS:
        signal.signal(signum, signal.SIG_IGN)


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
