"""A little disk space held in the state directory for the state file.

A state directory on the disk a job writes its checkpoints to fills up with it: every save
of the state then failed, and an agent restarted before anyone freed space (`systemctl
restart`, an upgrade) started without the manual notices raised meanwhile, which nothing
raises again. The agent holds `state.reserve` there (twice the state's size, 64 KiB at
least) and gives it up for the state's write when the disk is full, then takes it back.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger("forewarn.agent")

RESERVE_FILE = "state.reserve"
# The least held: many times a state file of a few notices. A larger state has twice its size
# held (`take(need)`), so that an agent of few notices (a test suite starts hundreds) holds
# little.
MIN_RESERVE_BYTES = 64 * 1024


class SpaceReserve:
    """Space allocated to the file `path`, given up when the state needs it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.held = 0  # the bytes allocated, as far as this agent knows
        self.wanted = MIN_RESERVE_BYTES  # the size last asked of `take`
        # The state's writer thread takes and gives up the reserve, and so does a watcher's
        # file written on a full disk in the event loop (`write_kept`).
        self._lock = threading.RLock()

    def take(self, need: int = 0) -> OSError | None:
        """Allocate `need` bytes (MIN_RESERVE_BYTES at least) unless they are held: None when
        held, else why not (a full disk; a file system that cannot allocate). What was
        allocated before a failure is kept, and the next call tries for the rest. Never
        raises."""
        with self._lock:
            return self._take(max(MIN_RESERVE_BYTES, need))

    def _take(self, size: int) -> OSError | None:
        self.wanted = size
        if self.held >= size:
            return None
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                # Blocks allocated, not only a size: a sparse file would free nothing.
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as error:
            return error
        self.held = size
        return None

    def take_back(self) -> bool:
        """Take the size last asked for again if it is not held and the disk has room for
        it twice over now (old checkpoints deleted): True when held. A disk without the room
        is left alone: allocating on it would take the last blocks a checkpoint's write
        needs, and the state's next write would find the disk full and give it up again."""
        with self._lock:
            if self.held >= self.wanted:
                return True
            try:
                disk = os.statvfs(self.path.parent)
            except OSError:
                return False
            if disk.f_bavail * disk.f_frsize < 2 * self.wanted:
                return False
            return self._take(self.wanted) is None

    def allocated(self) -> int:
        """The bytes the reserve's file holds on disk now (0 when there is none)."""
        try:
            return os.lstat(self.path).st_blocks * 512
        except OSError:
            return 0

    def spare_a_block(self) -> bool:
        """Give one block of the reserve's file back to the disk, for a few bytes that must
        land on a full disk (the pid in the state directory's lock, before the agent holds
        the reserve): True when there was one to give. The next `take` allocates it again."""
        with self._lock:
            self.held = 0
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                return False
            try:
                found = os.fstat(fd)
                block = max(os.fstatvfs(fd).f_frsize, 512)
                if not stat.S_ISREG(found.st_mode) or found.st_size < block:
                    return False
                os.ftruncate(fd, found.st_size - block)
            except OSError:
                return False
            finally:
                os.close(fd)
            return True

    def give_up(self) -> bool:
        """Free the reserve's space: True when there was some to free."""
        with self._lock:
            self.held = 0
            try:
                found = os.lstat(self.path)
                os.unlink(self.path)
            except OSError:
                return False
            return found.st_blocks > 0


__all__ = ["MIN_RESERVE_BYTES", "RESERVE_FILE", "SpaceReserve"]
