"""The guard byte: whether a CheckpointGuard in the main process handles SIGTERM now.

A DataLoader worker forewarn chained its init into outlives a SIGTERM from outside only while
a guard in its main process handles SIGTERM (and so will save and exit on it). The main process
keeps that truth in one shared byte: its fork workers map the same memory, its spawn and
forkserver workers are sent the byte's file (a memfd), or its value where there is none.
"""

from __future__ import annotations

import mmap
import os
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
        # Shared either way: without a memfd, with fork workers only.
        self.map = mmap.mmap(-1 if self.fd is None else self.fd, 1)


def _memfd() -> int | None:
    # Refused where a seccomp filter or an older kernel has no memfd_create: made at import
    # and in every forked child, it raised there, and `import forewarn.clients` with it. Then
    # only fork workers share the byte; spawn and forkserver workers are sent its value as
    # they start.
    try:
        fd = os.memfd_create("forewarn-guard", os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        os.ftruncate(fd, 1)
    except OSError:
        os.close(fd)
        return None
    return fd


# How many CheckpointGuards handle SIGTERM in this process now, and that count's truth (1 or
# 0) where this process's fork workers read it (`guard_handles_sigterm`).
_guards_handling_sigterm = 0
_guard_handles_sigterm_here = _GuardByte()


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
    _guard_handles_sigterm_here.map[0] = 1 if _guards_handling_sigterm else 0
    if handles:
        # A fork server started from now on is kept alive through a job-wide SIGTERM too:
        # its end would end every forkserver worker.
        _preload_in_fork_server()


def _guard_saves_first(guarded: _GuardByte | None) -> bool:
    """Whether a SIGTERM from outside is to be outlived: always for a worker given
    `worker_init_fn()`; for one protected on its own (`guarded`), while a guard in its main
    process handles SIGTERM, and so will save and exit on it."""
    return guarded is None or guarded.map[0] != 0


def _received_guard_byte(guarded: Any) -> _GuardByte | None:
    """The main process's guard byte as a worker is sent it: its file, or its value where it
    has none."""
    if isinstance(guarded, int):
        byte = _GuardByte(-1)
        byte.map[0] = guarded
        return byte
    return None if guarded is None else _GuardByte(guarded.detach())


def _remake_in_child() -> None:
    # A forked child shares no guard byte with its parent: its own guards say whether its own
    # workers outlive a SIGTERM, those it inherited counted among them (workers_fork).
    global _guard_handles_sigterm_here
    _guard_handles_sigterm_here = _GuardByte()
    _guard_handles_sigterm_here.map[0] = 1 if _guards_handling_sigterm else 0
