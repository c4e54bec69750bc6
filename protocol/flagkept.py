"""A handled flag file's deadline, kept beside it for the jobs that start later and for an
agent with the local provider that starts later: written and read by the jobs' guards when no
agent runs (`clients.guard_flag`) and by the agent's local watcher (`providers.local.watch`).

The last job to save for a flag file with a deadline removes the file (a script waits for it
to go) and writes the deadline to `<flag>.jobs/.deadline-<mtime_ns>-<dev>-<ino>`. A job that
starts later, finding no flag file, reads it: the deadline stands, and the job saves and exits
within its exit margin of it, as the agent keeps such a drain until its deadline and replays
it to a client that connects late. Without it, a job started between the save and the
deadline knew nothing of it and trained on until the machine went.

Several records may be there (one per flag handled, jobs of several users in the sticky
directory, each removing only its own): the newest flag's stands. A flag without a deadline
handled later withdraws an older one's, as the agent clears that drain when the file is
written again: its record is removed, or, where another user's cannot be, a record with no
deadline says so. A record is dead once its deadline is a grace past (the agent's: a client
that connects within it still gets the terminate). A deadline kept in an earlier boot (a
runtime directory that outlived a reboot) still names a real moment, an RFC 3339 time as a
duration (`5m` from the writing, its wall time kept: the boot clock it was counted on has
gone): it stands until it is a grace past, unless it passed before this boot began (it was
for the machine the reboot ended), as a `forewarn notify --deadline` of an earlier boot
does. A dead record
is removed where it can be, and makes no job save or exit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from .timefmt import format_time, parse_time, utcnow

log = logging.getLogger("forewarn.clients")

# A flag file's identity: (device, inode, mtime_ns), as guard_flag reads it.
Identity = tuple[int, int, int]

PREFIX = ".deadline-"
# The jobs' directory (`<flag>.jobs`): sticky and open to every user, as /tmp; each removes
# only its own places and records.
DIRECTORY_MODE = 0o1777
# How long past its deadline a kept drain still reaches a job that starts: the agent's grace
# (forewarn.agent.board.DEFAULT_GRACE) before it retires a notice past its deadline.
GRACE_SECONDS = 300.0
# Two readings of the boot time this close are one boot (as forewarn.providers.boot): they
# differ by any step of the wall clock since; a reboot puts a whole uptime between them.
BOOT_TIME_SLACK = 10.0
MAX_RECORD_BYTES = 4096
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def boot_seconds() -> float | None:
    """The kernel's boot clock (CLOCK_BOOTTIME), None where there is none (not Linux)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return None


@dataclass(frozen=True)
class KeptDeadline:
    """One record: the flag it was handled for and its deadline (None: a flag without one,
    handled later, withdrew the older ones'). `boot_deadline`: the deadline on the boot clock
    (CLOCK_BOOTTIME), for one written as a duration, which a step of the wall clock does not
    move; `boot_id` and `booted` tell the boot it was written in; `duration`: written as a
    duration (`5m`), which holds in that boot only."""

    flag: Identity
    deadline: datetime | None
    boot_deadline: float | None = None
    boot_id: str | None = None
    booted: datetime | None = None
    duration: bool = False

    def to_text(self) -> str:
        return json.dumps(
            {
                "flag": list(self.flag),
                "deadline": format_time(self.deadline) if self.deadline else None,
                "boot_deadline": self.boot_deadline,
                "boot_id": self.boot_id,
                "booted": format_time(self.booted) if self.booted else None,
                "duration": self.duration,
            }
        )


def record_name(flag: Identity) -> str:
    dev, ino, mtime_ns = flag
    return f"{PREFIX}{mtime_ns}-{dev}-{ino}"


