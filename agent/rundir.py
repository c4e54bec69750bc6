"""The runtime directory as a place others cannot tamper with: checked for owner and mode
before use, and held by one agent at a time through a lock file."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from forewarn.protocol.errors import ConfigError, ForewarnError
from forewarn.protocol.wire import AGENT_LOCK
from forewarn.providers.persist import NO_ROOM

from .reserve import RESERVE_FILE, SpaceReserve

log = logging.getLogger("forewarn.agent")

# Held in the state directory while the agent runs, as `agent.lock` in the runtime directory.
STATE_LOCK = "state.lock"


class RunDirError(ForewarnError, RuntimeError):
    """The directory cannot be used safely; the text says why and how to fix it."""


def check_private_dir(path: Path, what: str) -> None:
    """Refuse a directory owned by another uid or writable by others: whoever can write it
    can replace the control socket with their own or plant a flag file."""
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        raise RunDirError(f"{what} {path}: is a symbolic link; use the directory itself")
    me = os.geteuid()
    if found.st_uid != me:
        raise RunDirError(
            f"{what} {path}: owned by uid {found.st_uid}, not by this agent's uid {me}; "
            "use a directory of your own (e.g. --runtime-dir)"
        )
    if found.st_mode & stat.S_IWOTH:
        raise RunDirError(
            f"{what} {path}: writable by every user (mode {stat.S_IMODE(found.st_mode):04o}); "
            f"run `chmod o-w {path}` (group access is enough to share it)"
        )


def check_state_dir(path: Path, me: int | None = None) -> None:
    """Refuse a state directory whose owner or mode lets another user replace the agent's
    files: its state (what it restores at start: a planted terminate stops every job) and
    its providers' memory. Owned by another uid than this agent's (`me`) or root: that user
    can do anything there. Writable by every user without the sticky bit, when this agent
    owns it: anyone can rename or replace its files, and `chmod o-w` fixes it. A directory
    of root's writable by all is taken: it is the shape of a Kubernetes emptyDir (mode 0777,
    the agent not root), which only the containers of the pod that mount it can reach. Group
    write is a deliberate share (and what a umask of 002 gives), as for the runtime
    directory. Followed through a symbolic link: a state directory moved to another disk and
    linked is common, and what counts is the directory the files are in."""
    found = os.stat(path)
    me = os.geteuid() if me is None else me
    if found.st_uid not in (me, 0):
        raise RunDirError(
            f"state directory {path}: owned by uid {found.st_uid}, not by this agent's uid {me} "
            "or root; use a directory of your own (e.g. --state-dir)"
        )
    shared = found.st_mode & stat.S_IWOTH and not found.st_mode & stat.S_ISVTX
    if shared and found.st_uid == me:
        raise RunDirError(
            f"state directory {path}: writable by every user (mode "
            f"{stat.S_IMODE(found.st_mode):04o}), who could replace the state the agent "
            f"restores; run `chmod o-w {path}`"
        )


class LockHeld(RunDirError):
    """Another agent holds the lock; the text names its pid and the directory."""


class LockForbidden(LockHeld):
    """The lock belongs to another uid, whose agent uses the directory; the text names it."""


class AgentLock:
    """An exclusive lock on a file in the runtime directory (and one in the state directory),
    held while the agent runs. The kernel drops it when the process dies, so a SIGKILLed agent
    never blocks the next one."""

    def __init__(
        self,
        path: Path,
        held: str = "runs on {dir}",
        option: str = "--runtime-dir",
        make_room: Callable[[], bool] | None = None,
    ) -> None:
        """`held` says what the other agent does with the lock's directory, `option` how to
        give this one its own; `make_room` frees space for the pid on a full disk (True when
        it freed some)."""
        self.path = path
        self.held = held
        self.option = option
        self.make_room = make_room
        self.fd: int | None = None

    def acquire(self) -> AgentLock:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o640)
        except PermissionError as error:
            raise self._forbidden(error) from None
        except OSError as error:
            raise RunDirError(f"cannot open the lock {self.path}: {error.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            # A FIFO opens read-write and takes the lock, and then the pid cannot be written:
            # the start ended in "unexpected OSError: Invalid argument".
            os.close(fd)
            raise RunDirError(f"the lock {self.path} is not a regular file: remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(os.read(fd, 320).decode(errors="replace"), _flock_holder(fd))
            os.close(fd)
            held = self.held.format(dir=self.path.parent)
            raise LockHeld(
                f"another agent ({holder}) {held}: stop it, or give this one its own {self.option}"
            ) from None
        # The pid and host only name this agent in the refusal of another: a lock whose pid
        # cannot be written (a full disk) is held all the same.
        with contextlib.suppress(OSError):
            self._write_holder(fd)
        self.fd = fd
        return self

    def _write_holder(self, fd: int) -> None:
        record = f"{os.getpid()} {socket.gethostname()}\n".encode()
        os.ftruncate(fd, 0)
        try:
            os.write(fd, record)
        except OSError as error:
            if error.errno not in NO_ROOM or self.make_room is None or not self.make_room():
                raise
            os.write(fd, record)

    def _forbidden(self, error: OSError) -> RunDirError:
        """The lock is there and another uid's (the directory's group may write it): taken
        for one that cannot be made (a full disk), the state lock was passed over, and the
        agent ran on the state of another user's agent, publishing its manual notices."""
        try:
            found = os.lstat(self.path)
        except OSError:
            return RunDirError(f"cannot open the lock {self.path}: {error.strerror}")
        if found.st_uid == os.geteuid():  # this agent's own, its mode changed by hand
            return RunDirError(
                f"cannot open the lock {self.path}: {error.strerror} (mode "
                f"{stat.S_IMODE(found.st_mode):04o}; `chmod 640 {self.path}` fixes it)"
            )
        held = self.held.format(dir=self.path.parent)
        return LockForbidden(
            f"cannot open the lock {self.path}: owned by uid {found.st_uid} (mode "
            f"{stat.S_IMODE(found.st_mode):04o}), not this agent's uid {os.geteuid()}: another "
            f"user's agent {held}; give this one its own {self.option}"
        )

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


