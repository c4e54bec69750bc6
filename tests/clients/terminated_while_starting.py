"""A protected DataLoader worker (fork, spawn or forkserver, given `worker_init_fn()`) that is
starting a program (`os.system`, which runs for the whole of the program) when its main
process calls `terminate()`, then waits in Python. Prints `ended` once the worker has ended,
or `running` when it still ran 8 s after the terminate (then it is killed).

    terminated_while_starting.py fork|spawn|forkserver
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forewarn.clients.workers import worker_init_fn


def worker(init: Callable[[int], None], started: Any) -> None:
    init(0)
    started.set()
    os.system("sleep 1.5")  # the terminate comes while this runs
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
    context = multiprocessing.get_context(sys.argv[1])
    started = context.Event()
    process = context.Process(target=worker, args=(worker_init_fn(), started), daemon=True)
    process.start()
    assert started.wait(60)
    end = time.monotonic() + 30
    while not in_os_system(process.pid) and time.monotonic() < end:
        time.sleep(0.01)
    process.terminate()
    process.join(8)
    print("running" if process.is_alive() else "ended", flush=True)
    if process.is_alive():
        process.kill()
        process.join()
