"""Checkpoints that do not stop training: snapshot to host memory, upload in the background.

`BackgroundSaver.save(step, state)` copies every tensor of `state` into host buffers it keeps
and reuses (the training thread waits only for that copy: the stall), then a background thread
serialises the snapshot into generation `step` and commits it (files, manifest, marker, then
LATEST: the generation counts, and LATEST moves, only once it is complete). With `overlap=True`
the two overlap: the writer starts on each tensor as soon as its copy is done, while the
training thread copies the next ones, so the durable time is about the write alone; but the
writer's work (CRC-32, page-cache writes, hashing; on S3 part copies and requests) then shares
the cores with the copy, and on the 2-core development machine the stall doubled. The stall is
what training pays at every checkpoint, so by default the writer starts once the copy is done.
The writer hashes the buffers in place (nothing changes them until the next save, which waits
for this one), without copying them or waiting for the hashing per write. One save is in flight
at a time: a save while one is in flight first waits for it, because the buffers it would
overwrite are the ones being uploaded, so memory stays at one extra copy of the state. A failed
background save is raised by the next `save()` or `check()`.

`final(step, state, seconds_left)` is the terminate path: it waits for an in-flight save only
when that and the final save fit in the time left, else cancels it, then saves synchronously,
and says what it chose and why.
"""

from __future__ import annotations

import atexit
import copy
import functools
import inspect
import logging
import pickle
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from forewarn.protocol.errors import ForewarnError

from .errors import CheckpointError, CommitTimeout, InvalidNameError
from .final_deadline import FinalDeadline, deadline_words
from .generation import Generation, GenerationWriter, to_load
from .hashing import StableMemory
from .manifest import check_file_name
from .needs import needs
from .quiet import QuietTime
from .ranks import initialised_dist
from .store import CheckpointStore

_log = logging.getLogger("forewarn.clients")

STATE_FILE = "state.pt"
# How long a cancelled save may take to reach its next write and stop before the final save
# goes ahead without it.
CANCEL_GRACE_SECONDS = 1.0
# How long the last parts of a save that `final()` waits for past the deadline may send
# nothing before they count as stopped and are cancelled. At 1 s (the cancel's grace) parts
# whose bytes flowed were cut: a lossy link's retransmissions back off 0.2, 0.4, 0.8, 1.6 s
# (Linux), so a link that loses a segment or two pauses past 1 s and goes on. Counted only
# while the process runs (see `QuietTime`): a loaded machine that schedules it late is no
# stall of the link.
TAIL_QUIET_SECONDS = 3.0
# How long an exit's final save may run past the notice's deadline before it is given up as
# hung. A deadline is the earliest the provider may take the machine, not when it does (AWS
# and Azure often later; GCP's 30 s notice ends in a soft power-off), and a save still
# writing then is the only copy of that work: giving it up at the deadline lost it.
FINAL_SAVE_GRACE_SECONDS = 60.0
# An exit's save of several ranks ends this long before the deadline when the storage stopped
# answering (its requests bounded so): DCP gathers the failure, the ranks abort together, the
# agent is acked and the job says so, before the platform's SIGKILL.
EXIT_SAVE_MARGIN_SECONDS = 5.0
# How long the save in flight may go without writing a byte or moving one towards the storage
# (a hung mount, an upload to a service that stopped answering) before a wait for it stops:
# at interpreter exit, in close(), and in the next save, which then raises it as that save's
# failure.
EXIT_STALL_SECONDS = 120.0
# How many saves given up as stalled may still hold their snapshot (each a copy of the state,
# kept while its write stays stuck) before a new save is refused instead of taking one more:
# on a mount that stayed hung, each retry took a copy and kept it, until the OOM killer.
MAX_STUCK_COPIES = 2
# How often a wait for the save in flight looks whether it still moves.
_WAIT_TICK_SECONDS = 0.25
# How often `final()` says how its wait for the save in flight goes: it said nothing until
# the wait ended (tens of seconds on a slow link), and the operator saw a silent job.
PROGRESS_LOG_SECONDS = 10.0


# The savers of this process, for the exit: see `_finish_at_exit`.
_savers: weakref.WeakSet[BackgroundSaver] = weakref.WeakSet()
_exit_hook = threading.Lock()
_exit_hooked = False


def _finish_at_exit() -> None:
    for saver in list(_savers):
        saver.finish_in_flight("the process is exiting", "call close() before exiting")


