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
(`_programs`). While a guard handles SIGHUP they outlive it as well (a closed terminal's,
which bash sends the job's whole process group): `workers_protect._hold_hangup`.

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

This module is the façade: importing it installs every hook. Each part is a module of its own:
the `worker_init_fn` chain (workers_init), what a protected worker does with the signals it is
sent (workers_protect) and with its own init's SIGTERM handler (workers_ownhandler), the guard
byte (workers_guardbyte), the lifeline (workers_lifeline), the hooks on a fork (workers_fork)
and on a spawn or forkserver start (workers_spawn), and the fork server's preload
(workers_preload).
"""

from __future__ import annotations

from typing import Any

from . import workers_guardbyte, workers_lifeline, workers_protect
from .workers_fork import _after_fork_in_child as _after_fork_in_child
from .workers_fork import _after_fork_in_parent as _after_fork_in_parent
from .workers_fork import _before_fork as _before_fork
from .workers_fork import _forget_inherited_lifeline as _forget_inherited_lifeline
from .workers_fork import _forking as _forking
from .workers_fork import _forking_process as _forking_process
from .workers_guardbyte import _guard_saves_first as _guard_saves_first
from .workers_guardbyte import _GuardByte as _GuardByte
from .workers_guardbyte import _memfd as _memfd
from .workers_guardbyte import _received_guard_byte as _received_guard_byte
from .workers_guardbyte import guard_handles_sigterm as guard_handles_sigterm
from .workers_init import TORCH_WORKER_LOOP as TORCH_WORKER_LOOP
from .workers_init import _chain_torch_worker_init as _chain_torch_worker_init
from .workers_init import _Chained as _Chained
from .workers_init import _in_worker as _in_worker
from .workers_init import _protected_by_init as _protected_by_init
from .workers_init import ignore_job_signals, worker_init_fn
from .workers_init import protect_loader as protect_loader
from .workers_lifeline import _cut_lifeline as _cut_lifeline
from .workers_lifeline import _lifeline_read_end as _lifeline_read_end
from .workers_ownhandler import _gate_workers_own_handler as _gate_workers_own_handler
from .workers_ownhandler import _Gated as _Gated
from .workers_ownhandler import _to_workers_own_handler as _to_workers_own_handler
from .workers_preload import FORK_SERVER_PRELOAD as FORK_SERVER_PRELOAD
from .workers_preload import _preload_in_fork_server as _preload_in_fork_server
from .workers_protect import _EARLY_START as _EARLY_START
from .workers_protect import IGNORED_IN_WORKERS
from .workers_protect import _before_init as _before_init
from .workers_protect import _BeforeInit as _BeforeInit
from .workers_protect import _EarlyStart as _EarlyStart
from .workers_protect import _end_by_sigterm as _end_by_sigterm
from .workers_protect import _end_with_main as _end_with_main
from .workers_protect import _exit_as_asked as _exit_as_asked
from .workers_protect import _protect as _protect
from .workers_protect import _sigterm_from_main_only as _sigterm_from_main_only
from .workers_protect import _start as _start
from .workers_protect import _start_early as _start_early
from .workers_protect import in_protected_worker as in_protected_worker
from .workers_spawn import _LAUNCHES as _LAUNCHES
from .workers_spawn import FORK_SERVER_COMMAND as FORK_SERVER_COMMAND
from .workers_spawn import _launch_codes as _launch_codes
from .workers_spawn import _plain_preparation_data as _plain_preparation_data
from .workers_spawn import _preloading_fork_server as _preloading_fork_server
from .workers_spawn import _preparation_data as _preparation_data
from .workers_spawn import _reduce_started_process as _reduce_started_process
from .workers_spawn import _spawnv_passfds as _spawnv_passfds
from .workers_spawn import _started_by_fork_server as _started_by_fork_server
from .workers_spawn import _with_jobs_sys_path as _with_jobs_sys_path

# State a part rebinds (at a fork, as a guard starts or closes, as a worker starts): read where
# it lives at each access, so that `workers._guard_handles_sigterm_here` is this process's now.
_REBOUND_STATE = {
    "_guards_handling_sigterm": workers_guardbyte,
    "_lifeline": workers_lifeline,
    "_lifeline_lock": workers_lifeline,
    "_fork_lifeline": workers_lifeline,
    "_reading_sigterm": workers_protect,
}


def __getattr__(name: str) -> Any:
    if name == "_guard_handles_sigterm_here":
        return workers_guardbyte._here()  # made as a forked child first uses it
    module = _REBOUND_STATE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


# A fork server is started with the first forkserver worker, which may come before the guard
# is made (a loader iterated during set-up, persistent workers): kept alive through a job-wide
# SIGTERM from the start, it keeps those workers alive until the guard's save. It still ends
# with the main process, and its children that are not protected workers get SIGTERM back.
_preload_in_fork_server()


def _children_alive() -> set[int]:
    """The pids of this process's live multiprocessing children (DataLoader and pool workers
    among them; a started process keeps no record of its target to tell them apart)."""
    import multiprocessing

    return {child.pid for child in multiprocessing.active_children() if child.pid is not None}


# Worker processes already running as this module is imported: started without its hooks,
# they end on a job-wide SIGTERM whatever the guard does (see _unprotected_workers).
_STARTED_BEFORE_IMPORT = _children_alive()


def _unprotected_workers() -> list[int]:
    """The multiprocessing children still running that were started before forewarn.clients
    was imported: nothing protects them from a job-wide SIGTERM. Found by pasting the README's
    loop below a script's set-up: a process-group SIGTERM killed them, and torch raised
    `DataLoader worker (pid ...) is killed by signal: Terminated` in forewarn's exit handler."""
    if not _STARTED_BEFORE_IMPORT:
        return []
    return sorted(_STARTED_BEFORE_IMPORT & _children_alive())


__all__ = ["IGNORED_IN_WORKERS", "ignore_job_signals", "worker_init_fn"]
