"""A local directory filled with a generation's files at once (`Generation.get_dir`).

The files are copied into a hidden stage inside the directory (the same filesystem, also when
the directory is a mount point) and verified there; only then are they swapped in, by renames
in phases that a hidden name records, so that a copy killed at any moment leaves something the
next copy into the directory finishes or discards:

    .forewarn-get-T   being copied                        left: discarded (the old files stay)
    .forewarn-new-T   copied and verified; the directory's
                      entries are being moved into ...    left: finished (the rest go aside)
    .forewarn-old-T   ... here                            left alone: deleted
    .forewarn-in-T    every old entry is aside; the new
                      ones are being moved in             left: finished (the rest come in)
    .forewarn-what-T  what the copy is (store, generation, prefix): a copy finishing a dead
                      one's swap of the same files has them in place, and is done

The directory's extended attribute `user.forewarn.got` says what the last copy put in place
(what it is, and a digest of each file's path, size and mtime): the same copy run again (a
restart script's `get` at each start) finds it there, and a copy of another generation
replaces it while the directory holds just that copy, unchanged. It is written once the new
files are in, before the hidden entries go, so a copy killed before it is finished, and
recorded, by the next. An attribute, not a file:
nothing but the generation's files is left in the directory, for a loader that lists it.
Where the filesystem has no user attributes (/dev/shm before Linux 6.6, NFS before 4.2), or
this user may not set them (EPERM: a sticky directory of another user's), the
record is a file beside the directory, `.NAME.forewarn-got` in its parent: refused as not
empty there, the restart script's second `get` never started the job again. Where the parent
cannot keep it (read-only: a container's root filesystem holding the mount point) or would not
keep it as long as the directory (a mount point's parent is another filesystem, such as an
init container's own), it is a hidden file inside the directory, `.forewarn-got` (refused as
not empty before, the job never started again).

Removing the old entries first and then moving the new ones in left, when killed between,
part of either checkpoint and a directory the next copy refused as not empty.

A copy holds an exclusive `flock` on the directory while it works: another copy meanwhile
waits for it up to `wait` seconds (local ranks of one node each running a restart script's
`get` into one directory: the first copies, the others then find its copy in place) and is
then refused; whatever hidden entries a copy finds while it holds the lock are a dead copy's.
On a filesystem without `flock` (said once per directory, as a warning) the name tells instead: T is
`<pid>-<start><hex>`, the process's start time making a later process given the pid no
copy's; a copy finding another live one's entries waits for them to go as for the lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

_LOST_AND_FOUND = "lost+found"
_RECORD = "user.forewarn.got"
_RECORD_BESIDE = ".forewarn-got"
# The record inside the directory, where the one beside it would not live as long as it.
_RECORD_INSIDE = ".forewarn-got"
_RECORD_INSIDE_TEMP = re.compile(re.escape(_RECORD_INSIDE) + r"\.(?P<pid>\d+)-[0-9a-f]+")
# What getxattr and setxattr say where the filesystem keeps no user attributes.
_NO_ATTRIBUTES = frozenset({errno.ENOTSUP, errno.EOPNOTSUPP})
# What setxattr says where this user may not set them (EPERM: a sticky directory of another
# user's, as `mkdir -m 1777` by a root init container makes): kept as files there too.
_NOT_OURS = frozenset({errno.EPERM, errno.EACCES})
_OURS = re.compile(
    r"\.forewarn-(?P<phase>get|new|old|in|what)-(?P<token>(?P<pid>\d+)-(?P<stamp>[0-9a-f]*?)[0-9a-f]{1,8})"
)
log = logging.getLogger("forewarn.checkpoint")
# How far an entry's time (the file server's clock, on NFS) and a process's start (boot time
# in whole seconds, plus its ticks) may disagree: a process that started later than this
# after an entry last changed did not make it.
_CLOCK_SLACK = 5.0
# The directories this process said have no working locks (said once each).
_SAID_UNLOCKED: set[str] = set()
_SAID_LOCK = threading.Lock()


class Destination:
    """One copy into `directory` (which exists): `with Destination(d) as dest:` takes the
    lock and finishes a dead copy's swap; `held()`, `stage()`, `swap_in(token)`.

    A copy under way into the directory is waited for up to `wait` seconds (0: refused at
    once); `waiting` is told, once, what is waited for. A directory removed meanwhile (by
    the copy waited for, which made it and failed) is made again."""

    def __init__(
        self,
        directory: Path,
        *,
        wait: float = 0.0,
        waiting: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory
        self.wait = wait
        self.waiting = waiting
        self._fd: int | None = None
        self._locked = False
        # Whether another copy held the directory when this one came: it may have put just
        # this copy's files in place, for a process now loading them (see get_dir).
        self.waited = False
        # What each dead copy whose swap this one finished said it was (see `stage`).
        self.finished: list[str] = []

    def __enter__(self) -> Destination:
        while True:
            try:
                fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                # Removed since it was made: a failed copy that made it removes it (get_dir).
                self.directory.mkdir(parents=True, exist_ok=True)
                continue
            try:
                self._lock(fd)
                here = _still_named(fd, self.directory)
            except BaseException:
                os.close(fd)
                raise
            if here:
                break
            # The copy this one waited for made the directory, failed and removed it while it
            # held the lock: a stage made in the removed one would fail. Make it anew.
            os.close(fd)
            self.directory.mkdir(parents=True, exist_ok=True)
        self._fd = fd
        try:
            self.recover()
        except BaseException:
            self._release()
            raise
        return self

    def _lock(self, fd: int) -> None:
        """Take the directory's lock, waiting up to `wait` for a copy that holds it."""
        deadline = time.monotonic() + self.wait
        pause = 0.02
        told = False
        unlocked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._locked = True
                return
            except BlockingIOError:
                pass
            except OSError as error:
                # No flock here (NFS without a lock manager: ENOLCK). A copy under way shows
                # by its entries' pid: the second rank's `get` copied beside the first, ended
                # first, and the first then swapped its copy in under the rank loading it.
                if not unlocked and _first_said(self.directory):
                    log.warning(
                        "forewarn: checkpoint: %s has no working locks (flock: %s): a copy "
                        "into it under way is known only by its pid, and copies started at "
                        "the same moment are not kept apart; run one `get` per directory",
                        self.directory,
                        error.strerror or error,
                    )
                unlocked = True
                if not self._copies_under_way():
                    return
            under_way = f"another copy into {self.directory} is under way{self._holder()}"
            left = deadline - time.monotonic()
            if left <= 0:
                # Refused at once before: ranks of one node restoring together each ran the
                # restart script's `get`, and all but the first exited 2.
                after = f", still under way after {self.wait:g}s" if self.wait > 0 else ""
                raise BlockingIOError(
                    errno.EWOULDBLOCK,
                    f"{under_way}{after} (a second `forewarn checkpoint get` or get_dir into "
                    "the same directory); wait for it to end",
                    str(self.directory),
                )
            self.waited = True
            if not told and self.waiting is not None:
                self.waiting(f"{under_way}; waiting up to {self.wait:g}s for it to end")
                told = True
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)

    def _copies_under_way(self) -> bool:
        """Whether the directory holds a live process's copy entries (another's than this
        process's): known by their pid where there is no lock."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return False
        for name in names:
            match = _OURS.fullmatch(name)
            if (
                match is not None
                and int(match["pid"]) != os.getpid()
                and _made_by_alive(match, self.directory / name)
            ):
                return True
        return False

    def _holder(self) -> str:
        """' (pid P)' of the copy under way, as its stage's name says; '' when none shows."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return ""
        pids = sorted({match["pid"] for match in map(_OURS.fullmatch, names) if match is not None})
        return f" (pid {', '.join(pids)})" if pids else ""

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # lets go of the flock
            self._fd = None

    def held(self) -> list[str]:
        """What the directory holds, besides the hidden entries of copies and, at a mount
        point's root, `lost+found`: a freshly formatted volume (`mkfs.ext4`) holds it, fsck
        needs it, and a restore into the volume was refused as not empty (`--replace`
        deleted it)."""
        names = [name for name in os.listdir(self.directory) if not _ours(name)]
        if _LOST_AND_FOUND in names and os.path.ismount(self.directory):
            names.remove(_LOST_AND_FOUND)
        return names

    def stage(self, what: str = "") -> tuple[str, Path]:
        """A new, empty stage to copy into, and its token for `swap_in`; `what` the copy is
        is kept beside it until its swap ends (for `finished`)."""
        token = _token()
        path = self._path("get", token)
        path.mkdir()
        if what:
            try:
                self._path("what", token).write_text(what, encoding="utf-8")
            except BaseException:
                self.discard(token)  # (a full disk): nothing of this copy stays behind
                raise
        return token, path

    def discard(self, token: str) -> None:
        """A copy that failed: its stage goes, the directory stays as it was."""
        shutil.rmtree(self._path("get", token), ignore_errors=True)
        self._path("what", token).unlink(missing_ok=True)

    def copied(self) -> str | None:
        """What the last copy into the directory was (`stage`'s `what`) when the directory
        holds just the files it put in place, each of the size and mtime it had then; None
        otherwise (no record, or a file added, changed or removed since: a job's or a
        person's, which a copy must not replace unasked)."""
        try:
            record = json.loads(self._read_record())
            what, digest = record["what"], record["files"]
            if not isinstance(what, str) or not isinstance(digest, str):
                return None
            files = self._files()
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None  # (RecursionError: JSON nested past the parser's depth)
        return what if files is not None and _digest(files) == digest else None

    def record(self, what: str) -> None:
        """Note what the copy just swapped in is (see `copied`). Not written (no user
        attributes here, a full disk): the next copy into the directory is refused as it was
        before these records."""
        try:
            files = self._files()
            if files is not None:
                text = json.dumps({"what": what, "files": _digest(files)})
                self._write_record(text.encode())
        except OSError:
            pass

    def _forget(self) -> None:
        try:
            os.removexattr(self.directory, _RECORD)
        except OSError as error:
            if error.errno not in _NO_ATTRIBUTES | _NOT_OURS | {errno.ENODATA}:
                return
        # (Also where the attribute was absent: a record kept as a file, see _write_record.)
        with contextlib.suppress(OSError):
            self._inside().unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # (a read-only parent holds none)
            self._beside().unlink(missing_ok=True)

    def _read_record(self) -> bytes:
        try:
            return os.getxattr(self.directory, _RECORD)
        except OSError as error:
            if error.errno not in _NO_ATTRIBUTES | {errno.ENODATA}:
                raise
        try:
            return self._inside().read_bytes()
        except FileNotFoundError:
            return self._beside().read_bytes()

    def _write_record(self, raw: bytes) -> None:
        try:
            os.setxattr(self.directory, _RECORD, raw)
            return
        except OSError as error:
            if error.errno not in _NO_ATTRIBUTES | _NOT_OURS:
                raise
        try:
            if os.path.ismount(self.directory.resolve()):
                raise OSError(errno.EXDEV, "a mount point's parent is another filesystem")
            _write_whole(self._beside(), raw)
        except OSError:
            # A parent that cannot keep it (a read-only root filesystem holding the mount
            # point an init container made), or a mount point's, on another filesystem that
            # may not live as long as the directory (the init container's own, new at its
            # next start): kept nowhere, the restart script's next `get` was refused the
            # directory as not empty, and a rank that waited for another's copy with
            # `--replace` copied again under the rank loading it. Inside the directory it
            # lives as long as the files it speaks for, and moves with them.
            _write_whole(self._inside(), raw)
        else:
            self._inside().unlink(missing_ok=True)

    def _beside(self) -> Path:
        """The record's file where the directory's filesystem has no user attributes: in its
        parent, named for it as its real path says (a symlink to it finds the same)."""
        real = self.directory.resolve()
        if real.parent == real:
            raise OSError(errno.ENOTSUP, "no record beside the root directory")
        return real.parent / f".{real.name}{_RECORD_BESIDE}"

    def _inside(self) -> Path:
        """The record's file where neither the directory's attributes nor its parent keep it:
        hidden in the directory (not one of the files a copy puts there)."""
        return self.directory / _RECORD_INSIDE

    def _files(self) -> dict[str, tuple[int, int]] | None:
        """Each regular file the directory holds (its hidden entries aside), by its path in
        it: (size, mtime_ns); None when it holds anything else (a link, a FIFO)."""
        found: dict[str, tuple[int, int]] = {}
        pending = [(self.directory / name, name) for name in self.held()]
        while pending:
            path, relative = pending.pop()
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                pending.extend((path / name, f"{relative}/{name}") for name in os.listdir(path))
            elif stat.S_ISREG(info.st_mode):
                found[relative] = (info.st_size, info.st_mtime_ns)
            else:
                return None
        return found

    def swap_in(self, token: str) -> None:
        """Put the stage's entries in place of what the directory holds."""
        # What the directory held is going: its record must not speak for the new files (a
        # swap killed midway leaves no record until the next copy finishes it).
        self._forget()
        what = self._what(token)
        try:
            self._path("old", token).mkdir(exist_ok=True)
            os.rename(self._path("get", token), self._path("new", token))  # no way back now
        except BaseException:
            # (ENOSPC for the directory's new entry): the copy is given up, and its stage
            # (a whole generation's bytes) goes with it rather than wait for the next copy.
            self.discard(token)
            shutil.rmtree(self._path("old", token), ignore_errors=True)
            raise
        self._finish(token, what)

    def recover(self) -> None:
        """Finish, or discard, what copies that died left in the directory."""
        phases: dict[str, set[str]] = {}
        for name in os.listdir(self.directory):
            match = _OURS.fullmatch(name)
            if match is None:
                temp = _RECORD_INSIDE_TEMP.fullmatch(name)
                if temp is not None and (self._locked or not _alive(int(temp["pid"]))):
                    (self.directory / name).unlink(missing_ok=True)  # a killed record's
                continue
            if not self._locked and _made_by_alive(match, self.directory / name):
                continue  # without the lock, a live pid may be a copy under way
            phases.setdefault(match["token"], set()).add(match["phase"])
        for token in sorted(phases):
            # Past the stage's rename: moving entries, or only deleting the old ones.
            found = phases[token]
            swapping = bool(found & {"new", "in"}) or ("old" in found and "get" not in found)
            what = self._what(token) if swapping else ""
            self.discard(token)
            self._finish(token, what)
            if swapping:
                self.finished.append(what)

    def _what(self, token: str) -> str:
        try:
            return self._path("what", token).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""  # a copy from before these records, or one that could not write it

    def _finish(self, token: str, what: str) -> None:
        """Move a verified stage's entries in place of the old ones, record `what` they are
        (see `copied`; '' records nothing), then delete the old ones."""
        ready, moving, aside = (self._path(p, token) for p in ("new", "in", "old"))
        if ready.is_dir():
            aside.mkdir(exist_ok=True)
            try:
                for name in self.held():
                    os.rename(self.directory / name, aside / name)
            except OSError:
                # An entry that cannot be moved (EACCES: another user's directory, EBUSY: a
                # mount point): the old contents go back and the copy is given up, so the
                # directory holds its old contents whole, not part of them.
                for name in os.listdir(aside):
                    os.rename(aside / name, self.directory / name)
                os.rmdir(aside)
                shutil.rmtree(ready, ignore_errors=True)
                self._path("what", token).unlink(missing_ok=True)
                raise
            os.rename(ready, moving)
        if moving.is_dir():
            for child in sorted(os.listdir(moving)):
                target = self.directory / child
                if os.path.lexists(target):  # put there after the old ones went aside
                    _remove(target)
                os.rename(moving / child, target)
            os.rmdir(moving)
        if what:
            # Before the hidden entries go: a copy killed after its files were in place but
            # before this left them unrecorded, and every later copy of another generation
            # (a restart script's next start) was refused the directory as not empty. Killed
            # before this, the entries left make the next copy finish here again.
            self.record(what)
        shutil.rmtree(aside, ignore_errors=True)
        self._path("what", token).unlink(missing_ok=True)

    def _path(self, phase: str, token: str) -> Path:
        return self.directory / f".forewarn-{phase}-{token}"