class BackgroundSaveError(CheckpointError):
    """A background save failed; raised at the next `save()` or `check()`."""

    def __init__(self, step: int, cause: BaseException) -> None:
        self.step = step
        self.cause = cause
        super().__init__(
            f"the background checkpoint of step {step} failed: {type(cause).__name__}: {cause}"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # rebuilt on another rank (`StorageError`)
        return (BackgroundSaveError, (self.step, self.cause))


class CopiesHeldError(CheckpointError):
    """Why a save was refused before it copied anything: saves given up as stalled still hold
    `MAX_STUCK_COPIES` snapshots (`BackgroundSaver.refusing`)."""


def _cause_words(error: BackgroundSaveError) -> str:
    """A failed save's cause, one line: `OSError: [Errno 28] No space left on device`."""
    return " ".join(f"{type(error.cause).__name__}: {error.cause}".split())


def _size(count: int) -> str:
    """`count` bytes in the largest binary unit under it, one decimal: said always in MiB, the
    copies a small state's stuck saves held read "0.0 MiB", as if they held nothing."""
    if count < 1024:
        return "1 byte" if count == 1 else f"{count} bytes"
    number = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        number /= 1024
        # Rounded to one decimal, 1023.96 KiB reads "1024.0 KiB": that is the next unit's 1.0.
        if round(number, 1) < 1024:
            return f"{number:.1f} {unit}"
    return f"{number / 1024:.1f} TiB"


class _WaitNews:
    """What `final()` says while it waits for the save in flight: that it waits, and why,
    when it starts; every PROGRESS_LOG_SECONDS how far the save is and the time left to the
    deadline as it stands (a deadline moved since `final()` began is the one it says)."""

    def __init__(self, saver: BackgroundSaver, step: int, in_flight: int, deadline: FinalDeadline):
        self._saver = saver
        self._step = step
        self._in_flight = in_flight
        self._deadline = deadline
        self.began = time.monotonic()
        self._next = self.began + PROGRESS_LOG_SECONDS

    def start(self, why: str) -> None:
        _log.warning(
            "forewarn: final checkpoint of step %d: waiting for the background save of step "
            "%d%s (%s; %s; %s)",
            self._step,
            self._in_flight,
            "" if self._in_flight == self._step else " first",
            why,
            self._saver.progress_words(),
            deadline_words(self._deadline.at()),
        )

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._next or self._saver.in_flight is None:
            return
        self._next = now + PROGRESS_LOG_SECONDS
        _log.warning(
            "forewarn: final checkpoint of step %d: still waiting for the background save of "
            "step %d after %.0f s (%s; %s)",
            self._step,
            self._in_flight,
            now - self.began,
            self._saver.progress_words(),
            deadline_words(self._deadline.at()),
        )


class _Cancelled(ForewarnError):
    """The terminate path gave up an in-flight save to write the final one."""


@dataclass(frozen=True)
class FinalSave:
    """What `final()` did: `choice` is "waited", "cancelled" or "nothing in flight"."""

    choice: str
    reason: str
    generation: Generation
    stall_seconds: float
    durable_seconds: float


@dataclass(frozen=True)
class SaveTiming:
    step: int
    stall_seconds: float  # what the training thread waited (the snapshot)
    durable_seconds: float | None = None  # from the call until committed, once known


class _CancellableStream:
    """Passes writes through until cancelled (then the save aborts at its next write)."""

    def __init__(
        self, inner: Any, cancelled: threading.Event, moved: Callable[[], None] | None = None
    ) -> None:
        self._inner = inner
        self._cancelled = cancelled
        self._moved = moved

    def write(self, data: Any) -> int:
        if self._cancelled.is_set():
            raise _Cancelled("cancelled for the final checkpoint")
        written: int = self._inner.write(data)
        if self._moved is not None:
            self._moved()
        return written

    def flush(self) -> None:
        return None


class SaveMotion:
    """When a final save last wrote or moved bytes towards the storage. Given up a grace past
    its deadline whatever it was doing, a final save over a slow link was lost with its bytes
    still flowing, on a machine that often stays past its deadline; past that point it is
    waited for while it moves, and given up once it has moved nothing for the grace (storage
    that stopped answering fails at the same moment as before)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        # Its file's bytes all sent and the upload completing (S3's CompleteMultipartUpload,
        # which may take minutes for a large object and sends nothing meanwhile): it moves
        # until the completion answers, as the exit's wait for a background save counts it
        # (bounded by the storage client's own timeouts, not by progress): by one attempt's
        # read timeout, as the stream says (`completion_timeout`); the client's retries of a
        # completion that never answered ran six of them (an hour and a half on S3).
        self._completing = False
        self._completing_until: float | None = None

    def mark(self) -> None:
        self._last = time.monotonic()
        # Bytes moving after a completion: that file is done and another one is on its way,
        # whose own stall counts from here.
        self._completing = False

    def completing(self, bound: float | None = None) -> None:
        """Every byte of a file sent, its completion under way for at most `bound` seconds
        (None: as long as it takes)."""
        self.mark()
        self._completing = True
        self._completing_until = None if bound is None else self._last + bound

    def completed(self) -> None:
        self._completing = False
        self.mark()

    def quiet_seconds(self) -> float:
        """How long it has moved nothing: 0 while its upload completes (within its bound)."""
        now = time.monotonic()
        until = self._completing_until
        if self._completing and (until is None or now < until):
            return 0.0
        return now - self._last

    def moving(self) -> bool:
        now = time.monotonic()
        until = self._completing_until
        if self._completing and (until is None or now < until):
            return True
        return now - self._last < FINAL_SAVE_GRACE_SECONDS

    def watch_file(self, stream: Any) -> None:
        """`stream` (a generation's file being written) marked as moving by its bytes going
        to the storage and its upload completing, until the completion is answered: counted
        until the user's write returned, a save then held on the next file (its
        CreateMultipartUpload unanswered by a service that stopped answering) read as moving,
        and an exit's save waited out the client's timeouts (minutes) past its deadline."""
        stream.on_progress = self.mark
        stream.on_sent = lambda: self.completing(stream.completion_timeout)
        stream.on_closed = self.completed

    def watch(self, stream: Any) -> Any:
        """`stream` watched (`watch_file`) and by its writes too; returns what to write to."""
        self.watch_file(stream)
        return _CancellableStream(stream, threading.Event(), self.mark)


class _Copies:
    """The snapshot's copies as the training thread makes them: the writer waits for each
    buffer's copy before serialising it (torch computes a record's CRC-32 before writing
    it, so the bytes must be complete by then)."""

    def __init__(self, buffers: Iterable[Any]) -> None:
        self._events: dict[int, threading.Event] = {}
        for buffer in buffers:
            address = _address(buffer)
            if address:
                self._events[address] = threading.Event()
        self._failed = False

    def copied(self, buffer: Any) -> None:
        event = self._events.get(_address(buffer))
        if event is not None:
            event.set()

    def fail(self) -> None:
        """The snapshot failed: every wait gives up."""
        self._failed = True
        for event in self._events.values():
            event.set()

    def wait_for(self, address: int) -> None:
        event = self._events.get(address)
        if event is not None:
            event.wait()
        if self._failed:
            raise _Cancelled("the snapshot failed")

    def wait_all(self) -> None:
        for address in self._events:
            self.wait_for(address)


def _address(buffer: Any) -> int:
    storage = buffer.untyped_storage()
    return int(storage.data_ptr()) if storage.nbytes() else 0


class _AfterCopy:
    """torch's zip writer, writing a storage's record only once its copy is done."""

    def __init__(self, zip_file: Any, copies: _Copies) -> None:
        self._zip = zip_file
        self._copies = copies

    def write_record(self, name: str, data: Any, size: int) -> Any:
        if not isinstance(data, (str, bytes)):  # a storage: the other records are metadata
            self._copies.wait_for(int(data.data_ptr()) if size else 0)
        return self._zip.write_record(name, data, size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zip, name)


_SAVE_PARAMETERS = [
    "obj",
    "zip_file",
    "pickle_module",
    "pickle_protocol",
    "_disable_byteorder_record",
]


def _can_overlap(torch: Any) -> bool:
    """Whether this torch has the pieces of `torch.save` that `_save_overlapped` calls: its
    private `_save` and `_open_zipfile_writer`, with the signature of torch 2.13 (elsewhere
    the writer waits for the whole snapshot, then calls `torch.save`)."""
    serialization = getattr(torch, "serialization", None)
    save = getattr(serialization, "_save", None)
    if save is None or not hasattr(serialization, "_open_zipfile_writer"):
        return False
    try:
        return list(inspect.signature(save).parameters) == _SAVE_PARAMETERS
    except (TypeError, ValueError):
        return False


def _save_overlapped(torch: Any, obj: Any, stream: Any, copies: _Copies | None) -> None:
    """`torch.save(obj, stream)`, the same bytes, writing each storage as soon as its copy is
    done (`copies`), while the others are still being copied."""
    if copies is not None and _can_overlap(torch):
        serialization = torch.serialization
        with serialization._open_zipfile_writer(stream) as zip_file:
            serialization._save(
                obj, _AfterCopy(zip_file, copies), pickle, serialization.DEFAULT_PROTOCOL, False
            )
        return
    if copies is not None:
        copies.wait_all()
    torch.save(obj, stream)


class _AtWrite:
    """The tensors an exit's save copies only as torch writes their record (`_CopyAtWrite`):
    each host buffer torch serialises, its source, and its size."""

    def __init__(self) -> None:
        self._entries: list[tuple[Any, Any, int]] = []

    def add(self, buffer: Any, source: Any) -> None:
        self._entries.append((buffer, source, int(buffer.untyped_storage().nbytes())))

    def by_address(self) -> dict[int, tuple[Any, Any]]:
        """The buffers and their sources by address, for one write of the file. The store
        writes it again after making room on a full disk: the buffers the first write let go
        are allocated again (untouched, so unbacked by memory until copied into); written
        with 0 bytes each, that second file could not be loaded."""
        for buffer, _source, size in self._entries:
            storage = buffer.untyped_storage()
            if storage.nbytes() != size:
                storage.resize_(size)
        return {
            int(buffer.untyped_storage().data_ptr()): (buffer, source)
            for buffer, source, _size in self._entries
        }


def _place_at_write(torch: Any, value: Any, at_write: _AtWrite) -> Any:
    """What an exit's save serialises for `value` without copying it now: a CPU tensor that
    is its whole storage, itself (the training thread is in `final()` while it is written,
    and a write given up by its timeout commits nothing written after); any other (on a GPU,
    a view of part of a storage) a host buffer of its own that stays untouched, so unbacked
    by memory, until `_CopyAtWrite` copies it just before its record is written."""
    detached = value.detach()
    storage = _storage(detached)  # None for a wrapper subclass: copied, as a background save's
    whole = (
        storage is not None
        and detached.device.type == "cpu"
        and detached.is_contiguous()
        and detached.storage_offset() == 0
        and storage[1] == detached.numel() * detached.element_size()
    )
    if whole or detached.numel() == 0:
        return detached if whole else detached.to("cpu", copy=True)
    buffer = torch.empty(detached.shape, dtype=detached.dtype, device="cpu")
    at_write.add(buffer, detached)
    return buffer


class _CopyAtWrite:
    """torch's zip writer for an exit's save taken while given-up saves hold their copies: a
    buffer's record is copied from its source just before it is written, and its memory let
    go right after, so the save holds one tensor's copy at a time, not one of the state."""

    def __init__(self, zip_file: Any, at_write: _AtWrite) -> None:
        self._zip = zip_file
        self._at_write = at_write.by_address()

    def write_record(self, name: str, data: Any, size: int) -> Any:
        entry = None
        if not isinstance(data, (str, bytes)) and size:
            entry = self._at_write.pop(int(data.data_ptr()), None)
        if entry is None:
            return self._zip.write_record(name, data, size)
        buffer, source = entry
        buffer.copy_(source, non_blocking=False)
        try:
            return self._zip.write_record(name, data, size)
        finally:
            # Written (and hashed: these buffers are no stable memory, so the file took its
            # bytes before the write returned): nothing reads it again.
            buffer.untyped_storage().resize_(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zip, name)


