"""`CheckpointStore`: immutable, verified generations named by their step.

A save writes its files, then `MANIFEST.json`, then `COMMIT` (naming the manifest's
checksum), then the `LATEST` hint. `latest()` walks the generations newest first and returns
the first one whose marker, manifest and file sizes (and checksums, by policy) verify.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal
from urllib.parse import unquote, urlsplit

from .backend import Backend, ObjectWriter
from .errors import (
    CheckpointError,
    CommitError,
    CorruptGenerationError,
    GenerationExistsError,
    GenerationNotFoundError,
    StoreConfigError,
)
from .hashing import READ_CHUNK, digest_data, digest_stream, new_hash
from .manifest import (
    COMMIT,
    LATEST,
    MANIFEST,
    PARTS,
    CommitMarker,
    FileEntry,
    Manifest,
    Part,
    check_file_name,
    decode_latest,
    encode_latest,
    generation_name,
    parse_generation_name,
    part_name,
)
from .ranks import Ranks, poll, resolve

log = logging.getLogger("forewarn.checkpoint")

VerifyPolicy = Literal["sizes", "checksums"]
_POLICIES = ("sizes", "checksums")


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


@dataclass(frozen=True)
class FlushResult:
    """What `CheckpointStore.flush` did: the committed generation and how long it took."""

    seconds: float
    generation: Generation


class Generation:
    """A committed generation, read side."""

    def __init__(self, store: CheckpointStore, manifest: Manifest) -> None:
        self.store = store
        self.manifest = manifest
        self.step = manifest.step
        self.name = generation_name(manifest.step)
        self.files: dict[str, FileEntry] = {entry.name: entry for entry in manifest.files}

    @property
    def metadata(self) -> dict[str, Any]:
        return self.manifest.metadata

    @property
    def created_at(self) -> str:
        return self.manifest.created_at

    @property
    def world_size(self) -> int:
        return self.manifest.world_size

    def __repr__(self) -> str:
        return f"<Generation {self.name} files={len(self.files)} in {self.store.url}>"

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
        return self.store._backend.open_read(f"{self.name}/{name}")

    def read_bytes(self, name: str) -> bytes:
        """One file's bytes, checked against the manifest's checksum."""
        entry = self._entry(name)
        with self.open(name) as stream:
            data = stream.read()
        if len(data) != entry.size or digest_data(data, entry.checksum) != entry.checksum:
            raise CorruptGenerationError(self.name, [f"{name} does not match its checksum"])
        return data

    def path(self, name: str) -> Path:
        """The file's path on local disk (local stores only; use `get_file` for S3)."""
        self._entry(name)
        path = self.store._backend.local_path(f"{self.name}/{name}")
        if path is None:
            raise CheckpointError(
                f"{self.store.url} is not on local disk: use open() or get_file() for {name!r}"
            )
        return path

    def get_file(self, name: str, destination: str | os.PathLike[str]) -> Path:
        """Copy one file to `destination` (a concurrent ranged download on S3)."""
        self._entry(name)
        target = Path(destination)
        self.store._backend.download(f"{self.name}/{name}", target)
        return target

    def get_dir(self, prefix: str, destination: str | os.PathLike[str]) -> list[Path]:
        """Copy every file under `prefix/` ('' for all) into `destination`, keeping the tree."""
        base = prefix.strip("/")
        target = Path(destination)
        copied = []
        for name in sorted(self.files):
            if base and not name.startswith(base + "/"):
                continue
            path = target / (name[len(base) + 1 :] if base else name)
            path.parent.mkdir(parents=True, exist_ok=True)
            copied.append(self.get_file(name, path))
        if not copied:
            raise FileNotFoundError(f"{self.name} has no files under {prefix!r}")
        return copied

    def verify(self, *, checksums: bool = True) -> Verification:
        return self.store.verify(self, checksums=checksums)


