"""The lifeline: a pipe whose read end each protected worker holds, to end with its main process.

A protected worker outlives a SIGTERM from outside, and a thread of it may take its main
process's own SIGTERM too; the read end returns empty once the main process has closed the
write end (at its exit, or when it dies), and the worker then ends (`workers_protect`).
"""

from __future__ import annotations

import atexit
import os
import threading

# This process's lifeline to its spawn and forkserver workers: (read end, write end) of a pipe
# whose write end no other process holds. Made on first use.
_lifeline: tuple[int, int] | None = None
_lifeline_lock = threading.Lock()
# In a protected fork worker: the read end of its main process's lifeline. The main process's
# SIGTERM is not always read as its (a SIGTERM that comes while the worker starts a program is
# passed by, `_programs._released`), and multiprocessing's exit handler, which sends it, then
# waits for the worker without a timeout: the job, its save done, never exited.
_fork_lifeline: int | None = None


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


def _forget_inherited(protected_fork_worker: bool) -> None:
    """In a forked child: let go of the lifelines inherited. A protected fork worker keeps
    the read end of its main process's (`_fork_lifeline`); no child holds a write end open."""
    global _lifeline, _lifeline_lock, _fork_lifeline
    _lifeline_lock = threading.Lock()
    if _fork_lifeline is not None:
        os.close(_fork_lifeline)  # the lifeline of the worker this child was forked from
        _fork_lifeline = None
    if protected_fork_worker and _lifeline is not None:
        # A protected fork worker: it keeps the read end, ours (_before_fork).
        os.close(_lifeline[1])
        _fork_lifeline, _lifeline = _lifeline[0], None
    _cut_lifeline()
