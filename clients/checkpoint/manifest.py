"""What a generation holds on storage: its name, manifest, commit marker and part-manifests.

Layout under the store's root (a directory or an S3 prefix):

    LATEST                          hint: the newest committed generation
    step-000000001200/
        <files>                     the user's files, any depth
        parts/rank-00001.json       one part-manifest per rank (multi-rank saves only)
        MANIFEST.json               names, sizes, checksums, step, time, world size, metadata
        COMMIT                      written last: names the manifest's checksum

A generation counts only once COMMIT exists and names the checksum of the MANIFEST.json
beside it; everything else is a partial write.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from forewarn.protocol import jsontext

from .errors import InvalidNameError
from .hashing import ALGORITHM, check_scheme, digest_bytes

FORMAT = "forewarn-checkpoint/1"
MANIFEST = "MANIFEST.json"
COMMIT = "COMMIT"
LATEST = "LATEST"
PARTS = "parts"
OUTPUTS = "outputs"  # beside the generations: BatchProgress's shards
PREFIX = "step-"
# Twelve digits keep names sorting by step up to a trillion steps; larger steps still parse.
_DIGITS = 12
# Exactly the names generation_name() gives: a thirteenth digit only without a leading zero,
# ASCII digits only (`\d` takes any script's), so no second directory parses as the same step.
_NAME = re.compile(r"^step-([0-9]{12}|[1-9][0-9]{12,})\Z")
_RESERVED = {MANIFEST, COMMIT, PARTS}


def generation_name(step: int) -> str:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    return f"{PREFIX}{step:0{_DIGITS}d}"


def parse_generation_name(name: str) -> int | None:
    """The step a generation directory name stands for, or None for anything else."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def part_name(rank: int) -> str:
    return f"{PARTS}/rank-{rank:05d}.json"