def _save_copying_at_write(torch: Any, obj: Any, stream: Any, at_write: _AtWrite) -> None:
    """`torch.save(obj, stream)`, the same bytes, copying each of `at_write`'s buffers only
    as its record is written (`_CopyAtWrite`); `_final` plans it only where `_can_overlap`."""
    serialization = torch.serialization
    with serialization._open_zipfile_writer(stream) as zip_file:
        serialization._save(
            obj, _CopyAtWrite(zip_file, at_write), pickle, serialization.DEFAULT_PROTOCOL, False
        )


@dataclass
class _Job:
    """One background save, shared by the training thread and the writer."""

    step: int
    started: float
    copies: _Copies | None
    stable: StableMemory
    stall: float | None = None
    snapshot_taken: threading.Event | None = None
    at_write: _AtWrite | None = None  # an exit's save that copies at each record's write


# Told, on the background thread, how each background save ended: its timing (with the
# durable time once committed), the committed generation or None, and the failure or None.
OnDone = Callable[[SaveTiming, "Generation | None", "BaseException | None"], None]


class BackgroundSaver:
    """Background checkpoints into a `CheckpointStore` (see the module's text).

    `on_done(timing, generation, error)` is called on the background thread when a background
    save is committed (`error` None) or failed (`generation` None); not for a save cancelled
    by `final()`, which reports itself. `overlap`: whether the write starts while the snapshot
    is still being copied (a shorter durable time, a longer stall; see the module's text)."""

    def __init__(
        self,
        store: CheckpointStore,
        *,
        file_name: str = STATE_FILE,
        on_done: OnDone | None = None,
        overlap: bool = False,
    ) -> None:
        self.store = store
        self.file_name = _check_file_name(file_name)
        self.on_done = on_done
        # Whether the write starts while the snapshot is still being copied (see the module).
        self.overlap = overlap
        self.last: SaveTiming | None = None
        self.last_durable: Generation | None = None
        # The host buffers, by the keys (and list indices) that lead to each tensor, as they
        # are: joined into a "/" string, "a/b" and "a" then "b" (or 1 and "1") named one
        # buffer, and the second tensor's copy overwrote the first's in the snapshot.
        self._buffers: dict[tuple[Any, ...], Any] = {}
        self._thread: threading.Thread | None = None
        self._in_flight: int | None = None
        self._started = 0.0
        self._error: BackgroundSaveError | None = None
        self._cancel = threading.Event()
        self._durable_estimate: float | None = None
        self._moved = 0.0  # when the save in flight last started or wrote (monotonic)
        self._writes_done = False  # the save in flight has made its last write
        # ... and its file still has bytes to send after it, whose progress is told (S3 parts)
        self._tail_sends = False
        self._file_closed = False  # ... and its file is closed: what is left is the commit
        self._stream: Any = None  # the file the save in flight writes (an ObjectWriter)
        self._in_final = False  # final() is running
        self._final_motion: SaveMotion | None = None  # the final save's, while it writes
        # When the final save began its write (monotonic), and the durable time of the last
        # background save, by which it is expected to take as long (final_seconds_needed).
        self._final_writing_since: float | None = None
        self._final_estimate: float | None = None
        # Saves left behind (given up as stalled, or cancelled by `final()`) whose thread is
        # still stuck in a write, holding its snapshot: (step, thread, bytes held).
        self._stuck: list[tuple[int, threading.Thread, int]] = []
        store.finish_on_close(self)

    # -- the training thread's side -------------------------------------------------------

    @property
    def in_flight(self) -> int | None:
        """The step being saved in the background, if any."""
        return self._in_flight if self._thread is not None and self._thread.is_alive() else None

    def check(self) -> None:
        """Raise the failure of the last background save, once (call it at `due()`)."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        metadata: Mapping[str, Any] | None = None,
        waited_since: float | None = None,
    ) -> SaveTiming:
        """Snapshot `state` and save it as generation `step` in the background; returns once
        the snapshot is taken (`stall_seconds`). Raises the previous save's failure, and
        `CheckpointError` under torch.distributed with several ranks (see `_refuse_ranks`).
        `waited_since`: when (time.monotonic()) the caller began waiting for the save in
        flight itself, counted in the stall and the durable time as the wait here is."""
        _refuse_ranks(step)
        started = time.monotonic() if waited_since is None else waited_since
        # One in flight: its buffers are about to be reused.
        while self.in_flight is not None and not self.give_up_if_stalled():
            self.wait(_WAIT_TICK_SECONDS)
        self.check()
        self._refuse_another_copy(step)
        copies: list[tuple[Any, Any]] = []
        snapshot = self._plan(state, copies)
        job = _Job(
            step,
            started,
            _Copies(buffer for buffer, _value in copies) if self.overlap else None,
            self._stable(copies),
            snapshot_taken=threading.Event(),
        )
        if not self.overlap:
            self._copy(copies, None)  # the writer starts once the snapshot is whole
        self._cancel = threading.Event()
        self._in_flight = step
        self._started = started
        self._moved = time.monotonic()
        self._writes_done = False
        self._tail_sends = False
        self._file_closed = False
        self._stream = None
        self._thread = threading.Thread(
            target=self._run,
            args=(job, snapshot, dict(metadata or {}), self._cancel),
            name=f"forewarn-background-save-{step}",
            daemon=True,
        )
        assert job.snapshot_taken is not None
        try:
            self._thread.start()
            _hook_exit(self)
            if job.copies is not None:
                try:
                    self._copy(copies, job.copies)
                except BaseException:
                    job.copies.fail()  # the writer gives up: nothing is committed
                    job.snapshot_taken.set()
                    self.wait()
                    raise
            job.stall = time.monotonic() - started
            timing = SaveTiming(step, job.stall)
            self.last = timing
        finally:
            # Whatever left this block (Ctrl-C between the writer's start and here): the
            # writer waits for this event at its end, and waited forever, so the save stayed
            # in flight and close() and the exit waited for it.
            job.snapshot_taken.set()
        return timing

    def refusing(self) -> bool:
        """Whether a save now is refused at once (`_refuse_another_copy`): the guard holds
        back the saves a drain or the schedule asks for meanwhile, and saves at the first
        step after one of the stuck saves ends."""
        return sum(1 for entry in self._stuck if entry[1].is_alive()) >= MAX_STUCK_COPIES

    def _refuse_another_copy(self, step: int) -> None:
        """Raise (and tell `on_done`) the save of `step` as failed, before it copies anything,
        while `MAX_STUCK_COPIES` saves left behind still hold their snapshots: a new one would
        take one more copy of the state, and on storage that stays hung every retry did."""
        self._stuck = [entry for entry in self._stuck if entry[1].is_alive()]
        if len(self._stuck) < MAX_STUCK_COPIES:
            return
        steps = [entry[0] for entry in self._stuck]
        held = sum(entry[2] for entry in self._stuck)
        named = ", ".join(str(s) for s in steps[:-1]) + f" and {steps[-1]}"
        durable = self.last_durable
        cause = CopiesHeldError(
            f"the background saves of steps {named}, given up, are still stuck in their "
            f"writes (a hung mount or a storage service that stopped answering?), holding "
            f"{_size(held)} of copies of the state: no further copy is taken until one of "
            f"them ends; the last durable generation is "
            f"{durable.name if durable is not None else 'none'}"
        )
        error = BackgroundSaveError(step, cause)
        self._tell(SaveTiming(step, 0.0), None, cause)
        raise error

    def wait(self, timeout: float | None = None) -> Generation | None:
        """Wait until the in-flight save is committed (or failed); the last durable one."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if not thread.is_alive():
                self._thread = None
        return self.last_durable

    def final(
        self,
        step: int,
        state: Mapping[str, Any],
        seconds_left: float | None,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | Callable[[], float] | None = None,
        waited: Callable[[], bool] | None = None,
        left: Callable[[], float | None] | None = None,
    ) -> FinalSave:
        """The terminate path: finish or cancel the in-flight save, then save `step`
        synchronously. `seconds_left` is the time until the deadline (None: unknown).

        The wait for a save in flight, chosen by `seconds_left`, ends at the deadline as
        `left()` gives it while the wait runs (seconds to it from now; None: no longer
        known, the last seen holds), when given (the guard's: the agent moves a notice's
        deadline). Taken once, a deadline moved later gave the upload up at the old one
        although minutes remained, and one moved earlier kept the wait going past the new
        one, the final save then cut off by the SIGKILL with no line saying so.

        The synchronous save is given up (`CommitTimeout`) a grace past that deadline, once
        its bytes have also stopped moving. `timeout` replaces that bound, in seconds from
        this call or as a callable giving the seconds left from now, asked again while the
        save runs (the guard's: the terminate's deadline may move earlier during the save);
        `waited()` true keeps the save waited for past it even with no byte moving (the
        guard's: the deadline moved later and has not passed). Taken once from
        `seconds_left`, a deadline moved later gave the save up at the old one plus the
        grace, and one moved earlier left it to the SIGKILL with no CommitTimeout."""
        self._in_final = True
        try:
            deadline = FinalDeadline(time.monotonic(), seconds_left, left)
            return self._final(step, state, deadline, metadata, timeout, waited)
        finally:
            self._in_final = False

    def _wait_to_deadline(
        self, step: int, in_flight: int, deadline: FinalDeadline, reason: str
    ) -> tuple[str, str]:
        """Wait for the save in flight, in place of a final save the time left is too short
        for, up to the deadline as it stands and then while its last parts move; cancel it
        if it is still going then. Returns `final()`'s choice and reason, `reason` saying
        why it waited."""
        choice = "waited"
        news = _WaitNews(self, step, in_flight, deadline)
        news.start(reason)
        while self.in_flight is not None:
            left = (deadline.at() or 0.0) - time.monotonic()
            if left <= 0:
                break
            self.wait(min(_WAIT_TICK_SECONDS, left))
            news.tick()
        # Only its last parts still going, bytes flowing: cut at the deadline (once the
        # cancel could stop them) the step nearly durable was lost for a final save the time
        # left had been judged too short for. Waited for while they move; one that stops
        # moving is cancelled, as one still writing is.
        tail = time.monotonic()
        quiet = QuietTime(self._moved, _WAIT_TICK_SECONDS, tail)
        while self.in_flight is not None and self._moving_tail(quiet):
            self.wait(_WAIT_TICK_SECONDS)
            news.tick()
        if self.in_flight is not None:
            choice = "cancelled"
            reason = f"{reason}, which was still uploading when the deadline came: cancelled it"
            self._cancel_in_flight()
        elif time.monotonic() - tail >= _WAIT_TICK_SECONDS:
            reason = (
                f"{reason}, which was still sending its last parts when the deadline "
                f"came: waited {time.monotonic() - tail:.1f} s more while they moved "
                "and it committed"
            )
        moved = deadline.words()
        if moved:
            reason = f"{reason}; {moved}"
        return choice, reason

    @property
    def in_final(self) -> bool:
        """Whether `final()` is running."""
        return self._in_final

    def _final(
        self,
        step: int,
        state: Mapping[str, Any],
        deadline: FinalDeadline,
        metadata: Mapping[str, Any] | None,
        limit: float | Callable[[], float] | None = None,
        waited: Callable[[], bool] | None = None,
    ) -> FinalSave:
        started = deadline.started
        seconds_left = None if deadline.first is None else deadline.first - started
        in_flight = self.in_flight
        final_estimate = self._durable_estimate
        durable_before = self.last_durable
        own_failure: BackgroundSaveError | None = None
        if in_flight is not None and in_flight == step:
            # The save in flight already holds this step's state: finishing it is the final save.
            # It is waited for even past the deadline (a second save of the same generation
            # would be deleted by this one's abort), but a wait that outlasts the deadline says
            # so while the process is still there to say it; and, as at exit, only while it
            # moves: one stuck in a write (a hung mount) held the process for ever where the
            # machine stayed, and the job was never restarted. That one is given up and raised
            # as this save's failure (it is not written again: its abort, whenever its write
            # returns, would delete a second save of the same generation).
            told = False
            news = _WaitNews(self, step, step, deadline)
            news.start(f"it holds step {step}'s state: its commit is the final save")
            while self.in_flight == step:
                if self.give_up_if_stalled(report=False):
                    self.check()
                self.wait(_WAIT_TICK_SECONDS)
                news.tick()
                # The deadline as it stands: one moved earlier passed, unsaid, while this
                # waited for the old one.
                at = deadline.at()
                late = at is not None and time.monotonic() > at
                if late and at is not None and not told and self.in_flight == step:
                    told = True
                    _log.warning(
                        "forewarn: the deadline passed (%.1f s) and the background save of step "
                        "%d, the final one, is still uploading: it is not durable yet; waiting on",
                        at - started,
                        step,
                    )
            durable = self.last_durable
            if durable is not None and durable.step == step:
                self._error = None
                seconds = time.monotonic() - started
                reason = f"the save in flight is of step {step} itself; waited for its commit"
                return FinalSave("waited", reason, durable, seconds, seconds)
            in_flight = None  # it failed: write it again, synchronously
            own_failure = self._error
        committed = self.last_durable
        if in_flight is None and committed is not None and committed.step == step:
            # The background save of this very step committed a moment ago (the periodic save
            # at the step the terminate is handled at): saving it again raised
            # GenerationExistsError, and the exit path crashed with its state durable, where
            # the same call while that save was still uploading returned "waited".
            self._error = None
            seconds = time.monotonic() - started
            reason = f"step {step} is already durable: its background save committed"
            return FinalSave("nothing in flight", reason, committed, seconds, seconds)
        if in_flight is None and own_failure is not None:
            # Said "no background save was running" (the ack's note, the log), where one of
            # this very step had run, been waited for and failed.
            choice = "waited"
            reason = (
                f"the save in flight was of step {step} itself and failed "
                f"({_cause_words(own_failure)}): writing it again"
            )
        elif in_flight is None:
            choice, reason = "nothing in flight", "no background save was running"
        elif seconds_left is None:
            choice, reason = "cancelled", f"step {in_flight} cancelled: the deadline is unknown"
            self._cancel_in_flight()
        elif final_estimate is None and started - self._started < seconds_left:
            choice = "cancelled"
            reason = f"step {in_flight} cancelled: no save has been timed yet to plan with"
            self._cancel_in_flight()
        elif final_estimate is None:
            # No save timed yet, but this one has run longer than the time left: a final save
            # of the same state, started afresh, takes longer than that too. Cancelled for it,
            # the upload (the only save there was) was lost and the final save was cut by the
            # deadline's SIGKILL: nothing durable at all. The upload, nearer its end than a
            # new save can be, is waited for first, as when the final save alone does not fit.
            choice, reason = self._wait_to_deadline(
                step,
                in_flight,
                deadline,
                f"no save has been timed yet, but step {in_flight} has been uploading for "
                f"{started - self._started:.1f} s, longer than the {seconds_left:.1f} s left, "
                "so a final save of the same state does not fit either: waited for step "
                f"{in_flight} first",
            )
        else:
            running = started - self._started
            remaining = max(final_estimate - running, 0.0)
            needed = remaining + final_estimate
            if needed <= seconds_left:
                choice = "waited"
                reason = (
                    f"step {in_flight} needed about {remaining:.1f} s more and the final save "
                    f"about {final_estimate:.1f} s: {needed:.1f} s fit in {seconds_left:.1f} s"
                )
                # The figures are estimates: an upload that stalls past the moment the final
                # save (and a stuck write's cancel grace) must start would hold it until the
                # deadline's SIGKILL, losing both. One on its estimate is never cut short,
                # unless the deadline moved so early that its estimate no longer fits.
                start_by = _start_by(deadline, started + remaining, final_estimate)
                news = _WaitNews(self, step, in_flight, deadline)
                news.start(reason)
                stopped = self._wait_while_moving(start_by, news)
                moved = deadline.words()
                if moved:
                    reason = f"{reason}; {moved}"
                if stopped is not None:
                    choice = "cancelled"
                    reason = (
                        f"step {in_flight} was expected to need about {remaining:.1f} s more "
                        f"but had moved nothing for {stopped:.0f} s (a storage service that "
                        "stopped answering?): cancelled it, leaving the final save the time"
                    )
                    self._cancel_in_flight()
                elif self.in_flight is not None:
                    choice = "cancelled"
                    reason = (
                        f"step {in_flight} was expected to need about {remaining:.1f} s more "
                        f"but was still uploading after {time.monotonic() - started:.1f} s, when "
                        f"the final save (about {final_estimate:.1f} s) had to start to fit "
                        + (f"before it: {moved}" if moved else f"in {seconds_left:.1f} s")
                        + ": cancelled it"
                    )
                    self._cancel_in_flight()
            elif remaining <= seconds_left < final_estimate:
                # The final save alone does not fit (a slow disk, a short notice): cancelling
                # the upload for it left the deadline's SIGKILL to cut the final save, and the
                # job resumed from the save before the upload's. The upload, due to end within
                # the time left, is waited for, up to the deadline; the final save is still
                # tried after it (estimates are only estimates).
                choice, reason = self._wait_to_deadline(
                    step,
                    in_flight,
                    deadline,
                    f"step {in_flight} needed about {remaining:.1f} s more and the final save "
                    f"alone about {final_estimate:.1f} s, more than the {seconds_left:.1f} s "
                    f"left: waited for step {in_flight} first",
                )
            else:
                choice = "cancelled"
                reason = (
                    f"step {in_flight} needed about {remaining:.1f} s more and the final save "
                    f"about {final_estimate:.1f} s: {needed:.1f} s do not fit in "
                    f"{seconds_left:.1f} s"
                )
                self._cancel_in_flight()
        committed = self.last_durable
        failed = self._error
        if in_flight is not None and failed is not None and failed.step == in_flight:
            # It failed while waited for (a full disk, a refused upload): the reason gave only
            # the estimates the wait was chosen by, as if it had committed.
            reason = (
                f"{reason}; but step {in_flight} failed ({_cause_words(failed)}): the final "
                "save is written without it"
            )
        if (
            choice == "cancelled"
            and committed is not None
            and committed is not durable_before
            and committed.step == in_flight
        ):
            # A save already past its last write commits anyway during the cancel's grace:
            # reported as cancelled, its generation is durable and counts for resume.
            choice = "waited"
            reason = (
                f"{reason}; but step {in_flight} was already committing and committed before "
                "the cancel reached it"
            )
        if in_flight is not None:
            # What it chose, said before its own write, which storage may hold to the end,
            # with the figures of now: the reason's are the estimates it chose by.
            _log.warning(
                "forewarn: final checkpoint of step %d: %s; writing it now (%.1f s after the "
                "terminate reached the saver; %s)",
                step,
                reason,
                time.monotonic() - started,
                deadline_words(deadline.at()),
            )
        self._error = None  # a cancelled or failed older save is superseded by this one
        copies: list[tuple[Any, Any]] = []
        # Saves given up on a hung mount still hold MAX_STUCK_COPIES copies of the state: the
        # exit's save took a third (200 MB more for a 200 MB state, at the worst moment of a
        # notice), and refusing it would lose the job's last save. It copies each tensor only
        # as its record is written instead, and lets the copy go once written.
        torch = _torch()
        at_write = (
            _AtWrite() if self.refusing() and torch is not None and _can_overlap(torch) else None
        )
        snapshot = self._plan(state, copies, at_write)
        self._copy(copies, None)
        job = _Job(step, started, None, self._stable(copies), at_write=at_write)
        timeout: float | Callable[[], float] | None = None
        if callable(limit):
            timeout = limit
        elif limit is not None:
            timeout = max(limit - (time.monotonic() - started), 0.0)
        elif seconds_left is not None:
            # Storage that stopped answering held the final save past the deadline, where the
            # SIGKILL said nothing: it fails a grace after the deadline instead, saying why;
            # but only once it has also moved nothing for that grace (see `SaveMotion`).
            left = max(seconds_left - (time.monotonic() - started), 0.0)
            timeout = max(left + FINAL_SAVE_GRACE_SECONDS, CANCEL_GRACE_SECONDS)
            if deadline.follows:
                timeout = _grace_past(deadline)
        motion = SaveMotion()
        self._final_motion = motion
        self._final_writing_since, self._final_estimate = time.monotonic(), final_estimate
        try:
            generation = self._write(
                job,
                snapshot,
                dict(metadata or {}),
                threading.Event(),
                timeout=timeout,
                motion=motion,
                waited=waited,
            )
        finally:
            self._final_motion = None
            self._final_writing_since = None
        self.last_durable = generation
        seconds = time.monotonic() - started
        self.last = SaveTiming(step, seconds, seconds)
        return FinalSave(choice, reason, generation, seconds, seconds)

    def _wait_while_moving(self, until: Callable[[], float], news: _WaitNews) -> float | None:
        """Wait until `until()` (monotonic, asked at each tick: the deadline may move) for
        the save in flight while it moves; how long it had
        moved nothing when the wait stopped for that (`TAIL_QUIET_SECONDS`, on the wall clock
        and as a watcher counts it), else None. Waited for whole, an upload stalled by storage
        that stopped answering held the final save until the last moment its estimate
        allowed (a minute and more of a two-minute notice), and the final save, as slow as
        its estimate or slower, then missed the deadline."""
        start = time.monotonic()
        quiet = QuietTime(self._moved, _WAIT_TICK_SECONDS, start)
        while self.in_flight is not None:
            left = until() - time.monotonic()
            if left <= 0:
                return None
            self.wait(min(_WAIT_TICK_SECONDS, left))
            news.tick()
            stalled = self.stalled_seconds()
            looked = quiet.look(self._moved, time.monotonic())
            # A request whose bytes are all sent and whose answer is late counts as quiet
            # here (unlike at the deadline's tail): the final save fits after it, and a
            # service that took a body and stopped answering looks the same until the read
            # timeout, a minute of the notice spent on a dead connection.
            if min(stalled, looked) >= TAIL_QUIET_SECONDS and self.in_flight is not None:
                return stalled
        return None

    def _moving_tail(self, quiet: QuietTime) -> bool:
        """Whether the save in flight has made its last write and its bytes still move (its
        parts' blocks taken by their connections within `TAIL_QUIET_SECONDS`, as `quiet`
        counts them), or are all sent and its upload completes and commits."""
        if not self._writes_done:
            return False
        if self._file_closed:
            # Every part uploaded: what is left, the completion (minutes on S3 for a large
            # object) and the commit's small requests, sends nothing and is bounded by the
            # storage's own timeouts, as at the exit. Judged by its quiet, it was cancelled
            # 3 s in, which stops nothing (it is left to commit) but reported it cut and left
            # its commit to the process's exit, the step nearly durable lost with it.
            return True
        if self._answers_awaited():
            # A part whose bytes are all sent waits for its answer, which a busy service gives
            # seconds late: read as a stopped link after 3 s of quiet, it was cancelled just
            # before it committed. Bounded by the client's read timeout (its retry reads the
            # body from the start, moving nothing new, and the quiet counts again).
            return True
        return quiet.look(self._moved, time.monotonic()) < TAIL_QUIET_SECONDS

    def _answers_awaited(self) -> bool:
        """Whether the save in flight waits for the storage's answer to a request whose
        bytes are all sent (see `ObjectWriter.answers_awaited`)."""
        stream = self._stream
        return stream is not None and bool(stream.answers_awaited())

    def stalled_seconds(self) -> float:
        """How long the save in flight has written nothing and moved no byte towards the
        storage (since it started, last wrote, or a part's connection last took a block); 0
        when none is in flight, once its file's bytes are all sent (every part uploaded: the
        completion and the commit are bounded by the storage's own timeouts), and after the
        last write of a file that sends nothing after it (a local file's last fsync: a slow
        disk's of gigabytes writes nothing for minutes and is no hung save). Parts still
        uploading after the last write count: counted as 0 there, parts stuck on a service
        that stopped answering held the next save(), close() and final() for botocore's
        timeouts and retries (about 6 minutes), where the exit gave them up at its bound."""
        if self.in_flight is None or self._file_closed:
            return 0.0
        if self._writes_done and not self._tail_sends:
            return 0.0
        return time.monotonic() - self._moved

    def final_quiet_seconds(self) -> float | None:
        """How long the final save `final()` is writing has moved nothing (0 while its upload
        completes); None when `final()` writes none."""
        motion = self._final_motion
        return None if motion is None else motion.quiet_seconds()

    def final_seconds_needed(self) -> float | None:
        """How much longer the final save `final()` is writing is expected to take, by the
        last background save's durable time; 0 once it has run that long; None when `final()`
        writes none or no save was timed."""
        since, estimate = self._final_writing_since, self._final_estimate
        if since is None or estimate is None:
            return None
        return max(estimate - (time.monotonic() - since), 0.0)

    def progress_words(self) -> str:
        """How far the save in flight is, for a log line: its bytes sent, of how many once
        it has made its last write."""
        stream = self._stream
        if stream is None:
            return "its file not opened yet"
        sent = _size(stream.bytes_sent())
        if self._file_closed:
            return f"{sent} sent, every byte: committing"
        if self._writes_done:
            return f"{sent} of {_size(stream.bytes_written())} sent"
        return f"{sent} sent, still writing"

    def stall_words(self, stalled: float) -> str:
        """What the save in flight has not done for `stalled` seconds, for a log line."""
        if self._writes_done and self._tail_sends:
            return (
                "made its last write, but the parts it still had to upload sent nothing for "
                f"{stalled:.0f} s"
            )
        if self._writes_done:
            return f"made its last write, but its file was not closed for {stalled:.0f} s"
        return f"wrote nothing for {stalled:.0f} s"

    def give_up_if_stalled(self, *, report: bool = True) -> bool:
        """When the save in flight has written nothing for `EXIT_STALL_SECONDS` (stuck in a
        write on a hung mount, or on a storage service that stopped answering): leave it
        behind, never to commit, and report it failed (`on_done` unless `report` is false,
        for a caller that raises it itself; and raised by the next `check()` or `save()`);
        True then. A wait for it with no such bound held the training
        loop, at its next save, for as long as the mount stayed hung, saying nothing. What is
        committed is not touched: the save given up is not, and never will be."""
        step = self.in_flight
        if step is None:
            return False
        stalled = self.stalled_seconds()
        if stalled < EXIT_STALL_SECONDS:
            return False
        durable_before = self.last_durable
        self._cancel_in_flight()
        committed = self.last_durable
        if committed is not None and committed is not durable_before and committed.step == step:
            return False  # it made its last write and committed before the cancel reached it
        cause = TimeoutError(
            f"it {self.stall_words(stalled)} (a hung mount or a storage service that "
            "stopped answering?): given up, it is not committed and never will be; the last "
            f"durable generation is {committed.name if committed is not None else 'none'}"
        )
        self._error = BackgroundSaveError(step, cause)
        if self.on_done is None:  # else the hook, or the caller raising it, says it
            _log.error("forewarn: %s", self._error)
        if report:
            last = self.last
            stall = last.stall_seconds if last is not None and last.step == step else 0.0
            self._tell(SaveTiming(step, stall), None, cause)
        return True

    def close(self) -> None:
        """Wait for the in-flight save; raise its failure, if any. Bounded by progress, as
        the next `save()` is: one that writes or sends nothing for `EXIT_STALL_SECONDS` is
        given up and raised as its failure."""
        while self.in_flight is not None and not self.give_up_if_stalled():
            self.wait(_WAIT_TICK_SECONDS)
        self.wait()
        self.check()

    def finish_in_flight(self, closing: str, advice: str) -> None:
        """At interpreter exit, or when the store is closed, wait for the save in flight (not
        one `final()` cancelled): its thread is a daemon, and a loop that ended without
        `close()` (or by an exception) lost the last periodic save of a finished run, a
        partial generation left behind; `closing` and `advice` go into the WARNING."""
        step = self.in_flight
        if step is None or self._cancel.is_set() or self._thread is threading.current_thread():
            return  # (the last: the store closed from `on_done`, on the save's own thread)
        _log.warning(
            "forewarn: %s while the background save of step %d is still being written: "
            "waiting for its commit (%s)",
            closing,
            step,
            advice,
        )
        # Bounded by progress, not time: a large save on a slow link is waited for, but one
        # stuck in a write on a hung mount (or a service that stopped answering) held the
        # exit as long as the mount stayed hung, and the job was never restarted; so were
        # part uploads stuck on stalled connections after the last write. A save whose file
        # is closed (its bytes durable: fsynced, or every part uploaded and the upload
        # completed) is waited for however long its commit takes: what is left is a
        # handful of small requests or fsyncs, each bounded by the storage's own timeouts,
        # and counted from the last write, a commit slower than 120 s was given up and lost.
        while self.in_flight is not None:
            stalled = 0.0 if self._file_closed else time.monotonic() - self._moved
            if stalled >= EXIT_STALL_SECONDS:
                _log.error(
                    "forewarn: the background save of step %d %s (a hung mount or a storage "
                    "service that stopped answering?): exiting without it; it is not committed, "
                    "and the last durable generation is %s",
                    step,
                    self.stall_words(stalled),
                    self.last_durable.name if self.last_durable is not None else "none",
                )
                return
            self.wait(EXIT_STALL_SECONDS - stalled)
        error = self._error
        if error is not None and self.on_done is None:  # on_done has reported it
            _log.error("forewarn: %s", error)

    # -- the snapshot ---------------------------------------------------------------------

    def _plan(
        self,
        state: Mapping[str, Any],
        copies: list[tuple[Any, Any]],
        at_write: _AtWrite | None = None,
    ) -> dict[str, Any]:
        """The snapshot's structure, with the buffers each tensor is to be copied into (the
        copies listed in `copies`, in the order torch will write them); the rest is copied.
        With `at_write` (an exit's save, `_final`), tensors are not copied now: see
        `_place_at_write`."""
        seen: dict[tuple[Any, ...], Any] = {}
        snapshot = {
            key: self._place((key,), value, copies, seen, at_write) for key, value in state.items()
        }
        if at_write is not None:
            return snapshot  # no buffer of this snapshot's is kept for the next save
        # Only this snapshot's buffers are kept (no save in flight uses the others: a save
        # waits for the one before, and a save left behind took its buffers with it): kept
        # for every path ever saved, a state whose keys change from save to save (a tensor
        # per epoch) grew host memory by a copy of each tensor gone, save after save.
        used = {id(buffer) for buffer, _value in copies}
        self._buffers = {path: kept for path, kept in self._buffers.items() if id(kept) in used}
        return snapshot

    def _place(
        self,
        path: tuple[Any, ...],
        value: Any,
        copies: list[tuple[Any, Any]],
        seen: dict[tuple[Any, ...], Any],
        at_write: _AtWrite | None = None,
    ) -> Any:
        torch = _torch()
        if torch is not None and isinstance(value, torch.Tensor) and value.layout != torch.strided:
            # A sparse (or other non-strided) tensor cannot be copied into a dense buffer
            # ("copy_() between dense and sparse Tensors is not implemented"): copied anew.
            return value.detach().to("cpu", copy=True)
        if torch is not None and isinstance(value, torch.Tensor):
            # One tensor under two keys (tied weights: an embedding shared with the output
            # layer) is copied once and saved once, shared, as torch.save writes it: copied
            # per key, host memory and the file held it twice and the load no longer shared it.
            same = _same_tensor_key(value)
            if same is not None and same in seen:
                return seen[same]
            if at_write is not None:
                placed = _place_at_write(torch, value, at_write)
                if same is not None:
                    seen[same] = placed
                return placed
            buffer = self._buffers.get(path)
            if (
                buffer is None
                or buffer.shape != value.shape
                or buffer.dtype != value.dtype
                or buffer.layout != value.layout
            ):
                pin = torch.cuda.is_available() and value.device.type == "cuda"
                buffer = torch.empty(value.shape, dtype=value.dtype, device="cpu", pin_memory=pin)
                self._buffers[path] = buffer
            copies.append((buffer, value))
            if same is not None:
                seen[same] = buffer
            return buffer
        if isinstance(value, Mapping):
            placed = {
                key: self._place((*path, key), item, copies, seen, at_write)
                for key, item in value.items()
            }
            return _same_kind(value, placed)
        if isinstance(value, (list, tuple)):
            items = [
                self._place((*path, index), item, copies, seen, at_write)
                for index, item in enumerate(value)
            ]
            return type(value)(items) if isinstance(value, list) else tuple(items)
        return copy.deepcopy(value)

    @staticmethod
    def _copy(copies: list[tuple[Any, Any]], done: _Copies | None) -> None:
        for buffer, value in copies:
            buffer.copy_(value.detach(), non_blocking=False)
            if done is not None:
                done.copied(buffer)

    @staticmethod
    def _stable(copies: list[tuple[Any, Any]]) -> StableMemory:
        # The buffers change only at the next save, which first waits for this one.
        stable = StableMemory()
        for buffer, _value in copies:
            storage = buffer.untyped_storage()
            stable.add(storage.data_ptr(), storage.nbytes(), buffer)
        return stable

    # -- the background side --------------------------------------------------------------

    def _run(
        self, job: _Job, snapshot: dict[str, Any], metadata: dict[str, Any], cancel: threading.Event
    ) -> None:
        try:
            generation = self._write(job, snapshot, metadata, cancel)
        except BaseException as exc:
            # A cancelled save's own failure (its stuck write timing out) is superseded too.
            if not isinstance(exc, _Cancelled) and not cancel.is_set():
                assert job.snapshot_taken is not None
                job.snapshot_taken.wait()  # the training thread is done with the copies
                self._error = BackgroundSaveError(job.step, exc)
                self._tell(SaveTiming(job.step, job.stall or 0.0), None, exc)
            return
        durable = time.monotonic() - job.started
        newest = self.last_durable
        if newest is not None and newest.step >= generation.step:
            # Cancelled once its commit had begun, it committed after the final save's newer
            # step: that one stays the last durable (it moved back to this older step), and
            # this commit is no news for `on_done` (the guard acked the exit's save already).
            return
        if not cancel.is_set():  # a cancelled save's time says nothing of the next one's
            self._durable_estimate = durable
        self.last_durable = generation
        assert job.snapshot_taken is not None
        job.snapshot_taken.wait()  # set right after the last copy, which the write waited for
        done = SaveTiming(job.step, job.stall or 0.0, durable)
        if (
            self.last is not None
            and self.last.step == job.step
            and self.last.durable_seconds is None
        ):
            self.last = done
        self._tell(done, generation, None)

    def _tell(
        self, timing: SaveTiming, generation: Generation | None, error: BaseException | None
    ) -> None:
        if self.on_done is None:
            return
        try:
            self.on_done(timing, generation, error)
        except Exception:  # a broken hook must not hide the save's own outcome
            logging.getLogger("forewarn.clients").exception("forewarn: on_done hook failed")

    def _write(
        self,
        job: _Job,
        snapshot: dict[str, Any],
        metadata: dict[str, Any],
        cancel: threading.Event,
        *,
        timeout: float | Callable[[], float] | None = None,
        motion: SaveMotion | None = None,
        waited: Callable[[], bool] | None = None,
    ) -> Generation:
        torch = _torch()
        started = time.monotonic()
        # The final save's own: a save left behind, its parts still moving, must not make
        # the final one look alive.
        moved = motion.mark if motion is not None else self._mark_moved

        def sent(stream: Any) -> None:
            self._mark_sent()
            if motion is not None:
                motion.completing(stream.completion_timeout)

        def write(gen: GenerationWriter) -> None:
            try:
                write_file(gen)
            finally:
                if motion is not None:
                    motion.completed()

        def write_file(gen: GenerationWriter) -> None:
            with gen.open(self.file_name) as stream:
                if motion is None:  # a background save's, whose wait `final()` judges
                    self._stream = stream
                stream.stable_memory = job.stable
                # Bytes of parts moving after the last write count as progress (a part slower
                # than the stall bound on a slow link is no hung one), and a completion under
                # way as a closed file: an upload whose completion took minutes (S3's, for a
                # large object) was given up at the exit as hung.
                stream.on_progress = moved
                stream.on_sent = functools.partial(sent, stream)
                # Cancelled after its last write with bytes still to send (S3 parts, the tail
                # of its file), it stops too: it went on beside the final save, sharing the
                # link, and committed after final() had said "cancelled". One whose bytes are
                # all sent (every part uploaded, its last fsync made) is left to commit: what
                # is left costs the final save nothing, and stopped it was lost for nothing.
                stream.stop = cancel
                target = _CancellableStream(stream, cancel, moved)
                if torch is not None and job.at_write is not None:
                    _save_copying_at_write(torch, snapshot, target, job.at_write)
                elif torch is not None:
                    _save_overlapped(torch, snapshot, target, job.copies)
                else:
                    if job.copies is not None:
                        job.copies.wait_all()
                    pickle.dump(snapshot, target)
                # Its bytes are all handed over: what is left (the file's last fsync or parts,
                # the commit) is bounded by the storage's own timeouts, not by progress;
                # but parts still uploading tell of each block they send, and parts that
                # send nothing are a stall (see `stalled_seconds`).
                self._tail_sends = bool(getattr(stream, "sends_after_writes", False))
                self._writes_done = True
                if cancel.is_set():  # after its last write: a left-behind save never commits
                    raise _Cancelled("cancelled for the final checkpoint")
            self._file_closed = True

        try:
            # Through flush: a save that finds the disk full makes room as retention would.
            flushed = self.store.flush(
                job.step,
                write,
                metadata=metadata,
                timeout=timeout,
                moving=None if motion is None else _either(motion.moving, waited),
            )
        except CommitTimeout:
            # The save goes on on its own thread, hashing these buffers in place: they are
            # its until it ends, and the next save takes new ones.
            self._buffers = {}
            raise
        except BaseException:
            job.stable.clear()
            raise
        job.stable.clear()
        if self._durable_estimate is None:
            self._durable_estimate = time.monotonic() - started
        return flushed.generation

    def _mark_moved(self) -> None:
        self._moved = time.monotonic()

    def _mark_sent(self) -> None:
        self._file_closed = True

    def _cancel_in_flight(self) -> None:
        self._cancel.set()
        thread = self._thread
        if thread is None:
            return
        # A cancelled save stops at its next write, but one stuck inside a write (a hung
        # mount, a stalled upload) would hold the final save until the deadline, and the
        # SIGKILL there would lose it. After a moment it is left behind: it keeps its snapshot
        # buffers (the final save takes new ones), never commits and never reports.
        thread.join(CANCEL_GRACE_SECONDS)
        if thread.is_alive():
            held = sum(buffer.untyped_storage().nbytes() for buffer in self._buffers.values())
            assert self._in_flight is not None  # set with the thread, by save()
            self._stuck.append((self._in_flight, thread, held))
            self._buffers = {}
        self._thread = None


