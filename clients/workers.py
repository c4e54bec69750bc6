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
handler of its own, one that ends the worker on anyone's SIGTERM, and seeds), and a spawn
worker is started with them blocked (an exec'd program keeps its signal mask; it imports the
main module before its init): `_spawnv_passfds`. Such a spawn or forkserver worker reads the
SIGTERMs it is sent from its start, before it imports the main module (`_EarlyStart`): its main
process's `terminate()` ends it there, and the programs it starts get SIGTERM and SIGINT back
(`_programs`).

    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn())
    DataLoader(dataset, num_workers=4, worker_init_fn=worker_init_fn(my_seed_fn))

Most loops give their DataLoader no worker_init_fn. Every torch DataLoader worker this process
starts gets `worker_init_fn(its own init)` in its place (`_chain_torch_worker_init`): as it is
forked (an at-fork hook), or as it is pickled for spawn and forkserver (a ForkingPickler
reducer). Such a worker outlives a SIGTERM from outside only while a CheckpointGuard in the
main process handles SIGTERM (`guard_handles_sigterm`, read through a shared byte), and
otherwise ends on it as it would have without forewarn (by the SIGTERM handler its own init
installed, if it did: `_to_workers_own_handler`). Importing this module has the fork
server, when one starts, keep SIGTERM blocked (its end would end every forkserver worker).

Parts that hold state or a job of their own are modules of their own: the guard byte
(workers_guardbyte), the lifeline (workers_lifeline), the worker's own init's SIGTERM handler
(workers_ownhandler) and the fork server's preload (workers_preload).
"""

from __future__ import annotations

import copy
import ctypes
import inspect
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing import context, reduction, spawn, util
from typing import Any, cast

from . import _forkserver, _programs, _terminate_again, workers_guardbyte, workers_lifeline
from .workers_guardbyte import _guard_saves_first, _GuardByte, _received_guard_byte
from .workers_guardbyte import _memfd as _memfd
from .workers_guardbyte import guard_handles_sigterm as guard_handles_sigterm
from .workers_lifeline import _cut_lifeline as _cut_lifeline
from .workers_lifeline import _lifeline_read_end
from .workers_ownhandler import _gate_workers_own_handler, _to_workers_own_handler
from .workers_ownhandler import _Gated as _Gated
from .workers_preload import FORK_SERVER_PRELOAD, _preload_in_fork_server

IGNORED_IN_WORKERS = (signal.SIGTERM, signal.SIGINT)


def _protect(lifeline: int | None, guarded: _GuardByte | None = None) -> None:
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


TORCH_WORKER_LOOP = ("torch.utils.data._utils.worker", "_worker_loop")


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
    _protect(lifeline=workers_lifeline._fork_lifeline)


class _Chained:
    """Picklable (workers may start with `spawn`): ignore the signals, then the user's own."""

    def __init__(self, then: Callable[[int], object] | None) -> None:
        self.then = then
        self.lifeline: tuple[int, int] | None = None  # (the worker's pid, read end)
        # Set when chained in by this module, not the user: the main process's byte that says
        # whether a guard there handles SIGTERM (_guard_saves_first).
        self.guarded: _GuardByte | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if context.get_spawning_popen() is None:
            return (_Chained, (self.then,))
        # Pickled to start a spawn or forkserver worker: it gets the read end of our lifeline,
        # and the file of our guard's byte when chained in by this module (its value now where
        # there is no such file: the worker then sees a guard made or closed later no more).
        guarded = self.guarded
        byte: Any = None
        if guarded is not None:
            byte = guarded.map[0] if guarded.fd is None else reduction.DupFd(guarded.fd)
        return (_in_worker, (self.then, reduction.DupFd(_lifeline_read_end()), byte))

    def __call__(self, worker_id: int) -> None:
        lifeline = self.lifeline
        _protect(
            lifeline[1]
            if lifeline is not None and lifeline[0] == os.getpid()
            else workers_lifeline._fork_lifeline,
            self.guarded,
        )
        if self.then is not None:
            self.then(worker_id)
            _gate_workers_own_handler()


def _in_worker(
    then: Callable[[int], object] | None, lifeline: Any, guarded: Any = None
) -> _Chained:
    # Unpickled in a worker being started: a forkserver worker keeps SIGTERM blocked until
    # _protect, as a spawn worker, started with it blocked (_spawnv_passfds), does anyway.
    _forkserver.protected_worker = True
    chained = _Chained(then)
    chained.lifeline = (os.getpid(), lifeline.detach())
    chained.guarded = _received_guard_byte(guarded)
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
    if isinstance(init, _Chained) or init is ignore_job_signals or init is worker_init_fn:
        # Protected already, or this module's factory given uncalled: its worker raises the
        # TypeError that says so.
        return
    if init is not None and not callable(init):
        return  # not an init torch could call either: its own error stands
    chained = _Chained(init)
    chained.guarded = workers_guardbyte._guard_handles_sigterm_here
    args[index] = chained
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