def check_file_name(name: str) -> str:
    """A file name inside a generation: relative, `/`-separated, no `.`/`..`, not reserved."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"file name must be a non-empty string, got {name!r}")
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise InvalidNameError(f"file name {name!r} must be relative and use '/' only")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidNameError(f"file name {name!r} has an empty, '.' or '..' component")
    if parts[0] in _RESERVED:
        raise InvalidNameError(f"file name {name!r} is reserved by the store ({parts[0]})")
    if any(part.startswith(".") and ".tmp" in part for part in parts):
        raise InvalidNameError(f"file name {name!r} looks like one of the store's temp files")
    return name


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    checksum: str
    rank: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "checksum": self.checksum, "rank": self.rank}

    @classmethod
    def from_json(cls, data: Any) -> FileEntry:
        if not isinstance(data, dict):
            raise ValueError(f"file entry is not an object: {data!r}")
        name, size, checksum = data.get("name"), data.get("size"), data.get("checksum")
        rank = data.get("rank", 0)
        if not isinstance(name, str) or not isinstance(checksum, str):
            raise ValueError(f"file entry lacks a name or checksum: {data!r}")
        # One this version cannot check (a store a newer one wrote, a flipped byte) raised
        # ValueError out of latest() when it was hashed: the generation does not verify.
        check_scheme(checksum)
        # Checked when written, but an S3 key may hold `..` or start with `/`: a manifest
        # naming one verified, and get_dir wrote the file outside its destination.
        check_file_name(name)
        if not isinstance(size, int) or size < 0 or not isinstance(rank, int):
            raise ValueError(f"file entry has a bad size or rank: {data!r}")
        return cls(name=name, size=size, checksum=checksum, rank=rank)


@dataclass(frozen=True)
class Manifest:
    step: int
    created_at: str
    world_size: int
    files: tuple[FileEntry, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    algorithm: str = ALGORITHM

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "step": self.step,
            "generation": generation_name(self.step),
            "created_at": self.created_at,
            "world_size": self.world_size,
            "checksum_algorithm": self.algorithm,
            "files": [entry.to_json() for entry in self.files],
            "metadata": self.metadata,
        }
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()

    @classmethod
    def decode(cls, raw: bytes) -> Manifest:
        data = _load_object(raw, "manifest")
        if data.get("format") != FORMAT:
            raise ValueError(f"manifest format is {data.get('format')!r}, expected {FORMAT!r}")
        files = data.get("files")
        if not isinstance(files, list):
            raise ValueError("manifest has no file list")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ValueError("manifest metadata is not an object")
        return cls(
            step=_int_field(data, "step"),
            created_at=str(data.get("created_at", "")),
            world_size=_int_field(data, "world_size"),
            files=tuple(FileEntry.from_json(entry) for entry in files),
            metadata=metadata,
            algorithm=str(data.get("checksum_algorithm", ALGORITHM)),
        )


@dataclass(frozen=True)
class CommitMarker:
    step: int
    manifest_checksum: str

    def encode(self) -> bytes:
        body = {
            "format": FORMAT,
            "step": self.step,
            "manifest": MANIFEST,
            "manifest_checksum": self.manifest_checksum,
        }
        return (json.dumps(body, sort_keys=True) + "\n").encode()

    @classmethod
    def for_manifest(cls, step: int, manifest_bytes: bytes) -> CommitMarker:
        return cls(step=step, manifest_checksum=digest_bytes(manifest_bytes))

    @classmethod
    def decode(cls, raw: bytes) -> CommitMarker:
        data = _load_object(raw, "commit marker")
        checksum = data.get("manifest_checksum")
        if not isinstance(checksum, str) or ":" not in checksum:
            raise ValueError("commit marker names no manifest checksum")
        check_scheme(checksum)
        return cls(step=_int_field(data, "step"), manifest_checksum=checksum)


@dataclass(frozen=True)
class Part:
    """What one rank wrote into a multi-rank generation."""

    step: int
    rank: int
    world_size: int
    files: tuple[FileEntry, ...]
    attempt: str | None = None
    error: str | None = None
    # Ranks meeting through the store: rank 0's fresh random token for this commit, which the
    # other ranks copy into their parts once they have read it (see commit.py).
    token: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "step": self.step,
            "rank": self.rank,
            "world_size": self.world_size,
            "attempt": self.attempt,
            "error": self.error,
            "token": self.token,
            "files": [entry.to_json() for entry in self.files],
        }

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: Any) -> Part:
        if not isinstance(data, dict):
            raise ValueError("part-manifest is not an object")
        files = data.get("files")
        if not isinstance(files, list):
            raise ValueError("part-manifest has no file list")
        attempt, error, token = data.get("attempt"), data.get("error"), data.get("token")
        return cls(
            step=_int_field(data, "step"),
            rank=_int_field(data, "rank"),
            world_size=_int_field(data, "world_size"),
            files=tuple(FileEntry.from_json(entry) for entry in files),
            attempt=attempt if isinstance(attempt, str) else None,
            error=error if isinstance(error, str) else None,
            token=token if isinstance(token, str) else None,
        )

    @classmethod
    def decode(cls, raw: bytes) -> Part:
        return cls.from_json(_load_object(raw, "part-manifest"))


def encode_latest(step: int) -> bytes:
    return (json.dumps({"generation": generation_name(step), "step": step}) + "\n").encode()


def decode_latest(raw: bytes) -> int | None:
    try:
        data = json.loads(raw)
        step = data.get("step") if isinstance(data, dict) else None
    except (ValueError, RecursionError):  # as _load_object
        return None
    return step if isinstance(step, int) and step >= 0 else None


def _load_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = jsontext.loads(raw)
    # RecursionError: nested a few thousand deep; escaping, it made latest() raise instead of
    # passing over the generation. Said in words: Python's own named its recursion limit.
    except RecursionError:
        raise ValueError(f"{what} is not JSON: nested too deeply") from None
    # A key twice (which one counts is the reader's guess) and a number past Python's digits
    # (whose own words were "use sys.set_int_max_str_digits()"): JSON, but not what we wrote.
    except (jsontext.DuplicateKeyError, jsontext.LongNumberError) as exc:
        raise ValueError(f"{what} refused: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


def _int_field(data: dict[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"field {key!r} is not a non-negative integer: {value!r}")
    return value