def _holder(written: str, flocked_by: int | None = None) -> str:
    """The holder of a lock as its file names it: the pid, and the host where it is not this
    one. In another container (one volume mounted by two, a pod's sidecar and a DaemonSet's
    agent) the pid is that container's, often 1: the host name (a pod's) is what finds it.
    An older agent wrote the pid alone. A file that names none (made on a full disk, where
    its content could not be written) is named by `flocked_by`, the pid the kernel lists as
    holding it: it said "pid ?"."""
    pid, _, host = written.strip().partition(" ")
    if not (pid.isascii() and pid.isdigit() and len(pid) <= 10):
        # Not a pid an agent writes (a file cut short, or written by hand): the line it
        # goes into, `forewarn status`'s too, printed its NULs and line breaks as they were.
        pid, host = "", ""
    if not pid and flocked_by is not None:
        pid = str(flocked_by)
    shown = f"pid {pid or '?'}"
    host = host.strip()
    if host and host.isprintable() and len(host) <= 255 and host != socket.gethostname():
        shown += f" on host {host}"
    return shown


def _flock_holder(fd: int) -> int | None:
    """The pid holding a flock on the open file `fd`, as /proc/locks lists it for this pid
    namespace; None where it cannot be told (no /proc, a holder in another namespace)."""
    try:
        found = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as listing:
            text = listing.read(1 << 20)
    except OSError:
        return None
    return flock_holder(text, found.st_dev, found.st_ino)