def _forget_inherited_lifeline() -> None:
    # A forked child (a fork worker, a forked rank) must not hold our write end open, nor
    # share our guard's byte: its own guards say whether its own workers outlive a SIGTERM. A
    # fork worker keeps ours through its chained init. The guards it inherited count among its
    # own: a forked rank may run its loop with one (which then saves on its SIGTERM), and its
    # workers, told no guard handled SIGTERM, died of a job-wide one and the loop raised
    # before the save. A child that runs no loop with them ends on SIGTERM (guard.py), and
    # its workers with it.
    workers_lifeline._forget_inherited(
        protected_fork_worker=_forking.__dict__.get("lifeline") is not None
    )
    workers_guardbyte._remake_in_child()


os.register_at_fork(after_in_child=_forget_inherited_lifeline)

# The signal mask of a thread forking a protected fork worker, to put back in the main process.
_forking = threading.local()


def _before_fork() -> None:
    # A fork worker runs torch's worker loop, which sets a SIGTERM handler that ends it on
    # anyone's SIGTERM, and seeds, before its worker_init_fn: a job-wide SIGTERM then ended it.
    # Forked with SIGTERM and SIGINT blocked, it keeps them pending until _protect.
    forking = _forking_process()
    if forking is None:
        return
    process, popen = forking
    _chain_torch_worker_init(process)
    if _protected_by_init(process):
        _terminate_again.mark(popen)
        # Its lifeline as well: made before the fork, so that the worker holds the read end.
        _forking.lifeline = _lifeline_read_end()
        _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED_IN_WORKERS)


