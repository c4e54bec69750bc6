"""The DataLoader `worker_init_fn` that protects a worker, and its chaining into torch's workers.

`worker_init_fn(then)` is what a user gives; `_Chained` is what a worker runs (picklable: it
carries the lifeline and the guard byte to a spawn or forkserver worker); every torch DataLoader
worker this process starts gets one in place of its own init (`_chain_torch_worker_init`, from
the start hooks of `workers_fork` and `workers_spawn`).
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
from collections.abc import Callable
from multiprocessing import context, reduction
from typing import Any

from . import _forkserver, workers_guardbyte, workers_lifeline
from .workers_guardbyte import _GuardByte, _received_guard_byte, _to_send
from .workers_lifeline import _lifeline_read_end
from .workers_orphan import end_with_parent
from .workers_ownhandler import _gate_workers_own_handler
from .workers_preload import _preload_in_fork_server
from .workers_protect import _end_spawn_worker_at_once, _protect

TORCH_WORKER_LOOP = ("torch.utils.data._utils.worker", "_worker_loop")
# A process pool's worker loops: multiprocessing's Pool and concurrent.futures'
# ProcessPoolExecutor. Each is given its initializer third: worker(inqueue, outqueue,
# initializer, initargs, ...), _process_worker(call_queue, result_queue, initializer, ...).
POOL_WORKERS = (
    ("multiprocessing.pool", "worker"),
    ("concurrent.futures.process", "_process_worker"),
)
POOL_INITIALIZER = 2


def ignore_job_signals(worker_id: int | None = None) -> None:
    """A `worker_init_fn`: this worker ignores SIGINT, and SIGTERM from anyone but its own main
    process. The main process's own SIGTERM still ends it: the DataLoader and
    multiprocessing's exit handler stop workers that way, and a worker deaf to them would hold
    the job's exit up. The sender is known from the signal's siginfo (`sigwaitinfo`, Linux);
    where that is not available SIGTERM is ignored outright. Given to a torch DataLoader
    (`worker_init_fn=ignore_job_signals`), its workers run `worker_init_fn()` in its place
    (`_chain_torch_worker_init`): they also end when the main process exits, and outlive a
    closed terminal's SIGHUP while a guard handles it."""
    if multiprocessing.parent_process() is None:
        # Not a worker: `worker_init_fn=ignore_job_signals()`, called where it should be
        # given. The training process itself ignored SIGINT and exited 0 on its parent's
        # SIGTERM (torchrun's, systemd's), without a save.
        raise RuntimeError(
            "ignore_job_signals() runs in a DataLoader worker, not in the training process: "
            "give worker_init_fn=ignore_job_signals (uncalled), or worker_init_fn=worker_init_fn()"
        )
    _protect(lifeline=workers_lifeline._fork_lifeline)


class _Chained:
    """Picklable (workers may start with `spawn`): ignore the signals, then the user's own."""

    def __init__(self, then: Callable[[int], object] | None) -> None:
        self.then = then
        self.lifeline: tuple[int, int] | None = None  # (the worker's pid, read end)
        # Set when chained in by this module, not the user: the main process's byte that says
        # whether a guard there handles SIGTERM (_guard_saves_first).
        self.guarded: _GuardByte | None = None
        # The main process's byte, given or chained in, for its second place: whether a guard
        # there handles SIGHUP (workers_protect._hold_hangup). Set as a worker is forked.
        self.hangup: _GuardByte | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if context.get_spawning_popen() is None:
            return (_Chained, (self.then,))
        # Pickled to start a spawn or forkserver worker: it gets the read end of our lifeline,
        # and the file of our guard's byte when chained in by this module (its value now where
        # there is no such file: the worker then sees a guard made or closed later no more);
        # that file in any case for whether a guard handles SIGHUP.
        guarded = self.guarded
        byte: Any = None if guarded is None else _to_send(guarded, 0)
        hangup = _hangup_to_send(guarded)
        return (_in_worker, (self.then, reduction.DupFd(_lifeline_read_end()), byte, hangup))

    def __call__(self, worker_id: int) -> None:
        lifeline = self.lifeline
        _end_spawn_worker_at_once()
        _protect(
            lifeline[1]
            if lifeline is not None and lifeline[0] == os.getpid()
            else workers_lifeline._fork_lifeline,
            self.guarded,
            self.hangup,
        )
        if self.then is not None:
            self.then(worker_id)
            _gate_workers_own_handler()


def _hangup_to_send(guarded: _GuardByte | None) -> Any:
    """The main process's byte, for whether a guard handles SIGHUP, as a spawn or forkserver
    worker is sent it: None when it is `guarded`'s file, sent already (a file passed twice to
    a spawn worker's start made it fail: `ValueError: bad value(s) in fds_to_keep`)."""
    byte = workers_guardbyte._here()
    if guarded is byte and byte.fd is not None:
        return None
    return _to_send(byte, 1)


def _received_hangup(hangup: Any, guarded: _GuardByte | None) -> _GuardByte | None:
    return guarded if hangup is None else _received_guard_byte(hangup, 1)


def _in_worker(
    then: Callable[[int], object] | None, lifeline: Any, guarded: Any = None, hangup: Any = None
) -> _Chained:
    # Unpickled in a worker being started: a forkserver worker keeps SIGTERM blocked until
    # _protect, as a spawn worker, started with it blocked (_spawnv_passfds), does anyway.
    _forkserver.protected_worker = True
    chained = _Chained(then)
    chained.lifeline = (os.getpid(), lifeline.detach())
    chained.guarded = _received_guard_byte(guarded)
    chained.hangup = _received_hangup(hangup, chained.guarded)
    return chained


