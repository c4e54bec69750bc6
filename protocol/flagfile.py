"""The flag file's content, read as the agent's local provider reads it and as a job's guard
reads it when no agent with the local provider runs: one reader, so the two never disagree on
whether a drain has a deadline (the guard took `5m` for a plain drain, and the job trained on
past its save until the machine went at the deadline)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .errors import ForewarnError
from .timefmt import format_time, parse_deadline, parse_time

# A deadline and a short note fit in far less; the rest of a larger file is never read.
MAX_FLAG_BYTES = 4096
# Seconds a flag file's mtime may be off what its reader (the agent's watcher, a guard) can
# tell of the writing (after the first read, before the last look that found no file) before
# it is taken for a step of the wall clock (`written_anchor`): a filesystem's coarse times, a
# look that took a while.
FLAG_CLOCK_SLACK = 2.0
# A time in a flag file this many seconds before the file was written was past already then
# (a wrong year, a local time written with `Z`): it is no deadline. Read as one, the agent sent
# a terminate due years ago and every job on the node exited at once, each job started later
# too. The agent's notice grace (`DEFAULT_GRACE`): a time a little past (`date` read before a
# slow write) still stands, due now.
PAST_AT_WRITING_SECONDS = 300.0
# A deadline this many seconds past when the file is read (the agent's notice grace, past which
# it retires a notice) is no deadline either: a flag file left over (written with a right time,
# then the machine ran on for days on a runtime directory that is no tmpfs) read as a
# terminate due at once, and every job started on the node exited at its first step. Its
# drain stands without one: a checkpoint, and training goes on.
PAST_AT_READING_SECONDS = 300.0
# Said by the agent's log and `status` and by a guard that takes the flag itself: what is
# there is refused, and what to do instead.
NOT_REGULAR = (
    "is not a regular file (a FIFO, device or directory): no drain is raised; "
    "remove it and write the flag file itself (touch)"
)
SYMLINK = (
    "is a symbolic link, not followed: no drain is raised; "
    "write the flag file itself (touch), not a link to one"
)


class FlagError(ForewarnError, OSError):
    """The flag path is there but is not a flag file forewarn will read."""


def read_flag(path: Path) -> tuple[int, str | None] | None:
    """(mtime_ns, content) of the flag file, or None when there is none. The runtime directory
    may be shared (a Kubernetes emptyDir), so the file is opened without following a link and
    without blocking on a FIFO, must be a regular file, and at most MAX_FLAG_BYTES are read.
    The content is None when the file is there but its mode keeps the reader from reading it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except PermissionError:
        # Its appearance is the request, its content optional: `sudo touch` under root's
        # umask 027 made a 0640 root:root flag the `forewarn` user could not open, and no
        # drain was raised at all. lstat needs no read permission.
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(found.st_mode):
            raise FlagError(errno.EINVAL, NOT_REGULAR) from None
        return found.st_mtime_ns, None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise FlagError(error.errno, SYMLINK) from None
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise FlagError(errno.EINVAL, NOT_REGULAR)
        content = os.read(fd, MAX_FLAG_BYTES)
    finally:
        os.close(fd)
    # Without a leading byte-order mark, which Windows editors and PowerShell's
    # `Set-Content -Encoding utf8` write: "\ufeff5m" was no deadline, the drain had none.
    return found.st_mtime_ns, content.decode("utf-8-sig", errors="replace")


# What an mtime past the dates Python holds (before year 1, after 9999) reads as: tmpfs, where
# the runtime directory lives (/run), keeps 64-bit seconds (`touch -d @400000000000`), and
# `fromtimestamp` raised, ending the agent's local watcher at every look (no drain raised)
# and a job's guard ticker. Far off either way, so `written_anchor` counts from the first
# read, as for any mtime the clock cannot have written; inside the range, so a duration
# (`5m`) counted from it still holds a date.
LATEST_WRITTEN = datetime(9999, 1, 1, tzinfo=timezone.utc)
EARLIEST_WRITTEN = datetime(1, 1, 2, tzinfo=timezone.utc)


def flag_written(mtime_ns: int) -> datetime:
    """When the flag file was written (its mtime): a duration in it counts from then. An mtime
    no date holds reads as LATEST_WRITTEN or EARLIEST_WRITTEN."""
    try:
        return datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc)
    except (OverflowError, ValueError, OSError):  # OSError: EOVERFLOW, past the C time_t
        return LATEST_WRITTEN if mtime_ns > 0 else EARLIEST_WRITTEN


