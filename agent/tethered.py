"""Children that end with the process that started them, even when it is killed outright.

A `kill -9` of `forewarn drill local` left its agent and demo running, holding their ports
and the drill's directory: a SIGKILL runs no cleanup. On Linux a child can ask the kernel for
a signal when its parent dies (prctl PR_SET_PDEATHSIG), which survives exec. The request is
made by a small launcher that then execs the real command: `preexec_fn` is not safe in a
process with threads, and the drill reads its demo on threads.

The signal comes when the *thread* that started the child ends, not the process: start
tethered children from a thread that lasts as long as the process (the drill uses its main
thread)."""

from __future__ import annotations

import os
import signal
import sys

# `python -S -c LAUNCHER PARENT_PID SIGNAL ARGV...`: no site, no forewarn import, so that it
# costs one bare interpreter start before the exec.
_LAUNCHER = """\
import ctypes, os, sys
parent, signum, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass
# The parent died before the request was made: the kernel will not send the signal.
if os.getppid() != parent:
    sys.exit(128 + signum)
os.execvp(argv[0], argv)
"""


def tethered(argv: list[str], signum: int = signal.SIGTERM) -> list[str]:
    """`argv` started so that it gets `signum` when this process dies (Linux; elsewhere
    `argv` as it is). The child keeps the pid of the launcher, so Popen waits on it."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-S", "-c", _LAUNCHER, str(os.getpid()), str(int(signum)), *argv]


__all__ = ["tethered"]
