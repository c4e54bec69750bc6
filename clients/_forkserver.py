"""Imported by multiprocessing's fork server only: `worker_init_fn()` names it in the fork
server's preload list.

A forkserver DataLoader worker is a child of the fork server, and torch's worker loop ends as
soon as its parent is gone. A SIGTERM to the whole job (systemd's `KillMode=control-group`, a
process-group kill) ended the fork server, and with it every worker: the loop raised `DataLoader
worker (pid(s) …) exited unexpectedly` before the save. The fork server now ignores SIGTERM; it
still ends when the main process exits (multiprocessing closes its pipe) and with SIGKILL. The
processes it forks get back the SIGTERM handling it had, so `Process.terminate()` still works.
Imported anywhere else, this module does nothing.
"""

from __future__ import annotations

import os
import signal
import sys


def _in_fork_server() -> bool:
    forkserver = sys.modules.get("multiprocessing.forkserver")
    if forkserver is None:
        return False
    server_main = forkserver.main.__code__
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is server_main:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _ignore_sigterm() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    restore = signal.SIG_DFL if previous is None else previous
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, restore))


if _in_fork_server():
    _ignore_sigterm()
