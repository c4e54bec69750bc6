"""The main process's `terminate()` of a protected DataLoader worker, sent again until the
worker reads it.

A protected worker ends on its main process's SIGTERM, which a thread of its own reads with
its sender (workers._sigterm_from_main_only). While the worker starts a program, the starting
thread does not block the signals, so that the program gets them (`_programs._released`: from a
`subprocess` start's fork to the program's exec; an `os.system` keeps them blocked, see
`_programs._system`), and a SIGTERM that comes then runs the do-nothing handler in the
worker's main thread, its sender unread.
Its main process's `terminate()` was passed by there: torch's DataLoader stops a worker still
busy 5 s after it asked it to end that way, and a dataset that starts a program per item (a
decoder) kept running beside the main process, which never asked again. So the main process
asks again, while the worker lives, for as long as a program start may last.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from multiprocessing import connection
from typing import Any

# Seconds between the sends after the first: quick at first (a `subprocess` start takes
# milliseconds), then once a second, for 10 s in all (a start on a loaded machine may take
# longer). Sent to the worker's pidfd where there is one (`_open_pidfd`).
AGAIN_AFTER = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)

_MARK = "_forewarn_protected"


def mark(popen: Any) -> None:
    """`popen` (multiprocessing's) starts a protected worker: its `terminate()` is sent again."""
    setattr(popen, _MARK, True)


def _still_running(popen: Any, pidfd: int | None = None) -> bool:
    """Whether the worker of `popen` has not ended, without reaping it (its pidfd, else its
    sentinel, becomes readable when it ends): the process that started it reaps it, and its
    pid is then no longer its own to signal. The sentinel stays unreadable while a process the
    worker forked holds it."""
    if popen.returncode is not None:
        return False
    if pidfd is not None:
        poll = select.poll()
        poll.register(pidfd, select.POLLIN)
        return not poll.poll(0)
    finalizer = getattr(popen, "finalizer", None)
    if finalizer is not None and not finalizer.still_active():
        return False  # closed: its sentinel may be another file's number by now
    try:
        return not connection.wait([popen.sentinel], 0)
    except (OSError, ValueError, AttributeError):
        return False


def _again(popen: Any, pidfd: int | None) -> None:
    try:
        for delay in AGAIN_AFTER:
            time.sleep(delay)
            if not _still_running(popen, pidfd):
                return
            try:
                if pidfd is None:
                    os.kill(popen.pid, signal.SIGTERM)
                else:
                    signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            except OSError:
                return
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _open_pidfd(popen: Any) -> int | None:
    """The worker's pidfd, opened as it is terminated: its pid names it then as surely as for
    the terminate's own kill. Sent by its pid for 10 s more, a worker reaped outside its Popen
    (a SIGCHLD handler's `waitpid(-1)`) while a process it forked held its sentinel open
    looked alive, and a new process given its pid got the SIGTERMs. None where there is no
    pidfd (before Linux 5.3, not Linux, a seccomp filter): sent by pid then."""
    try:
        return os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        return None


def _terminate(popen: Any) -> None:
    marked = getattr(popen, _MARK, False)
    pidfd = _open_pidfd(popen) if marked and _still_running(popen) else None
    _plain_terminate(popen)
    if marked and _still_running(popen, pidfd):
        threading.Thread(
            target=_again, args=(popen, pidfd), name="forewarn-terminate", daemon=True
        ).start()
    elif pidfd is not None:
        os.close(pidfd)


try:
    from multiprocessing import popen_fork
except ImportError:  # no fork on this platform: no protected workers either
    pass
else:
    # spawn's and forkserver's Popen inherit this terminate.
    _plain_terminate = popen_fork.Popen.terminate
    popen_fork.Popen.terminate = _terminate  # type: ignore[method-assign,assignment]
