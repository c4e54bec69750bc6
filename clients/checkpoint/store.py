"""`CheckpointStore`: immutable, verified generations named by their step (the façade).

A save writes its files, then `MANIFEST.json`, then `COMMIT` (naming the manifest's
checksum), then the `LATEST` hint (see `commit.py`). `latest()` walks the generations newest
first and returns the first one whose marker, manifest and file sizes (and checksums, by
policy) verify. Reading and writing one generation live in `generation.py`, the storage in
the backends (`local.py`, `s3.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import logging
import os
import string
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar, cast

from forewarn.protocol.wire import environment

from .backend import NO_CLAIM, Backend
from .commit import CommitProtocol, read_latest_hint
from .errors import (
    CheckpointError,
    CommitError,
    CommitTimeout,
    CorruptGenerationError,
    GenerationExistsError,
    GenerationNotFoundError,
    StoreConfigError,
)
from .generation import (
    FlushResult,
    Generation,
    GenerationWriter,
    Verification,
    check_generation,
    read_generation,
)
from .manifest import COMMIT, Manifest, generation_name, parse_generation_name, part_name
from .options import S3Options, open_backend
from .ranks import Ranks, initialised_dist, resolve

log = logging.getLogger("forewarn.checkpoint")

T = TypeVar("T")

# How old (by the service's clock) another step's unfinished upload must be before a job's first
# save aborts it. The job before this one on the same prefix may still be writing its final
# save (a replacement pod or restarted unit starts while the old one terminates): that save
# fits a notice window of seconds to minutes (15 at the longest), and uploading one file
# takes minutes even for tens of GiB, so an upload an hour old has no live writer.
STALE_UPLOAD_AGE = 3600.0
# How often a long-running job's saves look again for dead uploads (see `_start`): an upload
# its first save spared as too young (the job before, still uploading its final save, then
# killed) is aborted within this much of growing stale, not left billed until the next job.
UPLOAD_SWEEP_INTERVAL = 600.0

# How often a save waited for past its timeout while it moves (`flush(moving=)`) is looked at.
_MOVING_TICK = 0.25

# A save that fails with one of these may succeed once older generations make room.
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

# How many times `latest()` walks the store when a generation it passed over was being saved
# or removed meanwhile (see `_newest`); a walk after the first skips those found broken.
LATEST_WALKS = 3

VerifyPolicy = Literal["sizes", "checksums"]
_POLICIES = ("sizes", "checksums")


class _Writing:
    """The generations this process is writing, by (store URL, generation, rank), for every
    store object of the process: a second writer of one of them (a background save and an
    exit save of the same step, a save given up by its timeout and its retry) deleted the
    first's finished files as a dead writer's leftovers, or renamed its own over them, and
    the local lock does not tell two writers of one process apart (POSIX locks are the
    process's). Ranks of one save run as threads of one process in tests: each is its own."""

    def __init__(self) -> None:
        # Reentrant: a dropped writer's hold is let go by the garbage collector, which may run
        # on a thread that is inside `enter` already.
        self._lock = threading.RLock()
        self._held: dict[tuple[str, str, int], tuple[str, float]] = {}
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child writes none of its parent's saves (and no other thread holds the lock).
        self._lock = threading.RLock()
        self._held = {}

    def enter(self, url: str, name: str, rank: int) -> Callable[[], None]:
        """Hold (url, name, rank) until the returned function is called (once is enough);
        `CommitError` naming the holder when this process already holds it."""
        key = (url, name, rank)
        with self._lock:
            holder = self._held.get(key)
            if holder is not None:
                thread, since = holder
                raise CommitError(
                    f"{name} is already being saved in {url} by this process (rank {rank}, "
                    f"thread {thread!r}, for {time.monotonic() - since:.1f} s); a second save "
                    "of it would delete or overwrite that one's files: wait for it to commit "
                    "or fail (BackgroundSaver.wait(), DcpAsyncSave.commit(); a save given up "
                    "by its timeout may still commit)"
                )
            token = (threading.current_thread().name, time.monotonic())
            self._held[key] = token
        table = self._held

        def leave() -> None:
            with self._lock:
                # This writer's hold only (not a later writer's, nor a forked child's table).
                if self._held is table and self._held.get(key) is token:
                    del self._held[key]

        return leave

    def steps(self, url: str) -> set[int]:
        """The steps this process is saving into the store at `url`, by any store object."""
        with self._lock:
            names = [name for held_url, name, _rank in self._held if held_url == url]
        found = (parse_generation_name(name) for name in names)
        return {step for step in found if step is not None}


_WRITING = _Writing()

# How long `close()` and the interpreter's exit wait for the saves they end to let go of
# their claims, and for a commit under way to end: against an endpoint that stopped
# answering, each request may take the client's connect timeout for each of its retries, and
# an exit must not hang on that. Not an option: what a commit has left is a handful of small
# requests (a listing, the manifest, the marker, LATEST), a release one delete, and a claim
# not let go of in time only blocks its step for the lease: no job needs another bound, and
# a long one would hold a reclaimed job's exit.
RELEASE_WITHIN = 10.0

# The single-rank saves of this process that hold a claim on their step (`Backend.claim`),
# of every store: what `close()` and the interpreter's exit end.
_CLAIMED: weakref.WeakSet[GenerationWriter] = weakref.WeakSet()
# Every save of this process, of every store, with an event set once it has ended and let go
# of its claim if it held one: the interpreter's exit waits on it for a save whose commit is
# under way, claimed or not (a save holds none on a service without conditional writes, nor
# does a rank other than 0).
_RUNNING: weakref.WeakKeyDictionary[GenerationWriter, threading.Event] = weakref.WeakKeyDictionary()
# A forked child's copies are its parent's saves: ending them would delete the parent's files.
os.register_at_fork(after_in_child=_CLAIMED.clear)
os.register_at_fork(after_in_child=_RUNNING.clear)


class FinishesOnClose(Protocol):
    """What `CheckpointStore.finish_on_close` takes: something that saves into the store on
    a thread of its own (a `BackgroundSaver`)."""

    def finish_in_flight(self, closing: str, advice: str) -> None:
        """Wait for the save in flight to commit, saying `closing` (what is happening) and
        `advice` (how to avoid the wait) once when there is one."""


def _variable(name: str) -> str:
    """The variable `name` ("" when unset) as the agent and the other clients read every
    FOREWARN_ one: in any case, and without one pair of matching quotes around it, which a
    Docker `--env-file` line keeps (`FOREWARN_CHECKPOINT_URL="/data/ckpt"` saved into a
    directory named `"` in the working directory, not the mounted volume)."""
    return environment(name) or ""


class CheckpointStore:
    """Immutable, verified checkpoint generations on local disk or S3-compatible storage.

    `url`: a path, `file:///path`, or `s3://bucket/prefix`; or, instead, `backend=` a ready
    `Backend`. `s3`: the `S3Options` of an `s3://` store. `keep`: how many verified
    generations retention keeps (None keeps all). `verify`: what `latest()` checks by
    default, `"sizes"` (cheap) or `"checksums"` (reads every byte).
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        keep: int | None = None,
        verify: VerifyPolicy = "sizes",
        durable: bool = True,
        commit_timeout: float = 600.0,
        poll_interval: float = 0.1,
        s3: S3Options | None = None,
        backend: Backend | None = None,
    ) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise StoreConfigError(f"keep must be a positive integer or None, got {keep!r}")
        if verify not in _POLICIES:
            raise StoreConfigError(f"verify must be 'sizes' or 'checksums', got {verify!r}")
        if commit_timeout <= 0:
            raise StoreConfigError(f"commit_timeout must be positive, got {commit_timeout!r}")
        if poll_interval <= 0:
            raise StoreConfigError(f"poll_interval must be positive, got {poll_interval!r}")
        if s3 is not None and not isinstance(s3, S3Options):
            raise StoreConfigError(f"s3 must be an S3Options, got {type(s3).__name__}")
        self.keep = keep
        self.verify_policy: VerifyPolicy = verify
        self.commit_timeout = commit_timeout
        self.poll_interval = poll_interval
        if backend is not None:
            if url is not None or s3 is not None:
                raise StoreConfigError("give a store URL (and its options) or a backend, not both")
            self._backend = backend
        elif url is None:
            raise StoreConfigError("a checkpoint store needs a URL (a path or s3://bucket/prefix)")
        else:
            self._backend = open_backend(url, durable=durable, s3=s3)
        self._protocol = CommitProtocol(
            self._backend, timeout=commit_timeout, poll_interval=poll_interval
        )
        self._writing: set[int] = set()
        # Steps whose checksums retention has verified in this process (generations are
        # immutable): each is read back once, not at every save.
        self._hashed: set[int] = set()
        self._swept: float | None = None  # when (monotonic) this store last looked for dead uploads
        # Generations retention failed to delete (see `_prune`), said once each.
        self._undeletable: set[int] = set()
        # What each writer of this store holds (`_WRITING`; single-rank: `Backend.claim`).
        self._claims: weakref.WeakKeyDictionary[GenerationWriter, Callable[[], None]] = (
            weakref.WeakKeyDictionary()
        )
        # Each writer of this store until it ends, with an event set once its end is done
        # (claim let go of, retention run): what `close()` waits on for a commit under way.
        self._ends: weakref.WeakKeyDictionary[GenerationWriter, threading.Event] = (
            weakref.WeakKeyDictionary()
        )
        # What `close()` finishes first (`finish_on_close`), held weakly.
        self._finishing: weakref.WeakSet[FinishesOnClose] = weakref.WeakSet()
        self._closed = False
        # What `latest()` last said it passed over (see `_tell_passed_over`): said once, not at
        # every call of a job that looks often.
        self._told_passed_over: tuple[int | None, tuple[int, ...]] | None = None
        # The steps whose generations `restore()` found did not load (a flipped byte the
        # sizes check passes), by what was wrong: the job resumed below one and trains
        # through its step again, and its save there was refused as already committed.
        self._unloadable: dict[int, str] = {}
        # The generation the last `restore()` loaded (its `restore_seconds` set), else None.
        self.last_restored: Generation | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> CheckpointStore:
        """A store from FOREWARN_CHECKPOINT_URL, _KEEP and _VERIFY; arguments win."""
        # Stripped: a ConfigMap or Secret written as a YAML block (`url: |`) ends the value
        # with a newline, and the store then saved into a local directory named "...\n".
        url = overrides.pop("url", None) or _variable("FOREWARN_CHECKPOINT_URL").strip()
        if not url:
            raise StoreConfigError(
                "FOREWARN_CHECKPOINT_URL is not set (a path or s3://bucket/prefix)"
            )
        # A bad value is named by its variable: the store's own errors name the arguments
        # (`keep`, `verify`), which nobody passed in a pod whose manifest sets the variable.
        # Blank is unset, as for every FOREWARN_* variable the agent reads: a manifest's
        # `value: " "` stopped the job with "' ' is not an integer".
        raw = _variable("FOREWARN_CHECKPOINT_KEEP")
        if "keep" not in overrides and raw.strip(string.whitespace):
            count = raw.strip(string.whitespace)
            # ASCII digits alone: int() read `1_0` as 10, `+3` as 3 and `٣` as 3.
            if not (count.isascii() and count.isdigit()):
                raise StoreConfigError(f"FOREWARN_CHECKPOINT_KEEP={raw!r} is not an integer")
            overrides["keep"] = int(count)
            if overrides["keep"] < 1:
                raise StoreConfigError(
                    f"FOREWARN_CHECKPOINT_KEEP={raw!r} is not a positive integer (unset, every "
                    "generation is kept)"
                )
        raw = _variable("FOREWARN_CHECKPOINT_VERIFY")
        if "verify" not in overrides and raw.strip(string.whitespace):
            if raw.strip(string.whitespace) not in _POLICIES:
                raise StoreConfigError(
                    f"FOREWARN_CHECKPOINT_VERIFY={raw!r} is neither 'sizes' nor 'checksums'"
                )
            overrides["verify"] = raw.strip(string.whitespace)
        return cls(url, **overrides)

    @property
    def url(self) -> str:
        return self._backend.url

    @property
    def backend(self) -> Backend:
        """The storage this store reads and writes."""
        return self._backend

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r}, keep={self.keep}, verify={self.verify_policy!r})"

    def close(self) -> None:
        """Wait for the save in flight of each `BackgroundSaver` of this store to commit
        (bounded by its progress, as at the interpreter's exit; see `finish_on_close`). Then
        abort the single-rank saves of this store that hold a claim and are not being
        committed, letting go of their claims, and wait for the saves being committed to end
        (their failure logged as an ERROR), all within `RELEASE_WITHIN` seconds (never raises
        for them); abort, within as long again, the S3 uploads of failed saves that could not
        be aborted when they failed (each one still left said as a WARNING naming it); then
        release the backend's threads and connections. A save started after
        this raises `CheckpointError`."""
        # A saver's save in flight is finished, not aborted: leaving the store's `with` block
        # while the last background save was uploading lost the run's last checkpoint.
        for saver in list(self._finishing):
            saver.finish_in_flight(
                "the store is being closed", "close the saver, or the guard, before the store"
            )
        # Then: a save starting on another thread meanwhile is refused (see `save`).
        self._closed = True
        try:
            ends = list(self._ends.items())
            mine = [writer for writer, _ended in ends if writer in _CLAIMED]
            # A commit on another thread (a background save, one `flush(timeout=)` gave up
            # on) went on after close() returned: a script that closed the store and then
            # ended by os._exit, or started the next job, lost the step or found it claimed,
            # and a commit that failed was said to nobody.
            _end_claimed(mine, "the store was closed", waits=ends)
        finally:
            # (An S3 backend's close tries once more to abort the uploads of failed saves
            # that could not be aborted then, and says each one still left.)
            self._backend.close()

    def finish_on_close(self, saver: FinishesOnClose) -> None:
        """Have `close()` first wait for `saver`'s save in flight to commit (held weakly)."""
        self._finishing.add(saver)

    def __enter__(self) -> CheckpointStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------

    def save(
        self,
        step: int,
        *,
        metadata: Mapping[str, Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        group: Any = None,
        attempt: str | None = None,
        requests_within: float | None = None,
    ) -> GenerationWriter:
        """Start the generation for `step`; use it as a context manager (commits on exit).

        `requests_within`: this save's storage requests (its start, files, commit, abort)
        fail once they cannot end within that many seconds of this call, each with the time
        left when it starts (S3; a local disk is not bounded so); the ranks' wait for each
        other through the store ends then too, and retention is left to the next commit. An
        exit's save of several ranks gets it from `flush(timeout=)`.

        Multi-rank: each rank calls this with the same step (rank and world size come from
        torch.distributed when initialised, else RANK/WORLD_SIZE, else the arguments), writes
        its own files, and rank 0 commits once every rank's part is in (through the store, only
        parts that carry the token rank 0 published for this commit: a part a dead job left
        never enters it). `attempt` is recorded in each part (default:
        TORCHELASTIC_RESTART_COUNT).
        """
        name = generation_name(step)
        self._check_open(name)
        meta = dict(metadata or {})
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint metadata must be JSON-serialisable: {exc}") from None
        ranks = resolve(rank, world_size, group)
        if attempt is None:
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        backend = self._backend
        ends_by: float | None = None
        if requests_within is not None:
            ends_by = time.monotonic() + requests_within
            backend = backend.within(requests_within)
        releases = [_WRITING.enter(self._backend.identity, name, ranks.rank)]
        claimed = False
        try:
            # Every rank of a save of several too, each its own claim: rank 0 is in the save
            # until the commit, which waits for every other rank's files, and a rank may reach
            # its save before rank 0 does. Without a claim, another job's retention on the
            # same store saw nothing of the save and deleted its files mid-write (the commit
            # then failed with `a1.bin is missing from storage`).
            if ranks.rank == 0:
                backend.note_writer()
            releases.append(backend.claim(name, rank=ranks.rank))
            claimed = releases[-1] is not NO_CLAIM
            if claimed and ends_by is not None:
                releases[-1] = _released_by(releases[-1], ends_by, name)
            writer = self._start(step, name, meta, ranks, attempt, backend, ends_by)
            writer.retention = requests_within is None
        except BaseException:
            _release_all(releases)
            raise
        if claimed and ranks.world_size == 1:
            # Else its claim outlived a closed store, or the process, renewed by its timer
            # (or, after the exit, left for a whole lease to block the step elsewhere). Not
            # rank 0 of several: aborting it would wait for the other ranks' parts (up to
            # commit_timeout); its claim goes when its commit or abort ends.
            _CLAIMED.add(writer)
        _RUNNING[writer] = threading.Event()
        self._claims[writer] = release = _once(lambda: _release_all(releases))
        self._ends[writer] = threading.Event()
        # A writer dropped without commit() or abort() holds its step no longer once it is gone
        # (not at interpreter exit: a background save may still be committing then).
        weakref.finalize(writer, release).atexit = False
        if self._closed:
            # close() ran on another thread while this save started: it may not have seen it.
            writer.abort("the store was closed")
            self._check_open(name)
        return writer

    def _protocol_for(self, backend: Backend, ends_by: float | None) -> CommitProtocol:
        """The commit protocol of one save: the store's own, or one on the save's bounded
        backend, whose wait for the other ranks ends by `ends_by` too."""
        if backend is self._backend and ends_by is None:
            return self._protocol
        return CommitProtocol(
            backend,
            timeout=self.commit_timeout,
            poll_interval=self._protocol.poll_interval,
            ends_by=ends_by,
        )

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise CheckpointError(
                f"cannot save {name} in {self.url}: this CheckpointStore was closed (close(), "
                "or the end of its with block); open a new one to save again"
            )

    def _start(
        self,
        step: int,
        name: str,
        meta: dict[str, Any],
        ranks: Ranks,
        attempt: str | None,
        backend: Backend,
        ends_by: float | None = None,
    ) -> GenerationWriter:
        present = backend.list_sizes(name)
        if COMMIT in present:
            _found, problems = self._check(step, checksums=self.verify_policy == "checksums")
            if not problems and step in self._unloadable:
                problems = [f"it did not load at restore(): {self._unloadable[step]}"]
            if not problems or ranks.world_size != 1:
                broken = f" (it does not verify: {'; '.join(problems)})" if problems else ""
                raise GenerationExistsError(
                    f"{name} is already committed in {self.url}{broken}; generations are immutable"
                )
            # latest() passed over this broken generation, so the job resumed below it and
            # trains through its step again: refusing the step crashed a single-rank job there
            # at every restart. Nobody can resume from it; its only writer now is this one.
            log.warning(
                "forewarn: %s in %s is committed but does not verify (%s); saving it again",
                name,
                self.url,
                "; ".join(problems),
            )
            self.delete(step)
            present = {}
        if ranks.world_size == 1:
            # A save killed before its first file landed left only a temp file, which no
            # listing counts: the step's next save committed around it, and a whole file's
            # bytes stayed in the generation for as long as it was kept.
            leftover = bool(present) or self._holds_temps(name)
            if leftover and backend.claimed(name):
                # A rank of another job's save of several (one that restarted with fewer
                # ranks while the old one still flushes) reached its save before its rank 0:
                # its files were deleted under it as a dead writer's.
                raise CommitError(
                    f"cannot save {name} in {self.url}: another process is saving it (a live "
                    "claim of one of its ranks holds it); this save left it alone"
                )
            # Whatever is there is a dead writer's leftover.
            if leftover:
                try:
                    backend.delete_tree(name)
                except CommitError as exc:
                    raise CommitError(
                        f"cannot save {name} in {self.url}: the unfinished save of it that a "
                        f"writer left there cannot be removed: {exc}"
                    ) from exc
        elif part_name(ranks.rank) in present:
            backend.delete(f"{name}/{part_name(ranks.rank)}")
        if ranks.rank == 0 and (
            self._swept is None or time.monotonic() - self._swept >= UPLOAD_SWEEP_INTERVAL
        ):
            # The first save of this process: no writer of this job can still be uploading
            # anything but this step (the ranks save in step; an earlier step committed only
            # once every rank's part, hence its uploads, were in), so whatever else is
            # unfinished belongs to a killed writer, or to the job before this one still
            # writing its final save (a replacement pod starts while the old one terminates):
            # uploads younger than STALE_UPLOAD_AGE are spared for that. A single rank is the
            # step's only writer: its uploads are dead whatever their age, and they are the
            # usual ones (a job resumed from the last commit saves again the step it was
            # killed in).
            # Again every UPLOAD_SWEEP_INTERVAL: an upload spared here as too young (the job
            # before, still uploading its final save when this one started, then killed) was
            # left for as long as this job ran, its parts billed; its generation has no object,
            # so retention never lists it. Later looks are as safe as the first: this job's
            # earlier steps committed, and the other rules (age, live claims) still hold.
            self._swept = time.monotonic()
            name_if_single = name if ranks.world_size == 1 else None
            try:
                aborted = backend.abort_stale_uploads(
                    None if name_if_single else name,
                    older_than=STALE_UPLOAD_AGE,
                    dead_prefix=name_if_single,
                )
                if aborted:
                    log.info("forewarn: aborted %d unfinished uploads in %s", aborted, self.url)
            except Exception as exc:
                # Clean-up, not the save: credentials without s3:ListBucketMultipartUploads
                # (a common narrow bucket policy) failed the first save of every process.
                log.warning(
                    "forewarn: could not abort unfinished uploads in %s (saving anyway): %s",
                    self.url,
                    exc,
                )
        self._writing.add(step)
        protocol = self._protocol_for(backend, ends_by)
        writer = GenerationWriter(backend, protocol, step, meta, ranks, attempt, self._writer_ended)
        writer.reads_from = self._backend
        return writer

    def _holds_temps(self, name: str) -> bool:
        """Whether the local directory of generation `name` holds anything (its files all
        temps, as `list_sizes` found none)."""
        path = self._backend.local_path(name)
        try:
            return path is not None and path.is_dir() and any(path.iterdir())
        except OSError:
            return False

    def _writer_ended(self, writer: GenerationWriter, committed: bool) -> None:
        try:
            self._writing.discard(writer.step)
            release = self._claims.pop(writer, None)
            try:
                if release is not None:
                    release()
            finally:
                released = _RUNNING.get(writer)
                if released is not None:
                    released.set()
            if committed and writer.rank == 0 and not writer.retention:
                self._skip_retention(writer)
            elif committed and writer.rank == 0:
                try:
                    self._prune(fresh=writer.step)
                except Exception as exc:  # a failed clean-up must not undo a good commit
                    log.warning("forewarn: checkpoint retention failed in %s: %s", self.url, exc)
            if committed and writer.retention:
                # The uploads of this process's failed saves that could not be aborted then
                # (the service unreachable, credentials expired): the service answers again.
                # Each rank its own; after the save is timed, as retention, and not in an
                # exit's save, whose time is the deadline's. Before, they stood stored and
                # billed until the next sweep (UPLOAD_SWEEP_INTERVAL) or `prune
                # --abort-uploads`.
                self._backend.abort_left_uploads()
        finally:
            ended = self._ends.pop(writer, None)
            if ended is not None:
                ended.set()

    def _skip_retention(self, writer: GenerationWriter) -> None:
        """A save with a deadline (an exit's: `flush(timeout=)`, `save(requests_within=)`)
        committed: retention is left to the next commit, which applies `keep` to every older
        generation alike. Run here, its listing, checks and deletes went through the store's
        own client, not bounded by the save's time: storage that stopped answering after the
        commit held the exit's save (and its ack) on them past the deadline, and a single
        rank's save that had committed was reported given up (`CommitTimeout`)."""
        if self.keep is not None:
            log.info(
                "forewarn: %s committed in %s with a deadline: retention (keep=%d) is left to "
                "the next commit",
                writer.name,
                self.url,
                self.keep,
            )

    def flush(
        self,
        step: int,
        write: Callable[[GenerationWriter], object],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | Callable[[], float] | None = None,
        moving: Callable[[], bool] | None = None,
        **save_options: Any,
    ) -> FlushResult:
        """Save generation `step` by calling `write(gen)`, commit it, and time it.

        The hook `CheckpointGuard(store=...)` uses: `seconds` runs from the call to the
        commit being complete (`LATEST` written on rank 0, the commit seen on the others);
        retention afterwards is not counted (with `timeout`, an exit's save, none runs: the
        next commit applies `keep`). `save_options` go to `save` (rank, ...).
        `timeout` (single-rank saves): raise `CommitTimeout` once that many seconds pass
        without the commit, leaving the save behind on its own thread (see `_flush_within`);
        with `moving`, only once `moving()` also says the save has stopped moving (its bytes
        no longer going to the storage) and is not to be waited for otherwise (the guard's:
        its terminate's deadline moved later), with a WARNING at the timeout while it is.
        `timeout` may be a callable giving the seconds left from now, asked again while the
        save runs (the guard's: its terminate's deadline may move earlier during the save).
        With several ranks no rank can leave its save behind (the commit's collectives):
        `timeout` bounds the save's storage requests instead (`save(requests_within=)`), so
        storage that stopped answering fails the save within it, on every rank.
        """
        if timeout is not None:
            ranks = resolve(
                save_options.get("rank"), save_options.get("world_size"), save_options.get("group")
            )
            if ranks.world_size == 1:
                return self._flush_within(timeout, step, write, metadata, save_options, moving)
            within = timeout() if callable(timeout) else timeout
            save_options = {**save_options, "requests_within": within}
        return self._flush(step, write, metadata, save_options)

    def _flush_within(
        self,
        timeout: float | Callable[[], float],
        step: int,
        write: Callable[[GenerationWriter], object],
        metadata: Mapping[str, Any] | None,
        save_options: dict[str, Any],
        moving: Callable[[], bool] | None = None,
    ) -> FlushResult:
        # A terminate's final save to storage that stopped answering (a hung mount, an S3
        # endpoint that accepts connections and never answers: 60 s per request, 6 times)
        # ran on past the notice deadline and the SIGKILL there said nothing. The save runs
        # on a thread the caller stops waiting for; once given up it never commits a file
        # written after that (the caller may change its tensors), and commits only if its
        # writes were all done and the storage answers.
        gave_up = threading.Event()
        outcome: list[FlushResult | BaseException] = []
        began = time.monotonic()
        # A callable bound is asked again while the save runs: a terminate's deadline moved
        # earlier during an exit's save left the bound of its start (minutes), and the
        # SIGKILL at the new deadline cut the save off without the CommitTimeout saying so.
        left = timeout if callable(timeout) else (lambda: timeout - (time.monotonic() - began))

        def guarded(gen: GenerationWriter) -> object:
            gen.retention = False  # its time is the caller's (see `_skip_retention`)
            written = write(gen)
            if gave_up.is_set():
                spent = time.monotonic() - began
                raise CommitTimeout(f"{gen.name} was given up after {spent:.1f} s")
            return written

        def run() -> None:
            try:
                outcome.append(self._flush(step, guarded, metadata, save_options))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(
            target=run, name=f"forewarn-save-{generation_name(step)}", daemon=True
        )
        thread.start()
        while not outcome and (remaining := left()) > 0:
            thread.join(min(remaining, _MOVING_TICK) if callable(timeout) else remaining)
        bound = time.monotonic() - began
        # A save still moving at its timeout is a slow link, not a hung one: given up, it
        # was lost with its bytes flowing (a terminate's final save, on a machine that often
        # stays past its deadline). It is waited for while it moves, saying so once.
        told = False
        while not outcome and moving is not None and moving():
            if not told:
                told = True
                log.warning(
                    "forewarn: %s is not committed in %s after its %.1f s, but its upload is "
                    "still moving (or its deadline moved later): it is not durable yet; "
                    "waiting on",
                    generation_name(step),
                    self.url,
                    bound,
                )
            thread.join(_MOVING_TICK)
        if not outcome:
            gave_up.set()
            still = " moves nothing and" if told else ""
            raise CommitTimeout(
                f"{generation_name(step)} was not committed in {self.url} within {bound:.1f} s: "
                f"the save{still} is still waiting on the storage (a hung mount, or a service "
                "that stopped answering?); it is left behind and commits only if its files "
                "were all written and the storage answers"
            )
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def _flush(
        self,
        step: int,
        write: Callable[[GenerationWriter], object],
        metadata: Mapping[str, Any] | None,
        save_options: dict[str, Any],
    ) -> FlushResult:
        try:
            try:
                return self._flush_once(step, write, metadata, save_options)
            except Exception as exc:
                # Retention runs only after a commit: a disk that holds `keep` generations but
                # not one more failed every later save (step 10 stayed the newest through step
                # 60), and the job trained on with nothing to resume from but step 10.
                if not _out_of_space(exc):
                    raise
                ranks = resolve(
                    save_options.get("rank"),
                    save_options.get("world_size"),
                    save_options.get("group"),
                )
                if ranks.world_size != 1 or not self._make_room(step, exc):
                    raise
            return self._flush_once(step, write, metadata, save_options)
        except Exception as exc:
            if _out_of_space(exc):
                self._say_out_of_space(step, exc)
            raise

    def _say_out_of_space(self, step: int, error: BaseException) -> None:
        """Note on `error` which save ran out of space and what is left to resume from: the
        bare `[Errno 28] No space left on device` named neither the store nor the step."""
        add_note = getattr(error, "add_note", None)  # Python 3.11 and newer
        if add_note is None:
            return
        try:
            newest = self.latest()
        except Exception:
            return
        left = (
            f"the newest committed generation is still {newest.name}"
            if newest is not None
            else "the store holds no committed generation"
        )
        add_note(
            f"forewarn: saving {generation_name(step)} into {self.url} ran out of space: "
            f"nothing of it was committed, and {left}"
        )

    def _flush_once(
        self,
        step: int,
        write: Callable[[GenerationWriter], object],
        metadata: Mapping[str, Any] | None,
        save_options: Mapping[str, Any],
    ) -> FlushResult:
        with self.save(step, metadata=metadata, **save_options) as gen:
            write(gen)
        committed = gen.committed
        if committed is None or gen.seconds is None:
            raise CommitError(f"{gen.name} was not committed")
        return FlushResult(gen.seconds, committed)

    def _make_room(self, step: int, cause: BaseException) -> list[int]:
        """After a save of `step` failed for want of space: delete now the committed
        generations retention would delete once `step` commits, keeping the newest `keep - 1`
        that verify (at least one), the one `LATEST` names and any this process is writing.
        Before that, whatever `keep`, the unfinished saves of writers that are gone (a job
        SIGKILLed mid-save at a reclaim's deadline): no retention deletes one newer than the
        generations kept, and its temp files held the space every later save needed until
        the job reached that step again. Returns the steps deleted (none when nothing could
        be)."""
        steps = self.steps()
        writing = self._in_process()
        removed = self._remove_killed_saves(step, steps, writing, cause)
        if self.keep is None:
            return removed
        steps = [s for s in steps if s not in removed]
        checksums = self.verify_policy == "checksums"
        survivors = max(self.keep - 1, 1)
        kept: list[int] = []
        for candidate in reversed(steps):
            if candidate == step or candidate in writing:
                continue
            if candidate not in self._hashed:
                generation, problems = self._check(candidate, checksums=checksums)
                if generation is None or problems:
                    continue
                if checksums:
                    self._hashed.add(candidate)
            kept.append(candidate)
            if len(kept) == survivors:
                break
        if len(kept) < survivors:
            return removed
        floor = min(kept)
        hinted = self.latest_hint()
        # Only committed ones: an uncommitted generation may be another writer's save.
        doomed = [
            s
            for s in steps
            if s < floor
            and s not in writing
            and s not in (step, hinted)
            and self._backend.get_small(f"{generation_name(s)}/{COMMIT}") is not None
        ]
        if not doomed:
            return removed
        log.warning(
            "forewarn: no space to save %s in %s (%s: %s): deleting %s now, which retention "
            "(keep=%d) deletes once it commits, and saving it again",
            generation_name(step),
            self.url,
            type(cause).__name__,
            cause,
            ", ".join(generation_name(s) for s in doomed),
            self.keep,
        )
        for doomed_step in doomed:
            self.delete(doomed_step)
        return removed + doomed

    def _remove_killed_saves(
        self, step: int, steps: list[int], writing: set[int], cause: BaseException
    ) -> list[int]:
        """For `_make_room`: remove the uncommitted generations other than `step` that no
        save of this process writes and no live claim of another holds (their writers are
        gone, as a save of such a step finds its own leftovers); returns their steps."""
        removed: list[int] = []
        for candidate in steps:
            name = generation_name(candidate)
            if candidate == step or candidate in writing:
                continue
            if self._backend.get_small(f"{name}/{COMMIT}") is not None:
                continue
            if self._backend.claimed(name):
                continue  # another process is saving it
            log.warning(
                "forewarn: no space to save %s in %s (%s: %s): removing %s, an unfinished save "
                "whose writer is gone (no live claim holds it), and saving it again",
                generation_name(step),
                self.url,
                type(cause).__name__,
                cause,
                name,
            )
            try:
                self._backend.delete_tree(name)
            except (CheckpointError, OSError) as exc:
                log.warning("forewarn: could not remove %s in %s: %s", name, self.url, exc)
                continue
            removed.append(candidate)
        return removed

    def abort_stale_uploads(self, *, keep_step: int | None = None) -> int:
        """Abort unfinished multipart uploads that killed writers left (S3; nothing on local
        disk), except those of generation `keep_step`, whatever their age; returns how many.
        Rank 0's first save in a process does this by itself, sparing uploads younger than
        `STALE_UPLOAD_AGE`; call it only when no other writer of this store is saving."""
        keep = generation_name(keep_step) if keep_step is not None else None
        aborted = self._backend.abort_stale_uploads(keep)
        if aborted:
            log.info("forewarn: aborted %d unfinished uploads in %s", aborted, self.url)
        return aborted

    # -- reading -------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Every generation directory's step, committed or not, ascending."""
        found = (parse_generation_name(name) for name in self._backend.list_children(""))
        return sorted(step for step in found if step is not None)

    def latest_hint(self) -> int | None:
        """The step the LATEST hint names (a hint: `latest()` does not trust it)."""
        return read_latest_hint(self._backend)

    def latest(
        self,
        *,
        verify: VerifyPolicy | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        group: Any = None,
    ) -> Generation | None:
        """The newest generation that verifies, or None; broken ones are logged and skipped.

        With torch.distributed initialised and several ranks (of `group`), a collective that
        every rank calls: rank 0 picks the generation and every rank returns that one (see
        `_agree`); `rank=0, world_size=1` reads alone."""
        policy = self._policy(verify)
        ranks = resolve(rank, world_size, group) if initialised_dist() is not None else None
        if ranks is not None and ranks.dist is not None:
            return self._agree(ranks, policy)
        return self._newest(policy)

    def restore(
        self,
        load: Callable[[Generation], T],
        *,
        verify: VerifyPolicy | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        group: Any = None,
    ) -> tuple[Generation, T] | None:
        """Resume: `load(generation)` on the newest generation that verifies, and on the next
        older one whenever `load` raises `CorruptGenerationError` (with a WARNING naming the
        step and why); the generation loaded and what `load` returned, or None when no
        generation is left (a first run). `latest()` checks sizes by default, so a byte
        flipped in the newest generation showed only in the loader, which then failed the
        job at every restart though the step before was sound.

        With torch.distributed initialised and several ranks, a collective like `latest()`:
        every rank loads the generation rank 0 picked, and when any rank's `load` finds it
        corrupt, every rank moves on to the next older one together.

        The generation returned carries `restore_seconds` (from this call until `load`
        returned) and is kept as `last_restored`: `CheckpointGuard(store=).resumed(step)`
        reports that time to the agent (and 0 steps lost when the generation was an exit's
        save), so the job's resume line reads `restore=1.2s steps_lost=0`."""
        started = time.monotonic()
        policy = self._policy(verify)
        ranks = resolve(rank, world_size, group) if initialised_dist() is not None else None
        collective = ranks if ranks is not None and ranks.dist is not None else None
        below: int | None = None
        while True:
            if collective is not None:
                generation = self._agree(collective, policy, below=below)
            else:
                generation = self._newest(policy, below=below)
            if generation is None:
                return None
            if collective is None:
                try:
                    value = load(generation)
                except CorruptGenerationError as exc:
                    failures = [str(exc)]
                else:
                    return self._restored(generation, started), value
            else:
                loaded, failures = self._load_on_every_rank(collective, generation, load)
                if not failures:
                    return self._restored(generation, started), cast(T, loaded)
            log.warning(
                "forewarn: checkpoint %s in %s does not load, resuming from an older one: %s",
                generation.name,
                self.url,
                "; ".join(failures),
            )
            self._unloadable[generation.step] = "; ".join(failures)
            below = generation.step

    def _restored(self, generation: Generation, started: float) -> Generation:
        """Record the generation `restore()` loaded and how long the restore took: a guard
        given this store reports both at `resumed(step)`, so a loop need not time it."""
        generation.restore_seconds = time.monotonic() - started
        self.last_restored = generation
        return generation

    def _load_on_every_rank(
        self, ranks: Ranks, generation: Generation, load: Callable[[Generation], T]
    ) -> tuple[T | None, list[str]]:
        """`load` on this rank, then every rank's outcome on every rank: (the value, []) when
        all loaded, (None, what was corrupt) when one found the generation corrupt; another
        error on any rank is raised on every rank (its own, or one naming it), so no rank
        waits in a collective the others left."""
        value: T | None = None
        outcome: tuple[str, str] | None = None
        own: BaseException | None = None
        try:
            value = load(generation)
        except CorruptGenerationError as exc:
            outcome = ("corrupt", str(exc))
        except Exception as exc:
            own = exc
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        outcomes = ranks.all_gather(outcome)
        errors = [(index, o[1]) for index, o in enumerate(outcomes) if o and o[0] == "error"]
        if errors:
            if own is not None:
                raise own
            index, why = errors[0]
            raise CheckpointError(
                f"rank {index} could not load {generation.name} from {self.url}: {why}"
            )
        return value, [f"rank {index}: {o[1]}" for index, o in enumerate(outcomes) if o]

    def _agree(
        self, ranks: Ranks, policy: VerifyPolicy, *, below: int | None = None
    ) -> Generation | None:
        """Rank 0's newest generation, on every rank. Each rank looking on its own resumed
        the ranks from different steps when a generation committed between their calls (a
        straggler of the job before still committing into the same store) or one rank saw a
        stale listing. The others take rank 0's manifest and do not read the store: rank 0
        verified it, and generations are immutable."""
        if ranks.rank == 0:
            try:
                generation = self._newest(policy, below=below)
            except Exception as exc:
                ranks.broadcast_from_zero(("failed", f"{type(exc).__name__}: {exc}"))
                raise
            picked = None
            if generation is not None:
                picked = (generation.manifest.encode(), generation.checksummed)
            ranks.broadcast_from_zero(("picked", picked))
            return generation
        outcome, value = ranks.broadcast_from_zero(None)
        if outcome == "failed":
            raise CheckpointError(
                f"rank 0 could not pick the generation to resume from in {self.url}: {value}"
            )
        if value is None:
            return None
        raw, checksummed = value
        generation = Generation(self._backend, Manifest.decode(raw))
        generation.checksummed = checksummed
        return generation

    def _newest(self, policy: VerifyPolicy, *, below: int | None = None) -> Generation | None:
        # A walk that found nothing looks again when a generation it passed over may have
        # changed meanwhile: a job restarted while the old one still committed its final save
        # (keep=1) listed the store, saw that save uncommitted (or not at all), and while it
        # checked the step before, the commit landed and its retention removed that step:
        # latest() said None and the job trained again from step 0.
        broken: set[int] = set()
        for _walk in range(LATEST_WALKS):
            changing = False
            passed_over: list[int] = []  # newer steps not committed, passed over this walk
            steps = self.steps()
            unlisted = self._unlisted_hint(steps)
            for step in reversed(sorted({*steps, *unlisted})):
                if step in broken or (below is not None and step >= below):
                    continue
                try:
                    generation, problems = self._check(step, checksums=policy == "checksums")
                except Exception:
                    # A file gone under the hashing of verify="checksums" raised out of here.
                    if self._committed(step):
                        raise
                    changing = True
                    continue
                if generation is not None and not problems:
                    self._tell_passed_over(generation, passed_over)
                    return generation
                if step in unlisted and problems == ["not committed"]:
                    continue  # a hint left naming a generation since removed
                if problems == ["not committed"] or (problems and not self._committed(step)):
                    changing = True  # being saved, or removed while checked (marker first)
                    passed_over.append(step)
                    continue
                if problems:
                    broken.add(step)
                    log.warning(
                        "forewarn: checkpoint %s in %s does not verify, trying an older one: %s",
                        generation_name(step),
                        self.url,
                        "; ".join(problems),
                    )
            if not changing:
                return None
        self._tell_passed_over(None, passed_over)
        return None

    def _tell_passed_over(self, generation: Generation | None, passed_over: list[int]) -> None:
        """Say which generation resume gets and why, when newer ones were passed over as not
        committed: a job killed mid-save resumed from an older step without a word, and the
        store's listing showed the newer one (`partial`), leaving the user to guess whether
        resume had missed it. Whether a live writer still saves it is told apart from one
        that died (its claim). `generation` None: nothing committed is left to resume from
        (a job killed during its first save): the job starts from nothing, which the agent
        logs as "a fresh run", and this says why."""
        # This process's own saves under way are its own news.
        own = self._in_process()
        passed_over = [step for step in passed_over if step not in own]
        if not passed_over:
            return
        said = (None if generation is None else generation.step, tuple(passed_over))
        if said == self._told_passed_over:
            return
        self._told_passed_over = said
        saving = [step for step in passed_over if self._backend.claimed(generation_name(step))]
        dead = [step for step in passed_over if step not in saving]
        reasons = []
        if dead:
            reasons.append(
                f"{_names(dead)} {_is(dead)} not committed (its save never finished: its "
                "writer was killed or failed before the COMMIT marker)"
            )
        if saving:
            reasons.append(f"{_names(saving)} {_is(saving)} still being saved by another process")
        if generation is None:
            log.warning(
                "forewarn: no committed generation in %s to resume from: %s",
                self.url,
                "; ".join(reasons),
                extra={PASSED_OVER: True},
            )
            return
        log.warning(
            "forewarn: checkpoint %s in %s is the newest committed generation, resuming from "
            "it: newer %s",
            generation.name,
            self.url,
            "; ".join(reasons),
            extra={PASSED_OVER: True},
        )

    def _unlisted_hint(self, steps: list[int]) -> set[int]:
        """The step LATEST names, when the listing left it out and it is newer than every
        listed step. A listing may lag the writes it follows (S3-compatible services that
        replicate their bucket index), and a job restarted just after its predecessor's final
        save resumed from the generation before it. The step is still verified, not trusted."""
        hint = self.latest_hint()
        if hint is None or hint in steps or (steps and hint < steps[-1]):
            return set()
        return {hint}

    def _committed(self, step: int) -> bool:
        return self._backend.get_small(f"{generation_name(step)}/{COMMIT}") is not None

    def get(self, step: int, *, verify: VerifyPolicy | None = None) -> Generation:
        """The committed generation for `step`, verified by policy; raises when it does not."""
        generation, problems = self._check(step, checksums=self._policy(verify) == "checksums")
        if problems == ["not committed"]:
            raise GenerationNotFoundError(f"no committed generation for step {step} in {self.url}")
        if generation is None or problems:
            raise CorruptGenerationError(generation_name(step), problems)
        return generation

    def generations(self) -> list[Generation]:
        """Committed generations whose marker and manifest agree, oldest first (files unchecked)."""
        found = []
        for step in self.steps():
            generation = read_generation(self._backend, step)[0]
            if generation is not None:
                found.append(generation)
        return found

    def verify(
        self,
        generation: Generation | int,
        *,
        checksums: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> Verification:
        """Check a generation's marker, manifest, files and sizes (and checksums; then
        `progress(bytes_hashed)` is told as the bytes are read)."""
        step = generation.step if isinstance(generation, Generation) else generation
        _found, problems = check_generation(
            self._backend, step, checksums=checksums, progress=progress
        )
        return Verification(step=step, checksums=checksums, problems=tuple(problems))

    def _policy(self, verify: str | None) -> VerifyPolicy:
        policy = verify or self.verify_policy
        if policy not in _POLICIES:
            raise StoreConfigError(f"verify must be 'sizes' or 'checksums', got {policy!r}")
        return policy  # type: ignore[return-value]

    def _check(self, step: int, *, checksums: bool) -> tuple[Generation | None, list[str]]:
        return check_generation(self._backend, step, checksums=checksums)

    # -- retention -----------------------------------------------------------------------

    def _in_process(self) -> set[int]:
        """The steps this process is writing into this store: through this store object, or
        another one on the same path (retention of one deleted the other's save in flight,
        and that save failed with its files missing)."""
        return self._writing | _WRITING.steps(self._backend.identity)

    def _killed_saves(self, steps: list[int], writing: set[int], kept: list[int]) -> list[int]:
        """The uncommitted generations among `steps` that no save of this process writes and
        whose writers the backend proves gone (see `Backend.writer_gone`)."""
        return [
            s
            for s in steps
            if s not in writing
            and s not in kept
            and self._backend.get_small(f"{generation_name(s)}/{COMMIT}") is None
            and self._backend.writer_gone(generation_name(s))
        ]

    def _upload_steps(self) -> set[int]:
        """The steps of saves whose files are unfinished uploads (S3): one killed while its
        only files were uploads lists no object, and `prune` spared it for good."""
        try:
            found = self._backend.unfinished_uploads(sizes=False)
        except Exception as exc:
            # Credentials without s3:ListBucketMultipartUploads (a common narrow policy):
            # retention by hand goes on with the generations it lists, as before.
            log.info("forewarn: %s: cannot list unfinished uploads: %s", self.url, exc)
            return set()
        steps = (parse_generation_name(upload.generation) for upload in found)
        return {step for step in steps if step is not None}

    def delete(self, step: int) -> None:
        """Remove one generation (its marker first)."""
        self._hashed.discard(step)
        self._backend.delete_tree(generation_name(step))

    def prune(self, *, dry_run: bool = False) -> list[int]:
        """Apply `keep`: once `keep` newer generations verify (by the store's `verify` policy),
        delete every older one except the one LATEST names, any this process is still
        writing and any another process holds a claim on (saving it). Returns the steps
        deleted (with `dry_run`, the steps it would delete, deleting nothing); one it cannot
        delete does not stop it: the first such failure is raised once the rest are gone."""
        return self._prune(fresh=None, dry_run=dry_run)

    def _prune(self, fresh: int | None, dry_run: bool = False) -> list[int]:
        # `fresh` was committed by this process a moment ago: it needs no second look.
        if self.keep is None:
            return []
        steps = self.steps()
        writing = self._in_process()
        # By the policy `latest()` resumes by: with "checksums", a newer generation that only
        # has the right sizes must not push out the one resume would fall back to.
        checksums = self.verify_policy == "checksums"
        if checksums and fresh is not None:
            self._hashed.add(fresh)  # hashed as it was written
        kept: list[int] = []
        for step in reversed(steps):
            if step in writing:
                continue
            if step != fresh and step not in self._hashed:
                generation, problems = self._check(step, checksums=checksums)
                if generation is None or problems:
                    continue
                if checksums:
                    self._hashed.add(step)
            kept.append(step)
            if len(kept) == self.keep:
                break
        # By hand, also the unfinished saves whose writers are provably gone, whatever their
        # step (a final save SIGKILLed at a reclaim's deadline is newer than every generation
        # kept, and retention spared it for good unless the job saved that step again).
        gone = (
            []
            if fresh is not None
            else self._killed_saves(sorted(set(steps) | self._upload_steps()), writing, kept)
        )
        if len(kept) < self.keep:
            doomed = gone
        else:
            floor = min(kept)
            # `fresh` can be older than `floor` when a job restarted from an older
            # checkpoint: it is still the generation that job just made durable and will
            # resume from.
            doomed = [
                s
                for s in sorted(set(steps) | set(gone))
                if (s < floor or s in gone) and s not in writing
            ]
            doomed = [s for s in doomed if s != fresh]
        if doomed:
            hinted = self.latest_hint()
            doomed = [s for s in doomed if s != hinted]
        if dry_run:
            return [s for s in doomed if not self._backend.claimed(generation_name(s))]
        deleted = []
        first: Exception | None = None
        for step in doomed:
            try:
                self._hashed.discard(step)
                if not self._backend.delete_unclaimed(generation_name(step)):
                    # Another process is saving it (a slower job given the same store, or
                    # one restarted from an older checkpoint): deleting its files failed
                    # that save. Asked with the delete, as a writer claims its step
                    # before it writes a file; its next save's retention sees it again.
                    continue
            except Exception as exc:
                # One generation another user of a shared store made (its directory theirs
                # alone) stopped retention at every save, and this job's own older ones
                # behind it were never deleted. Said once per generation per process; a
                # prune() by hand raises the first failure once it has deleted the rest.
                first = first or exc
                if fresh is None:
                    continue
                if step not in self._undeletable:
                    self._undeletable.add(step)
                    log.warning(
                        "forewarn: checkpoint retention cannot delete %s in %s, and goes on "
                        "without it: %s",
                        generation_name(step),
                        self.url,
                        exc,
                    )
                continue
            self._undeletable.discard(step)
            deleted.append(step)
        if fresh is None and deleted:
            # The claims of the killed writers whose saves it removed (as a commit does).
            with contextlib.suppress(CheckpointError, OSError):
                self._backend.remove_stale_claims()
        if first is not None and fresh is None:
            raise first
        return deleted


def _end_claimed(
    writers: list[GenerationWriter],
    reason: str,
    *,
    waits: list[tuple[GenerationWriter, threading.Event]] | None = None,
) -> None:
    """Abort `writers` (which lets go of their claims), then wait for each writer of `waits`
    whose commit is under way until its event is set, all on a thread waited on for at most
    `RELEASE_WITHIN` seconds; a commit waited for that failed is logged as an ERROR.
    Never raises."""
    waits = waits or []
    if not writers and not waits:
        return
    deadline = time.monotonic() + RELEASE_WITHIN
    waited: list[tuple[GenerationWriter, threading.Event]] = []

    def run() -> None:
        for writer in writers:
            try:
                writer.abort(reason)
            except Exception as exc:
                log.warning(
                    "forewarn: could not abort %s in %s (%s): %s",
                    writer.name,
                    writer.backend.url,
                    reason,
                    exc,
                )
        # At exit a commit's thread is a daemon that dies with the process: mid-commit, it
        # left the step uncommitted and claimed for a whole lease, and the job restarted at
        # once in another container was refused the step it had been saving. After close()
        # the process may end as abruptly (os._exit), or the next job start.
        for writer, released in waits:
            if released.is_set() or not writer.commit_begun:
                continue
            waited.append((writer, released))
            log.warning(
                "forewarn: %s, but %s in %s is being committed: waiting up to %.0f s for its "
                "commit to end",
                reason,
                writer.name,
                writer.backend.url,
                max(deadline - time.monotonic(), 0.0),
            )
            released.wait(max(deadline - time.monotonic(), 0.0))

    thread = threading.Thread(target=run, name="forewarn-end-claims", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    if thread.is_alive() and writers:
        log.warning(
            "forewarn: %s, but the storage did not let go of the claims on %s within %.0f s: "
            "they expire once not renewed for their lease",
            reason,
            ", ".join(sorted(writer.name for writer in writers)),
            RELEASE_WITHIN,
        )
    for writer, released in list(waited):
        if not released.is_set():
            log.warning(
                "forewarn: %s, but %s in %s was still being committed after %.0f s: it is "
                "not durable yet (the last durable generation is an older one)",
                reason,
                writer.name,
                writer.backend.url,
                RELEASE_WITHIN,
            )
        elif writer.error is not None:
            log.error(
                "forewarn: %s while %s in %s was being committed, and that commit failed: it "
                "is not saved (%s: %s)",
                reason,
                writer.name,
                writer.backend.url,
                type(writer.error).__name__,
                writer.error,
            )


def _end_claimed_at_exit() -> None:
    # Registered when this module is imported, so it runs after the exit hooks registered
    # later (LIFO): a BackgroundSaver's, which waits for its save in flight to commit.
    _end_claimed(list(_CLAIMED), "the interpreter exited", waits=list(_RUNNING.items()))


atexit.register(_end_claimed_at_exit)


def _released_by(release: Callable[[], None], ends_by: float, name: str) -> Callable[[], None]:
    """A bounded save's claim release that holds the save's end (and its job's ack) no
    later than `ends_by` (monotonic): on storage that stopped answering, its DELETE ran past
    the save's bound (23.4 s of a 25 s lead, the requests bounded to 20). Not done by then it
    goes on on its own; a claim the process's exit cuts off expires after its lease."""

    def run() -> None:
        thread = threading.Thread(target=release, name=f"forewarn-release-{name}", daemon=True)
        thread.start()
        thread.join(max(ends_by - time.monotonic(), 0.0))

    return run


def _release_all(releases: list[Callable[[], None]]) -> None:
    # Each one whatever the others raise: Ctrl-C landing in the S3 claim's release (it waits
    # for a renewal in flight, then deletes its object) left the step held in this process,
    # and every later save of it was refused as a second writer of this process.
    if not releases:
        return
    try:
        releases[-1]()
    finally:
        _release_all(releases[:-1])


def _once(action: Callable[[], None]) -> Callable[[], None]:
    done = threading.Lock()

    def run() -> None:
        if done.acquire(blocking=False):
            action()

    return run


def _out_of_space(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError) and current.errno in _NO_SPACE:
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


# Set on the log record of `latest()`'s word on newer generations it passed over: a tool
# that lists them itself (`forewarn checkpoint`, whose `ls` shows them `partial`) leaves it out.
PASSED_OVER = "forewarn_passed_over"


def _names(steps: list[int]) -> str:
    return ", ".join(generation_name(step) for step in steps)


def _is(steps: list[int]) -> str:
    return "is" if len(steps) == 1 else "are"
