"""A job with an open CheckpointGuard that forks children (multiprocessing's "fork" start, as a
Pool or a helper process starts them): prints one JSON line of how each child ended.

- `idle`: a child that never uses the guard, stopped with `terminate()` (SIGTERM);
- `stacked`: the same under two open guards (an outer loop's and an inner phase's);
- `looping`: a forked rank that runs its loop with the inherited guard: a SIGTERM asks it to
  save and exit, as it asks the parent;
- `own`: a forked rank that makes a guard of its own and runs its loop with it, sent Ctrl-C
  (SIGINT): it is asked to save and exit;
- `workers`: a forked rank's DataLoader workers would outlive a job-wide SIGTERM under the
  guard it inherited (printed: the byte they read, `workers`, 1 or 0);
- `instant`: a child that never uses the guard, sent SIGTERM at the instant of its fork
  (its handler runs before forewarn's after-fork hooks have marked the guard's copy);
- `daemon`: a daemonic child left running when the job exits: multiprocessing's exit handler
  stops it with SIGTERM and waits for it (printed: `left`, then the job ends).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

from forewarn.clients import CheckpointGuard

GUARDS: list[CheckpointGuard] = []


def idle(ready: Any) -> None:
    ready.set()
    while True:
        time.sleep(0.05)


def looping(ready: Any) -> None:
    guard = GUARDS[-1]
    guard.due(0)
    ready.set()
    while not guard.should_exit:
        time.sleep(0.01)
    sys.exit(7)  # asked to exit by the guard: the loop's save would come here


def workers_byte(ready: Any) -> None:
    from forewarn.clients import workers

    sys.exit(10 + workers._guard_handles_sigterm_here.map[0])


def own_guard(ready: Any) -> None:
    GUARDS.append(CheckpointGuard(notices=False, flag_file=None))
    looping(ready)


def sigterm_at_the_fork() -> None:
    """Every child forked from here on is sent SIGTERM from inside fork(), as a job-wide one
    sent at that instant reaches it: by a C at-fork handler, which runs before Python's own
    (Python runs the guard's handler for it at its first chance, amid those hooks)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    KEEP.append(ctypes.CFUNCTYPE(None)(lambda: libc.kill(libc.getpid(), signal.SIGTERM)))
    getattr(libc, "__register_atfork")(None, None, KEEP[-1], None)


KEEP: list[object] = []


def main() -> None:
    case = sys.argv[1]
    if case == "instant":
        sigterm_at_the_fork()
    GUARDS.append(CheckpointGuard(notices=False, flag_file=None))
    if case == "stacked":
        GUARDS.append(CheckpointGuard(notices=False, flag_file=None))
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    if case == "instant":
        child = context.Process(target=idle, args=(ready,), daemon=True)
        child.start()
        child.join(5)
        print(json.dumps({"exitcode": child.exitcode}), flush=True)
        child.kill()
        return
    if case == "workers":
        child = context.Process(target=workers_byte, args=(ready,))
        child.start()
        child.join(15)
        print(json.dumps({"workers": (child.exitcode or 0) - 10}), flush=True)
        return
    if case in ("looping", "own"):
        child = context.Process(target=looping if case == "looping" else own_guard, args=(ready,))
    else:
        child = context.Process(target=idle, args=(ready,), daemon=True)
    child.start()
    # Running: a signal in the instant after the fork, before the child's interpreter has
    # cleared the ones its parent had pending, is lost (a Python handler inherited).
    ready.wait(60)
    if case == "daemon":
        for guard in GUARDS:
            guard.close()
        print(json.dumps({"left": child.pid}), flush=True)
        return
    if case == "own":
        os.kill(child.pid, signal.SIGINT)
    else:
        child.terminate()
    child.join(15)
    print(json.dumps({"exitcode": child.exitcode}), flush=True)
    child.kill()


if __name__ == "__main__":
    main()
