"""The jobs on one node that take one flag file themselves (no agent with the local provider
runs): each holds a locked file of its own in `<flag>.jobs/`, writes there which flag it saved
for, and the file goes once every job still running has saved for it, as the agent removes it
once every client acked. Removed at the first job's save, it told an operator's script that
waits for it to go that every job had saved while another was still saving (or never would:
its ticker had not looked yet).

A job's lock (flock) goes with its process, so a job killed before its save holds nothing.
A place that cannot be read (an older version made them 0600) cannot be locked to tell: its
name's pid says whether its job runs (the jobs sharing a runtime directory share a pid
namespace, as their flock does not need; one in another container is read as gone only where
its pid names no process here, a risk only with that older version's places).

The jobs may run as different users on one shared runtime directory: the directory is made
world-writable and sticky (as /tmp: each job removes only its own place) and the places
readable, so that every job can join and see the others. A job that cannot see them (a
directory an older version made 0700 for its own user) never removes the flag on its own: it
removed the file at its own save, while the other user's job still saved, or before that job
had even looked and saved at all.

The directory also holds the deadline of a flag handled with one (`.deadline-...`, see
protocol.flagkept) for the jobs that start before it passes: a dot-file, which no job takes for
a place, and which keeps the directory after the last job leaves until that deadline is dead.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import secrets
from pathlib import Path

from forewarn.protocol.flagkept import DIRECTORY_MODE, KeptDeadlines

log = logging.getLogger("forewarn.clients")

# A flag file's identity, as `guard_flag._identity` reads it: (device, inode, mtime_ns).
Identity = tuple[int, int, int]

# Sticky and open to every user, as /tmp (DIRECTORY_MODE); a place says only which flag its job
# saved for.
PLACE_MODE = 0o644


def _text(identity: Identity) -> str:
    return " ".join(str(part) for part in identity) + "\n"


def _job_gone(name: str) -> bool:
    """Whether the job whose place is `name` (`<pid>-<hex>`) is surely gone: no process has
    its pid. Another user's live process (EPERM), or a pid used again since, counts as there:
    the flag waits for it, as it would for a job still saving."""
    pid_text, dash, _ = name.partition("-")
    if not dash or not pid_text.isascii() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if not 0 < pid < 2**31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class FlagJobs:
    """This job's place among the jobs reading `flag`. Without one (a directory it may not
    write, as another user's agent's 0750 runtime directory), the job saves and removes the
    file as one job alone does; the others still count it out."""

    def __init__(self, flag: Path) -> None:
        self.directory = flag.with_name(flag.name + ".jobs")
        self._fd: int | None = None
        self._name: str | None = None
        self._pid = os.getpid()  # whose place it is

    @property
    def joined(self) -> bool:
        self._after_fork()
        return self._fd is not None

    def _after_fork(self) -> None:
        """In a process forked from the job (a forked rank), the place inherited is the
        parent's: written or removed there, the child said the parent had saved, or took its
        place away. The child lets go of it (the lock stays the parent's) and joins anew."""
        if self._pid == os.getpid():
            return
        inherited, self._fd, self._name = self._fd, None, None
        self._pid = os.getpid()
        if inherited is not None:
            os.close(inherited)
            self.join()

    def join(self) -> bool:
        """Take a place (once); False when none can be made (the flag's directory missing or
        not writable)."""
        self._after_fork()
        if self._fd is not None:
            return True
        name = f"{os.getpid()}-{secrets.token_hex(4)}"
        # Locked before it gets its name: a job listing the directory in between would have
        # taken an unlocked file for a dead job's and removed it.
        temporary = self.directory / f".{name}"
        fd = None
        for _ in range(2):  # once more when the last job to leave removed the directory
            try:
                try:
                    self.directory.mkdir(mode=0o700)
                    # Open to the other users' jobs, each removing only its own (the umask
                    # would take the bits away from mkdir's mode).
                    os.chmod(self.directory, DIRECTORY_MODE)
                except FileExistsError:
                    pass
                fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, PLACE_MODE)
                os.fchmod(fd, PLACE_MODE)
                break
            except FileNotFoundError:
                continue
            except OSError:
                return False
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(temporary, self.directory / name)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                temporary.unlink()
            return False
        self._fd, self._name = fd, name
        # A job that ends without close() (the README's loop ends with sys.exit) leaves here
        # too: its place, unlocked, stayed with the directory until the next job started.
        atexit.register(self._leave_at_exit)
        self._remove_ended()
        return True

    def _leave_at_exit(self) -> None:
        if self._pid == os.getpid():  # not in a process forked from the job
            self.leave()

    def _remove_ended(self) -> None:
        """Remove the places of jobs that ended without leaving (killed, crashed): they no
        longer counted, yet stayed in the directory for ever, one a killed job, and kept it
        after the last live job left. Told by the lock, which goes with its process, not by
        the pid in the name, which another process may have since."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name.startswith(".") or name == self._name:
                continue  # a record, a place being made, or this job's own
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # gone meanwhile, or another user's that cannot be read
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                continue  # its job holds it (or it cannot be locked to tell)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            finally:
                os.close(fd)

    def saved_for(self, identity: Identity) -> None:
        """Note that this job saved for the flag `identity`."""
        self._after_fork()
        if self._fd is None:
            return
        text = _text(identity).encode()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text, 0)

    def all_saved(self, identity: Identity) -> bool:
        """Whether every other job still running has saved for `identity` (the places of jobs
        that are gone are removed on the way)."""
        self._after_fork()
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return True  # no job took a place
        except OSError:
            return False  # the other jobs cannot be seen: they may not have saved
        wanted = _text(identity)
        for name in names:
            if name.startswith(".") or name == self._name:
                continue
            path = self.directory / name
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # gone meanwhile
            except OSError:
                if _job_gone(name):
                    # An older version's place (0600) that its job, killed, left behind:
                    # another user's job can neither read nor remove it, and it held the
                    # flag for ever.
                    continue
                return False  # another user's place that cannot be read: it may not have saved
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    # Its job holds it: a partial write reads as not saved, looked at again.
                    if os.pread(fd, 64, 0).decode(errors="replace") != wanted:
                        return False
                    continue
                except OSError:
                    continue
                with contextlib.suppress(OSError):
                    path.unlink()  # its job is gone without leaving
            finally:
                os.close(fd)
        return True

    def leave(self) -> None:
        """Give up the place (the job closes): it counts no more."""
        self._after_fork()
        atexit.unregister(self._leave_at_exit)
        fd, name = self._fd, self._name
        self._fd = self._name = None
        if fd is None or name is None:
            return
        with contextlib.suppress(OSError):
            (self.directory / name).unlink()
        os.close(fd)
        self._remove_ended()  # so that the last live job to leave removes the directory
        # A deadline kept there for the jobs that start later stays until it is dead.
        KeptDeadlines(self.directory).prune()
        with contextlib.suppress(OSError):
            self.directory.rmdir()  # the last job leaves nothing else behind
