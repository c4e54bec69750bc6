"""A protected DataLoader worker (fork, spawn or forkserver, given `worker_init_fn()`) that is
starting a program (`os.system`, which runs for the whole of the program) when its main
process calls `terminate()`, then waits in Python. Prints `ended` once the worker has ended,
or `running` when it still ran JOIN seconds (8 unless told) after the terminate (then it is
killed).

    terminated_while_starting.py fork|spawn|forkserver [PROGRAM_SECONDS JOIN]

The program is `sleep PROGRAM_SECONDS` (1.5 unless told), run by the shell as its child and
killed at the end.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forewarn.clients.workers import worker_init_fn


def worker(init: Callable[[int], None], started: Any, seconds: str, pid_file: str) -> None:
    init(0)
    started.set()
    os.system(f"sleep {seconds} & echo $! > {pid_file}; wait $!")  # the terminate comes meanwhile
    while True:  # until a signal ends it (one a handler passes by returns here)
        signal.pause()


def in_os_system(pid: int) -> bool:
    """Whether the worker `pid` has started its program (a child that runs sleep)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            if b"sleep" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


if __name__ == "__main__":
    seconds, join = (sys.argv[2], float(sys.argv[3])) if len(sys.argv) > 3 else ("1.5", 8.0)
    pid_file = Path(tempfile.mkdtemp()) / "sleep.pid"
    context = multiprocessing.get_context(sys.argv[1])
    started = context.Event()
    process = context.Process(
        target=worker, args=(worker_init_fn(), started, seconds, str(pid_file)), daemon=True
    )
    process.start()
    assert started.wait(60)
    end = time.monotonic() + 30
    while not (in_os_system(process.pid) and pid_file.exists()) and time.monotonic() < end:
        time.sleep(0.01)
    process.terminate()
    # Not join(): a spawn worker's programs inherit its end of the sentinel, which join() waits
    # on, so it waits out its timeout after the worker has ended.
    end = time.monotonic() + join
    while process.is_alive() and time.monotonic() < end:
        time.sleep(0.01)
    print("running" if process.is_alive() else "ended", flush=True)
    if process.is_alive():
        process.kill()
        process.join()
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    shutil.rmtree(pid_file.parent, ignore_errors=True)