def lock_holder(path: Path) -> str | None:
    """The holder of the lock at `path` as a refusal names it (`pid N`, and its host where
    not this one), read without taking the lock (a probe that took it for an instant made an
    agent starting then refuse to start); None when nobody holds it, or this cannot tell (no
    such file, another user's, a holder in a pid namespace this one does not see)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        holder = _flock_holder(fd)
        if holder is None:
            return None
        return _holder(os.read(fd, 320).decode(errors="replace"), holder)
    except OSError:
        return None
    finally:
        os.close(fd)


def flock_holder(proc_locks: str, device: int, inode: int) -> int | None:
    """The pid that /proc/locks (`proc_locks`, its text) lists as holding a FLOCK on the
    file `inode` of `device`, not one waiting for it; None when it lists none, or a pid it
    cannot show (0: the holder is in a pid namespace this one does not see)."""
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    for line in proc_locks.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 00:2a:17 0 EOF"; a waiter has "->" after the number.
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5].lower() != wanted:
            continue
        pid = fields[4]
        if pid.isascii() and pid.isdigit() and 0 < len(pid) <= 10 and 0 < int(pid) < 2**31:
            return int(pid)
    return None


def stat_state(line: str) -> str | None:
    """The state letter of a /proc/PID/stat line (`R`, `S`, `T` ...), or None for a line of
    another shape. The process's name comes before it in parentheses and may hold anything,
    `) T (` included: the state is the field after the last `)`."""
    _, close, rest = line.rpartition(")")
    fields = rest.split()
    if not close or not fields:
        return None
    state = fields[0]
    return state if len(state) == 1 and state.isascii() and state.isalpha() else None


def process_state(pid: int) -> str | None:
    """The state letter of process `pid` in this pid namespace, None when it cannot be read
    (gone, no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as found:
            return stat_state(found.read(4096))
    except OSError:
        return None


def stopped_holder(path: Path) -> int | None:
    """The pid holding the lock at `path` when that process is stopped (SIGSTOP, Ctrl-Z, a
    debugger: state `T` or `t`), else None. It takes requests on its sockets (the kernel
    queues them) and answers none until resumed: no timeout is long enough for it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        # The kernel's pid (/proc/locks) is of this namespace; the one written in the file
        # may be another container's.
        pid = _flock_holder(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        pid = None
    finally:
        os.close(fd)
    return pid if pid is not None and process_state(pid) in {"T", "t"} else None


class AgentDirs:
    """The runtime and state directories as one agent holds them: made, checked and locked."""

    def __init__(self, runtime_dir: Path, state_dir: Path) -> None:
        self.runtime_dir = runtime_dir
        self.state_dir = state_dir
        self.lock: AgentLock | None = None
        self.state_lock: AgentLock | None = None

    def hold(self) -> AgentDirs:
        """Make the directories and take their locks; ConfigError naming the directory (and,
        when another agent holds it, that agent's pid) when this agent cannot have them.
        Taken before the agent binds anything: a second agent with the same metrics_address
        reported the port in use, not the agent that holds the directory."""
        _prepare_dir(self.runtime_dir, "runtime directory", 0o750)
        _prepare_dir(self.state_dir, "state directory", 0o750)
        try:
            # Others must not be able to replace the sockets or plant a flag file.
            check_private_dir(self.runtime_dir, "runtime directory")
            check_state_dir(self.state_dir)
            self.lock = AgentLock(self.runtime_dir / AGENT_LOCK).acquire()
            # Taken where the state directory is the runtime directory too: an agent with a
            # runtime directory of its own and this state directory (or running in the state
            # directory of another) looks for this lock, not the runtime one.
            self._lock_state_dir()
        except RunDirError as error:
            self.release()
            raise ConfigError(str(error)) from None
        return self

    def _lock_state_dir(self) -> None:
        """Two agents on one state directory (a `state_dir` in the machine's config file,
        FOREWARN_STATE_DIR left set) saved over each other's state, and one restarted restored
        the other's notices: a terminate for jobs it was never raised for. LockHeld when
        another agent uses it; a lock that cannot be made (a full disk) stops nothing, as a
        state file that cannot be written does not."""
        lock = AgentLock(
            self.state_dir / STATE_LOCK,
            "keeps its state in {dir}",
            "--state-dir",
            # Made on a full disk, the lock stayed empty, and a second agent's refusal named
            # "pid ?" (in another container, no pid this one's kernel lists either).
            make_room=SpaceReserve(self.state_dir / RESERVE_FILE).spare_a_block,
        )
        try:
            self.state_lock = lock.acquire()
        except LockHeld:
            raise
        except RunDirError as error:
            log.warning(
                "cannot lock the state directory %s (%s); a second agent there would not be "
                "refused",
                self.state_dir,
                error,
            )

    def release(self) -> None:
        for lock in (self.lock, self.state_lock):
            if lock is not None:
                lock.release()
        self.lock = self.state_lock = None


def _prepare_dir(path: Path, what: str, mode: int) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
    except (FileExistsError, NotADirectoryError):
        # "cannot create it (File exists)": told it exists, the reader saw nothing to fix.
        raise ConfigError(f"{what} {path}: {_in_place(path)}") from None
    except OSError as error:
        raise ConfigError(f"{what} {path}: cannot create it ({error.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        if _read_only(path):
            # Told "not writable by uid 0", root looked for an owner or a mode to fix.
            option = "--state-dir" if what.startswith("state") else "--runtime-dir"
            raise ConfigError(
                f"{what} {path}: on a read-only file system; mount it read-write, or give "
                f"the agent a writable one ({option})"
            )
        raise ConfigError(f"{what} {path}: not writable by uid {os.getuid()}")


def _in_place(path: Path) -> str:
    """What stands where a directory was to be made: in `path`'s place, or in one of its
    parents' (`mkdir -p` stops at the first that is not a directory)."""
    for place in (path, *path.parents):
        named = "" if place == path else f"{place} is "
        if place.is_symlink() and not place.exists():
            return f"{named}a symbolic link to {os.readlink(place)}, which does not exist"
        if place.exists() and not place.is_dir():
            return f"{named}a file, not a directory"
    return "cannot create it (File exists)"


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


__all__ = [
    "STATE_LOCK",
    "AgentDirs",
    "AgentLock",
    "LockForbidden",
    "LockHeld",
    "RunDirError",
    "check_private_dir",
    "check_state_dir",
    "flock_holder",
    "lock_holder",
    "process_state",
    "stat_state",
    "stopped_holder",
]
