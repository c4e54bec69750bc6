"""One generation: reading a committed one (`Generation`), checking it, and writing one
(`GenerationWriter`), which hands its part to the commit protocol when its block ends."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import IO, Any

from .backend import Backend, ObjectWriter
from .backend import Progress as BytesProgress
from .commit import CommitProtocol, CommitRequest, read_manifest
from .destination import Destination, FileCopy, copy_entry
from .errors import (
    CheckpointError,
    CommitError,
    CorruptGenerationError,
    GenerationNotFoundError,
    GenerationRemovedError,
)
from .hashing import READ_CHUNK, Buffer, digest_data, digest_stream
from .manifest import COMMIT, FileEntry, Manifest, Part, check_file_name, generation_name
from .ranks import Ranks


@dataclass(frozen=True)
class Verification:
    """The outcome of checking one generation; true when it verifies."""

    step: int
    checksums: bool
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok


class CopiedPaths(list[Path]):
    """What `Generation.get_dir` returns: the path of each file of the copy in its
    destination. `in_place` is true when they were there already (the same copy made
    earlier, or a killed one finished just now) and nothing was copied: a restart script's
    `forewarn checkpoint get` run again said it had copied the files."""

    in_place: bool = False

    def __init__(self, paths: list[Path], *, in_place: bool = False) -> None:
        super().__init__(paths)
        self.in_place = in_place


@dataclass(frozen=True)
class FlushResult:
    """What `CheckpointStore.flush` did: the committed generation and how long it took."""

    seconds: float
    generation: Generation


class Generation:
    """A committed generation, read side."""

    def __init__(self, backend: Backend, manifest: Manifest) -> None:
        self.backend = backend
        self.manifest = manifest
        self.step = manifest.step
        self.name = generation_name(manifest.step)
        self.files: dict[str, FileEntry] = {entry.name: entry for entry in manifest.files}
        # Set when every file was hashed while this object was checked (latest(verify=
        # "checksums")): verify_file then need not read the bytes a second time.
        self.checksummed = False
        # Set by the save that committed it when writing its COMMIT marker reported an error
        # though the marker is in place: it is committed and readers take it. Local (a
        # directory's fsync failing after the rename) it may not survive a crash of the
        # machine; on S3 (a PUT stored, then answered an error) it is durable. The error,
        # else None.
        self.unconfirmed: str | None = None
        # Set by `CheckpointStore.restore()` on the generation it loaded: the seconds from the
        # call until `load` returned (finding, verifying and loading it, and any newer ones
        # that did not load), which `CheckpointGuard.resumed(step)` reports. Else None.
        self.restore_seconds: float | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.metadata

    @property
    def created_at(self) -> str:
        return self.manifest.created_at

    @property
    def world_size(self) -> int:
        return self.manifest.world_size

    @property
    def size(self) -> int:
        """The bytes of every file, as the manifest records them."""
        return sum(entry.size for entry in self.manifest.files)

    def __repr__(self) -> str:
        return f"<Generation {self.name} files={len(self.files)} in {self.backend.url}>"

    def _entry(self, name: str) -> FileEntry:
        try:
            return self.files[name]
        except KeyError:
            raise FileNotFoundError(
                f"{self.name} has no file {name!r} (it has: {', '.join(sorted(self.files))})"
            ) from None

    def open(self, name: str) -> IO[bytes]:
        """A binary stream of one file (not re-verified; see `read_bytes` and `verify`)."""
        self._entry(name)
        try:
            return self.backend.open_read(f"{self.name}/{name}")
        except FileNotFoundError as exc:
            self._check_present(exc)
            raise

    def _check_present(self, error: BaseException) -> None:
        """A file of this generation could not be read: when the generation itself is gone
        (its marker deleted), say so. With keep=N, another process committing a newer
        generation deletes this one under a reader that holds it: the reader got a bare
        FileNotFoundError naming a path. Reading the newer one in its place instead would
        hand back another step's bytes under this object's `step`, so this one raises."""
        try:
            if self.backend.get_small(f"{self.name}/{COMMIT}") is not None:
                return
        except Exception:
            return  # storage unreachable: the read's own error says more
        raise GenerationRemovedError(
            f"{self.name} was removed from {self.backend.url} after it was read as committed "
            "(retention deletes older generations once a newer one commits: another process "
            "saved since); call store.latest() again for the newest generation"
        ) from error

    def read_bytes(self, name: str) -> bytes:
        """One file's bytes, checked against the manifest's checksum."""
        entry = self._entry(name)
        with self.open(name) as stream:
            data = stream.read()
        if len(data) != entry.size or digest_data(data, entry.checksum) != entry.checksum:
            raise CorruptGenerationError(self.name, [f"{name} does not match its checksum"])
        return data

    def verify_file(self, name: str) -> None:
        """Re-read one file and check it against the manifest (size and checksum); raises
        `CorruptGenerationError` naming it when it does not match."""
        entry = self._entry(name)
        if self.checksummed:
            return
        with self.open(name) as stream:
            size, checksum = digest_stream(stream, entry.checksum)
        if size != entry.size or checksum != entry.checksum:
            raise CorruptGenerationError(
                self.name,
                [
                    f"{name} does not match its checksum "
                    "(store.latest(verify='checksums') skips generations like this one)"
                ],
            )

    def path(self, name: str) -> Path:
        """The file's path on local disk (local stores only; use `get_file` for S3)."""
        self._entry(name)
        path = self.backend.local_path(f"{self.name}/{name}")
        if path is None:
            raise CheckpointError(
                f"{self.backend.url} is not on local disk: use open() or get_file() for {name!r}"
            )
        if not path.exists():
            self._check_present(FileNotFoundError(str(path)))
        return path

    def get_file(
        self, name: str, destination: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> Path:
        """Copy one file to `destination` (its directory is created), verified: the bytes go
        to a temp file beside it, are checked against the manifest (size and checksum), and
        only then renamed into place; corrupt bytes raise `CorruptGenerationError` and leave
        nothing behind. `progress(bytes_done, bytes_total)` is called as bytes arrive."""
        return self._get_file(name, Path(destination), progress, sweep=True)

    def _get_file(self, name: str, target: Path, progress: Progress | None, *, sweep: bool) -> Path:
        """`get_file`; `sweep`: first remove what killed copies to `target` left beside it."""
        entry = self._entry(name)
        # Both failed after the download with an error naming the hidden temp file: a
        # destination in a directory that did not exist yet, and one that is a directory.
        if target.is_dir():
            raise IsADirectoryError(
                f"{target} is a directory: get_file copies to a file path "
                f"(e.g. {target / PurePosixPath(name).name}); get_dir copies into a directory"
            )
        target.parent.mkdir(parents=True, exist_ok=True)

        def arrived(done: int) -> None:
            if progress is not None:
                progress(done, entry.size)

        with FileCopy(target, sweep=sweep) as copy:
            temp = copy.temp
            try:
                checksum = self.backend.download(
                    f"{self.name}/{name}", temp, entry.checksum, arrived
                )
            except Exception as exc:  # S3 says a missing object its own way
                self._check_present(exc)
                raise
            size = temp.stat().st_size
            if size != entry.size or checksum != entry.checksum:
                raise CorruptGenerationError(
                    self.name, [f"{name} does not match its checksum (nothing was copied)"]
                )
            os.replace(temp, target)
        return target

    def get_dir(
        self,
        prefix: str,
        destination: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
        replace: bool = False,
        wait: float = 0.0,
        waiting: Callable[[str], None] | None = None,
        waited: bool = False,
    ) -> CopiedPaths:
        """Copy every file under `prefix/` ('' for all) into `destination`, keeping the tree;
        each file verified as in `get_file`. `progress` counts over all the files.

        `destination` must be absent or empty unless `replace`: files copied beside those of
        another step (a stale `model.safetensors` beside a sharded layout) made a loader read
        a mix of two checkpoints. The files go to a hidden directory inside `destination`
        first and are moved into place only once every one verified, so a failed copy leaves
        `destination` as it was; with `replace`, what it held is set aside, the new files
        moved in, and then it is deleted: a copy killed meanwhile is finished by the next
        copy into `destination` (see `destination.py`), which returns at once when it is the
        same copy (same store, generation and prefix). A `destination` holding just what an
        earlier copy put there, unchanged, is that copy's: the same copy again returns at
        once, another generation replaces it (a restart script's `get` at each start); the
        paths it returns then say `in_place`. Another copy under way into `destination` is
        waited for up to `wait` seconds (`waiting` is told once what it waits for), then
        `BlockingIOError` names it: ranks of one node restoring into one directory together
        find the first one's copy in place. `waited`: this process waited for such a copy
        already, in a try of a generation removed meanwhile; its copy of this one in place is
        kept with `replace` too."""
        base = prefix.strip("/")
        target = Path(destination)
        names = [name for name in sorted(self.files) if not base or name.startswith(base + "/")]
        if not names:
            raise FileNotFoundError(f"{self.name} has no files under {prefix!r}")
        if target.exists() and not target.is_dir():
            raise NotADirectoryError(
                errno.ENOTDIR, f"{target} is not a directory (get_dir copies into one)", str(target)
            )
        self._refuse_the_store(target)
        made = _to_make(target)
        target.mkdir(parents=True, exist_ok=True)
        wanted = {name[len(base) + 1 :] if base else name: name for name in names}
        # The same copy run again after it was killed mid-swap finds the swap finished.
        what = json.dumps({"store": self.backend.url, "generation": self.name, "prefix": base})
        with Destination(target, wait=wait, waiting=waiting) as into:
            try:
                held = into.held()
                if held and not replace and self._holds(target, held, wanted, into.finished, what):
                    return CopiedPaths([target / relative for relative in wanted], in_place=True)
                # What an earlier copy put there, unchanged: a restart script's `get` run again
                # (at each start) was refused the directory its first run filled. The same copy
                # is there already; another generation replaces that copy, nobody's own files.
                # With `replace` too when the copy waited for another that put just these files in
                # place: the ranks of one node restoring together with `--replace` each copied
                # again, swapping the files under the rank that was loading them.
                # And when it waited in an earlier try, of a generation retention removed
                # meanwhile: the first rank had copied the newest, and this one copied it again.
                waited_before = into.waited or waited
                earlier = into.copied() if held and (waited_before or not replace) else None
                if earlier == what:
                    return CopiedPaths([target / relative for relative in wanted], in_place=True)
                if held and not replace and earlier is None:
                    raise FileExistsError(
                        errno.ENOTEMPTY,
                        f"{target} is not empty (it holds {', '.join(sorted(held)[:3])}"
                        f"{', ...' if len(held) > 3 else ''}): copying {self.name} in would mix "
                        "its files with those; give an empty directory, or replace=True to "
                        "replace them",
                        str(target),
                    )
                total = sum(self.files[name].size for name in names)
                finished = 0

                def arrived(done: int, _size: int) -> None:
                    if progress is not None:
                        progress(finished + done, total)

                token, stage = into.stage(what)
                relatives = []
                try:
                    for name in names:
                        relative = name[len(base) + 1 :] if base else name
                        path = stage / relative
                        path.parent.mkdir(parents=True, exist_ok=True)
                        # The stage is new: no killed copy's leftovers to look for.
                        self._get_file(name, path, arrived, sweep=False)
                        relatives.append(relative)
                        finished += self.files[name].size
                except BaseException:
                    into.discard(token)
                    raise
                into.swap_in(token)  # which records `what` the directory now holds
            except BaseException:
                # A failed copy leaves `destination` as it was: one it made (and the parents
                # it made) goes, removed while the lock is held so that a copy waiting for it
                # makes its own. Before, a `get` of a step that did not verify left it empty,
                # and a restart script that resumes when the directory is there loaded nothing.
                _unmake(made)
                raise
        return CopiedPaths([target / relative for relative in relatives])

    def _holds(
        self, target: Path, held: list[str], wanted: dict[str, str], finished: list[str], what: str
    ) -> bool:
        """Whether `target` holds just what this copy would put there because a dead copy of
        the same files, whose swap was finished just now, put it there (its files had all
        verified before its swap began): `forewarn checkpoint get` killed while it moved the
        files in, then run again as it was (a restarted init container, a retry loop), was
        refused the directory as not empty for ever."""
        if finished != [what] or set(held) != {relative.split("/")[0] for relative in wanted}:
            return False
        for relative, name in wanted.items():
            path = target / relative
            if path.is_symlink() or not path.is_file():
                return False
            if path.stat().st_size != self.files[name].size:
                return False
        return True

    def _refuse_the_store(self, target: Path) -> None:
        """`ValueError` when `target` is this generation's own (local) store, holds it or is
        inside it: with `replace`, the store's parent (`get ./ckpt . --replace`) lost every
        generation of the run."""
        root = self.backend.local_path("")
        if root is None:
            return
        store, where = Path(os.path.realpath(root)), Path(os.path.realpath(target))
        if where == store or store.is_relative_to(where) or where.is_relative_to(store):
            raise ValueError(
                f"{target} is, holds or is inside the store {self.backend.url}: copy the "
                "generation to a directory outside it"
            )

    def verify(
        self, *, checksums: bool = True, progress: BytesProgress | None = None
    ) -> Verification:
        _found, problems = check_generation(
            self.backend, self.step, checksums=checksums, progress=progress
        )
        return Verification(step=self.step, checksums=checksums, problems=tuple(problems))


def to_load(generation: Generation | None, caller: str) -> Generation:
    """`generation`, for a loader; None (what `store.latest()` returns for a store with no
    committed generation yet: a first run) raises an error saying so, not an AttributeError."""
    if generation is None:
        raise GenerationNotFoundError(
            f"{caller}() was given None, not a generation: store.latest() returns None when "
            "the store has no committed generation yet (a first run starts from scratch)"
        )
    return generation


def read_generation(backend: Backend, step: int) -> tuple[Generation | None, list[str]]:
    """The committed generation for `step` when its marker and manifest agree (files not
    checked), else None and what is wrong (`["not committed"]` without a marker)."""
    manifest, problems = read_manifest(backend, step)
    return (Generation(backend, manifest) if manifest is not None else None), problems


def check_generation(
    backend: Backend, step: int, *, checksums: bool, progress: BytesProgress | None = None
) -> tuple[Generation | None, list[str]]:
    """`read_generation`, then every file present with its size (and, asked, its checksum;
    `progress(bytes_hashed)` is told as the bytes are read)."""
    generation, problems = read_generation(backend, step)
    if generation is None:
        return None, problems
    sizes = backend.sizes_of(generation.name, [entry.name for entry in generation.manifest.files])
    for entry in generation.manifest.files:
        size = sizes.get(entry.name)
        if size is None:
            problems.append(f"{entry.name} is missing")
        elif size != entry.size:
            problems.append(f"{entry.name} has {size} bytes, the manifest says {entry.size}")
    if checksums and not problems:
        hashed = 0

        def count(chunk: Buffer) -> None:
            nonlocal hashed
            hashed += memoryview(chunk).nbytes
            if progress is not None:
                progress(hashed)

        for entry in generation.manifest.files:
            with backend.open_read(f"{generation.name}/{entry.name}") as stream:
                size, checksum = digest_stream(stream, entry.checksum, count)
            if size != entry.size or checksum != entry.checksum:
                problems.append(f"{entry.name} does not match its checksum")
        generation.checksummed = not problems
    return generation, problems


# Told (bytes done, bytes total) as a copy goes.
Progress = Callable[[int, int], None]

# Told when a writer is done, committed (True) or not: the store's bookkeeping and retention.
OnEnd = Callable[["GenerationWriter", bool], None]


class GenerationWriter:
    """A generation being written by one rank; commits when its `with` block ends cleanly."""

    def __init__(
        self,
        backend: Backend,
        protocol: CommitProtocol,
        step: int,
        metadata: Mapping[str, Any] | None,
        ranks: Ranks,
        attempt: str | None,
        on_end: OnEnd,
    ) -> None:
        self.backend = backend
        # Where the committed generation is read from: the store's own backend, not a save's
        # copy whose requests were bounded by the time the save had (see `Backend.within`).
        self.reads_from = backend
        self.step = step
        self.name = generation_name(step)
        self.rank = ranks.rank
        self.world_size = ranks.world_size
        self.ranks = ranks
        self.attempt = attempt
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.committed: Generation | None = None
        # Why its commit failed: for whoever waits for a commit it did not run itself
        # (`CheckpointStore.close()`, the exit), to report.
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self.started = time.monotonic()
        self._protocol = protocol
        self._on_end = on_end
        self._entries: dict[str, FileEntry] = {}
        self._open: dict[str, ObjectWriter] = {}
        self._done = False
        # What ended it, for the error of a later write or commit.
        self._ended = ""
        # Commit and abort may race (a store closed, or the interpreter exiting, while a
        # thread commits): exactly one of them ends the save, so an abort never releases
        # the claim of a commit still writing the manifest and marker.
        self._ending = threading.Lock()
        # Told of each file as it is opened (CheckpointGuard's exit save watches their bytes
        # move, to tell a slow link from storage that stopped answering).
        self.on_open: Callable[[ObjectWriter], None] | None = None
        # Whether rank 0 applies the store's `keep` once this save commits: not for a save
        # with a deadline (an exit's, see `CheckpointStore._writer_ended`).
        self.retention = True

    def __repr__(self) -> str:
        return f"<GenerationWriter {self.name} rank {self.rank}/{self.world_size}>"

    @property
    def commit_begun(self) -> bool:
        """Whether its commit has begun (it may have ended since: see `committed`, `error`)."""
        return self._done and self._ended == "committed"

    @property
    def files(self) -> dict[str, FileEntry]:
        """The files this rank has finished writing so far."""
        return dict(self._entries)

    def open(self, name: str, mode: str = "wb") -> ObjectWriter:
        """A binary stream that becomes the file `name` when closed (hashed while written)."""
        if mode != "wb":
            raise ValueError(f"files of a generation being written open with 'wb', not {mode!r}")
        self._check_writable()
        check_file_name(name)
        if name in self._entries or name in self._open:
            raise CommitError(f"{self.name}: file {name!r} was already written")

        def done(size: int, checksum: str) -> None:
            self._open.pop(name, None)
            self._entries[name] = FileEntry(name, size, checksum, self.rank)

        writer = self.backend.writer(f"{self.name}/{name}", done)
        self._open[name] = writer
        if self.on_open is not None:
            self.on_open(writer)
        return writer

    def write_bytes(self, name: str, data: bytes | bytearray | memoryview) -> FileEntry:
        with self.open(name) as stream:
            stream.write(data)
        return self._entries[name]

    def put_file(
        self, name: str, source: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> FileEntry:
        """Copy a local file in, streaming; `progress(bytes_done, bytes_total)` as it goes."""
        with open(source, "rb") as handle, self.open(name) as stream:
            total = os.fstat(handle.fileno()).st_size
            done = 0
            while True:
                chunk = handle.read(READ_CHUNK)
                if not chunk:
                    break
                stream.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, max(total, done))
        return self._entries[name]

    def put_dir(
        self, prefix: str, source: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> list[FileEntry]:
        """Copy a local directory's files in under `prefix/` (for writers that want a path,
        such as `save_pretrained(dir)` or torch.distributed.checkpoint); `progress` counts
        over all the files."""
        root = Path(source)
        if not root.is_dir():
            raise NotADirectoryError(f"put_dir: {root} is not a directory")
        base = check_file_name(prefix.strip("/")) if prefix.strip("/") else ""
        # A directory a `get_dir` copied into may keep its record inside it (`.forewarn-got`,
        # a mount point without user attributes): saved back, it went into the generation as
        # one of its files, and each restore of it brought another copy's record along.
        paths = [
            path
            for path in sorted(root.rglob("*"))
            if path.is_file() and not any(copy_entry(part) for part in path.relative_to(root).parts)
        ]
        total = sum(path.stat().st_size for path in paths)
        finished = 0

        def sent(done: int, _size: int) -> None:
            if progress is not None:
                progress(finished + done, max(total, finished + done))

        entries = []
        for path in paths:
            relative = path.relative_to(root).as_posix()
            name = f"{base}/{relative}" if base else relative
            entries.append(self.put_file(name, path, progress=sent))
            finished += entries[-1].size
        return entries

    def _check_writable(self) -> None:
        if self._done:
            raise CommitError(f"{self.name} was already {self._ended or 'committed or aborted'}")

    def _end(self, how: str) -> bool:
        """Mark the save ended; False when something else ended it first."""
        with self._ending:
            if self._done:
                return False
            self._done = True
            self._ended = how
            return True

    def __enter__(self) -> GenerationWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            # Committed (or aborted) inside the block already: raising "already committed"
            # here reported a durable generation as a failed save.
            if not self._done:
                self.commit()
        else:
            self.abort(f"{exc_type.__name__}: {exc}")

    def commit(self) -> Generation:
        """Finish this rank's part; on rank 0, commit the generation once every part is in.

        Returns the committed generation (on every rank once rank 0 committed it).
        """
        self._check_writable()
        if self._open:
            # Aborted, not just refused: the other ranks then learn why at once instead of
            # waiting for this rank's part until commit_timeout, and a single rank's files
            # and its claim on the step do not stay behind.
            reason = f"files still open: {', '.join(sorted(self._open))}"
            self.abort(f"CommitError: {reason}")
            raise CommitError(f"{self.name}: {reason}")
        if not self._end("committed"):
            self._check_writable()
        try:
            manifest = self._protocol.commit(self._request(None))
            # Timed before retention runs: that is clean-up, not the save.
            self.seconds = time.monotonic() - self.started
            committed = Generation(self.reads_from, manifest)
            committed.unconfirmed = self._protocol.unconfirmed.pop(self.name, None)
            self.committed = committed
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            self._on_end(self, self.committed is not None)
        return self.committed

    def abort(self, reason: str = "aborted") -> None:
        """Give up this save: nothing is committed, and the other ranks learn why."""
        if not self._end(f"aborted ({reason})"):
            return
        for writer in list(self._open.values()):
            writer.abort()
        self._open.clear()
        try:
            self._protocol.abort(self._request(reason))
        finally:
            self._on_end(self, False)

    def _request(self, error: str | None) -> CommitRequest:
        part = Part(
            step=self.step,
            rank=self.rank,
            world_size=self.world_size,
            files=tuple(self._entries.values()),
            attempt=self.attempt,
            error=error,
        )
        return CommitRequest(self.step, self.ranks, self.attempt, self.metadata, part)


def _to_make(target: Path) -> list[Path]:
    """The directories `target.mkdir(parents=True)` would make, deepest first."""
    missing = []
    for path in (target, *target.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    return missing


def _unmake(made: list[Path]) -> None:
    """Remove the directories of `made` (deepest first) that are still empty."""
    for path in made:
        try:
            os.rmdir(path)
        except OSError:
            return  # (not empty: another's files, or another copy's stage)
