"""The commit protocol: when a generation counts, and how the ranks of a save agree on it.

Rank 0 collects every rank's part-manifest, then writes `MANIFEST.json`, the `COMMIT` marker
naming the manifest's checksum, and the `LATEST` hint, in that order. The parts travel
through torch.distributed collectives when a process group is initialised, else through the
store itself (rank 0 publishes a fresh token and polls for the parts that carry it, the
others copy the token into their parts and poll for the marker).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from .backend import Backend
from .errors import CommitError, CommitTimeout, CorruptGenerationError, GenerationExistsError
from .hashing import new_hash
from .manifest import (
    COMMIT,
    LATEST,
    MANIFEST,
    PARTS,
    CommitMarker,
    FileEntry,
    Manifest,
    Part,
    decode_latest,
    encode_latest,
    generation_name,
    part_name,
)
from .ranks import Ranks, poll

log = logging.getLogger("forewarn.checkpoint")

# How old a temp file of the LATEST hint must be before a commit removes it: writing the hint
# (a few bytes and an fsync) takes milliseconds, so one this old has no live writer.
STALE_TEMP_AGE = 600.0


@dataclass(frozen=True)
class CommitRequest:
    """What one rank hands to the protocol when its block ends."""

    step: int
    ranks: Ranks
    attempt: str | None
    metadata: dict[str, Any]
    part: Part

    @property
    def name(self) -> str:
        return generation_name(self.step)


def read_manifest(backend: Backend, step: int) -> tuple[Manifest | None, list[str]]:
    """The manifest of a committed generation, when its marker names the manifest's exact
    checksum; else None and what is wrong (`["not committed"]` when there is no marker)."""
    name = generation_name(step)
    raw_marker = backend.get_small(f"{name}/{COMMIT}")
    if raw_marker is None:
        return None, ["not committed"]
    try:
        marker = CommitMarker.decode(raw_marker)
    except ValueError as exc:
        return None, [f"commit marker: {exc}"]
    raw = backend.get_small(f"{name}/{MANIFEST}")
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
    return manifest, []


def read_latest_hint(backend: Backend) -> int | None:
    raw = backend.get_small(LATEST)
    return None if raw is None else decode_latest(raw)


class CommitProtocol:
    """Commits one generation across its ranks; every rank calls `commit` or `abort`."""

    def __init__(
        self,
        backend: Backend,
        *,
        timeout: float,
        poll_interval: float,
        ends_by: float | None = None,
    ) -> None:
        self.backend = backend
        self.timeout = timeout
        self.poll_interval = poll_interval
        # A save with a deadline (time.monotonic()): the ranks' wait for each other through
        # the store ends there too, not `timeout` (commit_timeout, 600 s) later.
        self.ends_by = ends_by
        # Generations committed whose marker's write reported an error though the marker is
        # in place, by name, with that error: taken by the save that committed each one.
        self.unconfirmed: dict[str, str] = {}

    def commit(self, request: CommitRequest) -> Manifest:
        """Make this rank's files durable, hand its part in, and return the committed
        manifest once rank 0 committed it (or raise `CommitError`)."""
        ranks = request.ranks
        if ranks.world_size == 1:
            try:
                self.backend.make_durable(request.name)
                return self._finish(request, [request.part])
            except BaseException as exc:
                # A commit that fails (a disk that filled up after the files, at the manifest
                # or the marker) would otherwise leave the files of the whole save behind, and
                # on a full disk every later save would fail for want of that space.
                log.warning(
                    "forewarn: checkpoint %s was not committed in %s (%s: %s); removing its files",
                    request.name,
                    self.backend.url,
                    type(exc).__name__,
                    exc,
                )
                try:
                    self._discard(request.name)
                except Exception as cleanup:  # the commit's own failure is the one to raise
                    log.warning("forewarn: could not remove %s: %s", request.name, cleanup)
                raise
        if ranks.dist is not None:
            try:
                self.backend.make_durable(request.name)
                key = f"{request.name}/{part_name(ranks.rank)}"
                self.backend.put_small(key, request.part.encode())
            except Exception as exc:
                # Handed in as a failed part all the same: the other ranks are already in
                # the commit's collectives, and waited there for the process group's timeout
                # (30 min) for a rank whose storage stopped answering.
                failed = replace(request.part, error=f"{type(exc).__name__}: {exc}")
                with contextlib.suppress(CommitError):
                    self._commit_collective(replace(request, part=failed))
                raise
            return self._commit_collective(request)
        try:
            self.backend.make_durable(request.name)
        except Exception as exc:
            # Handed in as a failed part all the same, as through the collectives: raised
            # before it, the other ranks polled for this rank's part until commit_timeout.
            failed = replace(request.part, error=f"{type(exc).__name__}: {exc}")
            try:
                self.abort(replace(request, part=failed))
            except Exception as cannot:  # the storage's own failure is the one to raise
                log.warning(
                    "forewarn: %s: rank %d could not tell the other ranks it failed: %s",
                    request.name,
                    ranks.rank,
                    cannot,
                )
            raise
        if ranks.rank == 0:
            return self._lead(request)
        self._follow(request)
        return self._load(request.step)

    def _time_left(self) -> float:
        """How long the ranks may wait for each other now: `timeout`, or less in a save
        with a deadline (never below one poll)."""
        if self.ends_by is None:
            return self.timeout
        left = self.ends_by - time.monotonic()
        return max(min(self.timeout, left), self.poll_interval)

    def abort(self, request: CommitRequest) -> None:
        """Give up this rank's part; the other ranks learn why (and raise)."""
        ranks = request.ranks
        if ranks.world_size == 1:
            try:
                self._discard(request.name)
            except Exception as cleanup:  # the reason for the abort is the error to see
                log.warning("forewarn: could not remove %s: %s", request.name, cleanup)
            return
        if ranks.dist is not None:
            # The other ranks are waiting in the same collectives: take part, then fail.
            try:
                ranks.all_gather(request.part.to_json())
                if ranks.rank == 0:
                    ranks.broadcast_from_zero(f"rank 0 aborted: {request.part.error}")
                else:
                    ranks.broadcast_from_zero(None)
            except Exception as exc:
                # A rank lost meanwhile (gloo fails the collective at once): raising its error
                # here would hide the exception that made this rank abort.
                log.warning(
                    "forewarn: checkpoint %s aborted; the other ranks could not be told: %s: %s",
                    request.name,
                    type(exc).__name__,
                    exc,
                )
            return
        # Through the store, too, the failure is handed in as this commit's part (a part of
        # no commit would be ignored): the others then fail at once instead of timing out.
        # Raising here would hide the exception that made this rank abort.
        try:
            if ranks.rank == 0:
                self._lead(request)
            else:
                self._follow(request)
        except CommitTimeout as exc:
            log.warning("forewarn: checkpoint %s aborted: %s", request.name, exc)
        except CommitError:
            pass

    def _discard(self, name: str) -> None:
        """Remove a single-rank save that did not commit, unless another writer of the same
        step (a stale job on the same store) committed the generation meanwhile: that one
        is not this writer's to delete."""
        if self.backend.get_small(f"{name}/{COMMIT}") is not None:
            log.warning(
                "forewarn: %s in %s was committed by another writer; leaving it",
                name,
                self.backend.url,
            )
            return
        self.backend.delete_tree(name)

    def _lead(self, request: CommitRequest) -> Manifest:
        """Rank 0 through the store: publish a fresh token in its part, wait until every other
        rank's part carries it, then commit, or record why not in its part.

        The token is what proves a part is this job's: a rank writes it only after reading it,
        so a part left by a job that died (whose restart count, step and rank may all be the
        same as this one's) never enters the commit."""
        own = replace(request.part, token=uuid.uuid4().hex)
        key = f"{request.name}/{part_name(0)}"
        # Published without this rank's error: the others take a token only from a part that
        # names none (a failed part of a dead job must not end their save), and learn of the
        # failure once their own parts carry the token.
        self.backend.put_small(key, replace(own, error=None).encode())
        try:
            try:
                others = poll(
                    lambda: self._collect_parts(request, own.token),
                    timeout=self._time_left(),
                    interval=self.poll_interval,
                    what=f"every rank's part of {request.name}",
                )
            except CommitTimeout as exc:
                raise CommitTimeout(f"{exc}: {self._missing(request, own.token)}") from None
            return self._finish(request, [own, *others])
        except Exception as exc:
            self.backend.put_small(key, replace(own, error=str(exc)).encode())
            raise

    def _follow(self, request: CommitRequest) -> None:
        """A rank other than 0 through the store: write this rank's part with rank 0's
        current token (again whenever rank 0 publishes a new one), until rank 0 commits or
        says why not under the token this rank's part carries."""
        key = f"{request.name}/{part_name(request.ranks.rank)}"
        carried: list[str | None] = [None]

        def check() -> bool | None:
            if self.backend.get_small(f"{request.name}/{COMMIT}") is not None:
                return True
            zero = self._read_part(request, 0)
            if zero is None or zero.token is None:
                return None
            if zero.error is None:
                if zero.token != carried[0]:
                    self.backend.put_small(key, replace(request.part, token=zero.token).encode())
                    carried[0] = zero.token
            elif zero.token == carried[0]:
                raise CommitError(f"rank 0 did not commit {request.name}: {zero.error}")
            return None

        poll(
            check,
            timeout=self._time_left(),
            interval=self.poll_interval,
            what=f"rank 0 to commit {request.name}",
        )

    def _commit_collective(self, request: CommitRequest) -> Manifest:
        ranks = request.ranks
        try:
            gathered = ranks.all_gather(request.part.to_json())
        except Exception as exc:
            raise CommitError(
                f"{request.name} was not committed: rank {ranks.rank} lost the other ranks "
                f"while handing in its part ({type(exc).__name__}: {exc})"
            ) from exc
        parts = [Part.from_json(item) for item in gathered]
        outcome: str | None = None
        committed: Manifest | None = None
        if ranks.rank == 0:
            try:
                committed = self._finish(request, parts)
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
                ranks.broadcast_from_zero(outcome)
                raise
        try:
            outcome = ranks.broadcast_from_zero(outcome)
        except Exception as exc:
            # A rank died after handing in its part (gloo then fails the broadcast at once).
            # The marker is what counts: rank 0 wrote it before telling the others, so a
            # committed generation is returned, not reported as failed to the loop that is
            # saving for a terminate.
            manifest = committed
            if manifest is None:
                manifest, _problems = read_manifest(self.backend, request.step)
            if manifest is None:
                raise CommitError(
                    f"{request.name} was not committed: rank {ranks.rank} lost rank 0 before "
                    f"it said so ({type(exc).__name__}: {exc})"
                ) from exc
            log.warning(
                "forewarn: %s is committed in %s, but rank %d could not reach every other "
                "rank afterwards: %s: %s",
                request.name,
                self.backend.url,
                ranks.rank,
                type(exc).__name__,
                exc,
            )
            return manifest
        if outcome is not None:
            raise CommitError(f"rank 0 did not commit {request.name}: {outcome}")
        return committed if committed is not None else self._load(request.step)

    def _load(self, step: int) -> Manifest:
        manifest, problems = read_manifest(self.backend, step)
        if manifest is None:
            raise CorruptGenerationError(generation_name(step), problems)
        return manifest

    def _collect_parts(self, request: CommitRequest, token: str | None) -> list[Part] | None:
        # One listing per poll; the parts are read only once all of them are there, and
        # count only once they carry this commit's token (rank 0's own part is not read).
        world = request.ranks.world_size
        if len(self.backend.list_sizes(f"{request.name}/{PARTS}")) < world:
            return None
        parts: list[Part] = []
        for rank in range(1, world):
            part = self._read_part(request, rank)
            if part is None or part.token != token:
                return None
            parts.append(part)
        for rank, part in enumerate(parts, start=1):
            if part.error is not None:
                raise CommitError(f"rank {rank} failed to write {request.name}: {part.error}")
        return parts

    def _missing(self, request: CommitRequest, token: str | None) -> str:
        """Which ranks' parts a timed-out commit lacks, and the usual reason: a save on rank 0
        only, in a job whose RANK and WORLD_SIZE (torchrun's) make it a multi-rank save."""
        world = request.ranks.world_size
        missing = []
        for rank in range(1, world):
            part = self._read_part(request, rank)
            if part is None or part.token != token:
                missing.append(str(rank))
        return (
            f"no part from rank{'s' if len(missing) > 1 else ''} {', '.join(missing)} of "
            f"{world} (every rank calls "
            f"store.save({request.step}); a save by one process alone takes rank=0, "
            "world_size=1)"
        )

    def _read_part(self, request: CommitRequest, rank: int) -> Part | None:
        raw = self.backend.get_small(f"{request.name}/{part_name(rank)}")
        if raw is None:
            return None
        try:
            return Part.decode(raw)
        except ValueError:
            return None  # a part-manifest is put atomically; bad JSON is someone else's

    def _finish(self, request: CommitRequest, parts: list[Part]) -> Manifest:
        """Rank 0: check the parts, write the manifest, the marker, then the hint."""
        world = request.ranks.world_size
        problems: list[str] = []
        seen: dict[str, int] = {}
        files: list[FileEntry] = []
        for expected, part in enumerate(sorted(parts, key=lambda item: item.rank)):
            if part.rank != expected or part.world_size != world or part.step != request.step:
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
        if len(parts) != world:
            problems.append(f"{len(parts)} parts for world size {world}")
        if not problems:
            # Another job's retention on the same store may have deleted this unfinished
            # generation's files: committing the manifest would then report a save that
            # never verifies.
            present = self.backend.sizes_of(request.name, [entry.name for entry in files])
            if COMMIT in present:
                # Another writer of this step (a stale job on the same store) committed it
                # while this one wrote: a second manifest would claim its bytes as ours.
                raise GenerationExistsError(
                    f"{request.name} was committed by another writer in {self.backend.url} "
                    "while this save was being written; generations are immutable"
                )
            for entry in files:
                size = present.get(entry.name)
                if size is None:
                    problems.append(f"{entry.name} is missing from storage")
                elif size != entry.size:
                    problems.append(f"{entry.name} has {size} bytes, written {entry.size}")
        if problems:
            raise CommitError(f"cannot commit {request.name}: " + "; ".join(problems))
        manifest = Manifest(
            step=request.step,
            created_at=_now(),
            world_size=world,
            files=tuple(sorted(files, key=lambda entry: entry.name)),
            metadata=request.metadata,
        )
        raw = manifest.encode()
        self.backend.put_small(f"{request.name}/{MANIFEST}", raw)
        marker = CommitMarker.for_manifest(request.step, raw).encode()
        try:
            self.backend.put_small(f"{request.name}/{COMMIT}", marker)
        except Exception as exc:
            # The marker's rename done and the directory's fsync failed after it (EIO), or an
            # S3 PUT stored and answered an error: it is in place and readers take the
            # generation (latest() returns it). Reported as failed, the job was told its step
            # was not saved while a restart resumed from it, and `last_durable` stayed behind
            # what readers took. What is true is said: committed, and what that is worth on
            # this backend (local: maybe not durable across a crash of the machine).
            if not self._marker_in_place(request.name, marker):
                raise
            self.unconfirmed[request.name] = f"{type(exc).__name__}: {exc}"
            log.warning(
                "forewarn: checkpoint %s is committed in %s and readers take it (its COMMIT "
                "marker is in place), but writing the marker reported %s: %s; %s",
                request.name,
                self.backend.url,
                type(exc).__name__,
                exc,
                self.backend.written_despite_error,
            )
        try:
            self.backend.remove_dead_temps(request.name, [entry.name for entry in files])
        except Exception as exc:  # clean-up of a committed generation, not the commit
            log.warning(
                "forewarn: could not remove dead writers' temp files in %s of %s: %s",
                request.name,
                self.backend.url,
                exc,
            )
        self._move_hint(request.step)
        return manifest

    def _marker_in_place(self, name: str, marker: bytes) -> bool:
        """Whether generation `name`'s COMMIT marker reads back as `marker`."""
        try:
            return self.backend.get_small(f"{name}/{COMMIT}") == marker
        except Exception:
            return False

    def _move_hint(self, step: int) -> None:
        # The generation is committed once its marker is written: LATEST is only a hint
        # (latest() never trusts it), so failing to write it (a full disk, a throttled
        # request) must not report a committed generation as failed, which would make a
        # retry of the same step raise GenerationExistsError. The next commit moves it.
        try:
            hinted = read_latest_hint(self.backend)
            # Back to an older step only when the hinted generation is gone (deleted to roll
            # a run back): the hint otherwise named it until the job saved past its step.
            if (
                hinted is None
                or hinted <= step
                or self.backend.get_small(f"{generation_name(hinted)}/{COMMIT}") is None
            ):
                self.backend.put_small(LATEST, encode_latest(step))
        except Exception as exc:
            log.warning(
                "forewarn: checkpoint %s is committed in %s but the LATEST hint was not "
                "written: %s",
                generation_name(step),
                self.backend.url,
                exc,
            )
        try:
            # A process killed while it wrote the hint left its temp file in the store's root,
            # where nothing else ever removed it.
            self.backend.remove_stale_temps(LATEST, older_than=STALE_TEMP_AGE)
        except Exception as exc:
            log.warning(
                "forewarn: could not remove stale LATEST temp files in %s: %s",
                self.backend.url,
                exc,
            )
        try:
            # Each writer killed in a single-rank save leaves its claim on that step; the
            # step is often never saved again (a final save at an off-schedule step).
            self.backend.remove_stale_claims()
        except Exception as exc:
            log.warning("forewarn: could not remove stale claims in %s: %s", self.backend.url, exc)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
