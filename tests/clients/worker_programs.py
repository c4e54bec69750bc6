"""A protected DataLoader worker (a fork child that runs `ignore_job_signals()`, as its
`worker_init_fn` does) that starts a program each way a dataset starts one, sends it SIGTERM or
SIGINT (a process of its own: terminate()), and prints one JSON object: for each way and
signal, the program's exit code (negative: the signal ended it) or null when it was still
running 3 s later (then it is SIGKILLed).

    worker_programs.py protected|plain

`plain`: the worker does not call `ignore_job_signals()` (what the program gets without
forewarn).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from forewarn.clients.workers import ignore_job_signals

SLEEP = ["sleep", "30"]


def exec_done(pid: int) -> None:
    """Wait until `pid` runs the program: a signal sent between its fork and its exec is the
    forked Python's, not the program's."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if cmdline.read().startswith(b"sleep\0"):
                return
        time.sleep(0.005)


def wait_ended(pid: int) -> int | None:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def with_popen(signum: int) -> int | None:
    program = subprocess.Popen(SLEEP)
    exec_done(program.pid)
    program.send_signal(signum)
    try:
        return program.wait(timeout=3)
    except subprocess.TimeoutExpired:
        program.kill()
        program.wait()
        return None


def with_posix_spawn(signum: int) -> int | None:
    pid = os.posix_spawnp("sleep", SLEEP, os.environ)
    exec_done(pid)
    os.kill(pid, signum)
    return wait_ended(pid)


def with_fork_exec(signum: int) -> int | None:
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", SLEEP)
    exec_done(pid)
    os.kill(pid, signum)
    return wait_ended(pid)


def with_system(signum: int) -> int | None:
    # The shell sends itself the signal: it is still there to exit 0 only if it kept it.
    status = os.system(f"kill -{signum} $$; sleep 3")
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else code


def with_multiprocessing(signum: int) -> int | None:
    # A process of the worker's own (a fork Process): terminate() is how it is stopped.
    helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    helper.start()
    helper.terminate()
    helper.join(3)
    if helper.exitcode is None:
        helper.kill()
        helper.join()
    return helper.exitcode


WAYS: dict[str, Callable[[int], int | None]] = {
    "popen": with_popen,
    "posix_spawn": with_posix_spawn,
    "fork_exec": with_fork_exec,
    "system": with_system,
    "multiprocessing": with_multiprocessing,
}


def worker(protected: bool) -> None:
    if protected:
        ignore_job_signals()
    ended = {
        f"{name} {signal.Signals(signum).name}": way(signum)
        for name, way in WAYS.items()
        for signum in (signal.SIGTERM, signal.SIGINT)
        if name != "multiprocessing" or signum == signal.SIGTERM
    }
    print(json.dumps(ended), flush=True)


if __name__ == "__main__":
    process = multiprocessing.get_context("fork").Process(
        target=worker, args=(sys.argv[1] == "protected",)
    )
    process.start()
    process.join()
    sys.exit(process.exitcode)
