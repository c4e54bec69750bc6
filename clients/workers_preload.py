"""The fork server's preload: forewarn's module, which keeps SIGTERM blocked in the server.

A forkserver worker is forked by the fork server: a job-wide SIGTERM that ended the server
ended every such worker with it. The server imports `FORK_SERVER_PRELOAD`
(`forewarn.clients._forkserver`), which keeps SIGTERM blocked there; this module puts it in the
preload, beside what the job preloads itself.
"""

from __future__ import annotations

FORK_SERVER_PRELOAD = "forewarn.clients._forkserver"


def _preload_in_fork_server() -> None:
    # The fork server is started with the first forkserver worker, after this: the DataLoader
    # is built with its worker_init_fn before it starts any worker.
    try:
        from multiprocessing import forkserver
    except ImportError:  # no fork server on this platform
        return
    # A list the job set empty stays so, but for ours: it has the server import no main module.
    modules = getattr(forkserver._forkserver, "_preload_modules", None)
    modules = ["__main__"] if modules is None else list(modules)
    if FORK_SERVER_PRELOAD not in modules:
        forkserver.set_forkserver_preload([*modules, FORK_SERVER_PRELOAD])


# A fork server is started with the first forkserver worker, which may come before the guard
# is made (a loader iterated during set-up, persistent workers): kept alive through a job-wide