def record_order(name: str) -> int | None:
    """The mtime (ns) of the flag a record's `name` is of (`record_name`), which orders the
    records; None for a name that is no record's (a writer's temporary file). Before 1970 it
    is negative (`.deadline--86400000000000-...`): read as no number, such a flag's record was
    skipped, and a job started later never learnt its deadline."""
    rest = name[len(PREFIX) :] if name.startswith(PREFIX) else ""
    digits = (rest[1:] if rest.startswith("-") else rest).partition("-")[0]
    if not digits.isascii() or not digits.isdigit():
        return None
    return -int(digits) if rest.startswith("-") else int(digits)


def parse_record(text: str) -> KeptDeadline | None:
    """The record `text` holds, or None when it is none (damaged, another version's)."""
    try:
        payload = json.loads(text)
    # RecursionError: nested past the recursion limit (4,096 `[` fit in the 4 KiB read), in a
    # directory every user may write; it ended the agent's local watcher and the guards'
    # tickers.
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    flag = payload.get("flag")
    # The device and inode are not negative; the mtime is before 1970 for a file touched so
    # (or written under a clock reset to 0): refused, its record was lost to later jobs.
    if (
        not isinstance(flag, list)
        or len(flag) != 3
        or not all(type(part) is int for part in flag)
        or flag[0] < 0
        or flag[1] < 0
    ):
        return None
    deadline_read, deadline = _time(payload.get("deadline"))
    booted_read, booted = _time(payload.get("booted"))
    boot_deadline = payload.get("boot_deadline")
    boot_id = payload.get("boot_id")
    if not deadline_read or not booted_read:
        return None
    if not (boot_id is None or isinstance(boot_id, str)):
        return None
    if boot_deadline is not None and (
        type(boot_deadline) not in (int, float) or not -1e15 < boot_deadline < 1e15
    ):
        return None
    # Written before the field was: only a duration was kept on the boot clock.
    duration = payload.get("duration", boot_deadline is not None)
    if type(duration) is not bool:
        return None
    return KeptDeadline(
        (flag[0], flag[1], flag[2]),
        deadline,
        None if boot_deadline is None else float(boot_deadline),
        boot_id,
        booted,
        duration,
    )


def _time(value: object) -> tuple[bool, datetime | None]:
    """(read, the time): an RFC 3339 time as the record holds it, or none; not read for
    anything else."""
    if value is None:
        return True, None
    if not isinstance(value, str):
        return False, None
    try:
        return True, parse_time(value)
    except (ValueError, OverflowError):
        return False, None


def this_boot() -> tuple[str | None, datetime | None]:
    """(boot id, boot time): what tells a record written in this boot of the machine."""
    try:
        boot = BOOT_ID_PATH.read_text().strip().lower() or None
    except (OSError, UnicodeDecodeError):
        boot = None
    up = boot_seconds()
    return boot, None if up is None else utcnow() - timedelta(seconds=up)


def same_boot(record: KeptDeadline, boot: tuple[str | None, datetime | None]) -> bool:
    """Whether `record` was written in this boot (by the boot id, else the boot time); a
    record that cannot tell counts as this boot's."""
    boot_id, booted = boot
    if boot_id is not None and record.boot_id is not None:
        return record.boot_id == boot_id
    if booted is not None and record.booted is not None:
        return abs((record.booted - booted).total_seconds()) <= BOOT_TIME_SLACK
    return True


def seconds_left(
    record: KeptDeadline,
    now: datetime,
    boot: tuple[str | None, datetime | None],
    up: float | None,
) -> float | None:
    """Seconds until the record's deadline (negative: past), None when it is dead: no
    deadline, one of an earlier boot that passed before this boot began, or more than the
    grace past. A deadline written as a duration is counted on the boot clock in the boot
    that wrote it; in a later boot it is the wall time the record keeps (the writing plus the
    duration), judged as a time is, as the agent judges `forewarn notify --deadline 30m` of an
    earlier boot: a reboot does not call off the reclaim a deadline was written for."""
    if record.deadline is None:
        return None
    this = same_boot(record, boot)
    booted = boot[1]
    if not this and booted is not None and record.deadline < booted:
        # Passed before this machine started: it named the machine the reboot ended. Kept the
        # grace, a job started after the boot saved and exited at its first look.
        return None
    if this and record.boot_deadline is not None and up is not None:
        left = record.boot_deadline - up
    else:
        left = (record.deadline - now).total_seconds()
    return None if left < -GRACE_SECONDS else left