class FileCopy:
    """One `get_file` into `target`: the bytes go to `<work>/data`, where `work` is a hidden
    directory beside `target` (`.NAME.part-<pid>-<start><hex>`, on the same filesystem) that
    the copy holds an exclusive `flock` on, then are renamed into place. A copy killed meanwhile (a
    reclaim during a restore) left its partial file beside `target` for ever, a whole file's
    bytes at each try, until the disk the next restore needed was full; boto3's download
    leaves a temp file of its own beside the one it was given. The next copy to `target`
    removes every such directory no live copy holds."""

    def __init__(self, target: Path, *, sweep: bool = True) -> None:
        self.target = target
        self.sweep = sweep
        self.work = target.with_name(f".{target.name}.part-{_token()}")
        self._fd: int | None = None

    @property
    def temp(self) -> Path:
        return self.work / "data"

    def __enter__(self) -> FileCopy:
        if self.sweep:
            self._remove_dead()
        self.work.mkdir()
        self._fd = os.open(self.work, os.O_RDONLY | os.O_DIRECTORY)
        with contextlib.suppress(OSError):  # no flock here: the pid in the name tells
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _remove_dead(self) -> None:
        pattern = re.compile(
            re.escape(f".{self.target.name}.part-")
            + r"(?P<pid>\d+)-(?P<stamp>[0-9a-f]*?)[0-9a-f]{1,8}"
        )
        try:
            names = os.listdir(self.target.parent)
        except FileNotFoundError:
            return
        for name in names:
            found = pattern.fullmatch(name)
            if found is None:
                continue
            path = self.target.parent / name
            if _held(path, found):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:  # a partial file of a copy before these directories
                path.unlink(missing_ok=True)