def _start_by(
    deadline: FinalDeadline, on_estimate: float, final_estimate: float
) -> Callable[[], float]:
    """When the final save must start (monotonic) for the deadline as it stands: the
    deadline less the final save's estimate and a stuck write's cancel grace, but not before
    `on_estimate`, the upload's own estimated end, while that still leaves the final save
    its estimate before the deadline."""

    def start_by() -> float:
        at = deadline.at()
        if at is None:  # never here: `final()` waits only for a known deadline
            return on_estimate
        latest = at - final_estimate - CANCEL_GRACE_SECONDS
        if on_estimate + final_estimate <= at:
            return max(latest, on_estimate)
        return latest

    return start_by


def _grace_past(deadline: FinalDeadline) -> Callable[[], float]:
    """The final save's bound as `flush(timeout=)` asks it, seconds from now: a grace past
    the deadline as it stands (at least a cancel's grace from the write's start)."""
    began = time.monotonic()

    def bound() -> float:
        now = time.monotonic()
        at = deadline.at()
        left = FINAL_SAVE_GRACE_SECONDS if at is None else at - now + FINAL_SAVE_GRACE_SECONDS
        return max(left, CANCEL_GRACE_SECONDS - (now - began))

    return bound


def _either(moving: Callable[[], bool], waited: Callable[[], bool] | None) -> Callable[[], bool]:
    """What keeps a final save waited for past its timeout: its bytes moving, or `waited()`."""
    if waited is None:
        return moving
    return lambda: moving() or waited()


