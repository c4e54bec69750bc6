"""The process behind a hold (`forewarn wait --client ID --pid PID`): a shell loop killed
between its `wait` and its `ack` held its notice until the notice was retired (an hour for a
flag file's drain), so every other client's ack was not enough and an operator's script that
waits for the flag to go waited that long. The hold names the loop's process; the agent lets
go of it once that process is gone.

A process is named by its pid, its start time (so a pid used again by another process is not
taken for it) and its pid namespace (so an agent in a container of its own, which sees other
pids or none, never reads a pid of the job's namespace as its own). Whatever cannot be told
for sure (another namespace, /proc hidden by `hidepid`) keeps the hold: let go too early, the
notice counted as flushed while the loop still saved (the flag removed, Azure approving
early), which is the loss the hold is there to prevent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def pid_namespace() -> str | None:
    """This process's pid namespace (`pid:[4026531836]`), None where it cannot be read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _stat_field(pid: int, number: int) -> int | None:
    """Field `number` (counted from 1, as proc(5) does) of /proc/PID/stat, read after the
    command's closing parenthesis (a command may hold spaces and parentheses); None when it
    cannot be read (gone, or hidden)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        return int(fields[number - 3])
    except (OSError, ValueError, IndexError):
        return None


def process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat's 22nd field);
    None when it cannot be read (gone, or hidden)."""
    return _stat_field(pid, 22)


def process_parent(pid: int) -> int | None:
    """The parent of process `pid` (/proc/PID/stat's 4th field), None where it cannot be read."""
    return _stat_field(pid, 4)


def ancestors(pid: int) -> list[int]:
    """The processes `pid` descends from, its parent first, up to the first process (a
    bounded walk: a pid namespace's tree is at most this deep in practice)."""
    found: list[int] = []
    parent = process_parent(pid)
    while parent is not None and parent > 0 and parent not in found and len(found) < 256:
        found.append(parent)
        parent = process_parent(parent)
    return found


def process_group(pid: int) -> int | None:
    """The process group of process `pid`, None where it cannot be read."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def process_exists(pid: int) -> bool:
    """Whether a process `pid` is there (another user's too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: another user's
    return True


@dataclass(frozen=True)
class Holder:
    """The process that will ack a held notice, as the `wait` that held it saw it."""

    pid: int
    start: int | None  # its start time, when `wait` could read it
    namespace: str | None  # the pid namespace of `wait`, which shares it with its loop
    # Its process group: a loop's shell killed alone (`kill "$LOOP"`) leaves the save it
    # started running in that group, and the hold lasts until that ends too.
    group: int | None = None

    def watchable(self, own_namespace: str | None) -> bool:
        """Whether this agent can tell when the process is gone: it sees the same pids."""
        return own_namespace is not None and self.namespace == own_namespace

    def gone(self) -> bool:
        """True only when the process is surely gone (no process has its pid, or the one
        that has it started at another time: the pid was used again) and so is every
        process of its group (a number used again by another group keeps the hold)."""
        return self._process_gone() and (self.group is None or not _group_left(self.group))

    def _process_gone(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # another user's: it is there
        except OSError:
            return False
        if self.start is None:
            return False
        start = process_start(self.pid)
        return start is not None and start != self.start


def _group_left(group: int) -> bool:
    """Whether any process of process group `group` other than this agent is left (another
    user's too)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: another user's processes are in it
    if group != os.getpgrp():
        return True
    # The agent's own group: a script that starts `forewarn agent &` and then its loop (a
    # container's entrypoint, a batch job's script) runs both in one group, and the agent
    # itself kept the hold of a loop killed before its ack until the notice was retired.
    return _another_member(group)


def _another_member(group: int) -> bool:
    """Whether a process other than this one is in process group `group`, by /proc (5th field
    of each process's stat); True where that cannot be told (/proc not listed, a process's
    stat not read: `hidepid`), which keeps the hold."""
    own = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit() or int(entry) == own:
            continue
        member = _stat_field(int(entry), 5)
        if member is None:
            if os.path.exists(f"/proc/{entry}"):
                return True  # there, but its group cannot be read
            continue  # gone meanwhile
        if member == group:
            return True
    return False


__all__ = [
    "Holder",
    "ancestors",
    "pid_namespace",
    "process_exists",
    "process_group",
    "process_parent",
    "process_start",
]
