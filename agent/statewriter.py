"""The agent's state file, written off its event loop.

Each save fsyncs, and a save in the event loop held everything behind it: with a checkpoint
being written to the same disk, one took up to 0.45 s on the development machine (0.5 ms when
the disk is idle), and a burst of rank acks, each widening the exit margin, paid it once per
ack while heartbeats, replays and the next notice waited. Saves go to one writer thread
instead; the newest state wins (a save handed in while another is written replaces any not yet
begun), and the file never goes back to an older state. A save that must be on disk before
what follows it (a clear, before it is published) still writes in the caller, after the write
in progress.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from forewarn.providers.persist import NO_ROOM, write_atomically

from .reserve import SpaceReserve

log = logging.getLogger("forewarn.agent")

# A write that found no room (`NO_ROOM`): the disk full, or the user's quota on it used up (a
# cluster's home or project directory, where checkpoints use up the quota long before the
# disk). The reserve is in the same quota, so giving it up makes room for the state either way.
_STATE_MODE = 0o640


class StateWriter:
    """Writes `path` with the newest bytes handed in; `on_result(error)` (None on success)
    is called on the event loop's thread after each write."""

    def __init__(
        self,
        path: Path,
        on_result: Callable[[OSError | None], None],
        reserve: SpaceReserve | None = None,
    ) -> None:
        """`reserve`: space given up for a write that finds the disk full, then taken back."""
        self.path = path
        self._on_result = on_result
        self._reserve = reserve
        self._spent_said = False  # the reserve's spending logged since the disk had room
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forewarn-state")
        # Held while the file is written, by the thread or by `write_now`.
        self._lock = threading.Lock()
        self._generation = 0  # of the newest bytes handed in
        self._written = 0  # of the newest bytes written (or whose write failed)
        self._latest: bytes | None = None
        self._task: asyncio.Task[None] | None = None

    def save(self, data: bytes) -> None:
        """Have `data` written soon, without waiting for the disk (an event loop must run)."""
        self._generation += 1
        self._latest = data
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def write_now(self, data: bytes) -> None:
        """Write `data` before returning (after the write in progress, if any)."""
        self._generation += 1
        self._latest = None
        self._wrote(self._write(self._generation, data))

    async def settled(self) -> None:
        """Wait until everything handed in so far is written (or its write failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._latest is not None and self._generation > self._written:
            generation, data = self._generation, self._latest
            self._latest = None
            try:
                outcome = await loop.run_in_executor(self._executor, self._write, generation, data)
            except Exception:  # not the disk's: a bug, said loudly, and the next save tries
                log.exception("writing %s failed", self.path)
                continue
            self._wrote(outcome)

    def _write(self, generation: int, data: bytes) -> OSError | bool | None:
        """Write unless a newer state is on disk already (False); the error, or None."""
        with self._lock:
            if generation <= self._written:
                return False
            self._written = generation  # a failed write is retried with the next save
            try:
                write_atomically(self.path, data, mode=_STATE_MODE)
            except OSError as error:
                if error.errno not in NO_ROOM or not self.make_room(self.path, error):
                    return error
                try:
                    write_atomically(self.path, data, mode=_STATE_MODE)
                except OSError as again:
                    return again
            else:
                self._spent_said = False
            if self._reserve is not None:
                # Back for the next write, if the disk has room: twice this state, which the
                # next write needs while this one is still on disk.
                self._reserve.take(2 * len(data))
            return None

    def take_back_reserve(self) -> None:
        """Take the reserve back if a write spent it and the disk has room again. Before,
        only the next write took it back: an agent idle after the disk was cleared held
        none when it filled again, and the next notice's state was not saved. Not while a
        write is in progress (it takes the reserve back itself)."""
        if self._reserve is None or self._reserve.held >= self._reserve.wanted:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._reserve.take_back() and self._spent_said:
                self._spent_said = False
                log.info(
                    "the disk of %s has room again: %s is held for the state again",
                    self.path,
                    self._reserve.path,
                )
        finally:
            self._lock.release()

    def make_room(self, path: Path, error: OSError) -> bool:
        """Free the reserve for the write of `path` on a full disk (or quota): the state, or
        another file of the state directory that must survive a full disk (`write_kept`).
        True if it held space; taken back as for the state's own writes. Called by the
        writer thread and by the event loop's (a watcher's file)."""
        if self._reserve is None or not self._reserve.give_up():
            return False
        if not self._spent_said:
            self._spent_said = True
            log.warning(
                "the disk of %s is full (%s): gave up the space of %s to save %s; free "
                "space there (the state of the next notices may not fit)",
                path,
                error.strerror or error,
                self._reserve.path,
                "the state" if path == self.path else path.name,
            )
        return True

    def _wrote(self, outcome: OSError | bool | None) -> None:
        if outcome is not False:
            self._on_result(outcome if isinstance(outcome, OSError) else None)


__all__ = ["StateWriter"]
