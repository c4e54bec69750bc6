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

Parts with a job of their own are modules of their own: the `worker_init_fn` chain
(workers_init), what a protected worker does with the signals it is sent (workers_protect) and
with its own init's SIGTERM handler (workers_ownhandler), the guard byte (workers_guardbyte),
the lifeline (workers_lifeline) and the fork server's preload (workers_preload); the hooks on
a fork and on a spawn or forkserver start are here.
"""

from __future__ import annotations

import copy
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing import context, reduction, spawn, util
from typing import Any, cast

from . import (
    _terminate_again,
    workers_guardbyte,
    workers_lifeline,
    workers_protect,
)
from .workers_guardbyte import _guard_saves_first as _guard_saves_first
from .workers_guardbyte import _GuardByte as _GuardByte
from .workers_guardbyte import _memfd as _memfd
from .workers_guardbyte import _received_guard_byte as _received_guard_byte
from .workers_guardbyte import guard_handles_sigterm as guard_handles_sigterm
from .workers_init import TORCH_WORKER_LOOP as TORCH_WORKER_LOOP
from .workers_init import (
    _chain_torch_worker_init,
    _Chained,
    _protected_by_init,
    ignore_job_signals,
    worker_init_fn,
)
from .workers_init import _in_worker as _in_worker
from .workers_init import protect_loader as protect_loader
from .workers_lifeline import _cut_lifeline as _cut_lifeline
from .workers_lifeline import _lifeline_read_end
from .workers_ownhandler import _gate_workers_own_handler as _gate_workers_own_handler
from .workers_ownhandler import _Gated as _Gated
from .workers_ownhandler import _to_workers_own_handler as _to_workers_own_handler
from .workers_preload import FORK_SERVER_PRELOAD, _preload_in_fork_server
from .workers_protect import _EARLY_START as _EARLY_START
from .workers_protect import IGNORED_IN_WORKERS, _EarlyStart
from .workers_protect import _before_init as _before_init
from .workers_protect import _BeforeInit as _BeforeInit
from .workers_protect import _end_by_sigterm as _end_by_sigterm
from .workers_protect import _end_with_main as _end_with_main
from .workers_protect import _exit_as_asked as _exit_as_asked
from .workers_protect import _protect as _protect
from .workers_protect import _sigterm_from_main_only as _sigterm_from_main_only
from .workers_protect import _start as _start
from .workers_protect import _start_early as _start_early
from .workers_protect import in_protected_worker as in_protected_worker


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
    "_reading_sigterm": workers_protect,
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
