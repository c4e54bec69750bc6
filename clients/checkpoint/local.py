"""The local-directory backend: temp file + fsync + rename, and fsynced directories."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import re
import secrets
import shutil
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .backend import CLAIM_STEM, RANK_CLAIM, Backend, ObjectWriter, OnDone, claim_stem
from .errors import CommitError, StoreNotFoundError
from .hashing import Buffer
from .manifest import COMMIT, parse_generation_name

_TMP_MARK = ".tmp-"
_LOCK_NAME = re.compile(r"\.(?P<stem>[^/]+)\.lock")


class _HeldLocks:
    """The lock files this process holds a claim on, by (device, inode), whoever opened them.

    `remove_stale_claims` must never open one of them: closing any descriptor of a file
    drops every POSIX lock the process holds on it. Claims and the sweep take `mutex`, so no
    claim is made between the sweep's look and its open. Reentrant: a dropped writer's claim
    is let go by the garbage collector, which may run on a thread that holds it already."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.files: set[tuple[int, int]] = set()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child holds none of its parent's locks (and no other thread holds mutex).
        self.mutex = threading.RLock()
        self.files = set()


_HELD = _HeldLocks()

# The abstract Unix socket name (no file anywhere) a process committing into a local store
# binds for as long as it runs (`LocalBackend.note_writer`): the kernel frees it when the
# process ends, SIGKILL included. A lock file in the temporary directory did the same but left
# a directory there for good (the drills' "nothing left in TMPDIR" tests found it), and one open
# to every user took a symlink to another file as its lock file.
WRITER_NAME = "forewarn-store-writer-{device}-{inode}"


class _Writers:
    """The stores this process commits into, by the root's (device, inode), with the bound
    socket that names this process their writer (None: it could not be bound)."""

    def __init__(self) -> None:
        self.stores: dict[tuple[int, int], socket.socket | None] = {}
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        # A forked child (a DataLoader worker) is no writer: its copy of the bound socket
        # would keep the name taken after the writer died.
        for bound in self.stores.values():
            if bound is not None:
                with contextlib.suppress(OSError):
                    bound.close()
        self.stores = {}


_WRITERS = _Writers()


def _bind_writer_name(key: tuple[int, int]) -> tuple[socket.socket | None, int | None]:
    """(the bound socket, None) when this process is the store's first live writer; (None,
    the holder's pid, 0 when it cannot be told) when another live process holds the name;
    (None, None) where abstract names are not available."""
    name = b"\0" + WRITER_NAME.format(device=key[0], inode=key[1]).encode()
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        bound.bind(name)
        bound.listen(64)  # never accepted: a second writer's connect only asks who holds it
        return bound, None
    except OSError as error:
        bound.close()
        if error.errno != errno.EADDRINUSE:
            return None, None
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.settimeout(1.0)
        probe.connect(name)
        credentials = probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, _uid, _gid = struct.unpack("3i", credentials)
        return None, pid
    except (OSError, struct.error):
        return None, 0
    finally:
        probe.close()


log = logging.getLogger("forewarn.checkpoint")

# Azure's temporary (resource) disk, mounted at /mnt (or /mnt/resource) on Linux VMs that have
# one, is erased by a Redeploy, a Spot eviction (Preempt), a scale-set Terminate and any
# stop-deallocate: a checkpoint saved there for the notice is gone when the job comes back.
# The Azure Linux agent and Azure images write this file at its root; udev links the disk here.
AZURE_DATALOSS_MARKER = "DATALOSS_WARNING_README.txt"
AZURE_RESOURCE_DISK_LINKS = ("/dev/disk/azure/resource-part1", "/dev/disk/azure/resource")


def _is_temp(name: str) -> bool:
    return name.startswith(".") and _TMP_MARK in name


# The file systems (`statfs`'s f_type, linux/magic.h) only this machine's kernel writes:
# ext2/3/4, XFS, Btrfs, tmpfs, ramfs, overlayfs, F2FS, ZFS, bcachefs. On them every writer of
# a store is a process here, so a lock nobody holds proves a killed writer gone. On NFS (a
# `nolock` mount keeps locks per machine), CIFS, FUSE and cluster file systems another
# machine's live save looks unlocked from here.
_FILE_SYSTEMS_OF_ONE_MACHINE = frozenset(
    {
        0xEF53,
        0x58465342,
        0x9123683E,
        0x01021994,
        0x858458F6,
        0x794C7630,
        0xF2F52010,
        0x2FC12FC1,
        0xCA451A4E,
    }
)
# Where `struct statfs` starts with a 64-bit little-endian f_type (glibc and musl).
_STATFS_MACHINES = ("x86_64", "aarch64")


