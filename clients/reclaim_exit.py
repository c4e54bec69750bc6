"""The end of a process that saved for a reclaim: no final sweep of its whole heap.

Python's exit collects garbage across everything the process still holds (`finalize_modules`
runs full collections after sys.modules is emptied). With torch imported that is hundreds of
thousands of objects: on the project's loaded 2-core machine a torchrun rank spent 2.5-5 s
there after its exit save (a faulthandler dump: "Garbage-collecting", no Python frame), and
torchrun, waiting for its ranks, was still alive at the platform's SIGKILL 8 s after the
notice ("job exit code -9"). Those seconds are the lead's, and nothing in them is saved.

After a save that answered a reclaim's exit, the guard has the process's exit freeze the heap
first (`gc.freeze()` in an atexit hook; registered after the others, it runs before them, and
what they leave behind is collected as usual): what the process holds then is not traversed or
collected, only freed by reference counting as modules are cleared. Finalizers of objects in
reference cycles (`__del__`, weakref callbacks) do not run at that exit, as they would not
under the SIGKILL that comes next.
"""

from __future__ import annotations

import atexit
import gc
import os

# The process that registered the hook: a child forked after it runs atexit hooks it
# inherited only when it exits through sys.exit, and its own heap is its own to collect.
_registered_in: int | None = None


def skip_final_collection() -> None:
    """Have this process's exit skip the full collection of what it holds (once per process;
    from any thread)."""
    global _registered_in
    pid = os.getpid()
    if _registered_in == pid:
        return
    _registered_in = pid
    atexit.register(_freeze_heap, pid)


def _freeze_heap(pid: int) -> None:
    if os.getpid() == pid:
        gc.freeze()


__all__ = ["skip_final_collection"]
