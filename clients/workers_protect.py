"""In a protected worker: SIGINT ignored, and SIGTERM from anyone but its main process outlived.

A thread reads the SIGTERMs the worker is sent, with their sender (`sigwaitinfo`): its main
process's ends the worker (the DataLoader and multiprocessing's exit handler stop workers that
way), one from outside ends it only when no guard in the main process will save first (the
guard byte, `workers_guardbyte`). A spawn or forkserver worker starts that thread before it
imports the main module (`_EarlyStart`), and the worker also ends with its main process's exit
(its lifeline, `workers_lifeline`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _programs
from .guard_terminal import watch_terminal_output_in_worker
from .workers_guardbyte import _guard_saves_first, _guard_saves_on_hangup, _GuardByte
from .workers_ownhandler import _to_workers_own_handler

IGNORED_IN_WORKERS = (signal.SIGTERM, signal.SIGINT)
# Blocked in a protected worker from its start (its fork, its program's exec, the fork server's
# fork) until its init: those two, and SIGHUP, which a closed terminal sends the job's whole
# process group (`_hold_hangup`).
BLOCKED_AT_START = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _protect(
    lifeline: int | None, guarded: _GuardByte | None = None, hangup: _GuardByte | None = None
) -> None:
    """Ignore SIGINT, and SIGTERM from anyone but the main process; with `guarded` (a worker
    protected because its main process may run a guard), only while the main process's byte in
    it says a guard there handles SIGTERM: otherwise such a SIGTERM ends the worker, as it
    would have without forewarn."""
    # The main process, not getppid(): a forkserver worker's parent is the fork server.
    parent = multiprocessing.parent_process()
    main = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    if hasattr(signal, "sigtimedwait") and signal.SIGTERM in signal.sigpending():
        # A fork, spawn or forkserver worker starts with SIGTERM blocked (_before_fork,
        # _spawnv_passfds, forewarn.clients._forkserver): one sent while it started waits
        # here; ignoring it below would drop it.
        info = signal.sigtimedwait({signal.SIGTERM}, 0)
        if info is not None and info.si_pid == main:
            _exit_as_asked()
        if info is not None and not _guard_saves_first(guarded):
            _end_by_sigterm()
    # Passed by in the whole process, not by a thread's mask: a spawn or forkserver worker has
    # threads before this runs (import torch starts OpenBLAS's), and a SIGTERM for the process
    # that one of them took would otherwise end the worker. By a handler that does nothing,
    # not SIG_IGN, which the programs the worker starts would keep (_programs).
    _programs.hold()
    if hasattr(signal, "sigwaitinfo"):
        # Blocked in this thread (the process's first one, which kill() targets), a SIGTERM
        # is kept rather than dropped as ignored, until a thread that does not block it takes
        # it: the one below, with its sender, or a thread the worker had before, which
        # ignores it. Threads started from here on block it too.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        if not _reading_sigterm:
            _start(_sigterm_from_main_only, main, os.getppid(), guarded)
        elif _before_init.initialize(guarded) and not _guard_saves_first(guarded):
            # A spawn or forkserver worker's reads it from its start (_EarlyStart); one from
            # outside before this, with no guard to save first, ends it as it would have.
            _end_by_sigterm()
    if lifeline is not None:
        # Such a thread may take the main process's SIGTERM too; the lifeline still ends the
        # worker when the main process exits.
        _start(_end_with_main, lifeline)
    _hold_hangup(hangup, watch=lifeline is None)
    if hangup is not None:
        # A spawn or forkserver worker's own print to the terminal after it hung up raised
        # EIO in the worker, which the DataLoader raised in the loop before the save.
        watch_terminal_output_in_worker(main, hangup)


def _hold_hangup(hangup: _GuardByte | None, watch: bool) -> None:
    """SIGHUP outlived while a guard in the main process handles it (`hangup`, the second
    place of its guard byte): bash sends SIGHUP to the job's whole process group as its
    terminal closes, and the workers died of it, so the loop raised `DataLoader worker (pid …)
    is killed by signal: Hangup` before the guard's save (a pool's map hung). The guard then
    saves, exits 129, and stops its workers as it exits (the DataLoader, the pool's finalizer:
    their SIGTERM). Otherwise it goes where it would have without forewarn: the default ends
    the worker, as the main process ends. Ignored (`nohup`) it stays so. Blocked since the
    worker started (BLOCKED_AT_START), a SIGHUP sent meanwhile is decided on here. `watch`: a
    worker without a lifeline (a pool's) that outlived one ends once its main process is gone:
    a main process that died after all (killed, a crash before its save) left it blocked on
    its task queue for ever, in a session nobody would stop any more."""
    previous = signal.getsignal(signal.SIGHUP)
    if previous != signal.SIG_IGN:
        # The parent to watch is read now, while the main process lives: read as the SIGHUP
        # is handled, after the main process died (the terminal's SIGHUP and the kill come
        # together, in either order), it was the reaper's, and the worker ran on to the end
        # of its task, however long, after its job was gone.
        parent = os.getppid() if watch else None
        signal.signal(signal.SIGHUP, _Hangup(previous, hangup, parent))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})  # a pending one acts now


class _Hangup:
    """A protected worker's SIGHUP handler (`_hold_hangup`)."""

    def __init__(self, previous: Any, hangup: _GuardByte | None, parent: int | None) -> None:
        self.previous = previous
        self.hangup = hangup
        self.parent = parent  # to watch for, once a SIGHUP is outlived; None: not to
        self.watching = False

    def __call__(self, signum: int, frame: Any) -> None:
        if _guard_saves_on_hangup(self.hangup):
            if self.parent is not None and not self.watching:
                self.watching = True
                _start(_end_when_orphaned, self.parent)
            return
        previous = self.previous
        if callable(previous):
            # A fork worker's inherited copy of the guard's handler, which hands it on to the
            # default (guard_signals), or the job's own.
            previous(signum, frame)
            return
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGHUP)