class KeptDeadlines:
    """The records in the jobs' directory `directory` (`<flag>.jobs`)."""

    def __init__(self, directory: Path, logger: logging.Logger = log) -> None:
        self.directory = directory
        self.log = logger  # the reader's: a job's guard, or the agent's local watcher

    def _records(self) -> list[tuple[str, KeptDeadline | None]]:
        """(name, record) for every record there, oldest flag first (None: unreadable)."""
        try:
            names = [name for name in os.listdir(self.directory) if name.startswith(PREFIX)]
        except OSError:
            return []
        found: list[tuple[int, str, KeptDeadline | None]] = []
        for name in names:
            order = record_order(name)
            if order is None:
                continue  # a writer's temporary file, or nothing of ours
            found.append((order, name, self._read(name)))
        found.sort(key=lambda entry: (entry[0], entry[1]))
        return [(name, record) for _, name, record in found]

    def _read(self, name: str) -> KeptDeadline | None:
        try:
            fd = os.open(self.directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            return parse_record(os.read(fd, MAX_RECORD_BYTES).decode(errors="replace"))
        except OSError:
            return None
        finally:
            os.close(fd)

    def in_force(self) -> KeptDeadline | None:
        """The newest flag's record, when its deadline still stands (see `seconds_left`); the
        older records, and the newest when dead, are removed on the way where they can be."""
        records = self._records()
        if not records:
            return None
        name, newest = records[-1]
        boot = this_boot()
        alive = newest is not None and (
            seconds_left(newest, utcnow(), boot, boot_seconds()) is not None
        )
        older = [older_name for older_name, _ in records[:-1]]
        left = [older_name for older_name in older if not self._remove(older_name)]
        if not alive and not left:
            # Kept while an older one stays (another user's): removed, that one stood again.
            self._remove(name)
        return newest if alive else None

    def keep(self, record: KeptDeadline) -> None:
        """Write `record` for the flag just handled (its deadline, or None to withdraw an older
        flag's), and remove the older records this user can."""
        names = [name for name, _ in self._records() if name != record_name(record.flag)]
        left = [name for name in names if not self._remove(name)]
        if record.deadline is None and not left:
            return  # nothing older stands: no record needed
        temporary = self.directory / f"{PREFIX}tmp-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.fchmod(fd, 0o644)  # read by the other users' jobs, whatever the umask
                os.write(fd, record.to_text().encode())
            finally:
                os.close(fd)
            os.replace(temporary, self.directory / record_name(record.flag))
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink()
            self.log.warning(
                "forewarn: cannot keep the flag file's deadline in %s (%s): a job or an agent "
                "started before it passes will not know of it",
                self.directory,
                error.strerror or error,
            )

    def make_directory(self) -> None:
        """Make the jobs' directory where there is none yet (a record needs it)."""
        if self.directory.is_dir():
            return
        with contextlib.suppress(OSError):
            self.directory.mkdir(mode=0o700)
            # Open to the other users' jobs (the umask would take the bits from mkdir's mode).
            os.chmod(self.directory, DIRECTORY_MODE)

    def withdraw(self, mtime_ns: int) -> None:
        """Remove the records of the flag written at `mtime_ns` (its drain ended)."""
        prefix = f"{PREFIX}{mtime_ns}-"
        for name, _ in self._records():
            if name.startswith(prefix):
                self._remove(name)

    def prune(self) -> None:
        """Remove the records that no longer say anything (see `in_force`)."""
        self.in_force()

    def _remove(self, name: str) -> bool:
        try:
            (self.directory / name).unlink()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


__all__ = [
    "DIRECTORY_MODE",
    "GRACE_SECONDS",
    "KeptDeadline",
    "KeptDeadlines",
    "parse_record",
    "record_name",
    "record_order",
    "same_boot",
    "seconds_left",
    "this_boot",
]
