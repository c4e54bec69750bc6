"""How a store reaches its storage: the S3 options as one object, and the URL → backend map.

`S3Options` holds everything that applies to `s3://` stores only (endpoint, credentials,
part size, ...); a store built from a URL opens its backend from it. A store can also be
handed a ready `Backend` instead (the seam tests and other object stores use), as an httpx
client takes a transport.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import unquote, urlsplit

from .backend import Backend
from .errors import StoreConfigError


@dataclass(frozen=True)
class S3Options:
    """Options of an `s3://` store; `None` means boto3's own default or environment."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    addressing_style: str | None = None
    part_size: int | None = None
    concurrency: int | None = None
    upload_checksums: bool | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    attempts: int | None = None

    def given(self) -> dict[str, Any]:
        """The options that were set, by name."""
        return {
            item.name: getattr(self, item.name)
            for item in fields(self)
            if getattr(self, item.name) is not None
        }


def open_backend(
    url: str | os.PathLike[str], *, durable: bool = True, s3: S3Options | None = None
) -> Backend:
    """The backend a store URL names: a path, `file://`, or `s3://bucket/prefix`."""
    given = s3.given() if s3 is not None else {}
    text = os.fspath(url)
    if isinstance(url, str) and text != text.strip():
        # `" /data/ckpt"` opened `./ /data/ckpt` on the machine's own disk, and a line read
        # unstripped (`"/data/ckpt\n"`) another directory than the next job's: saved where no
        # resume looks. A path object is taken as it is (a name that really has such space).
        raise StoreConfigError(
            f"store URL {text!r} has white space at its start or end, which would name "
            "another directory than the one meant: remove it (a name that really has it can "
            "be given as a pathlib.Path)"
        )
    # URL schemes are case-insensitive: `S3://bucket/prefix` was refused as an unknown scheme.
    head, sep, _rest = text.partition("://")
    scheme = head.lower() if sep else ""
    if not sep:
        # A slash short, read as a relative path: `s3:/bucket/run` saved every checkpoint
        # into `./s3:/bucket/run` on the machine's own disk, gone with the machine.
        word, colon, after = text.partition(":")
        if colon and word.lower() == "s3":
            raise StoreConfigError(
                f"store URL {text!r} is not an S3 URL: did you mean 's3://{after.lstrip('/')}'?"
            )
        if colon and word.lower() == "file":
            if not after.startswith("/"):
                raise StoreConfigError(f"file URL {text!r} names no absolute path")
            text, scheme = f"file://{after}", "file"  # RFC 8089's `file:/path`
    if scheme == "s3":
        from .s3 import S3Backend

        return S3Backend(f"s3://{_rest}", **given)
    if given:
        raise StoreConfigError(
            f"S3 options {', '.join(sorted(given))} apply to s3:// stores only, not {text!r}"
        )
    from .local import LocalBackend

    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreConfigError(f"file URL {text!r} names a host; use file:///absolute/path")
        if "#" in text or "?" in text:
            # The parser drops a fragment or query: `file:///ckpt/run#1` and `.../run#2`
            # both opened /ckpt/run, and the second run resumed from the first's checkpoints.
            raise StoreConfigError(
                f"file URL {text!r} has a '#' or '?', which a URL ends the path at: write "
                "them as %23 and %3F, or give the path itself"
            )
        return LocalBackend(unquote(parts.path), durable=durable)
    if sep:
        raise StoreConfigError(
            f"store URL scheme {head!r} is not supported: use a path, file:// or s3://"
            " (GCS through its S3 interoperability endpoint)"
        )
    if not text:
        raise StoreConfigError("store URL is empty")
    return LocalBackend(text, durable=durable)
