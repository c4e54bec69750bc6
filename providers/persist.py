"""The one atomic file writer: the agent's state file and the watchers' own small files in the
state directory. A crash at any moment leaves either the old contents or the new, never a
torn file, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from .health import PollHealth

log = logging.getLogger("forewarn.providers")


def write_atomically(
    path: Path, data: bytes | str, *, mode: int = 0o600, sync: bool = True
) -> None:
    """Replace `path` with `data` (text is written as UTF-8) with permissions `mode`. With
    `sync` false nothing is synced: the file survives a kill of the process, not a crash of
    the machine (for a file on a tmpfs, or one that must not wait on a slow disk)."""
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            os.fchmod(handle, mode)
            view = memoryview(payload)
            while view:  # os.write may write less than asked (a full disk, a signal)
                view = view[os.write(handle, view) :]
            if sync:
                os.fsync(handle)
        finally:
            os.close(handle)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    if not sync:
        return
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash only once the directory is synced
    except OSError as error:
        # EINVAL: a file system whose directories have no fsync (CIFS before its no-op one,
        # VirtualBox shared folders), where the rename is all there is (PostgreSQL passes it
        # over too). Raised, every write there was reported failed after replacing the file.
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(directory)


# A write that found no room: the disk full, or the user's quota on it used up.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT)

# Frees space for the write of a file that found no room (`path`, `error`): True when it freed
# some, and the write is worth trying again.
MakeRoom = Callable[[Path, OSError], bool]

# Space held in a directory (the agent's reserve in its state directory), by directory.
_rooms: dict[Path, MakeRoom] = {}
_rooms_lock = threading.Lock()


def hold_room(directory: Path, make_room: MakeRoom) -> None:
    """Have `write_kept` of a file in `directory` call `make_room` when the disk is full."""
    with _rooms_lock:
        _rooms[directory] = make_room


def drop_room(directory: Path) -> None:
    with _rooms_lock:
        _rooms.pop(directory, None)


def write_kept(path: Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """`write_atomically` for a file that must survive a full disk: one whose loss loses a
    notice, or sends one again under a new id (a watcher's memory, the `seq` mark). Written
    on a disk (or quota) with no room, the space held in its directory (`hold_room`) is given
    up for it, and it is written once more. Only state.json used the reserve: on a disk a
    checkpoint had filled, GCP's notices in force were not saved, and a restart raised them
    again under new ids."""
    try:
        write_atomically(path, data, mode=mode)
    except OSError as error:
        with _rooms_lock:
            make_room = _rooms.get(path.parent)
        if error.errno not in NO_ROOM or make_room is None or not make_room(path, error):
            raise
        write_atomically(path, data, mode=mode)


def write_or_report(path: Path, data: bytes | str, health: PollHealth | None) -> bool:
    """`write_atomically` for a watcher's own file: True when written. A failure (a full disk,
    a read-only state directory) is counted in `health` as a `state` error and a standing
    condition, and logged, never raised: a watcher must go on publishing notices without its
    file. The caller keeps what it could not write and calls again at its next write."""
    condition = f"state {path.name}"
    try:
        write_kept(path, data)
    except OSError as error:
        message = f"cannot write {path} ({type(error).__name__}: {error}); retrying"
        if health is None:
            log.warning("state: %s", message)
        else:
            health.error("state", message)
            health.condition(condition, message)
        return False
    if health is not None and health.conditions.pop(condition, None) is not None:
        log.info("%s: wrote %s again", health.provider, path)
    return True


# The names `write_atomically` gives its temporary files: mkstemp's, a dot and the file's name,
# a dot, 8 characters of mkstemp's alphabet, and the suffix.
_TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp", re.DOTALL)


def is_leftover(name: str) -> bool:
    """Whether `name` is one `write_atomically` gives its temporary files."""
    return _TEMPORARY.fullmatch(name) is not None


def remove_leftovers(directory: Path) -> list[str]:
    """Remove the temporary files that writes cut short by a kill (SIGKILL, a power loss
    between the write and the rename) left in `directory`; the names removed. Only regular
    files of this uid, never through a link. Call it only while holding the directory (the
    agent's lock on it): another writer's file would be taken from under it."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError as error:
        log.warning("cannot list %s for leftover temporary files: %s", directory, error)
        return removed
    for entry in entries:
        if not is_leftover(entry.name):
            continue
        try:
            found = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
                continue
            os.unlink(entry.path)
        except OSError as error:
            log.warning("cannot remove the leftover %s: %s", entry.path, error)
            continue
        removed.append(entry.name)
    return removed


# A watcher's own file holds a few dozen ids or notices: anything larger is not one of ours.
MAX_STATE_BYTES = 64 * 1024


def read_small(path: Path, limit: int = MAX_STATE_BYTES) -> bytes:
    """The regular file `path`, not through a link and without blocking (a FIFO left in its
    place hung the watcher's start for good), `limit` bytes at most: OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes")
    return b"".join(chunks)


def read_state_object(path: Path, provider: str) -> dict[str, object] | None:
    """The JSON object a watcher saved in `path`; None when there is none. A file that cannot
    be read, is no regular file (a link, a FIFO), is larger than MAX_STATE_BYTES, is not JSON
    or not an object is logged and taken as none: a notice raised once more or once less is a
    smaller harm than a watcher that cannot start."""
    try:
        payload = json.loads(read_small(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as error:
        log.warning("%s: ignoring unreadable %s (%s)", provider, path, error)
        return None
    if not isinstance(payload, dict):
        log.warning("%s: ignoring %s: not a JSON object", provider, path)
        return None
    return payload


__all__ = [
    "MAX_STATE_BYTES",
    "NO_ROOM",
    "MakeRoom",
    "drop_room",
    "hold_room",
    "is_leftover",
    "read_small",
    "read_state_object",
    "remove_leftovers",
    "write_atomically",
    "write_kept",
    "write_or_report",
]