def _file_system_type(path: Path) -> int | None:
    """`statfs(path)`'s f_type, or None where it cannot be read (another OS or machine, no
    such path)."""
    if not sys.platform.startswith("linux") or os.uname().machine not in _STATFS_MACHINES:
        return None
    import ctypes

    buffer = ctypes.create_string_buffer(512)  # struct statfs is 120 bytes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.statfs(os.fsencode(path), buffer) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return int(struct.unpack_from("<q", buffer.raw)[0])


def name_path(error: OSError, path: Path) -> None:
    """`error` with `path` as its file name when it names none: an error of a write, a flush
    or an fsync of an open file (`[Errno 28] No space left on device`) named no file, so a
    full disk under a save named neither the store nor the disk."""
    if error.filename is None:
        error.filename = str(path)


def dangling_link(path: Path) -> tuple[Path, str] | None:
    """The symbolic link, `path` itself or a directory above it, whose target does not exist
    (the volume it points to not mounted, or removed), with that target; None when there is
    none. Never raises."""
    current = path
    try:
        while not os.path.exists(current):
            if os.path.islink(current):
                return current, os.readlink(current)
            if current == current.parent:
                return None
            current = current.parent
    except OSError:
        return None
    return None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        # EINVAL: a file system whose directories have no fsync (CIFS before its no-op one,
        # VirtualBox shared folders), where the rename is all there is (PostgreSQL passes it
        # over too, as the agent's state writer does). Raised, every save there failed at
        # its first directory and the job never had a checkpoint.
        if error.errno != errno.EINVAL:
            name_path(error, path)
            raise
    finally:
        os.close(fd)


def _raise(error: OSError) -> None:
    raise error


def _raise_unless_gone(error: OSError) -> None:
    # ESTALE: NFS's word for a directory another client removed.
    if not isinstance(error, (FileNotFoundError, NotADirectoryError)) and (
        error.errno != errno.ESTALE
    ):
        raise error


