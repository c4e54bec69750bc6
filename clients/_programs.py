"""Programs a protected DataLoader worker starts get SIGTERM and SIGINT as they would without
forewarn.

A protected worker outlives a job-wide SIGTERM (workers._protect): it passes SIGTERM and
SIGINT by, and keeps SIGTERM blocked in its main thread so that a thread of its own reads who
sent it. An exec'd program keeps the signal mask of the thread that started it, and the
signals its process ignored: while the worker ignored them (SIG_IGN), a program its dataset
started (`subprocess.Popen`, `os.posix_spawn`, `os.fork` and exec, `os.system`) or a process of
its own (a fork `multiprocessing.Process`) ignored `terminate()`; a dataset that stops its
decoder that way waited for it for ever, and the training loop with it, and one still running
outlived the job's stop until the platform's SIGKILL.

So a protected worker passes them by with a handler that does nothing (`pass_by`: exec sets a
caught signal back to its default), and while it starts a program, the starting thread does
not block them (an unblocking that lasts the fork and exec, `_released`). `os.system` lasts
its program, not its start: the worker keeps them blocked, and the shell starts with them
unblocked (`_system`). A process it forks gets their defaults back at once
(`_after_fork_in_child`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

JOB_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# True in a protected worker (`hold`), from its init on; a process it forks is not one.
held = False


def pass_by(signum: int, frame: FrameType | None) -> None:
    """The handler a protected worker has for SIGTERM and SIGINT: it does nothing. Not SIG_IGN:
    a program the worker starts keeps the signals its process ignores, and resets those it
    catches to their default."""


def hold() -> None:
    """Called in the worker's main thread, by its init: pass the job's signals by. The
    caller blocks SIGTERM in its main thread itself, as it has a thread read it."""
    global held
    for signum in JOB_SIGNALS:
        signal.signal(signum, pass_by)
    if not held:
        held = True
        _wrap_starts()


@contextmanager
def _released() -> Iterator[None]:
    """The job's signals unblocked in this thread while it starts a program, which inherits
    its mask. One that comes meanwhile runs `pass_by`, or the worker's own handler, in the
    worker's main thread: passed by, as a thread the worker had before its init passes it by,
    its sender unread. Its main process's too: its `terminate()` is sent again while the worker
    lives (`_terminate_again`), and every protected worker also ends when its main process
    exits (its lifeline, `workers._end_with_main`), as multiprocessing's exit handler that
    sends it then waits for the worker without a timeout."""
    if not held:
        yield
        return
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, JOB_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _released_around(start: Callable[..., Any]) -> Callable[..., Any]:
    def started(*args: Any, **kwargs: Any) -> Any:
        with _released():
            return start(*args, **kwargs)

    started.__wrapped__ = start  # type: ignore[attr-defined]
    return started


def _system(command: Any) -> int:
    """`os.system` in a protected worker: the shell, `/bin/sh -c command` as the C library
    starts it, waited for, its wait status returned (127 as its exit code when it could not be
    started). Started with the job's signals unblocked and at their defaults, while the worker
    keeps SIGTERM blocked for the thread that reads who sent it. Unblocked in the worker for
    the whole of the program (`_released` around the C library's `system`), a SIGTERM from
    the main process ran `pass_by`, its sender unread, and so did the ones sent again for 10 s
    (`_terminate_again`): torch's DataLoader waits 5 s for each worker it terminates, and one
    running a decoder that way outlived every terminate until its program ended."""
    spawn = _posix_spawn
    if not held or spawn is None:  # a process the worker forked: the C library's, as it was
        return _plain_system(command)
    command = os.fspath(command)
    sys.audit("os.system", command)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ()) - set(JOB_SIGNALS)
    try:
        pid = spawn(  # not the wrapped one, which unblocks them in this thread
            "/bin/sh",
            ["sh", "-c", command],
            os.environ,
            setsigmask=mask,
            setsigdef=JOB_SIGNALS,
        )
    except OSError:
        return 127 << 8
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): the C library's -1
        return -1


def _wrap_starts() -> None:
    """Wrap, in this worker only, each way Python starts a program: subprocess's fork and exec
    (`subprocess.Popen`, `os.popen`, asyncio's), `os.posix_spawn` and `os.posix_spawnp` (which
    subprocess also uses), and `os.system` (`_system`). `os.fork` and exec gets them in
    `_after_fork_in_child`."""
    fork_exec = getattr(subprocess, "_fork_exec", None)
    if fork_exec is not None:
        subprocess._fork_exec = _released_around(fork_exec)  # type: ignore[attr-defined]
    for name in ("posix_spawn", "posix_spawnp"):
        start = getattr(os, name, None)
        if start is not None:
            setattr(os, name, _released_around(start))
    if hasattr(os, "system"):
        os.system = _system if _posix_spawn is not None else _released_around(_plain_system)


# Taken before `_wrap_starts` wraps them: `_system` starts the shell with its own signal mask.
_posix_spawn: Callable[..., int] | None = getattr(os, "posix_spawn", None)
_plain_system: Callable[[Any], int] = getattr(os, "system", lambda command: -1)


def _after_fork_in_child() -> None:
    # A process the worker forks (a fork multiprocessing.Process, os.fork then exec) is not a
    # protected worker: it gets the defaults a Python process starts with.
    global held
    if not held:
        return
    held = False
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, JOB_SIGNALS)


os.register_at_fork(after_in_child=_after_fork_in_child)
