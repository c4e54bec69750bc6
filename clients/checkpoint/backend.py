"""What the store needs from a storage backend, and the streaming writer both backends share."""

from __future__ import annotations

import io
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from .errors import WriteCancelled
from .hashing import Buffer, StableMemory, StreamHasher, digest_stream

OnDone = Callable[[int, str], None]
# Told the bytes done so far, as a transfer goes.
Progress = Callable[[int], None]


class ObjectWriter(io.BufferedIOBase):
    """A file being written into a generation: hashed while written, visible under its name
    only once closed without error. Leaving a `with` block by an exception discards it.

    `stable_memory`, when set, names memory that stays allocated and unchanged until this
    file is closed: writes from inside it return without waiting for their hashing.

    `on_progress`, when set, is called as bytes written before move towards the storage (each
    block of an S3 part's body the connection takes, each part answered; from the upload
    threads too), and `on_sent` once every byte has reached it and only the storage's
    completion of the object is left (bounded by its own timeouts): a waiter bounded by
    progress (the exit's wait for a background save) told a slow close from a hung one only
    by the writes, and gave up on an upload whose completion took minutes. `on_closed` is
    called once the storage has answered that completion (the file is whole there): until
    then the completion counts as the save moving, and no longer.

    `stop`, when set (an event), gives the file up once the event is set and bytes are still
    to be sent: bytes on their way stop at their next block, and `close()` discards the file
    and raises `WriteCancelled` instead of sending the rest. A background save cancelled for
    the final one after its last write (its parts still uploading) otherwise went on sending
    beside the final save and committed after it. Once every byte is sent (the last fsync
    begun, every part uploaded) the file is finished: nothing is left to spare."""

    # Whether bytes still go to the storage after the last write, telling of each block
    # through `on_progress` (S3's parts): a waiter bounded by progress then counts a stall
    # there too. False where what follows the last write is the storage's own flush (a local
    # file's last fsync), which tells of no progress and may take minutes on a slow disk.
    sends_after_writes = False

    def __init__(self, name: str, on_done: OnDone | None) -> None:
        super().__init__()
        self.name = name
        self.stable_memory: StableMemory | None = None
        self.on_progress: Callable[[], None] | None = None
        self.on_sent: Callable[[], None] | None = None
        self.on_closed: Callable[[], None] | None = None
        # How long one attempt at that completion may take (its read timeout), where the
        # storage bounds it; None where it is not bounded so, or there is none.
        self.completion_timeout: float | None = None
        self.stop: threading.Event | None = None
        self._on_done = on_done
        self._hasher = StreamHasher()
        self._finished = False
        self._write_error: Exception | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Buffer) -> int:  # type: ignore[override]
        if self._finished:
            raise ValueError(f"write to {self.name!r} after it was closed")
        stable = self.stable_memory is not None and self.stable_memory.covers(data)
        try:
            self._hasher.feed(data, self._sink, stable=stable)
        except Exception as error:
            if self._write_error is None:
                self._write_error = error  # for __exit__: see there
            raise
        return memoryview(data).nbytes

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            try:
                self.raise_if_stopped()
                self._finish()
                size, checksum = self._hasher.size, self._hasher.hexdigest()
            except BaseException:
                self._hasher.close()
                self._discard()
                raise
            if self.on_closed is not None:
                self.on_closed()
            if self._on_done is not None:
                self._on_done(size, checksum)
        super().close()

    def bytes_written(self) -> int:
        """How many bytes have been written to this file so far."""
        return self._hasher.size

    def bytes_sent(self) -> int:
        """How many of them have gone towards the storage (a local file: every one written;
        S3: the parts' bytes their connections took)."""
        return self._hasher.size

    def answers_awaited(self) -> bool:
        """Whether a request of this file has sent every byte of its body and waits for the
        storage's answer (S3's parts): no byte moves then, yet nothing has stalled but the
        answer, which the client's read timeout bounds. False where nothing is sent so."""
        return False

    def stopped(self) -> bool:
        """Whether `stop` is set: the file is given up."""
        stop = self.stop
        return stop is not None and stop.is_set()

    def raise_if_stopped(self) -> None:
        if self.stopped():
            raise WriteCancelled(f"{self.name} was given up (its save was cancelled)")

    def abort(self) -> None:
        """Drop what was written; the name never appears."""
        if not self._finished:
            self._finished = True
            self._hasher.close()
            self._discard()
        super().close()

    def __del__(self) -> None:
        # An abandoned writer was never finished on purpose: it must not appear.
        if not getattr(self, "_finished", True):
            self.abort()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
            error = self._write_error
            if error is not None and exc is not error and _caused_by(exc, error):
                # torch.save turns its stream's exception into its own RuntimeError
                # ("unexpected pos 896 vs 790"): a full disk read as a torch bug.
                add_note = getattr(error, "add_note", None)  # Python 3.11 and newer
                if add_note is not None:
                    add_note(
                        f"(writing {self.name}; the code writing it raised "
                        f"{exc_type.__name__}: {exc})"
                    )
                raise error from None
        else:
            self.close()

    @abstractmethod
    def _sink(self, data: Buffer) -> None:
        """Take the next bytes (the caller may reuse a mutable buffer after this returns)."""

    @abstractmethod
    def _finish(self) -> None:
        """Make the object durable and visible under its final name."""

    @abstractmethod
    def _discard(self) -> None:
        """Remove whatever was written so far; never raises."""