def flag_mtime_text(mtime_ns: int) -> str:
    """The mtime as a warning shows it: RFC 3339, or, where no date holds it, its seconds
    from 1970 as `touch -d` takes them (`@400000000000`), not the date it reads as."""
    try:
        return format_time(datetime.fromtimestamp(mtime_ns / 1e9, timezone.utc))
    except (OverflowError, ValueError, OSError):
        return f"@{mtime_ns // 10**9} (past any date)"


def line_deadline(
    line: str,
    written: datetime,
    read: datetime | None = None,
    started: datetime | None = None,
) -> datetime:
    """The deadline a flag file's first line holds (RFC 3339, or a duration counted from
    `written`); ValueError naming why it is none: not a deadline (`parse_deadline`), a time
    past by more than PAST_AT_WRITING_SECONDS when the file was written, or, read at `read`
    on a machine that started at `started`, one dead then (`past_when_read`)."""
    deadline = parse_deadline(line, now=written)
    if (written - deadline).total_seconds() > PAST_AT_WRITING_SECONDS:
        raise ValueError(
            f"{line.strip()!r} was past already when the file was written "
            f"({format_time(written)}): a wrong year, or a local time written as UTC?"
        )
    stale = None if read is None else past_when_read(deadline, read, written, started)
    if stale is not None:
        raise ValueError(f"{line.strip()!r} {stale}")
    return deadline


def past_when_read(
    deadline: datetime,
    read: datetime,
    written: datetime | None = None,
    started: datetime | None = None,
) -> str | None:
    """Why `deadline`, read at `read`, is no deadline, None when it stands: more than
    PAST_AT_READING_SECONDS past (a flag file left over), or, in a file written (`written`,
    its `written_anchor`) before this machine started (`started`: an earlier boot's, on a
    runtime directory that outlives a reboot), past before it started. That deadline named
    the machine the reboot ended, as a kept deadline of an earlier boot
    (`flagkept.seconds_left`) and a `forewarn notify --deadline` of one are dead then: read
    within the 300 s, it stood, due at once, and every job started after the boot saved and
    exited at its first step."""
    if (
        written is not None
        and started is not None
        and written < started - timedelta(seconds=FLAG_CLOCK_SLACK)
        and deadline < started
    ):
        return (
            f"names the deadline {format_time(deadline)}, which passed before this machine "
            f"started ({format_time(started)}; the file was written at {format_time(written)}, "
            "in an earlier boot): a flag file left over?"
        )
    if (read - deadline).total_seconds() <= PAST_AT_READING_SECONDS:
        return None
    return (
        f"names the deadline {format_time(deadline)}, more than "
        f"{PAST_AT_READING_SECONDS:g} s past when the file was read ({format_time(read)}): "
        "a flag file left over?"
    )


# How much of a first line that is no deadline a warning shows.
SHOWN_CHARS = 200


def unread_deadline(
    content: str,
    created: datetime,
    read: datetime | None = None,
    started: datetime | None = None,
) -> str | None:
    """Why the first line of a flag file's content is no deadline (read at `read` on a
    machine that started at `started`, see `line_deadline`), None when it is one or the
    content is blank. The line is shown escaped and cut at SHOWN_CHARS."""
    text = content.strip()
    if not text:
        return None
    line = text.splitlines()[0]
    shown = line[:SHOWN_CHARS]
    try:
        line_deadline(shown, created, read, started)
    except (ValueError, OverflowError) as error:
        if len(line) > SHOWN_CHARS:
            return f"{shown!r}... ({len(line)} characters) is not a deadline"
        return str(error)
    return None


def flag_deadline(content: str, mtime_ns: int, written: datetime | None = None) -> datetime | None:
    """The deadline the first line of a flag file's content holds (RFC 3339, or a duration
    such as `15m` counted from when the file was written, not from when it is read: `written`,
    else its mtime), or None (blank, or anything else: kept as a note)."""
    text = content.strip()
    if not text:
        return None
    try:
        return line_deadline(text.splitlines()[0], written or flag_written(mtime_ns))
    except (ValueError, OverflowError):
        return None