def _end_when_orphaned(parent: int) -> None:
    # The parent (the main process, or a forkserver worker's fork server, which ends with it):
    # once it is gone this worker has been handed to another (init, a subreaper). Polled: no
    # lifeline to wait on, and only after a SIGHUP outlived. A spawn or forkserver worker whose
    # main process died before its protection (importing the main module, torch, for seconds
    # on a loaded node, its SIGHUP held meanwhile) read a parent already handed on, which
    # never changed: it stayed blocked on its pool's task queue for ever. Its main process's
    # sentinel, the pipe it was started through, says so: readable once the main process
    # is gone, whose end only that process holds (a fork worker's siblings may hold it too,
    # so it may stay quiet, never wrongly say gone).
    sentinel = _main_process_sentinel()
    while os.getppid() == parent:
        if sentinel is None:
            time.sleep(0.5)
        elif multiprocessing.connection.wait([sentinel], timeout=0.5):
            break
    _exit_as_asked()


def _main_process_sentinel() -> int | None:
    main = multiprocessing.parent_process()
    try:
        sentinel = None if main is None else main.sentinel
    except ValueError:  # a parent process without one
        return None
    return sentinel if isinstance(sentinel, int) else None


def _start(target: Callable[..., None], *args: object) -> None:
    threading.Thread(target=target, args=args, name="forewarn-worker", daemon=True).start()


def _sigterm_from_main_only(
    main: int, parent: int, guarded: _GuardByte | _BeforeInit | None
) -> None:
    handed = False
    while True:
        info = signal.sigwaitinfo({signal.SIGTERM})
        if info.si_pid == main or os.getppid() != parent:
            # From the main process (or the main process is gone): end now, started or not.
            # Handed to the worker's own handler once: the main process sends its terminate()
            # again while the worker lives (_terminate_again), which that handler may outlast.
            if handed:
                continue
            handed = _to_workers_own_handler()
            if not handed:
                _exit_as_asked()
        elif isinstance(guarded, _BeforeInit) and guarded.defer():
            continue
        elif (
            not _guard_saves_first(guarded.guarded if isinstance(guarded, _BeforeInit) else guarded)
            and not _to_workers_own_handler()
        ):
            _end_by_sigterm()


def _end_by_sigterm() -> None:
    # As the worker would have ended without forewarn: killed by the signal, which the
    # DataLoader reports as it always did. From the watching thread, where Python's
    # signal.signal() refuses: libc's own sets the default action back.
    try:
        ctypes.CDLL(None, use_errno=True).signal(signal.SIGTERM, int(signal.SIG_DFL))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)
    except (OSError, AttributeError):  # no libc to call: end with the status the shell gives
        pass
    os._exit(128 + signal.SIGTERM)


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


