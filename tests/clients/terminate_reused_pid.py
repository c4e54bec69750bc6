"""A protected worker's main process sends its `terminate()` again while the worker lives
(`_terminate_again`); here the worker is reaped outside its Popen (a SIGCHLD handler's
`waitpid(-1)`) while a helper it forked still holds its sentinel, and its pid is given to a
new process of the job's. Prints `spared` when that process was not sent the re-sent SIGTERM,
`killed` when it was, `not reused` when the pid went elsewhere (nothing else in the namespace
starts a process: it does not), `no ns_last_pid: ...` when the next pid cannot be set.

    terminate_reused_pid.py OUTER_PID_NAMESPACE

Run in a pid namespace of its own (`unshare --user --map-root-user --pid --fork`), never the
machine's: it sets the namespace's next pid (/proc/sys/kernel/ns_last_pid), and refuses to
when its namespace is OUTER_PID_NAMESPACE (the link /proc/self/ns/pid of the caller).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from typing import Any

from forewarn.clients import _terminate_again


def worker(ready: Any) -> None:
    # It passes SIGTERM by (as a worker starting a program does), and forks a helper, which
    # holds the worker's sentinel open past the worker's end.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    ready.set()
    time.sleep(0.3)  # ends by itself after the terminate
    os._exit(0)


if __name__ == "__main__":
    if os.readlink("/proc/self/ns/pid") == sys.argv[1]:
        sys.exit("not in a pid namespace of its own: the machine's next pid is not ours to set")
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    process = context.Process(target=worker, args=(ready,), daemon=True)
    process.start()
    assert ready.wait(30)
    popen = process._popen  # type: ignore[attr-defined]
    _terminate_again.mark(popen)
    process.terminate()  # sent again while the worker lives
    pid = process.pid
    assert pid is not None
    os.waitpid(pid, 0)  # reaped outside its Popen
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(pid - 1))
    except OSError as error:  # a kernel or sandbox that does not let it be set
        print(f"no ns_last_pid: {error}", flush=True)
        sys.exit(0)
    bystander = subprocess.Popen(["sleep", "30"])
    if bystander.pid != pid:
        print("not reused", flush=True)
    else:
        time.sleep(1.5)  # two more sends are due in this time (at 0.75 s and 1.55 s)
        print("spared" if bystander.poll() is None else "killed", flush=True)
    bystander.kill()
    bystander.wait()
