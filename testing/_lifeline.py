"""Children that end with the test process.

The agent and the simulator run in sessions of their own, so that a Ctrl-C reaches only the
test, which then stops them in order. But then a signal to the test's process group never
reaches them either: a pytest ended by a CI timeout's SIGTERM, by SIGKILL or by a closed
terminal left them running for ever. Each child now holds the read end of a pipe whose write
end only the test process has; when that process is gone, the read sees the end of the file
and the child stops itself (SIGTERM, its clean stop; SIGKILL 10 s later)."""

from __future__ import annotations

import os
import subprocess
from typing import IO

# Runs `python -m MODULE WORDS...` given as `python -c WATCH FD -m MODULE WORDS...`.
_WATCH = """\
import os, runpy, signal, sys, threading

def _watch(fd):
    while os.read(fd, 64):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(10)
    os.kill(os.getpid(), signal.SIGKILL)

_fd = int(sys.argv[1])
threading.Thread(target=_watch, args=(_fd,), name="forewarn-lifeline", daemon=True).start()
_module = sys.argv[3]
sys.argv = [_module, *sys.argv[4:]]
runpy.run_module(_module, run_name="__main__", alter_sys=True)
"""


def spawn(
    argv: list[str], env: dict[str, str], log: IO[bytes]
) -> tuple[subprocess.Popen[bytes], int]:
    """Start `argv` (`python -m MODULE ...`) in a session of its own, its output to `log`.
    Returns the process and the lifeline: close it (`os.close`) once the process is stopped."""
    python, flag, *rest = argv
    if flag != "-m":
        raise ValueError(f"not a `python -m MODULE` command: {argv}")
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [python, "-c", _WATCH, str(read_end), flag, *rest],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=(read_end,),
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end


def cut(lifeline: int | None) -> None:
    """Close a lifeline (the child, if still running, stops itself)."""
    if lifeline is not None:
        os.close(lifeline)


__all__ = ["cut", "spawn"]
