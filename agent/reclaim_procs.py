"""The process side of the realistic reclaim drill: which processes a platform's kill reaches.

A job under torchrun is a tree: torchrun, one rank per process group (torchrun starts each
rank in a new session), and each rank's DataLoader workers. systemd's control group and a
container hold the whole tree, so the drill finds it by walking /proc from the job's top
process. While it runs, the drill is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so a
process whose parent was killed is re-parented to the drill instead of init: it stays in the
tree, and the drill reaps it, so no process is ever left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def become_subreaper(on: bool = True) -> bool:
    """Orphans of the drill's jobs come back to this process (Linux); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _is_subreaper() -> bool:
    flag = ctypes.c_int(0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and bool(
            flag.value
        )
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """This process a child subreaper while the drill runs, then as it was before. Left one
    for good, a process that goes on after the drill (a test suite's worker) adopted the
    orphans of everything it ran next, zombies nobody reaped: a killed job's DataLoader
    workers kept their /proc entries."""
    was = _is_subreaper()
    became = was or become_subreaper()
    try:
        yield became
    finally:
        if became and not was:
            become_subreaper(False)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text.rpartition(")")[2].split()
    return fields[0], int(fields[1])


def started_at(pid: int) -> int | None:
    """When a process started (clock ticks since boot), or None when it is gone: with its pid,
    a process's identity, which a pid alone is not once it may be reused."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(text.rpartition(")")[2].split()[19])


def children_map() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[0] != "Z":
            found.setdefault(stat[1], []).append(int(entry.name))
    return found


def tree(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """`root` and every live (non-zombie) descendant."""
    children = children_map() if children is None else children
    if _stat(root) is None or (_stat(root) or ("Z", 0))[0] == "Z":
        out: list[int] = []
    else:
        out = [root]
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class JobTree:
    """Every process a job ever had, as the platform sees it: the job's top process and its
    descendants, plus orphans re-parented to the drill that are not the drill's own helpers
    (`exclude`) or children it had before the job started."""

    def __init__(self, top: int, exclude: set[int]) -> None:
        self.top = top
        self.exclude = exclude  # the drill's own children that are not the job (agents)
        # Children the drill had before the job started cannot be the job's orphans: counted
        # as such, a process's other servers (a test's session-wide S3 and IMAP servers) were
        # SIGKILLed with the job.
        self.before = set(children_map().get(os.getpid(), [])) - {top}
        self.seen: set[int] = {top}

    def live(self) -> list[int]:
        self.reap()
        children = children_map()
        pids = set(tree(self.top, children))
        for pid in children.get(os.getpid(), []):
            if pid not in self.exclude and pid not in self.before and pid != self.top:
                pids.update(tree(pid, children))
        for pid in list(self.exclude):
            pids.difference_update(tree(pid, children))
        self.seen.update(pids)
        return sorted(pids)

    def signal(self, signum: int, pids: list[int] | None = None) -> list[int]:
        targets = self.live() if pids is None else pids
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
        return targets

    def reap(self) -> None:
        """Collect orphans of the job that died after being re-parented to the drill."""
        for pid in list(self.seen):
            if pid == self.top:
                continue  # its Popen reaps it
            stat = _stat(pid)
            if stat is not None and stat[0] == "Z" and stat[1] == os.getpid():
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def wait_gone(self, timeout: float) -> list[int]:
        """Wait until no process of the job is left; the ones still there after `timeout`."""
        end = time.monotonic() + timeout
        while True:
            left = self.live()
            if not left or time.monotonic() >= end:
                return left
            time.sleep(0.05)

    def kill_all(self) -> list[int]:
        left = self.signal(signal.SIGKILL)
        self.wait_gone(5)
        return left


__all__ = ["JobTree", "become_subreaper", "children_map", "started_at", "subreaper", "tree"]
