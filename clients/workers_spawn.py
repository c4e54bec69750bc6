"""Hooks on the start of a spawn or forkserver worker: its init chained as it is pickled, SIGTERM
and SIGINT blocked as its program starts, and its SIGTERMs read from before it imports the main
module (`_EarlyStart` in its preparation data).
"""

from __future__ import annotations

import copy
import signal
import sys
from collections.abc import Callable
from multiprocessing import context, reduction, spawn, util
from typing import Any, cast

from . import _terminate_again
from .workers_fork import _forking
from .workers_init import (
    _chain_pool_worker_init,
    _chain_torch_worker_init,
    _Chained,
    _protected_by_init,
    ignore_job_signals,
)
from .workers_preload import FORK_SERVER_PRELOAD, _preload_in_fork_server
from .workers_protect import BLOCKED_AT_START, _EarlyStart


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a spawn or forkserver process, with an
    `_EarlyStart` for a protected worker."""
    data = cast("dict[str, Any]", _plain_preparation_data(name))
    caller = sys._getframe(1).f_code
    if caller not in _LAUNCHES:
        return data
    process = copy.copy(sys._getframe(1).f_locals.get("process_obj"))
    _chain_torch_worker_init(process)  # as it will be pickled (_reduce_started_process)
    _chain_pool_worker_init(process)
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
    torch DataLoader worker's init, and a process pool worker's initializer, chained as a fork
    worker's is (_chain_torch_worker_init, _chain_pool_worker_init)."""
    popen = context.get_spawning_popen()
    if popen is not None:
        process = copy.copy(process)  # the caller's keeps its own arguments
        _chain_torch_worker_init(process)
        _chain_pool_worker_init(process)
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
    if _is_resource_tracker(caller):
        return _starting_resource_tracker(path, args, passfds)
    spawning = _forking.__dict__.pop("spawning", None)
    if (spawning is None or caller is not spawning) and not _preloading_fork_server(caller):
        return _plain_spawnv_passfds(path, args, passfds)
    if spawning is None or caller is not spawning:
        args = _with_jobs_sys_path(args)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_AT_START)
    try:
        return _plain_spawnv_passfds(path, args, passfds)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _is_resource_tracker(caller: object) -> bool:
    module = sys.modules.get("multiprocessing.resource_tracker")
    tracker = getattr(module, "ResourceTracker", None)
    return isinstance(tracker, type) and isinstance(caller, tracker)


def _starting_resource_tracker(path: Any, args: Any, passfds: Any) -> int:
    """multiprocessing's resource tracker, started with SIGHUP blocked, which it keeps: it
    ignores SIGINT and SIGTERM so that it outlives its job and cleans up what the job leaves
    (it ends when the job's last process closes its pipe), but a closed terminal's SIGHUP to
    the job's whole process group ended it. The job, saving on that SIGHUP, then warned
    `resource_tracker: process died unexpectedly, relaunching. Some resources might leak.`
    with a `KeyError` traceback for every semaphore it freed after, and what the dead tracker
    knew of was left behind had the job died before its exit."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
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