def _held(path: Path, name: re.Match[str]) -> bool:
    """Whether a live copy holds `path` (its flock; where flock is missing, the pid and start
    time in its `name`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return _made_by_alive(name, path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return _made_by_alive(name, path)
    finally:
        os.close(fd)
    # An old-style partial file: only its pid tells.
    return not path.is_dir() and _made_by_alive(name, path)


def copy_entry(name: str) -> bool:
    """Whether `name` in a directory is a copy's hidden entry or its record: none of the
    files it holds (`put_dir` of a directory a `get_dir` copied into leaves them out)."""
    return _ours(name)


def _ours(name: str) -> bool:
    """Whether `name` in a destination is a copy's hidden entry or its record."""
    return bool(
        _OURS.fullmatch(name) or name == _RECORD_INSIDE or _RECORD_INSIDE_TEMP.fullmatch(name)
    )


def _first_said(directory: Path) -> bool:
    """Whether this process has not yet said that `directory` has no working locks: said at
    each copy (a job's model, then its optimizer; the CLI's next try), it read as news."""
    key = os.path.abspath(directory)
    with _SAID_LOCK:
        if key in _SAID_UNLOCKED:
            return False
        _SAID_UNLOCKED.add(key)
        return True


def _write_whole(path: Path, raw: bytes) -> None:
    """Written whole or not at all: a torn record would be no copy's, and refused."""
    temp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}")
    try:
        temp.write_bytes(raw)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


