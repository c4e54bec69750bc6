"""The runtime directory as a place others cannot tamper with: checked for owner and mode
before use, and held by one agent at a time through a lock file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from pathlib import Path

from forewarn.protocol.errors import ForewarnError


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


class LockHeld(RunDirError):
    """Another agent holds the lock; the text names its pid and the directory."""


class AgentLock:
    """An exclusive lock on a file in the runtime directory (and one in the state directory),
    held while the agent runs. The kernel drops it when the process dies, so a SIGKILLed agent
    never blocks the next one."""

    def __init__(
        self, path: Path, held: str = "runs on {dir}", option: str = "--runtime-dir"
    ) -> None:
        """`held` says what the other agent does with the lock's directory, `option` how to
        give this one its own."""
        self.path = path
        self.held = held
        self.option = option
        self.fd: int | None = None

    def acquire(self) -> AgentLock:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o640)
        except OSError as error:
            raise RunDirError(f"cannot open the lock {self.path}: {error.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            held = self.held.format(dir=self.path.parent)
            raise LockHeld(
                f"another agent (pid {holder}) {held}: stop it, or give this one its own "
                f"{self.option}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


__all__ = ["AgentLock", "LockHeld", "RunDirError", "check_private_dir"]
