"""The notices a notifier has not passed on yet: how it names them at stop, and the file that
keeps them across a restart of the agent.

A webhook receiver that is down while the agent stops (a SIGTERM from systemd, a crash) held
notices that were lost with the process: the operator was never told of them. `PendingFile`
keeps them in the state directory, written atomically after each change, off the event loop
(changes that come within WRITE_INTERVAL of a write's start are written together then); the
restarted agent delivers them first. Delivery is at least once: a notice delivered just
before the process dies, before the file is written again, is delivered again after the
restart.

The file also names the notices the webhook is done with (delivered or given up; a clear
takes its id off): the agent's state is written apart from this file, and an agent killed
after the state took a new notice and before this file did restored the notice and never
delivered it. A restored notice the file neither holds nor names as done is delivered.

The converse: the state drops a notice before its clear goes out, and an agent killed before
this file took the clear left the receiver with a drain that never ended. The file keeps the
last notice done of each id (`done_notices`), so that a restart that restores none of that id
can send its clear (see `WebhookObserver.on_restore_done`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from ..protocol import Notice
from ..state import read_small, saved_notice, set_aside, write_atomic

log = logging.getLogger("forewarn.webhook")

PENDING_VERSION = 1
# The notices named as done, newest kept: those of active notices, which are few. Past it,
# the oldest is forgotten: a restart may then deliver it again (at least once, not lost).
MAX_DONE = 4096
# Larger files are not ours: the queue holds 100,000 notices at most, of a few hundred bytes.
MAX_PENDING_BYTES = 256 * 1024 * 1024
# Changes that come within this many seconds of a write's start are saved together once they
# have passed: a burst of notices is written a few times, not twice per notice. The first
# change after a quiet spell (this long since a write began) is written at once.
WRITE_INTERVAL = 0.05


def named(notices: list[Notice], limit: int = 10) -> str:
    """`action id, ...`: the first `limit` of `notices`, then `...` when there are more."""
    shown = ", ".join(f"{notice.action} {notice.id}" for notice in notices[:limit])
    return shown + (", ..." if len(notices) > limit else "")


# A notice the webhook is done with, as a restored one is matched: by id and action (its seq
# and sent_at are new after a restart; an escalation to terminate is a new notice to deliver).
DoneKey = tuple[str, str]


def done_key(notice: Notice) -> DoneKey:
    return notice.id, notice.action


# Each notice's JSON by the notice's identity, with the notice itself (kept alive, so that
# its id() names no other object while the entry stands).
EncodedNotices = dict[int, tuple[Notice, str]]


def _as_json(notices: list[Notice], known: EncodedNotices, kept: EncodedNotices) -> list[str]:
    """The JSON of each of `notices`, from `known` where it is there; `kept` gets each."""
    # A plain loop, not a closure per notice: this runs for every notice held at each write.
    texts = []
    for notice in notices:
        key = id(notice)
        entry = known.get(key)
        if entry is None or entry[0] is not notice:
            entry = (notice, notice.model_dump_json())
        kept[key] = entry
        texts.append(entry[1])
    return texts


def encode_pending(
    notices: list[Notice],
    done: list[DoneKey] | None = None,
    done_notices: list[Notice] | None = None,
    encoded: EncodedNotices | None = None,
) -> bytes:
    """The pending file's bytes. `encoded`: the JSON of the notices of the last call, used
    for those still held and left holding this call's only: a notice is frozen, and encoding
    every notice at each write (about 7 µs each) held the GIL for milliseconds behind a long
    queue, while the event loop waited for it to publish."""
    known: EncodedNotices = {} if encoded is None else encoded
    kept: EncodedNotices = {}
    notices_json = ",\n".join(_as_json(notices, known, kept))
    done_json = json.dumps([list(key) for key in done or []])
    done_notices_json = ",\n".join(_as_json(done_notices or [], known, kept))
    if encoded is not None:
        encoded.clear()
        encoded.update(kept)
    return (
        f'{{"version": {PENDING_VERSION}, "notices": [\n{notices_json}\n],\n'
        f'"delivered": {done_json},\n"done_notices": [\n{done_notices_json}\n]}}\n'
    ).encode()


def decode_done_notices(data: bytes) -> list[Notice]:
    """The last notice done of each id a pending file's bytes keep; none when it keeps none
    (written by an older agent) or one cannot be read (a notice left out, never a stop)."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        return []
    items = raw.get("done_notices") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return []
    notices = []
    for item in items:
        try:
            notices.append(saved_notice(item))
        except ValidationError:
            continue
    return notices