def _protected_by_init(process: Any) -> bool:
    """Whether `process` is a DataLoader worker given `worker_init_fn()`: such an init is
    among its arguments."""
    args = getattr(process, "_args", ())
    return any(isinstance(arg, _Chained) or arg is ignore_job_signals for arg in args)


def _chain_torch_worker_init(process: Any) -> None:
    """Put `worker_init_fn(its own init)` in place of the init a torch DataLoader worker about
    to be forked was given: the worker, a copy of this process, runs the chained one."""
    target = getattr(process, "_target", None)
    if not callable(target) or (
        (getattr(target, "__module__", None), getattr(target, "__name__", None))
        != TORCH_WORKER_LOOP
    ):
        return
    try:
        index = list(inspect.signature(target).parameters).index("init_fn")
    except (TypeError, ValueError):  # a torch whose worker loop takes no init_fn
        return
    args = list(getattr(process, "_args", ()))
    if index >= len(args):
        return
    init = args[index]
    if isinstance(init, _Chained):
        # Given worker_init_fn(): a fork worker reads whether a guard handles SIGHUP here.
        init.hangup = workers_guardbyte._here()
        return
    if init is worker_init_fn:
        return  # this module's factory given uncalled: its worker raises the TypeError
    if init is ignore_job_signals:
        # Given uncalled, as people write it: protected from SIGTERM and SIGINT with or without
        # a guard, as asked, but not from the SIGHUP a closed terminal sends the job's whole
        # process group while a guard handles it (it had no byte to read that from), so the
        # loop raised `DataLoader worker (pid …) is killed by signal: Hangup` before the save.
        # It is `worker_init_fn()`'s, with the hangup byte and a lifeline.
        chained = _Chained(None)
        chained.hangup = workers_guardbyte._here()
        args[index] = chained
        process._args = tuple(args)
        return
    if init is not None and not callable(init):
        return  # not an init torch could call either: its own error stands
    chained = _Chained(init)
    chained.guarded = chained.hangup = workers_guardbyte._here()
    args[index] = chained
    process._args = tuple(args)


class _PoolInit(_Chained):
    """What a `multiprocessing.Pool` (or `ProcessPoolExecutor`) worker runs as its initializer,
    under every start method: protected as a DataLoader worker is, then the pool's own
    initializer. Without its lifeline: the pool's finalizer stops its workers at the exit (its
    `terminate()`, which ends them), and a worker ended before it, while it held the lock of
    the pool's task queue, left that finalizer waiting for the lock for ever. Picklable: a
    spawn or forkserver worker gets the guard byte, as a DataLoader worker does."""

    def __reduce__(self) -> tuple[Any, ...]:
        if context.get_spawning_popen() is None:
            return (_PoolInit, (self.then,))
        guarded = self.guarded
        byte: Any = None if guarded is None else _to_send(guarded, 0)
        hangup = _hangup_to_send(guarded)
        return (_in_pool_worker, (self.then, byte, hangup))

    def __call__(self, *initargs: Any) -> None:
        # Without a lifeline, a pool worker ends once its main process is gone, mid-task or
        # idle, SIGHUP or not (workers_orphan).
        _protect(None, self.guarded, self.hangup)
        end_with_parent()
        if self.then is not None:
            self.then(*initargs)


def _in_pool_worker(
    then: Callable[..., object] | None, guarded: Any = None, hangup: Any = None
) -> _PoolInit:
    # Unpickled in a spawn or forkserver pool worker being started: it keeps SIGTERM blocked
    # until _protect, as a DataLoader worker does (_in_worker).
    _forkserver.protected_worker = True
    chained = _PoolInit(then)
    chained.guarded = _received_guard_byte(guarded)
    chained.hangup = _received_hangup(hangup, chained.guarded)
    return chained


def _chain_pool_worker_init(process: Any) -> None:
    """Put `_PoolInit(its own initializer)` in place of the initializer a
    `multiprocessing.Pool` or `ProcessPoolExecutor` worker about to be started was given (as
    it is forked, or pickled for spawn and forkserver): a job-wide SIGTERM ended the pool's
    workers, an idle one holding the lock of the pool's task queue or a busy one its task, and
    the loop then hung in `pool.map` before its save, or after it in the pool's finalizer at
    the exit, until the platform's SIGKILL; an executor's next `map` raised BrokenProcessPool
    before the save. One given `initializer=ignore_job_signals` runs it after: protected with
    or without a guard, as asked."""
    target = getattr(process, "_target", None)
    if not callable(target) or (
        (getattr(target, "__module__", None), getattr(target, "__name__", None)) not in POOL_WORKERS
    ):
        return
    args = list(getattr(process, "_args", ()))
    if len(args) <= POOL_INITIALIZER:
        return
    if isinstance(args[POOL_INITIALIZER], _Chained):
        args[POOL_INITIALIZER].hangup = workers_guardbyte._here()
        return
    init = args[POOL_INITIALIZER]
    if init is not None and not callable(init):
        return  # not an initializer the pool could call either: its own error stands
    chained = _PoolInit(init)
    chained.hangup = workers_guardbyte._here()
    if init is not ignore_job_signals:
        # Given ignore_job_signals, the worker outlives a SIGTERM from outside with or without
        # a guard, as asked. A fork worker then has two threads reading its SIGTERMs, this
        # init's and ignore_job_signals'; given the byte, this init's took one while no guard
        # handled SIGTERM, and ended the worker.
        chained.guarded = workers_guardbyte._here()
    args[POOL_INITIALIZER] = chained
    process._args = tuple(args)


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
