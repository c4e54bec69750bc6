"""Hooks on the fork of a worker: a protected fork worker is forked with SIGTERM and SIGINT blocked
and its lifeline made, and every forked child lets go of what is its parent's alone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from . import _terminate_again, workers_guardbyte, workers_lifeline
from .workers_init import _chain_pool_worker_init, _chain_torch_worker_init, _protected_by_init
from .workers_lifeline import _lifeline_read_end
from .workers_protect import BLOCKED_AT_START


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
    # Forked with SIGTERM and SIGINT blocked, it keeps them pending until _protect (SIGHUP
    # too: _hold_hangup).
    forking = _forking_process()
    if forking is None:
        return
    process, popen = forking
    _chain_torch_worker_init(process)
    _chain_pool_worker_init(process)
    if _protected_by_init(process):
        _terminate_again.mark(popen)
        # Its lifeline as well: made before the fork, so that the worker holds the read end.
        _forking.lifeline = _lifeline_read_end()
        _forking.mask = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_AT_START)


def _after_fork_in_parent() -> None:
    _forking.__dict__.pop("lifeline", None)
    mask = _forking.__dict__.pop("mask", None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _forking_process() -> tuple[Any, Any] | None:
    """The process multiprocessing's fork start (popen_fork's `_launch`) is forking, and its
    Popen, if this fork is one."""
    # Not imported: no fork start has run, and this fork is not one. Every other fork (one
    # with torch's DataLoader forked anew at each epoch) was walking its whole stack.
    popen_fork = sys.modules.get("multiprocessing.popen_fork")
    if popen_fork is None:
        return None
    launch = popen_fork.Popen._launch.__code__
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
