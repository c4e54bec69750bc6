"""A pool worker ends as soon as its main process ends, whatever it is doing.

A pool's worker has no lifeline (`workers_lifeline`): the lifeline is cut at the main process's
exit, before the pool's finalizer, and a worker it ended while holding the lock of the pool's
task queue left that finalizer waiting for the lock for ever. It watches its main process's
end instead, which at a clean exit comes after the finalizer has stopped it.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import threading
from collections.abc import Callable

from .workers_protect import _end_when_orphaned, _exit_as_asked


def end_with_parent() -> None:
    """In a pool worker, from its initializer: end it (`_exit_as_asked`) once its main process
    is gone. Without this, a worker whose main process alone was SIGKILLed (the OOM killer)
    ran its task to its end, a minute in the walk, any length in a job, on the node the next
    job is given. The main process itself is watched, not the parent: a forkserver worker's
    parent, the fork server, outlived the main process's SIGKILL while its workers ran."""
    parent = os.getppid()
    known = multiprocessing.parent_process()
    main = known.pid if known is not None and known.pid is not None else parent
    if main != parent and not _alive(main):
        _exit_as_asked()  # the main process died before this worker's init
    try:
        # A pidfd, not the pid: readable once that very process has ended, never another's.
        watched = os.pidfd_open(main)
    except (AttributeError, OSError):  # before Linux 5.3, or not Linux: the parent, polled
        _start(_end_when_orphaned, parent)
        return
    if os.getppid() != parent:  # reparented meanwhile: the main process is gone
        os.close(watched)
        _exit_as_asked()
    _start(_end_when_ended, watched)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process of that pid: not ours, but not gone either
    return True


def _end_when_ended(watched: int) -> None:
    poller = select.poll()
    poller.register(watched, select.POLLIN)
    while not poller.poll():  # no timeout: it returns only once the process has ended
        pass
    _exit_as_asked()


def _start(target: Callable[..., None], *args: object) -> None:
    threading.Thread(target=target, args=args, name="forewarn-worker-parent", daemon=True).start()


__all__ = ["end_with_parent"]