def in_protected_worker() -> bool:
    """Whether this process is a protected DataLoader worker: a spawn or forkserver one from its
    start (it reads its SIGTERMs before it imports the main module), a fork one from its init."""
    return _reading_sigterm or _programs.held


# Whether a thread of this worker reads the SIGTERMs it is sent (_sigterm_from_main_only).
_reading_sigterm = False


class _EarlyStart:
    """Put in the preparation data of a protected spawn or forkserver worker, which the worker
    unpickles first, before it imports the main module and unpickles its process object (the
    dataset, its worker_init_fn): it starts with SIGTERM and SIGINT blocked, and a SIGTERM
    waited for its init. One that hung there (importing the user's module) could not be
    stopped: multiprocessing's exit handler sends it SIGTERM and waits for it without a
    timeout, so the job hung at its exit for ever, the worker left behind; and a program the
    main module started as the worker imported it kept SIGTERM blocked. From here on a
    thread reads the SIGTERMs the worker is sent, ending it on its main process's at once,
    and the programs it starts get the signals back (_programs)."""

    def __reduce__(self) -> tuple[Any, ...]:
        # exec, not a function of forewarn's: the worker has not its main process's sys.path
        # yet, and forewarn may not be on the one it has (then its init still protects it).
        return (exec, (_EARLY_START, {"main": os.getpid()}))


_EARLY_START = """
try:
    from forewarn.clients.workers import _start_early
except ImportError:
    pass
else:
    _start_early(main)
"""


class _BeforeInit:
    """What the SIGTERM reader of a worker started early knows of it: whether its init has run,
    with the guard byte it was sent (in its process object, unpickled after this starts),
    and whether a SIGTERM from outside came before, which the init decides on, as it did
    when that SIGTERM waited for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.initialized = False
        self.guarded: _GuardByte | None = None
        self.deferred = False

    def initialize(self, guarded: _GuardByte | None) -> bool:
        """Whether a SIGTERM from outside came before."""
        with self.lock:
            self.guarded = guarded
            self.initialized = True
            return self.deferred

    def defer(self) -> bool:
        with self.lock:
            if not self.initialized:
                self.deferred = True
            return not self.initialized


_before_init = _BeforeInit()


def _start_early(main: int) -> None:
    global _reading_sigterm
    _programs.hold()
    if hasattr(signal, "sigwaitinfo") and not _reading_sigterm:
        _reading_sigterm = True
        _start(_sigterm_from_main_only, main, os.getppid(), _before_init)


def _end_spawn_worker_at_once() -> None:
    """Called as a DataLoader worker's init protects it (a pool's worker is left as it was:
    given this, one that outlived a SIGHUP stayed behind its main process's SIGKILL). A
    protected spawn DataLoader worker ends as a fork or forkserver one does: `os._exit` with its
    exit code once multiprocessing is done with it (`_bootstrap` returned), its atexit
    handlers run and its output flushed first. It ended through the interpreter's
    finalization, which ends a daemon thread when it next takes the GIL; one inside a torch
    op, which releases the GIL (multiprocessing's queue feeder pickling a batch into shared
    memory as the DataLoader stops the worker mid-epoch), aborted the worker: `terminate
    called without an active exception`, and `DataLoader worker (pid ...) is killed by
    signal: Aborted` in the job's log after its save (measured: 1 of 12 closed terminals)."""
    if not isinstance(getattr(multiprocessing.spawn, "sys", None), _SpawnSys):
        # spawn_main's `sys.exit(exitcode)`, the worker's last line, reads `sys` there.
        setattr(multiprocessing.spawn, "sys", _SpawnSys())  # noqa: B010 (a module's global)


class _SpawnSys:
    """multiprocessing.spawn's `sys` in a protected spawn worker: the real module, except that
    `exit` ends the process at once (`_end_spawn_worker_at_once`). A forkserver worker never
    calls it (the fork server ends it by `os._exit`)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(sys, name, value)  # spawn's prepare() sets sys.path

    def exit(self, code: object = None) -> None:
        # _bootstrap's exit code, an int (it wrote a SystemExit's message already).
        status = code if isinstance(code, int) else 0 if code is None else 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status & 0xFF)
