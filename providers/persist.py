"""The one atomic file writer: the agent's state file and the watchers' own small files in the
state directory. A crash at any moment leaves either the old contents or the new, never a
torn file, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """Replace `path` with `data` (text is written as UTF-8) with permissions `mode`."""
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(handle, mode)
            view = memoryview(payload)
            while view:  # os.write may write less than asked (a full disk, a signal)
                view = view[os.write(handle, view) :]
            os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash only once the directory is synced
    finally:
        os.close(directory)


__all__ = ["write_atomically"]