def _digest(files: dict[str, tuple[int, int]]) -> str:
    """One digest of every file's path, size and mtime."""
    text = json.dumps(sorted((relative, *figures) for relative, figures in files.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _token() -> str:
    """`<pid>-<start><hex>` for a copy's hidden names: its process's start time too, where
    /proc says it, so that without locks a dead copy's entries whose pid another process has
    now (a container's get restarted under the pid its first one had, or its shell) read as
    a leftover, not as a copy under way (waited for, never removed)."""
    started = _start_time(os.getpid())
    stamp = f"{started:x}" if started is not None else ""
    return f"{os.getpid()}-{stamp}{secrets.token_hex(4)}"


def _start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc), None where not known."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            fields = stat_file.read().rsplit(b")", 1)[1].split()
        return int(fields[19])  # the 22nd field; the fields after the name start at the 3rd
    except (OSError, IndexError, ValueError):
        return None


def _made_by_alive(match: re.Match[str], path: Path) -> bool:
    """Whether the process that made a copy's entry `path` (`_OURS` match) lives: its pid
    alive and, where the name carries its start time, started then (not a later process given
    the pid); where it does not (a name of the release before, or made without /proc), not
    started after the entry was last changed."""
    pid = int(match["pid"])
    if not _alive(pid):
        return False
    started = _start_time(pid)
    if started is None:
        return True
    if match["stamp"]:
        return started == int(match["stamp"], 16)
    # An earlier release's leftover under a pid a live process has now (a container's pid 1,
    # the shell running the restart script, at each start) was a copy under way for ever:
    # every `get` waited its bound out and was refused. Its maker started before making it.
    try:
        changed = os.lstat(path).st_mtime
    except OSError:
        return True
    since = _started_at(started)
    return since is None or since <= changed + _CLOCK_SLACK


def _started_at(ticks: int) -> float | None:
    """The wall-clock time of a process start `ticks` (clock ticks since boot, /proc)."""
    try:
        with open("/proc/stat", "rb") as stat_file:
            boot = next(int(line.split()[1]) for line in stat_file if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (a number past any pid: no process's)
        return False
    except PermissionError:
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _still_named(fd: int, directory: Path) -> bool:
    """Whether `directory` still names the directory open as `fd`."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(directory))
    except FileNotFoundError:
        return False