def _storage(value: Any) -> tuple[int, int] | None:
    """A tensor's storage as (address, bytes), or None for a wrapper subclass without storage
    of its own (torch raises one of these three for it, by subclass)."""
    try:
        storage = value.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _same_tensor_key(value: Any) -> tuple[Any, ...] | None:
    """What makes two tensors of the state one (the same memory seen the same way), or None
    for one without memory of its own to compare (empty, or a wrapper subclass)."""
    storage = _storage(value)
    if storage is None or not storage[0]:
        return None
    address = storage[0]
    return (
        str(value.device),
        address,
        value.storage_offset(),
        tuple(value.shape),
        tuple(value.stride()),
        value.dtype,
    )


def _same_kind(original: Mapping[Any, Any], placed: dict[Any, Any]) -> Any:
    """`placed` as a mapping of `original`'s type with its attributes: a module's state_dict
    is an OrderedDict whose `_metadata` holds each submodule's version, which torch.save
    keeps and `load_state_dict` passes to each module (a module that migrates old formats
    by version took a snapshot rebuilt as a plain dict for one of the oldest). A mapping
    that cannot be copied and refilled is saved as a plain dict."""
    if type(original) is dict:
        return placed
    try:
        same: Any = copy.copy(original)
        same.clear()
        same.update(placed)
        attributes = getattr(original, "__dict__", None)
        if attributes:
            same.__dict__.update(copy.deepcopy(attributes))
    except Exception:  # a read-only or unusual Mapping: its items are what matter
        return placed
    return same