class GenerationWriter:
    """A generation being written by one rank; commits when its `with` block ends cleanly."""

    def __init__(
        self,
        store: CheckpointStore,
        step: int,
        metadata: Mapping[str, Any] | None,
        ranks: Ranks,
        attempt: str | None,
    ) -> None:
        self.store = store
        self.step = step
        self.name = generation_name(step)
        self.rank = ranks.rank
        self.world_size = ranks.world_size
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.committed: Generation | None = None
        self.seconds: float | None = None
        self._ranks = ranks
        self._attempt = attempt
        self._entries: dict[str, FileEntry] = {}
        self._open: dict[str, ObjectWriter] = {}
        self._started = time.monotonic()
        self._done = False

    def __repr__(self) -> str:
        return f"<GenerationWriter {self.name} rank {self.rank}/{self.world_size}>"

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

        writer = self.store._backend.writer(f"{self.name}/{name}", done)
        self._open[name] = writer
        return writer

    def write_bytes(self, name: str, data: bytes | bytearray | memoryview) -> FileEntry:
        with self.open(name) as stream:
            stream.write(data)
        return self._entries[name]

    def put_file(self, name: str, source: str | os.PathLike[str]) -> FileEntry:
        """Copy a local file in, streaming."""
        with open(source, "rb") as handle, self.open(name) as stream:
            while True:
                chunk = handle.read(READ_CHUNK)
                if not chunk:
                    break
                stream.write(chunk)
        return self._entries[name]

    def put_dir(self, prefix: str, source: str | os.PathLike[str]) -> list[FileEntry]:
        """Copy a local directory's files in under `prefix/` (for writers that want a path,
        such as `save_pretrained(dir)` or torch.distributed.checkpoint)."""
        root = Path(source)
        if not root.is_dir():
            raise NotADirectoryError(f"put_dir: {root} is not a directory")
        base = check_file_name(prefix.strip("/")) if prefix.strip("/") else ""
        entries = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                relative = path.relative_to(root).as_posix()
                entries.append(self.put_file(f"{base}/{relative}" if base else relative, path))
        return entries

    def _check_writable(self) -> None:
        if self._done:
            raise CommitError(f"{self.name} was already committed or aborted")

    def __enter__(self) -> GenerationWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort(f"{exc_type.__name__}: {exc}")

    def commit(self) -> Generation:
        """Finish this rank's part; on rank 0, commit the generation once every part is in.

        Returns the committed generation (on every rank once rank 0 committed it).
        """
        self._check_writable()
        if self._open:
            raise CommitError(f"{self.name}: files still open: {', '.join(sorted(self._open))}")
        self._done = True
        try:
            self.committed = self.store._commit(self, self._part(None))
        finally:
            self.store._writing.discard(self.step)
        if self.seconds is None:  # rank 0 stopped the clock before retention
            self.seconds = time.monotonic() - self._started
        return self.committed

    def abort(self, reason: str = "aborted") -> None:
        """Give up this save: nothing is committed, and the other ranks learn why."""
        if self._done:
            return
        self._done = True
        for writer in list(self._open.values()):
            writer.abort()
        self._open.clear()
        try:
            self.store._abort(self, self._part(reason))
        finally:
            self.store._writing.discard(self.step)

    def _part(self, error: str | None) -> Part:
        return Part(
            step=self.step,
            rank=self.rank,
            world_size=self.world_size,
            files=tuple(self._entries.values()),
            attempt=self._attempt,
            error=error,
        )