def fsync_tree(path: Path) -> None:
    """Make a file, or a directory and every file under it, durable, then the directory that
    holds it (for checkpoints written by someone else: a framework's own save)."""
    if path.is_dir():
        # os.walk passes over a directory it cannot list: an EIO there acked a checkpoint
        # whose files were never fsynced.
        for directory, _dirs, files in os.walk(path, onerror=_raise):
            for name in files:
                fd = os.open(os.path.join(directory, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(Path(directory))
    else:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(path.parent)


_SYNC_FILE_RANGE_WRITE = 2
_libc: Any = None


# A file being written asks the disk to start on every this many bytes, so the disk writes
# while the writer still produces (the fsync at the end then finds little left to write);
# left to the kernel, nothing of a 1 GiB file is written back before the fsync.
WRITEBACK_STEP = 32 << 20


def start_writeback(fd: int, offset: int = 0, length: int = 0) -> None:
    """Ask Linux to start writing a file's dirty pages (`length` bytes from `offset`; 0: to
    the end) without waiting for them to reach the disk; elsewhere, or when it cannot,
    nothing (the fsync that follows does the work). It may block while the disk's queue is
    full, which paces a writer to the disk."""
    global _libc
    if not sys.platform.startswith("linux"):
        return
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.sync_file_range.argtypes = [
                ctypes.c_int,
                ctypes.c_int64,
                ctypes.c_int64,
                ctypes.c_uint,
            ]
        _libc.sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
    except (OSError, AttributeError):
        return


def _temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def _temp_pattern(name: str) -> re.Pattern[str]:
    """The names `_temp_beside` gives a temp file of `name`, and only those."""
    return re.compile(rf"\.{re.escape(name)}{re.escape(_TMP_MARK)}[0-9]+-[0-9a-f]{{8}}")


def _unclaimed() -> None:
    return None


# A lock found held by another process than the writer its file names (a commit's sweep
# removing a killed writer's lock file, or a writer that has locked it and not yet written its
# name) is looked at again, this often, until that changes: a fixed three looks 10 ms apart
# refused the save naming the killed writer whenever the sweep was descheduled meanwhile (a
# busy machine). At most `_SETTLE` seconds, so that a holder seen from another PID namespace
# (whose name is a pid of its own namespace) is still refused. Where the lock's holder cannot
# be asked, it is looked at `_BUSY_TRIES` times.
_SETTLE = 5.0
_BUSY_TRIES = 3
_BUSY_WAIT = 0.01
# Linux's struct flock on 64-bit machines: l_type, l_whence, l_start, l_len, l_pid.
_FLOCK = "hhqqi4x"
_WRITER_PID = re.compile(r"pid ([0-9]+) on ")
# How a claim's lock file held by a delete (`delete_unclaimed`) begins: never as a writer's
# name (`_WRITER_PID`), so a writer finding it waits for the delete, up to `_SETTLE`.
_DELETE_OF = "a delete of "


def _lock_holder(fd: int) -> int | None:
    """The pid of the process holding a lock on `fd`'s file, as this process's PID namespace
    sees it; None when none does or this system cannot say."""
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _whence, _start, _length, pid = struct.unpack(
            _FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query)
        )
    except (OSError, struct.error):
        return None
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None


def _named_writer(holder: str) -> int | None:
    """The pid a lock file names (`pid N on HOST`), or None."""
    found = _WRITER_PID.match(holder)
    return int(found.group(1)) if found else None


def _is_at(path: Path, fd: int) -> bool:
    """Whether `fd` is the file at `path` now (not one removed from there)."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _remove_if_dead(path: Path) -> int:
    """Remove the lock file at `path` when no process holds its lock (1), else leave it (0);
    called with `_HELD.mutex` held."""
    try:
        found = os.stat(path, follow_symlinks=False)
        if (found.st_dev, found.st_ino) in _HELD.files:
            return 0  # this process's own: opening it would drop the lock on close
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return 0  # gone already, or another user's that this one may not open
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # a live writer's (or no locks here: nothing is known of it)
        if not _is_at(path, fd):
            return 0
        try:
            path.unlink()
        except OSError:
            return 0
        return 1
    finally:
        os.close(fd)


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _owner(path: Path) -> str:
    try:
        found = path.stat()
    except OSError:
        return "its owner is unknown"
    return f"it belongs to {_user(found.st_uid)}, mode {found.st_mode & 0o7777:04o}"


def denied_hint(directory: Path) -> str:
    """Why this process may not change `directory`'s entries, when another user owns it: a
    save made under umask 022 leaves directories only their owner can write, which another
    user of a shared store then can neither remove nor write into."""
    try:
        found = directory.stat()
    except OSError:
        return f"{directory} is not writable by this user"
    mode = found.st_mode & 0o7777
    hint = (
        f"{directory} belongs to {_user(found.st_uid)} with mode {mode:04o} and this process "
        f"runs as {_user(os.geteuid())}"
    )
    if found.st_uid != os.geteuid():
        hint += (
            "; remove it as its owner or root, and have every user of a shared store save "
            "with umask 002 into a directory of a group they share (a umask of 022 makes a "
            "save's directories writable by their owner only)"
        )
    return hint


class LocalWriter(ObjectWriter):
    def __init__(self, path: Path, name: str, on_done: OnDone | None, durable: bool) -> None:
        super().__init__(name, on_done)
        self._path = path
        self._durable = durable
        self._temp = _temp_beside(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._temp, "wb")  # noqa: SIM115 - closed in _finish/_discard
        except BaseException:
            # Nothing to discard: without this, the garbage collector's abort of the
            # half-made writer printed an AttributeError under the real error.
            self._finished = True
            self._hasher.close()
            raise
        self._written = 0
        self._started_to = 0  # the bytes the disk was asked to start on

    def _sink(self, data: Buffer) -> None:
        try:
            self._file.write(data)
        except OSError as error:
            name_path(error, self._path)  # the file's final name: its temp goes
            raise
        if self._durable:
            self._written += memoryview(data).nbytes
            if self._written - self._started_to >= WRITEBACK_STEP:
                # Bytes still in the file object's buffer are left to the next step or the
                # fsync: only what reached the page cache is written back.
                start_writeback(self._file.fileno(), self._started_to, 0)
                self._started_to = self._written

    def _finish(self) -> None:
        try:
            self._file.flush()
            if self._durable:
                # The disk starts writing while this thread hashes the blocks still queued,
                # so the fsync finds most of the file already written.
                start_writeback(self._file.fileno())
            self._hasher.help()
            if self._durable:
                os.fsync(self._file.fileno())
            self._file.close()
        except OSError as error:
            name_path(error, self._path)
            raise
        os.replace(self._temp, self._path)

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()
        self._temp.unlink(missing_ok=True)


def azure_temporary_disk(path: Path) -> Path | None:
    """The mount point of Azure's temporary resource disk when `path` (or the nearest
    directory of it that exists) is on it, else None. Never raises."""
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        device = existing.stat().st_dev
        for link in AZURE_RESOURCE_DISK_LINKS:
            with contextlib.suppress(OSError):
                if os.stat(link).st_rdev == device:
                    return _mount_point(existing)
        directory = existing if existing.is_dir() else existing.parent
        while True:
            if (directory / AZURE_DATALOSS_MARKER).is_file():
                return directory
            if os.path.ismount(directory) or directory == directory.parent:
                return None
            directory = directory.parent
    except OSError:
        return None


def _mount_point(path: Path) -> Path:
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


class LocalBackend(Backend):
    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        path = Path(root).expanduser()
        if ".." in path.parts:
            # `./x/../y`: made with every part as written, `mkdir(parents=True)` left an
            # empty `x` beside the store. `..` goes up from where its part really is (a
            # symlink's target), as the kernel reads it, once; the path is used resolved.
            path = Path(os.path.realpath(path))
        self.root = path.absolute()
        self.url = f"file://{self.root}"
        disk = azure_temporary_disk(self.root)
        if disk is not None:
            log.warning(
                "forewarn: the checkpoint store %s is on Azure's temporary disk (%s): a "
                "Redeploy, a Spot eviction, a scale-set Terminate or a stop-deallocate erases "
                "it, so a checkpoint saved there for the notice is gone when the job comes "
                "back; put the store on a managed data disk, Azure Files or object storage (s3://)",
                self.root,
                disk,
            )
        # Without fsync a crash of the machine (not of the process) may lose a commit.
        self.durable = durable
        self._root_synced = False
        self._said_unlocked = False

    @property
    def identity(self) -> str:
        # Resolved at each call: a store opened through a symlink (or `..`) is the same
        # directory, and a second writer of one of its steps must be told so.
        return f"file://{os.path.realpath(self.root)}"

    def _path(self, key: str) -> Path:
        return self.root / key if key else self.root

    def writer(self, key: str, on_done: OnDone | None = None) -> ObjectWriter:
        try:
            return LocalWriter(self._path(key), key, on_done, self.durable)
        except OSError as exc:
            self._raise_if_read_only(key, exc)
            raise

    def raise_if_unreachable(self) -> None:
        """Raise `StoreNotFoundError` when the store's directory is behind a symbolic link
        whose target is gone: read as a missing directory, it was an empty store, `latest()`
        returned None and the job trained from step 0 as at a first start; a save raised
        `FileExistsError` naming the link."""
        found = dangling_link(self.root)
        if found is not None:
            link, target = found
            raise StoreNotFoundError(
                f"the store {self.url} cannot be reached: {link} is a symbolic link to "
                f"{target}, which does not exist (a volume not mounted, a directory removed or "
                "not made yet): no checkpoint there can be read or saved; mount the volume or "
                "make the directory, or give another store URL"
            )

    def _raise_if_read_only(self, what: str, error: OSError) -> None:
        """A clear error for a store on a read-only file system: the bare `[Errno 30]
        Read-only file system` named a hidden lock or temp file, not the store."""
        if error.errno == errno.EROFS:
            raise CommitError(
                f"cannot save {what} in {self.url}: {self.root} is on a read-only file system "
                "(a volume mounted read-only, a snapshot, a read-only bind mount): a store "
                "needs a directory it can write; mount it read-write, or give another store URL"
            ) from error

    def put_small(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = _temp_beside(path)
        try:
            with open(temp, "wb") as handle:
                handle.write(data)
                handle.flush()
                if self.durable:
                    os.fsync(handle.fileno())
            os.replace(temp, path)
        except OSError as error:
            temp.unlink(missing_ok=True)
            name_path(error, path)
            raise
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        if self.durable:
            fsync_dir(path.parent)

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        # Two processes saving one step into one directory (a job restarted while the old one
        # still flushes, two jobs given the same store) each deleted the other's files as a
        # dead writer's leftovers and renamed its own over them: both failed, or the one that
        # committed named the other's bytes. A POSIX lock on a file beside the generation
        # tells a live writer from a dead one: the kernel drops it when its process dies
        # (SIGKILL too), and forked children (DataLoader workers) do not inherit it.
        path = self.root / f".{claim_stem(prefix, rank)}.lock"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with _HELD.mutex:
                return self._claim(prefix if rank == 0 else f"{prefix} (rank {rank})", path)
        except OSError as exc:
            self.raise_if_unreachable()
            self._raise_if_read_only(prefix, exc)
            raise

    def _claim(self, prefix: str, path: Path) -> Callable[[], None]:
        busy = 0
        started = time.monotonic()
        deadline = started + _SETTLE
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except PermissionError as exc:
                if path.exists():
                    what = (
                        f"its lock file {path} (left by a writer that was killed, or in use) "
                        f"is not writable by this user ({exc.strerror}): it belongs to "
                        f"{_user(path.stat().st_uid)}"
                    )
                else:
                    what = (
                        f"the directory {self.root} is not writable by this user "
                        f"({exc.strerror}; {_owner(self.root)})"
                    )
                raise CommitError(f"cannot save {prefix} in {self.url}: {what}") from exc
            # Not 0644 under a umask of 022: a writer of another user of a shared store must
            # open it to lock it, also once this process is killed and leaves it behind.
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_uid == os.geteuid():
                    os.fchmod(fd, 0o666)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    # A filesystem without POSIX locks (an NFS mount with nolock, a FUSE
                    # mount of object storage): saving as before beats refusing every save.
                    os.close(fd)
                    with contextlib.suppress(OSError):
                        path.unlink()
                    self._say_unlocked(exc)
                    return _unclaimed
                if not _is_at(path, fd):
                    os.close(fd)  # its holder let go and removed it meanwhile
                    continue
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
                locker = _lock_holder(fd)
                if locker is None:
                    settling = busy < _BUSY_TRIES
                else:
                    settling = locker != _named_writer(holder) and time.monotonic() < deadline
                if settling:
                    os.close(fd)
                    busy += 1
                    time.sleep(_BUSY_WAIT)
                    continue
                os.close(fd)
                if holder.startswith(_DELETE_OF):
                    # The delete's own file: said as "another process (pid N on HOST) is
                    # saving", with the killed writer's name the file held before the delete
                    # took it, it named a process long gone and a save nobody was making.
                    raise CommitError(
                        f"cannot save {prefix} in {self.url}: {holder} holds its claim, and "
                        f"this save waited {time.monotonic() - started:.0f}s for it to end "
                        "(`forewarn checkpoint prune`, or a job's retention, deleting a "
                        "killed writer's leftover or an old generation); it left the step "
                        "alone: save it again once the delete has ended"
                    ) from exc
                raise CommitError(
                    f"another process ({holder}) is saving {prefix} in {self.url}; "
                    "this save left it alone"
                ) from exc
            # The holder before removes the file as it lets go: a lock on the file it removed
            # claims nothing, so lock the one now at the path.
            if _is_at(path, fd):
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        except OSError as error:
            # A disk already full (an exit's save after the job filled it): the bare `[Errno
            # 28]` named nothing, and the lock file and its descriptor stayed behind.
            with contextlib.suppress(OSError):
                path.unlink()  # held: a writer waiting on it looks again, as at a release
            os.close(fd)
            name_path(error, path)
            raise
        found = os.fstat(fd)
        held = (found.st_dev, found.st_ino)
        _HELD.files.add(held)
        owner = os.getpid()

        def release() -> None:
            if os.getpid() != owner:
                return  # a forked child's copy: the lock and its file are its parent's
            with _HELD.mutex:
                with contextlib.suppress(OSError):
                    path.unlink()
                os.close(fd)
                _HELD.files.discard(held)

        return release

    def note_writer(self) -> None:
        # Two live jobs committing into one store (the same job started twice by mistake)
        # interleaved their generations: `latest()` resumed from whichever committed last and
        # `keep=N` counted both jobs' generations, and nothing said so. Each committing
        # process binds a name for the store's directory (device and inode) until it exits
        # (`WRITER_NAME`); one that finds it taken says so once, naming the holder's pid.
        with _HELD.mutex:
            try:
                self.root.mkdir(parents=True, exist_ok=True)  # as `claim` makes it
                found = os.stat(self.root)
            except OSError:
                return  # the save itself says what is wrong with the directory
            key = (found.st_dev, found.st_ino)
            if key in _WRITERS.stores:
                return
            bound, holder = _bind_writer_name(key)
            _WRITERS.stores[key] = bound
            if holder is None:
                return
            log.warning(
                "forewarn: checkpoint: another process (%s on %s) is saving into the store %s "
                "too (the same job started twice?): two jobs on one store interleave "
                "their generations, latest() resumes from whichever committed last and "
                "keep=N counts both jobs' saves; stop one, or give each job its own store",
                f"pid {holder}" if holder else "a process",
                os.uname().nodename,
                self.url,
            )

    def _say_unlocked(self, error: OSError) -> None:
        """Once per store: said nowhere, two jobs given one such store each took the other's
        save under way for nothing (its retention, or its save of the same step, deleted the
        other's files mid-write) and nobody knew why."""
        if self._said_unlocked:
            return
        self._said_unlocked = True
        log.warning(
            "forewarn: checkpoint: the store %s has no working locks (%s): a save here holds "
            "no claim on its step, so another job saving to this store (its retention, or its "
            "save of the same step) may delete this one's files mid-write; give each job its "
            "own store, or mount it with working locks",
            self.url,
            error.strerror or error,
        )

    def claimed(self, prefix: str) -> bool:
        if self._lock_held(self.root / f".{prefix}.lock"):
            return True
        # The other ranks' (a rank may reach its save before rank 0 does).
        ranks = self._claim_locks(prefix, rank_zero=False)
        return ranks is not None and any(self._lock_held(path) for path in ranks)

    def delete_unclaimed(self, prefix: str) -> bool:
        # Asked apart from the delete (`claimed`, then `delete_tree`), a writer claiming the
        # step between the two wrote its files and the delete took them. The delete holds rank
        # 0's claim lock instead, as a claim does (its file naming no one): a writer finding
        # it held by a process its file does not name looks again for up to `_SETTLE` s.
        path = self.root / f".{prefix}.lock"
        with _HELD.mutex:
            try:
                found = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                found = None
            except OSError:
                return super().delete_unclaimed(prefix)
            if found is not None and (found.st_dev, found.st_ino) in _HELD.files:
                return False  # this process's own save (and opening it would drop the lock)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
            except OSError:
                return super().delete_unclaimed(prefix)  # another user's, a read-only store
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    return False  # a live writer holds it
                return super().delete_unclaimed(prefix)  # no working locks here
            # (Not `claimed`: it opens and closes rank 0's lock file, which drops the lock
            # this process now holds on it.)
            ranks = self._claim_locks(prefix, rank_zero=False)
            if not _is_at(path, fd) or (ranks and any(map(self._lock_held, ranks))):
                os.close(fd)
                return False  # claimed anew meanwhile, or by another rank
            held = os.fstat(fd)
            key = (held.st_dev, held.st_ino)
            _HELD.files.add(key)  # the sweep leaves it alone, as a claim's
            # Named as the delete it is: a writer waiting for it names it if it gives up.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(
                    fd,
                    f"{_DELETE_OF}{prefix} (pid {os.getpid()} on {os.uname().nodename})".encode(),
                    0,
                )
        try:
            self.delete_tree(prefix)
        finally:
            with _HELD.mutex:
                with contextlib.suppress(OSError):
                    path.unlink()  # its claim goes with it, as a writer's release does
                os.close(fd)
                _HELD.files.discard(key)
        return True

    def writer_gone(self, prefix: str) -> bool:
        # Only where every writer is on this machine (see _FILE_SYSTEMS_OF_ONE_MACHINE): a
        # claim is a POSIX lock, which the kernel drops when its holder dies, and a live
        # writer holds its lock from before its first file to its commit.
        if _file_system_type(self.root) not in _FILE_SYSTEMS_OF_ONE_MACHINE:
            return False
        locks = self._claim_locks(prefix, rank_zero=True)
        return locks is not None and all(self._lock_free(path) for path in locks)

    def _claim_locks(self, prefix: str, *, rank_zero: bool) -> list[Path] | None:
        """The claim lock files of the generation `prefix` in the store: every rank's, with
        rank 0's (`.{prefix}.lock`) only if `rank_zero`; None when the store cannot be listed."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return None
        ranks = rf"{re.escape(RANK_CLAIM)}[0-9]+"
        pattern = re.compile(
            re.escape(f".{prefix}") + (f"(?:{ranks})?" if rank_zero else ranks) + r"\.lock"
        )
        return [self.root / name for name in names if pattern.fullmatch(name)]

    def _lock_free(self, path: Path) -> bool:
        """Whether the lock at `path` is free or gone (False when this process holds it, or
        cannot open it to tell: another user's)."""
        with _HELD.mutex:
            try:
                found = os.stat(path, follow_symlinks=False)
                if (found.st_dev, found.st_ino) in _HELD.files:
                    return False
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            except FileNotFoundError:
                return True
            except OSError:
                return False
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
            finally:
                os.close(fd)  # (and with it the lock just taken)
            return True

    def usage(self, prefix: str) -> int:
        # A killed writer's bytes are mostly in temp files, which list_sizes leaves out.
        used = 0
        for directory, _dirs, files in os.walk(self._path(prefix)):
            for name in files:
                with contextlib.suppress(OSError):
                    used += os.stat(os.path.join(directory, name), follow_symlinks=False).st_size
        return used

    def _lock_held(self, path: Path) -> bool:
        with _HELD.mutex:
            try:
                found = os.stat(path, follow_symlinks=False)
                if (found.st_dev, found.st_ino) in _HELD.files:
                    return False  # this process's own (its saves are known by themselves)
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
            except OSError:
                return False  # no claim, or another user's that this one may not open
            try:
                if _lock_holder(fd) is not None:
                    return True
                # Free, or a holder this system cannot name: a lock this process cannot take
                # is held (taking a free one a moment delays a new writer by a retry).
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    return exc.errno in (errno.EAGAIN, errno.EACCES)
                return False
            finally:
                os.close(fd)

    def remove_stale_claims(self) -> int:
        # A writer killed in its save leaves its lock file; the next save of that step reuses
        # and removes it, but a step saved only once (a final save at an off-schedule step)
        # is never saved again, and one file was left behind per killed writer.
        try:
            entries = list(os.scandir(self.root))
        except (FileNotFoundError, NotADirectoryError):
            return 0
        removed = 0
        for entry in entries:
            found = _LOCK_NAME.fullmatch(entry.name)
            stem = CLAIM_STEM.fullmatch(found.group("stem")) if found else None
            if stem is None or parse_generation_name(stem.group("generation")) is None:
                continue
            with _HELD.mutex:
                removed += _remove_if_dead(Path(entry.path))
        return removed

    def remove_stale_temps(self, key: str, *, older_than: float) -> int:
        path = self._path(key)
        pattern = _temp_pattern(path.name)
        # The age by the store's own clock: on NFS a file's times are the server's, and
        # against this machine's clock one an hour ahead deleted a live writer's temp file,
        # one an hour behind kept a killed writer's for ever. The newest of `key`'s time
        # (just written by the commit calling this) and its directory's (changed by every
        # entry made there) is a time the server gave, never after its present.
        try:
            entries = list(os.scandir(path.parent))
            now = os.stat(path.parent).st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return 0
        with contextlib.suppress(OSError):
            now = max(now, os.stat(path).st_mtime)
        cutoff = now - older_than
        removed = 0
        for entry in entries:
            if not pattern.fullmatch(entry.name):
                continue
            try:
                if not entry.is_file(follow_symlinks=False) or entry.stat().st_mtime > cutoff:
                    continue
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed += 1
        return removed

    def remove_dead_temps(self, prefix: str, names: list[str]) -> int:
        # A rank killed while its file was a temp left it in the generation, under a name
        # no rank of the next save writes again: the restarted job's commit kept its bytes
        # in the generation for as long as it was kept. Every file of this save was closed
        # after the save began, so a temp not touched since before the earliest of them was
        # left by a writer dead by then (times all the store's own clock, also on NFS); a
        # stray live writer of this step is one whose save its commit refuses anyway.
        base = self._path(prefix)
        temps = [
            os.path.join(directory, name)
            for directory, _dirs, files in os.walk(base)
            for name in files
            if _is_temp(name)
        ]
        if not temps:
            return 0  # (the usual case: no file of the generation is looked at)
        try:
            floor = min(os.stat(base / name).st_mtime_ns for name in names)
        except (OSError, ValueError):
            return 0
        removed = 0
        for path in temps:
            try:
                if os.stat(path).st_mtime_ns < floor:
                    os.unlink(path)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def get_small(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def open_read(self, key: str) -> IO[bytes]:
        return open(self._path(key), "rb")

    def list_children(self, prefix: str) -> list[str]:
        try:
            with os.scandir(self._path(prefix)) as entries:
                # A symlink to a directory counts (a generation moved to another disk and
                # linked back was invisible: latest() resumed from the step before it).
                return [entry.name for entry in entries if entry.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            self.raise_if_unreachable()
            return []

    def list_sizes(self, prefix: str) -> dict[str, int]:
        base = self._path(prefix)
        sizes: dict[str, int] = {}
        # os.walk passes over a directory it cannot list: its files read as missing, so a
        # sound generation did not verify (EACCES, EIO), latest() resumed from an older one,
        # and the job's save of that step deleted it as broken. Only a directory gone (a
        # generation not there, or removed meanwhile) is no error.
        for directory, _dirs, files in os.walk(base, onerror=_raise_unless_gone):
            relative = os.path.relpath(directory, base)
            for name in files:
                if _is_temp(name):
                    continue
                key = name if relative == "." else f"{relative}/{name}".replace(os.sep, "/")
                try:
                    sizes[key] = os.stat(os.path.join(directory, name)).st_size
                except FileNotFoundError:
                    continue
        return sizes

    def size_of(self, key: str) -> int | None:
        try:
            return os.stat(self._path(key)).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        path = self._path(prefix)
        if path.is_symlink():
            # A generation linked in from elsewhere: the link only, which takes the generation
            # out of this store at once (rmtree refuses a link). Its files may be another
            # store's generation (a run seeded from a colleague's checkpoint): deleting them
            # through the link lost that store's checkpoint.
            path.unlink(missing_ok=True)
            if self.durable:
                fsync_dir(path.parent)
            return
        if not path.exists():
            return
        self._delete_directory(prefix, path)

    def _delete_directory(self, prefix: str, path: Path) -> None:
        # The marker goes first, durably, so a half-deleted generation never counts.
        marker = path / COMMIT
        try:
            if marker.exists():
                marker.unlink()
                if self.durable:
                    fsync_dir(path)
            denied: list[str] = []

            def failed(_function: Any, name: str, info: Any) -> None:
                # Anything else is left as before (an NFS .nfs file of a reader's open file).
                if isinstance(info[1], PermissionError):
                    denied.append(name)

            shutil.rmtree(path, onerror=failed)
            if denied:
                raise PermissionError(errno.EACCES, "Permission denied", denied[0])
        except PermissionError as exc:
            # Left silently, another user's leftover made the next save of its step fail
            # with a PermissionError naming a temp file, and retention failed at every save.
            where = Path(exc.filename).parent if exc.filename else path
            raise CommitError(
                f"cannot remove {prefix} from {self.url}: {denied_hint(where)}"
            ) from exc

    def make_durable(self, prefix: str) -> None:
        if not self.durable:
            return
        base = self._path(prefix)
        for directory, _dirs, _files in os.walk(base):
            fsync_dir(Path(directory))
        fsync_dir(base.parent)
        if not self._root_synced:
            # The first save may have created the root itself.
            fsync_dir(self.root.parent)
            self._root_synced = True

    def local_path(self, key: str) -> Path | None:
        return self._path(key)