def _caused_by(exc: BaseException | None, error: BaseException) -> bool:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if exc is error:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass(frozen=True)
class UnfinishedUpload:
    """A file of a generation still in an unfinished multipart upload (S3): bytes the store
    holds that no listing of its objects shows (a save under way, or one killed mid-file)."""

    generation: str  # the generation's name (`step-000000000040`)
    file: str  # the file's name within it
    size: int  # the bytes of its parts uploaded so far
    age_seconds: float | None  # since the upload began, by the service's clock; None: unknown


class Backend(ABC):
    """Keys are `/`-separated and relative to the store's root."""

    url: str
    # What is true of a small object whose write raised though it reads back as written (a
    # COMMIT marker): said in the warning of a generation committed so. Local: the rename
    # is done and the fsync after it failed, so a crash of the machine may still lose it;
    # object stores override it (the service stored it before it could be read).
    written_despite_error = (
        "it may not be durable yet: a crash of the machine (a power loss) may lose it"
    )

    @property
    def identity(self) -> str:
        """What tells this store from another in one process: two backends with the same
        identity are the same storage, however their URLs were spelled."""
        return self.url

    @abstractmethod
    def writer(self, key: str, on_done: OnDone | None = None) -> ObjectWriter: ...

    @abstractmethod
    def put_small(self, key: str, data: bytes) -> None:
        """Write a small object atomically and durably (manifest, marker, hint)."""

    @abstractmethod
    def get_small(self, key: str) -> bytes | None:
        """A small object's bytes, or None when it does not exist."""

    @abstractmethod
    def open_read(self, key: str) -> IO[bytes]:
        """A stream of the object's bytes; FileNotFoundError when it does not exist."""

    @abstractmethod
    def list_children(self, prefix: str) -> list[str]:
        """Names of the immediate sub-directories under `prefix` ('' for the root)."""

    @abstractmethod
    def list_sizes(self, prefix: str) -> dict[str, int]:
        """Every finished object under `prefix` (recursively): key relative to it → size."""

    def size_of(self, key: str) -> int | None:
        """One object's size, looked up by itself (not listed), or None when it does not
        exist (or this backend cannot tell)."""
        return None

    def sizes_of(self, prefix: str, names: list[str]) -> dict[str, int]:
        """`list_sizes(prefix)`, with each of `names` it leaves out looked up by itself until
        one is really missing: a listing may lag the writes it follows (S3-compatible
        services replicating their bucket index: an object reads back at once but is listed
        later), and a file not listed yet failed its commit as missing and made a generation
        just committed read as broken. A broken generation costs one lookup more."""
        sizes = self.list_sizes(prefix)
        for name in names:
            if name in sizes:
                continue
            size = self.size_of(f"{prefix}/{name}")
            if size is None:
                break
            sizes[name] = size
        return sizes

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object; a missing one is fine."""

    @abstractmethod
    def delete_tree(self, prefix: str) -> None:
        """Remove everything under `prefix`, including partial uploads; missing is fine."""

    def make_durable(self, prefix: str) -> None:  # noqa: B027 - object stores need nothing
        """Make every finished object under `prefix` durable before the next step writes."""

    def local_path(self, key: str) -> Path | None:
        """The object's path on a local filesystem, when the backend has one."""
        return None

    def download(self, key: str, destination: Path, like: str, progress: Progress | None) -> str:
        """Copy one object to a local file, hashing it while copying: returns its checksum in
        the scheme `like` names. `progress(bytes_done)` is called as bytes arrive."""
        done = 0

        def write(chunk: Buffer) -> None:
            nonlocal done
            handle.write(chunk)
            done += memoryview(chunk).nbytes
            if progress is not None:
                progress(done)

        with self.open_read(key) as stream, open(destination, "wb") as handle:
            return digest_stream(stream, like, write)[1]

    def abort_stale_uploads(
        self, keep_prefix: str | None, *, older_than: float = 0.0, dead_prefix: str | None = None
    ) -> int:
        """Abort unfinished uploads left by killed writers, except under `keep_prefix` (the
        generation being written now) and those started less than `older_than` seconds ago
        (by the service's clock) unless they are under `dead_prefix`; returns how many.
        Nothing to do on most backends."""
        return 0

    def abort_left_uploads(self) -> int:
        """Abort, by their upload IDs, the uploads of this process's failed saves that could
        not be aborted when they failed (the service unreachable, credentials expired); keep
        those that still cannot be. Never raises; returns how many went. Nothing to do on
        most backends."""
        return 0

    def unfinished_uploads(self, *, sizes: bool = True) -> list[UnfinishedUpload]:
        """The generations' files still in unfinished uploads, oldest first (without
        `sizes`, each `size` is 0, not asked for). None on most backends, whose unfinished
        files are listed as files."""
        return []

    def note_writer(self) -> None:
        """Called by a save of rank 0 (the committer) before it claims its step: say, once,
        when another live process commits into this store too (the same job started twice
        by mistake). Nothing where writers cannot be told apart."""
        return None

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        """Claim `prefix` for this process's writer of `rank` until the returned function is
        called; raises `CommitError` naming the holder when another live process holds it.
        Each rank of a save of several claims its own (see `claim_stem`). Nothing to claim
        where writers cannot be told apart."""
        return NO_CLAIM

    def claimed(self, prefix: str) -> bool:
        """Whether a live writer of another process holds a claim (see `claim`) on `prefix`,
        of any rank: retention must not delete a generation someone is writing. False where
        there are no claims, or when it cannot tell."""
        return False

    def delete_unclaimed(self, prefix: str) -> bool:
        """Delete the generation `prefix` unless a live writer of another process holds a
        claim on it (see `claimed`); whether it was deleted. Where claims are locks (a local
        store), the delete holds the step's claim, so a writer claiming it meanwhile waits
        for the delete instead of having its files deleted under it."""
        if self.claimed(prefix):
            return False
        self.delete_tree(prefix)
        return True

    def writer_gone(self, prefix: str) -> bool:
        """Whether the writer of the uncommitted generation `prefix` is provably gone (every
        rank's): False while any writer may still be saving it, and wherever this backend
        cannot prove it (writers on other machines)."""
        return False

    def usage(self, prefix: str) -> int:
        """The bytes stored under `prefix`, also those of files a save has not finished."""
        return sum(self.list_sizes(prefix).values())

    def remove_stale_claims(self) -> int:
        """Remove the claims (see `claim`) killed writers left on steps nobody saved again;
        returns how many. Nothing to do where there are none."""
        return 0

    def remove_stale_temps(self, key: str, *, older_than: float) -> int:
        """Remove the temp files a killed `put_small(key, ...)` left beside `key`, older than
        `older_than` seconds; returns how many. Nothing to do where puts are atomic."""
        return 0

    def remove_dead_temps(self, prefix: str, names: list[str]) -> int:
        """Once the generation `prefix` with files `names` committed: remove the temp files
        left under it by writers killed before this save (see the local backend); returns
        how many. Nothing to do where a write is never seen before it completes."""
        return 0

    def close(self) -> None:  # noqa: B027 - only some backends hold resources
        """Release threads and connections."""

    def within(self, seconds: float) -> Backend:
        """This storage for one save that must end within `seconds`: each request fails
        once it cannot end in the time left, where the storage's requests are bounded by
        timeouts (S3); the backend itself where they are not (a local disk)."""
        return self


def _nothing() -> None:
    return None


def claim_stem(prefix: str, rank: int) -> str:
    """What a claim of `rank` on generation `prefix` is named after (each backend adds its
    own dot and suffix): rank 0's is the generation's name, as before ranks had claims."""
    return prefix if rank == 0 else f"{prefix}{RANK_CLAIM}{rank}"


# Between a generation's name and its rank in the name of a claim of a rank other than 0.
RANK_CLAIM = ".rank-"
# The generation a claim's stem (see `claim_stem`) is of.
CLAIM_STEM = re.compile(r"(?P<generation>[^/]+?)(?:" + re.escape(RANK_CLAIM) + r"[0-9]+)?")


# What `claim` returns when nothing was claimed (the store then has no claim to let go of).
NO_CLAIM: Callable[[], None] = _nothing
