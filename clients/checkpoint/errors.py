"""The errors a checkpoint store raises; all derive from `CheckpointError`."""

from __future__ import annotations

import functools
from concurrent.futures import CancelledError
from typing import Any

from forewarn.protocol.errors import ForewarnError


class CheckpointError(ForewarnError):
    """Base of every error the checkpoint store raises."""


class StoreConfigError(CheckpointError, ValueError):
    """A store URL, option or environment variable is not usable; the message names it."""


class StoreNotFoundError(CheckpointError, FileNotFoundError):
    """The store's S3 bucket does not exist; the message names the bucket and the prefix
    (botocore's `NoSuchBucket` named neither). Or a local store's directory is behind a
    symbolic link whose target does not exist (a volume not mounted): the message names the
    link and its target."""


class StorageError(CheckpointError, OSError):
    """A request to the store's storage failed (S3: a timeout, no connection, no
    credentials, a refusal, after the request's attempts): the message names the store
    (`.store`), what went wrong in words (`.what`), the `S3Options` fields that change it
    (`.options`), then the storage client's own text (`.detail`); that client's error
    (botocore's) is its `__cause__`. An `OSError` too, as a local store's failures are.
    `.response` is botocore's error response when the service answered one, else None."""

    def __init__(
        self,
        store: str,
        what: str,
        detail: str,
        *,
        options: tuple[str, ...] = (),
        also: str = "",
        response: dict[str, object] | None = None,
    ) -> None:
        self.store = store
        self.what = what
        self.detail = detail
        self.options = options
        self.also = also
        self.response = response
        named = ", ".join(options) + (f"; {also}" if also else "")
        named = f" (S3Options {named})" if options else ""
        super().__init__(f"{store}: {what}{named}: {detail}")

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    # DCP gathers a rank's exception to the coordinator by pickling it: rebuilt from its
    # message alone it raised a TypeError there, out of DCP's collective on rank 0 only, and
    # the other rank waited in it for good.
    def __reduce__(self) -> tuple[Any, ...]:
        rebuild = functools.partial(
            StorageError, options=self.options, also=self.also, response=self.response
        )
        return (rebuild, (self.store, self.what, self.detail))


class InvalidNameError(CheckpointError, ValueError):
    """A file name inside a generation is empty, absolute, escapes it, or is reserved."""


class GenerationExistsError(CheckpointError):
    """A committed generation already holds this step; generations are immutable."""


class GenerationNotFoundError(CheckpointError, LookupError):
    """No committed generation holds this step."""


class GenerationRemovedError(GenerationNotFoundError, FileNotFoundError):
    """A `Generation` held by a reader was deleted since (retention, after another process
    committed a newer one): call `store.latest()` again."""


class CorruptGenerationError(CheckpointError):
    """A generation's marker, manifest or files do not verify."""

    def __init__(self, name: str, problems: list[str]) -> None:
        self.name = name
        self.problems = list(problems)
        super().__init__(f"{name} does not verify: " + "; ".join(self.problems))

    def __reduce__(self) -> tuple[Any, ...]:  # rebuilt on another rank (`StorageError`)
        return (CorruptGenerationError, (self.name, self.problems))


class RankError(CheckpointError):
    """A rank's exception inside a DCP save or load that could not cross to the other ranks as
    it is, in its place: DCP gathers each rank's exception by pickling it, and one whose
    pickle could not be made, did not rebuild it, or was too large left a rank waiting in
    DCP's collective for good. Also what the other ranks raise when one rank's step of
    `load_dcp` before DCP's own (the check of a local generation's files, the copy of an S3
    one) failed; that rank raises its own exception. Names the rank (`.rank`), the original's
    class (`.kind`, module-qualified) and its message (`.text`); on the rank that raised it,
    the original is its `__cause__`, with its traceback."""

    def __init__(self, rank: int, kind: str, text: str) -> None:
        self.rank = rank
        self.kind = kind
        self.text = text
        super().__init__(f"rank {rank}: {kind}: {text}")

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses ranks: rebuilt from its fields
        return (RankError, (self.rank, self.kind, self.text))


class CommitError(CheckpointError):
    """A generation could not be committed (a rank failed, names collide, a write failed)."""


class CommitTimeout(CommitError, TimeoutError):
    """Waiting for the other ranks' parts, or for rank 0's commit, took too long; or
    `DcpAsyncSave.commit(timeout)` ran out while DCP was still writing (the save stays in
    flight)."""


class ExtraMissingError(CheckpointError, ModuleNotFoundError):
    """A helper needs a package that is not installed (torch for the torch helpers); the
    message names the helper and the pip command that adds forewarn's extra for it. A
    `ModuleNotFoundError` still, for code that catches that."""


class WriteCancelled(CheckpointError, CancelledError):
    """A file being written was given up by its `stop` event (a background save cancelled for
    the final one). A `concurrent.futures.CancelledError` too: botocore passes that through
    from a request body instead of retrying the request as a broken connection."""