def _hook_exit(saver: BackgroundSaver) -> None:
    global _exit_hooked
    with _exit_hook:
        _savers.add(saver)
        if not _exit_hooked:
            # Run at exit while the daemon threads still run (after non-daemon threads end).
            atexit.register(_finish_at_exit)
            _exit_hooked = True


def _check_file_name(file_name: object) -> str:
    """The saver's file name, checked when the saver is made: checked only by the first
    save's write, a bad one failed mid-run, at worst at a terminate's final save."""
    if not isinstance(file_name, str):
        raise InvalidNameError(
            f"BackgroundSaver(file_name={file_name!r}): file_name must be a str (a name inside "
            f"the generation, '/'-separated), got {type(file_name).__name__}"
        )
    try:
        return check_file_name(file_name)
    except InvalidNameError as exc:
        raise InvalidNameError(f"BackgroundSaver(file_name={file_name!r}): {exc}") from None


def _refuse_ranks(step: int) -> None:
    """With torch.distributed initialised and several ranks, committing a generation is a
    collective of every rank (commit.py): run from the saver's thread, beside the training
    thread's own collectives on the same process group, the two interleave differently on
    each rank and every rank waits in a collective the others never enter (with two gloo
    ranks, the first save hung training until the process group's timeout, 30 min by
    default). Said before anything is copied."""
    dist = initialised_dist()
    if dist is None or dist.get_world_size() < 2:
        return
    raise CheckpointError(
        f"BackgroundSaver cannot save step {step}: torch.distributed runs "
        f"{dist.get_world_size()} ranks, and a generation's commit is a collective of every "
        "rank that the background thread would run beside the training loop's own (they "
        "deadlock); save multi-rank state with async_save_dcp (forewarn.clients.checkpoint)"
    )


def _torch() -> Any:
    import sys

    return sys.modules.get("torch")


def live_tensors(state: Any) -> StableMemory:
    """The storages of the CPU tensors in `state` (nested dicts, lists, tuples), as stable
    memory for a synchronous save: the caller waits in that save, so nothing changes them
    before its files are closed, and the references keep them allocated until `clear()`.
    Tensors on other devices are left out (torch.save copies them first)."""
    stable = StableMemory()
    torch = _torch()
    if torch is None:
        return stable
    pending = [state]
    while pending:
        value = pending.pop()
        if isinstance(value, torch.Tensor):
            if value.device.type == "cpu" and value.layout == torch.strided:
                storage = _storage(value)
                if storage is None:
                    continue  # a wrapper subclass without storage of its own: not stable
                stable.add(*storage, value)
        elif isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    return stable


def load_state(generation: Generation, *, file_name: str = STATE_FILE) -> Any:
    """The state a `BackgroundSaver` saved into `generation` (checksum-checked)."""
    needs("torch", "load_state")
    import io

    import torch

    data = to_load(generation, "load_state").read_bytes(file_name)
    return torch.load(io.BytesIO(data), weights_only=True)