def decode_done(data: bytes) -> list[DoneKey] | None:
    """The notices a pending file's bytes name as done; None when it names none (written by
    an older agent, or not a pending file): then no restored notice is known done."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        return None
    items = raw.get("delivered") if isinstance(raw, dict) else None
    if not isinstance(items, list):
        return None
    return [
        (item[0], item[1])
        for item in items
        if isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)
    ]


def decode_pending(data: bytes) -> tuple[list[Notice], list[str]]:
    """The notices in a pending file's bytes, and what was wrong with those left out.
    ValueError when the bytes are not a pending file at all."""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"is not JSON ({error})") from None
    if not isinstance(raw, dict) or raw.get("version") != PENDING_VERSION:
        raise ValueError(f"is not a pending file of version {PENDING_VERSION}")
    items = raw.get("notices")
    if not isinstance(items, list):
        raise ValueError("has no list of notices")
    notices, problems = [], []
    for index, item in enumerate(items):
        try:
            notices.append(saved_notice(item))
        except ValidationError as error:
            problems.append(f"notice {index}: {error.errors()[0]['msg']}")
    return notices, problems


class PendingFile:
    """`path`, holding what `snapshot()` returns: written after each `changed()` in a
    thread (at once after a quiet spell, else WRITE_INTERVAL after the last write began),
    or at once by `write_now`; a write never replaces a newer one."""

    def __init__(
        self,
        path: Path,
        snapshot: Callable[[], list[Notice]],
        done: Callable[[], list[DoneKey]] = list,
        done_notices: Callable[[], list[Notice]] = list,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._clock = clock
        self._snapshot = snapshot
        self._done = done
        self._done_notices = done_notices
        # What the file read by `load` named as done; None when it named nothing.
        self.loaded_done: list[DoneKey] | None = None
        # The last notice done of each id, as the file read by `load` kept them.
        self.loaded_done_notices: list[Notice] = []
        self._lock = threading.Lock()  # held while the file is written
        self._encoded: EncodedNotices = {}  # the last write's notices' JSON (under _lock)
        self._generation = 0  # of the newest snapshot taken
        self._written = 0  # of the newest snapshot written (or whose write failed)
        self._dirty = False
        self._began: float | None = None  # clock() when the last write began
        self._task: asyncio.Task[None] | None = None
        self._failing = False
        # Why the last write failed, until one succeeds: a standing condition in status.
        self.problem: str | None = None

    def load(self) -> list[Notice]:
        """The notices the last agent left undelivered; none when there is no file. A file
        that cannot be read is moved aside and reported, never a reason not to start."""
        try:
            data = read_small(self.path, MAX_PENDING_BYTES)
        except FileNotFoundError:
            return []
        except OSError as error:
            set_aside(self.path, "webhook pending file", f"cannot be read: {error}")
            return []
        try:
            notices, problems = decode_pending(data)
        except ValueError as error:
            set_aside(self.path, "webhook pending file", str(error))
            return []
        self.loaded_done = decode_done(data)
        self.loaded_done_notices = decode_done_notices(data)
        for problem in problems:
            log.error("webhook pending file %s: %s; left out", self.path, problem)
        return notices

    def changed(self) -> None:
        """What `snapshot()` returns changed: have it written soon (an event loop runs)."""
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    def write_now(self) -> None:
        """Write the current snapshot before returning (after the write in progress)."""
        self._dirty = False
        self._generation += 1
        self._write(self._generation, *self._take())

    async def _drain(self) -> None:
        while self._dirty:
            # A quiet spell is WRITE_INTERVAL since the last write began, not "no write in
            # progress": on a loaded node the loop runs late, each change of a burst came
            # after the write before had ended and was written at once, one write a notice.
            wait = 0.0 if self._began is None else self._began + WRITE_INTERVAL - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            self._dirty = False
            self._generation += 1
            self._began = self._clock()
            # Encoded in the thread too, each notice once (see encode_pending): a long queue
            # costs the event loop a list copy and the GIL a join.
            await asyncio.to_thread(self._write, self._generation, *self._take())

    def _take(self) -> tuple[list[Notice], list[DoneKey], list[Notice]]:
        """Copies of what is written, taken on the event loop."""
        return list(self._snapshot()), list(self._done()), list(self._done_notices())

    def _write(
        self,
        generation: int,
        notices: list[Notice],
        done: list[DoneKey],
        done_notices: list[Notice],
    ) -> None:
        with self._lock:
            if generation <= self._written:
                return
            self._written = generation
            try:
                data = encode_pending(notices, done, done_notices, self._encoded)
                write_atomic(self.path, data)
            except OSError as error:
                self.problem = (
                    f"cannot save the notices not delivered yet to {self.path} ({error}); "
                    "they are lost if the agent stops before a later save succeeds"
                )
                if not self._failing:
                    log.error(
                        "webhook: cannot save the notices not delivered yet to %s: %s; they "
                        "are lost if the agent stops before a later write succeeds",
                        self.path,
                        error,
                    )
                self._failing = True
                return
            if self._failing:
                log.warning("webhook: saved the notices not delivered yet to %s again", self.path)
            self._failing = False
            self.problem = None


__all__ = [
    "MAX_DONE",
    "WRITE_INTERVAL",
    "DoneKey",
    "EncodedNotices",
    "PendingFile",
    "decode_done",
    "decode_done_notices",
    "decode_pending",
    "done_key",
    "encode_pending",
    "named",
]
