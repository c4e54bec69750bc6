"""Imported by multiprocessing's fork server only: `worker_init_fn()` names it in the fork
server's preload list.

A forkserver DataLoader worker is a child of the fork server, and torch's worker loop ends as
soon as its parent is gone. A SIGTERM to the whole job (systemd's `KillMode=control-group`, a
process-group kill) ended the fork server, and with it every worker: the loop raised `DataLoader
worker (pid(s) …) exited unexpectedly` before the save. The fork server now keeps SIGTERM (and
SIGINT) blocked; it still ends when the main process exits (multiprocessing closes its pipe) and
with SIGKILL. The processes it forks start with them blocked too, so that one sent while they
import the main module waits: a DataLoader worker of `worker_init_fn()` keeps them blocked until
its init ignores them (and ends if that SIGTERM came from its main process); any other process
unblocks them once its process object is unpickled, just before it runs, so
`Process.terminate()` still works (one sent earlier acts then).
Imported anywhere else, this module does nothing.
"""

from __future__ import annotations

import signal
import sys
from multiprocessing import util


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


# SIGTERM, SIGINT and SIGHUP, as forewarn.clients.workers_protect.BLOCKED_AT_START (not
# imported: the fork server loads nothing more than it must). SIGHUP: a closed terminal sends
# it to the job's whole process group, and the fork server's end ended every forkserver worker;
# blocked, it stays pending in the server, which still ends when the main process exits.
_JOB_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}

# Set by forewarn.clients.workers when the process object it unpickles is a protected worker.
protected_worker = False


def _block_job_signals() -> None:
    # Blocked, not ignored: the children inherit the mask from the instant of the fork. A child
    # imports the main module before its worker_init_fn runs (Python 3.11's fork server does
    # not preload it: seconds, with torch), and a job-wide SIGTERM in that time ended the
    # worker and the loop raised before the save. Blocked, the SIGTERM waits; a child that is
    # not a protected worker still gets it once it starts to run (_started).
    signal.pthread_sigmask(signal.SIG_BLOCK, _JOB_SIGNALS)
    # Run by every child once its process object is unpickled, just before it runs.
    util.register_after_fork(_ANCHOR, _started)


def _started(_anchor: object) -> None:
    if not protected_worker:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _JOB_SIGNALS)  # a pending one acts now
    # A protected worker keeps them blocked until its worker_init_fn has them ignored.


class _Anchor:
    """What the after-fork registry holds (it keeps weak references)."""


_ANCHOR = _Anchor()


if _in_fork_server():
    _block_job_signals()