def _after_fork_in_parent() -> None:
    _forking.__dict__.pop("lifeline", None)
    mask = _forking.__dict__.pop("mask", None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forking_process() -> tuple[Any, Any] | None:
    """The process multiprocessing's fork start (popen_fork's `_launch`) is forking, and its
    Popen, if this fork is one."""
    try:
        from multiprocessing import popen_fork
    except ImportError:  # no fork on this platform
        return None
    launch = popen_fork.Popen._launch.__code__  # type: ignore[attr-defined]
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not launch:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return None
    return frame.f_locals.get("process_obj"), frame.f_locals.get("self")


def _after_fork_in_child() -> None:
    # The worker keeps them blocked: its _protect takes a pending SIGTERM (and ends if its main
    # process sent it), then ignores both.
    _forking.__dict__.pop("lifeline", None)
    _forking.__dict__.pop("mask", None)


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a spawn or forkserver process, with an
    `_EarlyStart` for a protected worker."""
    data = cast("dict[str, Any]", _plain_preparation_data(name))
    caller = sys._getframe(1).f_code
    if caller not in _LAUNCHES:
        return data
    process = copy.copy(sys._getframe(1).f_locals.get("process_obj"))
    _chain_torch_worker_init(process)  # as it will be pickled (_reduce_started_process)
    for arg in getattr(process, "_args", ()):
        if isinstance(arg, _Chained) or arg is ignore_job_signals:
            data["forewarn_early_start"] = _EarlyStart()
            break
    return data


def _launch_codes() -> set[Any]:
    codes = set()
    for module in ("popen_spawn_posix", "popen_forkserver"):
        try:
            popen = __import__(f"multiprocessing.{module}", fromlist=["Popen"]).Popen
        except ImportError:  # not on this platform
            continue
        codes.add(popen._launch.__code__)
    return codes


_LAUNCHES = _launch_codes()
_plain_preparation_data = spawn.get_preparation_data
spawn.get_preparation_data = _preparation_data


def _reduce_started_process(process: Any) -> tuple[Any, ...]:
    """How multiprocessing pickles a spawn or forkserver process it starts: as it would, with a
    torch DataLoader worker's init chained as a fork worker's is (_chain_torch_worker_init)."""
    popen = context.get_spawning_popen()
    if popen is not None:
        process = copy.copy(process)  # the caller's keeps its own arguments
        _chain_torch_worker_init(process)
        if _protected_by_init(process):
            _terminate_again.mark(popen)
            # Pickled before its program is started (util.spawnv_passfds): a spawn worker
            # starts with SIGTERM and SIGINT blocked (_spawnv_passfds).
            _forking.spawning = popen
        if _started_by_fork_server(popen):
            # Pickled before it asks for the fork server, which it starts if none runs: a job
            # that set the preload itself since (set_forkserver_preload([...])) had dropped
            # ours, and a job-wide SIGTERM ended the server and every worker with it.
            _preload_in_fork_server()
    return cast("tuple[Any, ...]", object.__reduce_ex__(process, 2))


def _spawnv_passfds(path: Any, args: Any, passfds: Any) -> int:
    """multiprocessing's start of a program, with SIGTERM and SIGINT blocked while it forks a
    protected spawn worker or a fork server that preloads forewarn's module: an exec'd
    program keeps its signal mask. A spawn worker imports the main module before its
    worker_init_fn runs (seconds with torch), and a job-wide SIGTERM in that time ended it, so
    the loop raised before the save. Blocked, that SIGTERM waits for its _protect, which ends
    the worker if its main process sent it, or if no guard there handles SIGTERM. The fork
    server imports its preload, the main module first, before forewarn's module blocks them
    in it (_forkserver): a job-wide SIGTERM then ended it, and the DataLoader raised
    `EOFError` as it asked it for a worker."""
    caller = sys._getframe(1).f_locals.get("self")
    spawning = _forking.__dict__.pop("spawning", None)
    if (spawning is None or caller is not spawning) and not _preloading_fork_server(caller):
        return _plain_spawnv_passfds(path, args, passfds)
    if spawning is None or caller is not spawning:
        args = _with_jobs_sys_path(args)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, IGNORED_IN_WORKERS)
    try:
        return _plain_spawnv_passfds(path, args, passfds)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


FORK_SERVER_COMMAND = "from multiprocessing.forkserver import main;"


def _with_jobs_sys_path(args: list[str]) -> list[str]:
    """The fork server's command line, with this process's sys.path after the server's own
    before it preloads forewarn's module. The fork server of Python 3.11 to 3.13 is given the
    job's sys.path but does not use it: a job that found forewarn on an entry it added at run
    time (a vendored copy) started a server that could not import it, and so never unblocked
    the signals in the processes it forked: one that did not import forewarn itself (a helper of
    the job's own) ignored `terminate()`, and multiprocessing's exit handler waited for it for
    ever. Its own entries come first: what it imported before, it imports the same."""
    try:
        command = args.index("-c") + 1
    except ValueError:
        return args
    if command >= len(args) or not args[command].startswith(FORK_SERVER_COMMAND):
        return args
    jobs = _plain_preparation_data("ignore").get("sys_path", [])
    extend = f"import sys; sys.path.extend(p for p in {jobs!r} if p not in sys.path); "
    return [*args[:command], extend + args[command], *args[command + 1 :]]


if hasattr(util, "spawnv_passfds"):  # POSIX: the spawn start looks it up as it calls it
    _plain_spawnv_passfds: Callable[..., int] = util.spawnv_passfds
    util.spawnv_passfds = _spawnv_passfds


def _preloading_fork_server(caller: object) -> bool:
    # The fork server this process starts, when it will import forewarn's module: it keeps
    # the signals blocked from there on, so blocked from the start they change nothing else.
    module = sys.modules.get("multiprocessing.forkserver")
    return (
        module is not None
        and isinstance(caller, module.ForkServer)
        and FORK_SERVER_PRELOAD in (getattr(caller, "_preload_modules", None) or ())
    )


def _started_by_fork_server(popen: object) -> bool:
    # Loaded: it is starting the process being pickled, if that start is a forkserver one.
    module = sys.modules.get("multiprocessing.popen_forkserver")
    return module is not None and isinstance(popen, module.Popen)


# `Process` is the default context's (multiprocessing.Process, torch.multiprocessing.Process):
# a DataLoader given no multiprocessing_context starts its workers as that, started by the
# default start method, forkserver from Python 3.14 on Linux (spawn on macOS). Its workers
# were pickled as they were given: unprotected, a job-wide SIGTERM ended them (and the fork
# server) before the save.
for _started_by_pickle in ("Process", "SpawnProcess", "ForkServerProcess"):
    if hasattr(context, _started_by_pickle):  # not on every platform
        reduction.ForkingPickler.register(
            getattr(context, _started_by_pickle), _reduce_started_process
        )


# State a part rebinds (at a fork, as a guard starts or closes, as a worker starts): read where
# it lives at each access, so that `workers._guard_handles_sigterm_here` is this process's now.
_REBOUND_STATE = {
    "_guards_handling_sigterm": workers_guardbyte,
    "_guard_handles_sigterm_here": workers_guardbyte,
    "_lifeline": workers_lifeline,
    "_lifeline_lock": workers_lifeline,
    "_fork_lifeline": workers_lifeline,
}


def __getattr__(name: str) -> Any:
    module = _REBOUND_STATE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


# A fork server is started with the first forkserver worker, which may come before the guard
# is made (a loader iterated during set-up, persistent workers): kept alive through a job-wide
# SIGTERM from the start, it keeps those workers alive until the guard's save. It still ends
# with the main process, and its children that are not protected workers get SIGTERM back.
_preload_in_fork_server()

__all__ = ["IGNORED_IN_WORKERS", "ignore_job_signals", "worker_init_fn"]
