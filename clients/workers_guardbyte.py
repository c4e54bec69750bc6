"""The guard byte: whether a CheckpointGuard in the main process handles SIGTERM now (and a
second one beside it: whether one handles SIGHUP, `guard_handles_sighup`).

A DataLoader worker forewarn chained its init into outlives a SIGTERM from outside only while
a guard in its main process handles SIGTERM (and so will save and exit on it). The main process
keeps that truth in one shared byte: its fork workers map the same memory, its spawn and
forkserver workers are sent the byte's file (a memfd), or its value where there is none.
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from typing import Any

from .workers_preload import _preload_in_fork_server


class _GuardByte:
    """1 while a guard in the process that made it handles SIGTERM, else 0; read by that
    process's workers: a fork worker maps the same memory, a spawn or forkserver worker is
    sent its file (a memfd) and maps that."""

    def __init__(self, fd: int | None = None) -> None:
        """`fd` -1: one of this process's own, none made."""
        if fd is None and hasattr(os, "memfd_create"):
            fd = _memfd()
        self.fd = None if fd == -1 else fd
        if self.fd is not None:
            # Closed with the byte: a forked child drops its parent's byte (_remake_in_child;
            # it makes its own as it first uses one, _here), and held the parent's memfd open
            # until it ended, one more descriptor at each generation of forks. The mapping
            # closes its own duplicate.
            weakref.finalize(self, os.close, self.fd)
        # Shared either way: without a memfd, with fork workers only.
        # Two bytes: [0] a guard handles SIGTERM, [1] a guard handles SIGHUP.
        self.map = mmap.mmap(-1 if self.fd is None else self.fd, 2)


def _memfd() -> int | None:
    # Refused where a seccomp filter or an older kernel has no memfd_create: made at import
    # (and in a forked child that uses one), it raised there, and `import forewarn.clients`
    # with it. Then only fork workers share the byte; spawn and forkserver workers are sent
    # its value as they start.
    try:
        fd = os.memfd_create("forewarn-guard", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        os.ftruncate(fd, 2)
    except OSError:
        os.close(fd)
        return None
    return fd


# How many CheckpointGuards handle SIGTERM in this process now, and that count's truth (1 or
# 0) where this process's fork workers read it (`guard_handles_sigterm`): this process's byte,
# None in a forked child until it first uses one (`_here`).
_guards_handling_sigterm = 0
_guard_handles_sigterm_here: _GuardByte | None = _GuardByte()
# How many handle SIGHUP (a terminal's hangup), kept in the byte's second place.
_guards_handling_sighup = 0
# Makes the byte once when two threads of a forked child first use it together.
_making = threading.Lock()


def _here() -> _GuardByte:
    """This process's guard byte, made as a forked child first uses it: made at each fork
    (`_remake_in_child`), it cost every fork ~0.3 ms of the child's CPU, memfd_create,
    ftruncate, mmap and a finalizer, for a byte most children never read (a DataLoader's fork
    worker is given its main process's, and the pool's fork workers are forked anew at each
    epoch)."""
    global _guard_handles_sigterm_here
    byte = _guard_handles_sigterm_here
    if byte is not None:
        return byte
    with _making:
        if _guard_handles_sigterm_here is None:
            byte = _GuardByte()
            # The guards it inherited count among its own (workers_fork).
            byte.map[0] = 1 if _guards_handling_sigterm else 0
            byte.map[1] = 1 if _guards_handling_sighup else 0
            _guard_handles_sigterm_here = byte
        return _guard_handles_sigterm_here


def guard_handles_sigterm(handles: bool) -> None:
    """Called by a CheckpointGuard as it installs its SIGTERM handler (True) and as it closes
    (False). Meanwhile every DataLoader worker this process started outlives a SIGTERM from
    anyone but this process, as `worker_init_fn()` makes it, given it or not: most loops give
    the DataLoader no worker_init_fn, and a job-wide SIGTERM (systemd's control-group kill, a
    process-group kill) killed their workers, so the loop raised at its next batch, before the
    guard's save: every step since the last periodic save was lost. The loop cannot save after
    that error either: torch raises it from its SIGCHLD handler, at any point of a step, which
    may be half applied. Without a guard handling SIGTERM such a worker ends on it, as it did
    without forewarn."""
    global _guards_handling_sigterm
    _guards_handling_sigterm = max(0, _guards_handling_sigterm + (1 if handles else -1))
    _here().map[0] = 1 if _guards_handling_sigterm else 0
    if handles:
        # A fork server started from now on is kept alive through a job-wide SIGTERM too:
        # its end would end every forkserver worker.
        _preload_in_fork_server()


def guard_handles_sighup(handles: bool) -> None:
    """Called by a CheckpointGuard as it installs its SIGHUP handler (True) and as it closes
    (False). Meanwhile every protected worker of this process outlives a SIGHUP: a terminal
    that closes (its ssh session ended) has bash send SIGHUP to the job's whole process group,
    and the workers died of it, so the loop raised `DataLoader worker (pid …) is killed by
    signal: Hangup` (or a pool's map hung) before the guard's save. Without a guard handling
    SIGHUP, a worker ends on it as it did without forewarn, and so does the job."""
    global _guards_handling_sighup
    _guards_handling_sighup = max(0, _guards_handling_sighup + (1 if handles else -1))
    _here().map[1] = 1 if _guards_handling_sighup else 0


def _guard_saves_on_hangup(hangup: _GuardByte | None) -> bool:
    """Whether a SIGHUP is to be outlived: while a guard in the main process handles SIGHUP
    (and so will save and exit on it, ending the workers as it exits)."""
    return hangup is not None and hangup.map[1] != 0


def _to_send(byte: _GuardByte, index: int) -> Any:
    """The byte as a spawn or forkserver worker is sent it: its file (a DupFd while pickling),
    or where it has none its value at `index` now."""
    from multiprocessing import reduction

    return byte.map[index] if byte.fd is None else reduction.DupFd(byte.fd)


def _guard_saves_first(guarded: _GuardByte | None) -> bool:
    """Whether a SIGTERM from outside is to be outlived: always for a worker given
    `worker_init_fn()`; for one protected on its own (`guarded`), while a guard in its main
    process handles SIGTERM, and so will save and exit on it."""
    return guarded is None or guarded.map[0] != 0


def _received_guard_byte(guarded: Any, index: int = 0) -> _GuardByte | None:
    """The main process's guard byte as a worker is sent it: its file, or its value at `index`
    where it has none."""
    if isinstance(guarded, int):
        byte = _GuardByte(-1)
        byte.map[index] = guarded
        return byte
    return None if guarded is None else _GuardByte(guarded.detach())


def _remake_in_child() -> None:
    # A forked child shares no guard byte with its parent: its own guards say whether its own
    # workers outlive a SIGTERM, those it inherited counted among them (workers_fork). The
    # parent's is let go of here (its finalizer closes the memfd, unless a fork worker's init
    # holds it); the child's own is made as it first uses one (_here).
    global _guard_handles_sigterm_here, _making
    _making = threading.Lock()  # another thread may have held it at the fork
    _guard_handles_sigterm_here = None