def flag_deadline_is_duration(content: str) -> bool:
    """Whether the first line of a flag file's content is a deadline given as a duration
    (`5m`), elapsed time from the writing, rather than a moment (RFC 3339)."""
    text = content.strip()
    if not text:
        return False
    line = text.splitlines()[0]
    try:
        parse_time(line)
    except ValueError:
        return flag_deadline(content, 0) is not None
    return False


# Filesystems whose files never outlive a boot: a flag file there was written in this one.
VOLATILE_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
MOUNTINFO = Path("/proc/self/mountinfo")


def _unescape_mount_point(text: str) -> str:
    r"""A mount point as mountinfo writes it, its space, tab, newline and backslash as octal
    escapes (`\040`), read back."""
    out, index = [], 0
    while index < len(text):
        code = text[index + 1 : index + 4]
        if text[index] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            index += 4
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def filesystem_type(path: str, mountinfo: str) -> str | None:
    """The type of the filesystem `path` (absolute, links resolved) is on, by the mount
    whose mount point is the longest prefix of it in `mountinfo` (/proc/self/mountinfo's
    text); None when no line names one. A line that is not mountinfo's is skipped."""
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields, sep, rest = line.partition(" - ")
        parts = fields.split(" ")
        if not sep or len(parts) < 5 or not rest.split(" ", 1)[0]:
            continue
        point = _unescape_mount_point(parts[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), rest.split(" ", 1)[0])  # the last mount over it wins
    return None if best is None else best[1]


def outlives_boot(path: Path) -> bool:
    """Whether the flag file `path` can be one an earlier boot of the machine wrote: its
    filesystem is no tmpfs (a runtime directory under /var, a home directory, a volume).
    False where the mounts cannot be read (not Linux): as before, a step of the clock."""
    try:
        mounts = MOUNTINFO.read_text(errors="replace")
        where = os.path.realpath(path.parent)
    except OSError:
        return False
    kind = filesystem_type(where, mounts)
    return kind is not None and kind not in VOLATILE_FILESYSTEMS


def written_anchor(
    written: datetime,
    now: datetime,
    booted: float | None,
    empty_at: float | None,
    outlives: Callable[[], bool] = lambda: False,
) -> datetime:
    """When a flag file written at `written` (its mtime, on the wall clock then) counts as
    written, read first at `now` with the boot clock at `booted`; `empty_at`: the boot clock
    at the reader's last look that found no file, None when the file was there at its first.
    The mtime, unless a step of the wall clock since the writing shows: an mtime in the
    future (the clock stepped back), one before the last look that found no file, or one
    before this machine booted (the clock stepped forward: NTP's first sync after a boot
    script wrote the flag). Then the first read is the honest anchor: a `10m` written 2 h
    before a step 2 h forward was 1 h 50 min past at once, a terminate and its clear.
    `outlives()`: whether the file's filesystem outlives a boot (`outlives_boot`, asked
    only then); there a file found at the first look with an mtime before this boot may be
    an earlier boot's, and its mtime stands: a duration is the writing plus it, judged as a
    moment (more than 5 min past when read, a flag file left over, it is none), as a kept
    deadline of an earlier boot is (`flagkept`). Counted from the read, a `10m` left two
    days before a reboot was a terminate 10 min after the agent started."""
    slack = timedelta(seconds=FLAG_CLOCK_SLACK)
    if written > now + slack:
        return now
    if booted is not None:
        # How long ago, at most, the file can have been written, by the boot clock.
        since = booted - empty_at if empty_at is not None else booted
        if now - written > timedelta(seconds=max(0.0, since)) + slack:
            # An mtime no date holds is no earlier boot's writing.
            earlier_boot = empty_at is None and written > EARLIEST_WRITTEN and outlives()
            return written if earlier_boot else now
    return written


__all__ = [
    "EARLIEST_WRITTEN",
    "FLAG_CLOCK_SLACK",
    "LATEST_WRITTEN",
    "MAX_FLAG_BYTES",
    "PAST_AT_READING_SECONDS",
    "PAST_AT_WRITING_SECONDS",
    "SHOWN_CHARS",
    "VOLATILE_FILESYSTEMS",
    "FlagError",
    "filesystem_type",
    "flag_deadline",
    "flag_deadline_is_duration",
    "flag_mtime_text",
    "flag_written",
    "line_deadline",
    "outlives_boot",
    "past_when_read",
    "read_flag",
    "unread_deadline",
    "written_anchor",
]
