"""DataLoader workers that outlive a SIGTERM aimed at the whole job.

systemd's `KillMode=control-group` sends SIGTERM to every process of the unit, and torchrun
forwards SIGTERM to each rank's whole process group: both reach the DataLoader's worker
processes too. A worker killed that way makes the training loop raise `RuntimeError:
DataLoader worker (pid …) is killed by signal: Terminated` at its next batch, before the
guard's save. Workers that ignore SIGINT, and SIGTERM from anyone but their own main process,
keep feeding the loop until it has saved, whatever the start method (fork, spawn, forkserver).
They still end with the main process: the DataLoader stops them, a worker exits when its main
process starts to exit or dies, the main process's own SIGTERM ends it (a spawn or forkserver
worker's threads from before its init, OpenBLAS's for one, may take that SIGTERM and ignore
it), and the platform's SIGKILL ends it. A fork server started after `worker_init_fn()`
keeps SIGTERM blocked as well (its forkserver workers end with it), and its workers start with
it blocked, so that a SIGTERM sent while they import the main module cannot end them. A fork
worker is forked with SIGTERM and SIGINT blocked too (torch's worker loop first sets a SIGTERM
handler of its own, one that ends the worker on anyone's SIGTERM, and seeds). A spawn
worker is open to it until its `worker_init_fn` runs: an exec'd process inherits nothing this
module could set up for it without changing how multiprocessing starts it.

    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn())
    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn(my_seed_fn))
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing import context, reduction
from typing import Any

from . import _forkserver

IGNORED_IN_WORKERS = (signal.SIGTERM, signal.SIGINT)

# This process's lifeline to its spawn and forkserver workers: (read end, write end) of a pipe
# whose write end no other process holds. Made on first use.
_lifeline: tuple[int, int] | None = None
_lifeline_lock = threading.Lock()


def ignore_job_signals(worker_id: int | None = None) -> None:
    """A `worker_init_fn`: this worker ignores SIGINT, and SIGTERM from anyone but its own main
    process. The main process's own SIGTERM still ends it: the DataLoader and
    multiprocessing's exit handler stop workers that way, and a worker deaf to them would hold
    the job's exit up. The sender is known from the signal's siginfo (`sigwaitinfo`, Linux);
    where that is not available SIGTERM is ignored outright. Give `worker_init_fn()` instead
    under spawn and forkserver: only it also ends the worker when the main process exits,
    which matters when a thread the worker had before this call takes that SIGTERM."""
    if multiprocessing.parent_process() is None:
        # Not a worker: `worker_init_fn=ignore_job_signals()`, called where it should be
        # given. The training process itself ignored SIGINT and exited 0 on its parent's
        # SIGTERM (torchrun's, systemd's), without a save.
        raise RuntimeError(
            "ignore_job_signals() runs in a DataLoader worker, not in the training process: "
            "give worker_init_fn=ignore_job_signals (uncalled), or worker_init_fn=worker_init_fn()"
        )
    _protect(lifeline=None)


def _protect(lifeline: int | None) -> None:
    # The main process, not getppid(): a forkserver worker's parent is the fork server.
    parent = multiprocessing.parent_process()
    main = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    if hasattr(signal, "sigtimedwait") and signal.SIGTERM in signal.sigpending():
        # A forkserver worker starts with SIGTERM blocked (forewarn.clients._forkserver): one
        # sent while it started waits here; ignoring it below would drop it.
        info = signal.sigtimedwait({signal.SIGTERM}, 0)
        if info is not None and info.si_pid == main:
            _exit_as_asked()
    # Ignored for the whole process, not by a thread's mask: a spawn or forkserver worker has
    # threads before this runs (import torch starts OpenBLAS's), and a SIGTERM for the process
    # that one of them took would otherwise end the worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "sigwaitinfo"):
        # Blocked in this thread (the process's first one, which kill() targets), a SIGTERM
        # is kept rather than dropped as ignored, until a thread that does not block it takes
        # it: the one below, with its sender, or a thread the worker had before, which
        # ignores it. Threads started from here on block it too.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _start(_sigterm_from_main_only, main, os.getppid())
    if lifeline is not None:
        # Such a thread may take the main process's SIGTERM too; the lifeline still ends the
        # worker when the main process exits.
        _start(_end_with_main, lifeline)


def _start(target: Callable[..., None], *args: int) -> None:
    threading.Thread(target=target, args=args, name="forewarn-worker", daemon=True).start()


def _sigterm_from_main_only(main: int, parent: int) -> None:
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == main or os.getppid() != parent:
            # From the main process (or the main process is gone): end now.
            _exit_as_asked()


def _end_with_main(lifeline: int) -> None:
    # Nothing is ever written: the read returns empty once the main process has closed its end.
    while os.read(lifeline, 1):
        pass
    _exit_as_asked()


def _exit_as_asked() -> None:
    # Status 0, as torch's own worker handler exits on its main process's SIGTERM: the
    # DataLoader reports a worker that exits otherwise as failed, even while the main process
    # is stopping it.
    os._exit(0)


def _lifeline_read_end() -> int:
    global _lifeline
    with _lifeline_lock:
        if _lifeline is None:
            _lifeline = os.pipe()  # not inheritable: spawned programs do not get it
            # Registered after multiprocessing's own exit handler (it is starting a worker, so
            # it is loaded), so atexit runs this first: before that handler terminates and
            # joins the workers.
            atexit.register(_cut_lifeline)
        return _lifeline[0]


def _cut_lifeline() -> None:
    global _lifeline
    if _lifeline is not None:
        for fd in _lifeline:
            os.close(fd)
        _lifeline = None


def _forget_inherited_lifeline() -> None:
    # A forked child (a fork worker, a forked rank) must not hold our write end open.
    global _lifeline_lock
    _lifeline_lock = threading.Lock()
    _cut_lifeline()


os.register_at_fork(after_in_child=_forget_inherited_lifeline)

# The signal mask of a thread forking a protected fork worker, to put back in the main process.
_forking = threading.local()


def _before_fork() -> None:
    # A fork worker runs torch's worker loop, which sets a SIGTERM handler that ends it on
    # anyone's SIGTERM, and seeds, before its worker_init_fn: a job-wide SIGTERM then ended it.
    # Forked with SIGTERM and SIGINT blocked, it keeps them pending until _protect.
    if _forking_protected_worker():
        _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED_IN_WORKERS)


def _after_fork_in_parent() -> None:
    mask = _forking.__dict__.pop("mask", None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forking_protected_worker() -> bool:
    """Whether this fork starts a DataLoader worker given `worker_init_fn()`: multiprocessing's
    fork start (popen_fork's `_launch`) with such an init among the process's arguments."""
    try:
        from multiprocessing import popen_fork
    except ImportError:  # no fork on this platform
        return False
    launch = popen_fork.Popen._launch.__code__  # type: ignore[attr-defined]
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not launch:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return False
    args = getattr(frame.f_locals.get("process_obj"), "_args", ())
    return any(isinstance(arg, _Chained) or arg is ignore_job_signals for arg in args)


def _after_fork_in_child() -> None:
    # The worker keeps them blocked: its _protect takes a pending SIGTERM (and ends if its main
    # process sent it), then ignores both.
    _forking.__dict__.pop("mask", None)


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


class _Chained:
    """Picklable (workers may start with `spawn`): ignore the signals, then the user's own."""

    def __init__(self, then: Callable[[int], object] | None) -> None:
        self.then = then
        self.lifeline: tuple[int, int] | None = None  # (the worker's pid, read end)

    def __reduce__(self) -> tuple[Any, ...]:
        if context.get_spawning_popen() is None:
            return (_Chained, (self.then,))
        # Pickled to start a spawn or forkserver worker: it gets the read end of our lifeline.
        return (_in_worker, (self.then, reduction.DupFd(_lifeline_read_end())))

    def __call__(self, worker_id: int) -> None:
        lifeline = self.lifeline
        _protect(lifeline[1] if lifeline is not None and lifeline[0] == os.getpid() else None)
        if self.then is not None:
            self.then(worker_id)


def _in_worker(then: Callable[[int], object] | None, lifeline: Any) -> _Chained:
    # Unpickled in a worker being started: a forkserver worker keeps SIGTERM blocked until
    # _protect, and a spawn worker imports nothing more for it.
    _forkserver.protected_worker = True
    chained = _Chained(then)
    chained.lifeline = (os.getpid(), lifeline.detach())
    return chained


def worker_init_fn(then: Callable[[int], object] | None = None) -> Callable[[int], None]:
    """A DataLoader `worker_init_fn` that makes the worker ignore SIGTERM and SIGINT, then
    calls `then(worker_id)` (your own init, e.g. seeding) when given. A fork server started
    from here on keeps SIGTERM blocked, and so do its workers until their init (see
    `forewarn.clients._forkserver`)."""
    if isinstance(then, int):
        # A worker calls its init with its id: this factory was given to the DataLoader
        # uncalled, and the worker went unprotected without a word.
        raise TypeError(
            f"worker_init_fn was called with a worker id ({then!r}): give the DataLoader "
            "worker_init_fn=worker_init_fn(), called, or worker_init_fn(your_init)"
        )
    if then is not None and not callable(then):
        raise TypeError(
            f"worker_init_fn(then): then must be callable (your own init) or None, got {then!r}"
        )
    _preload_in_fork_server()
    return _Chained(then)


def protect_loader(loader: Any) -> None:
    """Give a DataLoader built by someone else (a trainer) `worker_init_fn`, chaining the one it
    has; before its workers start, which is when a DataLoader reads it."""
    # accelerate's DataLoaderShard wraps the DataLoader that iterates, and hands attribute
    # reads, not writes, on to it.
    while getattr(loader, "base_dataloader", None) is not None:
        loader = loader.base_dataloader
    if getattr(loader, "num_workers", 0) and not isinstance(loader.worker_init_fn, _Chained):
        # This module's own factory, given uncalled, is replaced: chained, it would refuse the
        # worker id it is called with.
        then = None if loader.worker_init_fn is worker_init_fn else loader.worker_init_fn
        loader.worker_init_fn = worker_init_fn(then)


FORK_SERVER_PRELOAD = "forewarn.clients._forkserver"


def _preload_in_fork_server() -> None:
    # The fork server is started with the first forkserver worker, after this: the DataLoader
    # is built with its worker_init_fn before it starts any worker.
    try:
        from multiprocessing import forkserver
    except ImportError:  # no fork server on this platform
        return
    modules = list(getattr(forkserver._forkserver, "_preload_modules", None) or ["__main__"])
    if FORK_SERVER_PRELOAD not in modules:
        forkserver.set_forkserver_preload([*modules, FORK_SERVER_PRELOAD])


__all__ = ["IGNORED_IN_WORKERS", "ignore_job_signals", "worker_init_fn"]