class CheckpointStore:
    """Immutable, verified checkpoint generations on local disk or S3-compatible storage.

    `url`: a path, `file:///path`, or `s3://bucket/prefix`. `keep`: how many verified
    generations retention keeps (None keeps all). `verify`: what `latest()` checks by
    default, `"sizes"` (cheap) or `"checksums"` (reads every byte).
    """

    def __init__(
        self,
        url: str | os.PathLike[str],
        *,
        keep: int | None = None,
        verify: VerifyPolicy = "sizes",
        durable: bool = True,
        commit_timeout: float = 600.0,
        poll_interval: float = 0.1,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        part_size: int | None = None,
        concurrency: int | None = None,
        upload_checksums: bool | None = None,
    ) -> None:
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise StoreConfigError(f"keep must be a positive integer or None, got {keep!r}")
        if verify not in _POLICIES:
            raise StoreConfigError(f"verify must be 'sizes' or 'checksums', got {verify!r}")
        if commit_timeout <= 0:
            raise StoreConfigError(f"commit_timeout must be positive, got {commit_timeout!r}")
        self.keep = keep
        self.verify_policy: VerifyPolicy = verify
        self.commit_timeout = commit_timeout
        self.poll_interval = poll_interval
        s3_options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region": region,
            "access_key_id": access_key_id,
            "secret_access_key": secret_access_key,
            "session_token": session_token,
            "profile": profile,
            "addressing_style": addressing_style,
            "upload_checksums": upload_checksums,
            "part_size": part_size,
            "concurrency": concurrency,
        }
        self._backend = open_backend(url, durable=durable, **s3_options)
        self._writing: set[int] = set()

    @classmethod
    def from_env(cls, **overrides: Any) -> CheckpointStore:
        """A store from FOREWARN_CHECKPOINT_URL, _KEEP and _VERIFY; arguments win."""
        url = overrides.pop("url", None) or os.environ.get("FOREWARN_CHECKPOINT_URL")
        if not url:
            raise StoreConfigError(
                "FOREWARN_CHECKPOINT_URL is not set (a path or s3://bucket/prefix)"
            )
        if "keep" not in overrides and os.environ.get("FOREWARN_CHECKPOINT_KEEP"):
            raw = os.environ["FOREWARN_CHECKPOINT_KEEP"]
            try:
                overrides["keep"] = int(raw)
            except ValueError:
                raise StoreConfigError(
                    f"FOREWARN_CHECKPOINT_KEEP={raw!r} is not an integer"
                ) from None
        if "verify" not in overrides and os.environ.get("FOREWARN_CHECKPOINT_VERIFY"):
            overrides["verify"] = os.environ["FOREWARN_CHECKPOINT_VERIFY"]
        return cls(url, **overrides)

    @property
    def url(self) -> str:
        return self._backend.url

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r}, keep={self.keep}, verify={self.verify_policy!r})"

    def close(self) -> None:
        self._backend.close()

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
    ) -> GenerationWriter:
        """Start the generation for `step`; use it as a context manager (commits on exit).

        Multi-rank: each rank calls this with the same step (rank and world size come from
        torch.distributed when initialised, else RANK/WORLD_SIZE, else the arguments), writes
        its own files, and rank 0 commits once every rank's part is in. `attempt` tells apart
        parts of a retried save of the same step when ranks meet through the store (default:
        TORCHELASTIC_RESTART_COUNT).
        """
        name = generation_name(step)
        meta = dict(metadata or {})
        try:
            json.dumps(meta)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint metadata must be JSON-serialisable: {exc}") from None
        ranks = resolve(rank, world_size, group)
        if attempt is None:
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        present = self._backend.list_sizes(name)
        if COMMIT in present:
            raise GenerationExistsError(
                f"{name} is already committed in {self.url}; generations are immutable"
            )
        if ranks.world_size == 1:
            # Whatever is there is a dead writer's leftover.
            if present:
                self._backend.delete_tree(name)
        elif part_name(ranks.rank) in present:
            self._backend.delete(f"{name}/{part_name(ranks.rank)}")
        self._writing.add(step)
        return GenerationWriter(self, step, meta, ranks, attempt)

    def flush(
        self,
        step: int,
        write: Callable[[GenerationWriter], object],
        *,
        metadata: Mapping[str, Any] | None = None,
        **save_options: Any,
    ) -> FlushResult:
        """Save generation `step` by calling `write(gen)`, commit it, and time it.

        The hook `CheckpointGuard(store=...)` uses: `seconds` runs from the call to the
        `LATEST` hint being written on rank 0 (retention afterwards is not counted), and to
        the commit being seen on the other ranks. `save_options` go to `save` (rank, ...).
        """
        with self.save(step, metadata=metadata, **save_options) as gen:
            write(gen)
        committed = gen.committed
        if committed is None or gen.seconds is None:
            raise CommitError(f"{gen.name} was not committed")
        return FlushResult(gen.seconds, committed)

    def _commit(self, gen: GenerationWriter, part: Part) -> Generation:
        ranks = gen._ranks
        self._backend.make_durable(gen.name)
        if ranks.world_size == 1:
            return self._finish(gen, [part])
        self._backend.put_small(f"{gen.name}/{part_name(ranks.rank)}", part.encode())
        if ranks.dist is not None:
            parts = [Part.from_json(item) for item in ranks.all_gather(part.to_json())]
            outcome: str | None = None
            committed: Generation | None = None
            if ranks.rank == 0:
                try:
                    committed = self._finish(gen, parts)
                except Exception as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                    ranks.broadcast_from_zero(outcome)
                    raise
            outcome = ranks.broadcast_from_zero(outcome)
            if outcome is not None:
                raise CommitError(f"rank 0 did not commit {gen.name}: {outcome}")
            return committed if committed is not None else self._load(gen.step)
        if ranks.rank == 0:
            parts = poll(
                lambda: self._collect_parts(gen),
                timeout=self.commit_timeout,
                interval=self.poll_interval,
                what=f"every rank's part of {gen.name}",
            )
            try:
                return self._finish(gen, parts)
            except Exception as exc:
                failed = Part(gen.step, 0, ranks.world_size, part.files, part.attempt, str(exc))
                self._backend.put_small(f"{gen.name}/{part_name(0)}", failed.encode())
                raise
        poll(
            lambda: self._committed_or_failed(gen),
            timeout=self.commit_timeout,
            interval=self.poll_interval,
            what=f"rank 0 to commit {gen.name}",
        )
        return self._load(gen.step)

    def _abort(self, gen: GenerationWriter, part: Part) -> None:
        ranks = gen._ranks
        if ranks.world_size == 1:
            self._backend.delete_tree(gen.name)
            return
        if ranks.dist is not None:
            # The other ranks are waiting in the same collectives: take part, then fail.
            ranks.all_gather(part.to_json())
            if ranks.rank == 0:
                ranks.broadcast_from_zero(f"rank 0 aborted: {part.error}")
            else:
                ranks.broadcast_from_zero(None)
            return
        self._backend.put_small(f"{gen.name}/{part_name(ranks.rank)}", part.encode())

    def _collect_parts(self, gen: GenerationWriter) -> list[Part] | None:
        # One listing per poll; the parts are read only once all of them are there.
        if len(self._backend.list_sizes(f"{gen.name}/{PARTS}")) < gen.world_size:
            return None
        parts: list[Part] = []
        for rank in range(gen.world_size):
            raw = self._backend.get_small(f"{gen.name}/{part_name(rank)}")
            if raw is None:
                return None
            try:
                part = Part.decode(raw)
            except ValueError:
                return None  # a part-manifest is put atomically; bad JSON is someone else's
            if part.attempt != gen._attempt and rank != gen.rank:
                return None
            if part.error is not None:
                raise CommitError(f"rank {rank} failed to write {gen.name}: {part.error}")
            parts.append(part)
        return parts

    def _committed_or_failed(self, gen: GenerationWriter) -> bool | None:
        if self._backend.get_small(f"{gen.name}/{COMMIT}") is not None:
            return True
        raw = self._backend.get_small(f"{gen.name}/{part_name(0)}")
        if raw is not None:
            try:
                zero = Part.decode(raw)
            except ValueError:
                return None
            if zero.error is not None and zero.attempt == gen._attempt:
                raise CommitError(f"rank 0 did not commit {gen.name}: {zero.error}")
        return None

    def _finish(self, gen: GenerationWriter, parts: list[Part]) -> Generation:
        """Rank 0: check the parts, write the manifest, the marker, the hint; prune."""
        problems: list[str] = []
        seen: dict[str, int] = {}
        files: list[FileEntry] = []
        for expected, part in enumerate(sorted(parts, key=lambda item: item.rank)):
            if part.rank != expected or part.world_size != gen.world_size or part.step != gen.step:
                problems.append(
                    f"part of rank {part.rank} is for step {part.step}, world {part.world_size}"
                )
            if part.error is not None:
                problems.append(f"rank {part.rank} failed: {part.error}")
            for entry in part.files:
                if entry.name in seen:
                    first = seen[entry.name]
                    problems.append(f"file {entry.name!r} written by ranks {first} and {part.rank}")
                seen[entry.name] = part.rank
                files.append(entry)
        if len(parts) != gen.world_size:
            problems.append(f"{len(parts)} parts for world size {gen.world_size}")
        if problems:
            raise CommitError(f"cannot commit {gen.name}: " + "; ".join(problems))
        manifest = Manifest(
            step=gen.step,
            created_at=_now(),
            world_size=gen.world_size,
            files=tuple(sorted(files, key=lambda entry: entry.name)),
            metadata=gen.metadata,
        )
        raw = manifest.encode()
        self._backend.put_small(f"{gen.name}/{MANIFEST}", raw)
        marker = CommitMarker.for_manifest(gen.step, raw)
        self._backend.put_small(f"{gen.name}/{COMMIT}", marker.encode())
        hinted = self.latest_hint()
        if hinted is None or hinted <= gen.step:
            self._backend.put_small(LATEST, encode_latest(gen.step))
        gen.seconds = time.monotonic() - gen._started
        self._writing.discard(gen.step)
        try:
            self._prune(fresh=gen.step)
        except Exception as exc:  # a failed clean-up must not undo a good commit
            log.warning("forewarn: checkpoint retention failed in %s: %s", self.url, exc)
        return Generation(self, manifest)

    # -- reading -------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Every generation directory's step, committed or not, ascending."""
        found = (parse_generation_name(name) for name in self._backend.list_children(""))
        return sorted(step for step in found if step is not None)

    def latest_hint(self) -> int | None:
        """The step the LATEST hint names (a hint: `latest()` does not trust it)."""
        raw = self._backend.get_small(LATEST)
        return None if raw is None else decode_latest(raw)

    def latest(self, *, verify: VerifyPolicy | None = None) -> Generation | None:
        """The newest generation that verifies, or None; broken ones are logged and skipped."""
        policy = self._policy(verify)
        for step in reversed(self.steps()):
            generation, problems = self._check(step, checksums=policy == "checksums")
            if generation is not None and not problems:
                return generation
            if problems and problems != ["not committed"]:
                log.warning(
                    "forewarn: checkpoint %s in %s does not verify, trying an older one: %s",
                    generation_name(step),
                    self.url,
                    "; ".join(problems),
                )
        return None

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
            generation = self._manifest_of(step)[0]
            if generation is not None:
                found.append(generation)
        return found

    def verify(self, generation: Generation | int, *, checksums: bool = True) -> Verification:
        """Check a generation's marker, manifest, files and sizes (and checksums)."""
        step = generation.step if isinstance(generation, Generation) else generation
        _found, problems = self._check(step, checksums=checksums)
        return Verification(step=step, checksums=checksums, problems=tuple(problems))

    def _policy(self, verify: str | None) -> VerifyPolicy:
        policy = verify or self.verify_policy
        if policy not in _POLICIES:
            raise StoreConfigError(f"verify must be 'sizes' or 'checksums', got {policy!r}")
        return policy  # type: ignore[return-value]

    def _load(self, step: int) -> Generation:
        generation, problems = self._manifest_of(step)
        if generation is None:
            raise CorruptGenerationError(generation_name(step), problems)
        return generation

    def _manifest_of(self, step: int) -> tuple[Generation | None, list[str]]:
        name = generation_name(step)
        raw_marker = self._backend.get_small(f"{name}/{COMMIT}")
        if raw_marker is None:
            return None, ["not committed"]
        try:
            marker = CommitMarker.decode(raw_marker)
        except ValueError as exc:
            return None, [f"commit marker: {exc}"]
        raw = self._backend.get_small(f"{name}/{MANIFEST}")
        if raw is None:
            return None, ["manifest is missing"]
        hasher = new_hash(marker.manifest_checksum)
        hasher.update(raw)
        if f"{hasher.name}:{hasher.hexdigest()}" != marker.manifest_checksum:
            return None, ["manifest does not match the checksum in the commit marker"]
        try:
            manifest = Manifest.decode(raw)
        except ValueError as exc:
            return None, [f"manifest: {exc}"]
        if manifest.step != step or marker.step != step:
            return None, [f"manifest is for step {manifest.step}, marker for step {marker.step}"]
        return Generation(self, manifest), []

    def _check(self, step: int, *, checksums: bool) -> tuple[Generation | None, list[str]]:
        generation, problems = self._manifest_of(step)
        if generation is None:
            return None, problems
        sizes = self._backend.list_sizes(generation.name)
        for entry in generation.manifest.files:
            size = sizes.get(entry.name)
            if size is None:
                problems.append(f"{entry.name} is missing")
            elif size != entry.size:
                problems.append(f"{entry.name} has {size} bytes, the manifest says {entry.size}")
        if checksums and not problems:
            for entry in generation.manifest.files:
                with self._backend.open_read(f"{generation.name}/{entry.name}") as stream:
                    size, checksum = digest_stream(stream, like=entry.checksum)
                if size != entry.size or checksum != entry.checksum:
                    problems.append(f"{entry.name} does not match its checksum")
        return generation, problems

    # -- retention -----------------------------------------------------------------------

    def delete(self, step: int) -> None:
        """Remove one generation (its marker first)."""
        self._backend.delete_tree(generation_name(step))

    def prune(self) -> list[int]:
        """Apply `keep`: once `keep` newer generations verify (sizes), delete every older one
        except the one LATEST names and any this process is still writing. Returns the steps
        deleted."""
        return self._prune(fresh=None)

    def _prune(self, fresh: int | None) -> list[int]:
        # `fresh` was committed by this process a moment ago: it needs no second look.
        if self.keep is None:
            return []
        steps = self.steps()
        kept: list[int] = []
        for step in reversed(steps):
            if step in self._writing:
                continue
            if step != fresh:
                generation, problems = self._check(step, checksums=False)
                if generation is None or problems:
                    continue
            kept.append(step)
            if len(kept) == self.keep:
                break
        if len(kept) < self.keep:
            return []
        floor = min(kept)
        doomed = [s for s in steps if s < floor and s not in self._writing]
        if doomed:
            hinted = self.latest_hint()
            doomed = [s for s in doomed if s != hinted]
        for step in doomed:
            self.delete(step)
        return doomed


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def open_backend(
    url: str | os.PathLike[str], *, durable: bool = True, **s3_options: Any
) -> Backend:
    """The backend a store URL names: a path, `file://`, or `s3://bucket/prefix`."""
    given = {key: value for key, value in s3_options.items() if value is not None}
    text = os.fspath(url)
    if text.startswith("s3://"):
        from .s3 import S3Backend

        return S3Backend(text, **given)
    if given:
        raise StoreConfigError(
            f"options {', '.join(sorted(given))} apply to s3:// stores only, not {text!r}"
        )
    from .local import LocalBackend

    if text.startswith("file://"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreConfigError(f"file URL {text!r} names a host; use file:///absolute/path")
        return LocalBackend(unquote(parts.path), durable=durable)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreConfigError(
            f"store URL scheme {scheme!r} is not supported: use a path, file:// or s3://"
            " (GCS through its S3 interoperability endpoint)"
        )
    if not text:
        raise StoreConfigError("store URL is empty")
    return LocalBackend(text, durable=durable)
