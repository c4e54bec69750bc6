"""Local triggers a person can pull: a flag file that raises a drain.

The file (default `checkpoint-now` in the runtime directory) raises a drain notice when it
appears. It is removed once handled, that is once every client that received the notice has
acked its flush; until then the notice stays active, so a client that joins late still gets
it. A drain with a deadline stays in force after that until the agent retires it past its
deadline (sent as terminate within the exit margin, as any drain with a deadline is). Written
again (a new mtime), it is a new request: the earlier notice is cleared and a new
one raised. Removed by hand, it clears its notice. Manual notices from the control socket are
the agent's own (`forewarn notify`).

The deadline of a flag handled with one is also kept beside the file
(`checkpoint-now.jobs/.deadline-...`, see protocol.flagkept), where the jobs' guards keep it
when no agent runs: an agent that starts later finds it there and raises the drain again (a
job connected to it heard nothing: its guard leaves the flag to the agent), and a job started
after this agent stops finds it too. The record goes once dead (the drain retired), and a new
flag file withdraws it, as it clears the drain.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

from forewarn.protocol.flagfile import (
    FLAG_CLOCK_SLACK,
    MAX_FLAG_BYTES,
    SHOWN_CHARS,
    FlagError,
    flag_deadline_is_duration,
    flag_mtime_text,
    flag_written,
    line_deadline,
    outlives_boot,
    read_flag,
    unread_deadline,
    written_anchor,
)
from forewarn.protocol.flagkept import (
    Identity,
    KeptDeadline,
    KeptDeadlines,
    record_name,
    same_boot,
    this_boot,
)
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.report import Report

from ..base import Emit, WatcherContext
from ..boot import since_boot
from ..ticks import sleep_to_tick
from .settings import Settings

log = logging.getLogger("forewarn.providers.local")

FLAG_NAME = "checkpoint-now"


# How many first lines that are no deadline are remembered, so that each is warned about once.
WARNED_KEPT = 64


def flag_report(
    path: Path,
    content: str,
    mtime_ns: int,
    written: datetime | None = None,
    read: datetime | None = None,
    started: datetime | None = None,
) -> Report:
    """The drain a flag file stands for. Its content may hold a deadline (RFC 3339, or a
    duration such as `15m` counted from when the file was written, not from when it is read:
    `written`, else its mtime; see `written_anchor`; none when, read at `read` on a machine
    that started at `started`, it is dead: long past, or an earlier boot's that passed before
    this one began, `line_deadline`); anything else is kept as a note (the watcher warns about
    it: `unread_deadline`)."""
    text = content.strip()
    # When someone raised the notice: as `notice_time` it lets the metrics measure how long
    # the agent took to see it.
    created = written or flag_written(mtime_ns)
    deadline = _deadline(text, created, read, started)
    detail: dict[str, object] = {"path": str(path), "notice_time": format_time(created)}
    if text:
        detail["content"] = text[:500]
        if deadline is None:
            # Kept as its note, as `forewarn notify --note` keeps one: `watch` and `status`
            # show a note, and showed nothing of a `terminate 10m` the drain did not read.
            detail["note"] = text[:500]
    return Report(
        id=f"local/flag/{mtime_ns:x}",
        action="drain",
        reason="manual",
        provider="local",
        deadline=deadline,
        noticed_at=utcnow(),
        detail=detail,
        # `5m` is five minutes of real time from the writing: the agent keeps it on the boot
        # clock, so a step of the wall clock moves the deadline with it.
        deadline_is_duration=deadline is not None and flag_deadline_is_duration(content),
    )


def _deadline(
    text: str, written: datetime, read: datetime | None, started: datetime | None
) -> datetime | None:
    """The deadline the first line of `text` holds (a duration counts from `written`), or
    None (blank, or anything else: kept as a note)."""
    if not text:
        return None
    try:
        return line_deadline(text.splitlines()[0], written, read, started)
    except (ValueError, OverflowError):
        return None


def _machine_started() -> datetime | None:
    """When this machine started by the wall clock now (now less the boot clock), None where
    the boot clock cannot be read."""
    booted = since_boot()
    return None if booted is None else utcnow() - timedelta(seconds=booted)


def _on_boot_clock(report: Report) -> float | None:
    """The deadline of `report` by `since_boot()` from now, where it was written as a
    duration; else None (a deadline written as a time names a moment, which a step of the
    wall clock does not move)."""
    booted = since_boot()
    if not report.deadline_is_duration or report.deadline is None or booted is None:
        return None
    return booted + (report.deadline - utcnow()).total_seconds()


class LocalWatcher:
    name: ClassVar[str] = "local"

    def __init__(self, flag_file: Path, interval: float, context: WatcherContext) -> None:
        self.flag_file = flag_file
        self.interval = interval
        self.context = context
        self.current: Report | None = None
        # The flushed flag's notice, its file removed, kept in force until its deadline; and
        # whether it is to be reported again (handed back after an agent restart).
        self._kept = False
        self._report_again = False
        # The flag notices the agent restored from its state (`restored`): one taken up from
        # its kept deadline is no flag the jobs handled while no agent ran.
        self._restored_flags: set[str] = set()
        # The deadline of `current` by `since_boot()`, where it was written as a duration:
        # whether it is still ahead is judged on it, which no step of the wall clock moves.
        self._deadline_at: float | None = None
        self._emit: Emit | None = None
        # `since_boot()` at the last look that found no file: a file found later was written
        # since (`written_anchor`).
        self._empty_at: float | None = None
        self._warned: dict[str, None] = {}  # first lines already warned about, oldest first
        # The deadlines of flags handled, kept beside the file for the jobs' guards and for an
        # agent started later (see protocol.flagkept); whether this watcher has read them (at
        # its first look that finds no file: a file there is the request in force); and the
        # identity of the flag `current` stands for, which names its record.
        self.kept = KeptDeadlines(flag_file.with_name(flag_file.name + ".jobs"), log)
        self._kept_read = False
        self._flag: Identity | None = None

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        self._emit = emit
        while True:
            await self.poll(emit)
            # On the grid the agent's heartbeats and probes wake on: one wake-up for them all.
            await sleep_to_tick(self.interval)

    async def _look(self) -> tuple[int, str | None] | None:
        # Mostly there is no flag, and one lstat on the loop says so: a thread hop for every
        # look cost the idle agent 0.25 % of a core at four looks a second (half its idle
        # CPU), and the runtime directory is local (a tmpfs or an emptyDir). Opening and
        # reading what is there stay off the loop: whatever was planted stalls this watcher
        # only.
        try:
            os.lstat(self.flag_file)
        except FileNotFoundError:
            return None
        except OSError:
            pass  # read_flag meets it again and names it
        return await asyncio.to_thread(read_flag, self.flag_file)

    async def poll(self, emit: Emit) -> None:
        try:
            found = await self._look()
        except OSError as error:
            self.context.health.error("stat", f"{self.flag_file}: {error.strerror or error}")
            return
        if found is None:
            self._empty_at = since_boot()
            if not self._kept_read:
                self._kept_read = True
                if self.current is None:
                    await self._take_kept(emit)
            if self.current is not None and self._report_again:
                # Reported again, or the agent withdraws it once this watcher has answered.
                self._report_again = False
                emit(self.current)
            elif self.current is not None and not self._kept:
                # Removed by hand before anyone flushed: withdraw the notice.
                emit(self.current.model_copy(update={"action": "clear"}))
                self.current = None
            self.context.health.success()
            return
        mtime_ns, content = found
        self._kept_read = True  # the file there is the request in force
        if self.current is None or self.current.id != f"local/flag/{mtime_ns:x}":
            if self.current is not None:
                # Written again: a new request replaces the one in force, which nothing would
                # clear later (a flush, a retirement and the file's removal name the new id).
                emit(self.current.model_copy(update={"action": "clear"}))
            # The older flags' kept deadlines go with their drains: left there, the next
            # agent or a job started after this one read a withdrawn deadline.
            self._flag = await asyncio.to_thread(self._withdraw_kept, mtime_ns)
            # Read now: a deadline long past (a flag file left over) is none, as a guard
            # reads it, and every job connected would have exited at its first step.
            written = self._written(mtime_ns)
            self.current = flag_report(
                self.flag_file, content or "", mtime_ns, written, utcnow(), _machine_started()
            )
            self._deadline_at = _on_boot_clock(self.current)
            self._kept = self._report_again = False
            log.info("flag file %s found: drain %s", self.flag_file, self.current.id)
            if content is None:
                # Once per request (a new mtime): a deadline written there is not seen.
                log.warning(
                    "flag file %s: cannot read it (permission denied): the drain has no "
                    "deadline or note from it; make it readable by the agent's user",
                    self.flag_file,
                )
            elif self.current.deadline is None:
                self._warn_unread(content, written)
            emit(self.current)
        self.context.health.success()

    def _written(self, mtime_ns: int) -> datetime:
        """When the file found with `mtime_ns` counts as written (`written_anchor`)."""
        mtime, now = flag_written(mtime_ns), utcnow()
        anchor = written_anchor(
            mtime, now, since_boot(), self._empty_at, lambda: outlives_boot(self.flag_file)
        )
        if anchor != mtime:
            log.warning(
                "flag file %s: its mtime %s is not when it was written by this clock (read "
                "at %s: the clock was stepped since); a duration in it counts from now",
                self.flag_file,
                flag_mtime_text(mtime_ns),
                format_time(now),
            )
        return anchor

    def _warn_unread(self, content: str, written: datetime) -> None:
        # Someone who wrote `terminate 10m` or `06:00` meant a deadline: the drain raised
        # without one must not pass in silence. Once per distinct text, as a file touched
        # again keeps its content.
        why = unread_deadline(content, written, utcnow(), _machine_started())
        if why is None:
            return
        key = content.strip().splitlines()[0][:SHOWN_CHARS]
        if key in self._warned:
            return
        self._warned[key] = None
        while len(self._warned) > WARNED_KEPT:
            del self._warned[next(iter(self._warned))]
        log.warning(
            "flag file %s: first line %s; the drain has no deadline (the text is kept as its note)",
            self.flag_file,
            why,
        )

    def forget(self, notice_id: str) -> None:
        """The agent retired the flag's notice (past its end): if the file is still there the
        next look raises it again, with a fresh lifetime. Its kept deadline goes with it."""
        if self.current is not None and notice_id == self.current.id:
            if self._kept:
                self.kept.withdraw(_mtime_of(notice_id))
            self.current = None
            self._kept = self._report_again = False

    async def _take_kept(self, emit: Emit) -> None:
        """A flag handled before this agent started (by the jobs' guards, or an agent before
        it), its file removed, whose kept deadline still stands (`KeptDeadlines.in_force`):
        raised again as the drain it was, kept in force until its deadline. Without it, a job
        connected to this agent heard nothing (its guard leaves the flag to the agent) and
        trained on until the machine went."""
        record = await asyncio.to_thread(self.kept.in_force)
        if record is None or record.deadline is None:
            return
        now, up = utcnow(), since_boot()
        deadline, self._deadline_at = record.deadline, None
        at = record.boot_deadline if record.duration else None
        if at is not None and up is not None and same_boot(record, this_boot()):
            # Where the wall clock puts it now: it was counted on the boot clock.
            deadline = now + timedelta(seconds=at - up)
            self._deadline_at = at
        mtime_ns = record.flag[2]
        self.current = Report(
            id=f"local/flag/{mtime_ns:x}",
            action="drain",
            reason="manual",
            provider="local",
            deadline=deadline,
            noticed_at=now,
            # No `notice_time`: seen now, it was no detection of the file's writing by this
            # agent, and the metrics took the time since as this agent's detection delay.
            detail={
                "path": str(self.flag_file),
                "kept": str(self.kept.directory / record_name(record.flag)),
            },
            deadline_is_duration=self._deadline_at is not None,
        )
        self._flag = record.flag
        self._kept, self._report_again = True, False
        if self.current.id in self._restored_flags:
            # Past its deadline, so not taken up by `restored`: the agent before this one
            # raised it, and it is in force already. Said as a flag the jobs took while no
            # agent ran, each restart in its grace read as a new drain.
            log.info(
                "flag file %s: drain %s, restored from the state, stays in force (its "
                "deadline %s kept in %s)",
                self.flag_file,
                self.current.id,
                format_time(deadline),
                self.kept.directory,
            )
        else:
            log.warning(
                "flag file %s was handled before this agent started (its deadline kept in %s): "
                "drain %s raised again, deadline %s",
                self.flag_file,
                self.kept.directory,
                self.current.id,
                format_time(deadline),
            )
        emit(self.current)

    def _withdraw_kept(self, mtime_ns: int) -> Identity:
        """The identity of the flag file just found (written at `mtime_ns`); the older flags'
        kept deadlines are withdrawn, as their drains are cleared."""
        try:
            found = os.lstat(self.flag_file)
            flag = (found.st_dev, found.st_ino, mtime_ns)
        except OSError:
            flag = (0, 0, mtime_ns)
        self.kept.keep(KeptDeadline(flag, None))
        return flag

    def _keep(self) -> None:
        """The flag's file removed, its drain kept in force: its deadline is kept beside it
        too, for a job started after this agent stops and for the next agent (after a
        reboot: its state keeps no provider notice of an earlier boot)."""
        if self.current is None or self.current.deadline is None:
            return
        # Restored after a restart, its file's device and inode are not known: named by its
        # mtime, which orders the records and withdraws them.
        flag = self._flag or (0, 0, _mtime_of(self.current.id))
        boot_id, booted = this_boot()
        duration = self._deadline_at is not None
        self.kept.make_directory()
        self.kept.keep(
            KeptDeadline(
                flag,
                self.current.deadline,
                self._deadline_at if duration else None,
                boot_id,
                booted,
                duration,
            )
        )

    def restored(self, reports: list[Report]) -> None:
        """After an agent restart: a flag's drain kept in force past its flush (its file
        removed, its deadline ahead) is taken up again. Otherwise the missing file read as a
        removal by hand, and the agent withdrew the notice: no terminate at its deadline."""
        self._restored_flags = {r.id for r in reports if r.id.startswith("local/flag/")}
        if self.current is not None or os.path.lexists(self.flag_file):
            return  # a file there is read as ever: the same mtime is the same notice
        now = utcnow()
        for report in reports:
            if report.id.startswith("local/flag/") and report.deadline and report.deadline > now:
                self.current = report
                self._deadline_at = _on_boot_clock(report)
                self._kept = self._report_again = True
                return

    def _deadline_ahead(self) -> bool:
        """Whether the deadline of the notice in force is still to come. One written as a
        duration is judged on the boot clock: by the wall clock, NTP stepping it forward 25
        min took a `5m` written a minute before for past, and its flush withdrew the drain
        (no terminate went out)."""
        if self.current is None or self.current.deadline is None:
            return False
        booted = since_boot()
        if self._deadline_at is not None and booted is not None:
            return self._deadline_at > booted
        return self.current.deadline > utcnow()

    def _written_again(self) -> bool:
        """The file has another mtime than the drain in force: written since the last look."""
        try:
            mtime_ns = os.lstat(self.flag_file).st_mtime_ns
        except OSError:
            return False
        return self.current is not None and self.current.id != f"local/flag/{mtime_ns:x}"

    def flushed(self, notice_id: str) -> None:
        """Every client flushed for the flag's notice: the flag is handled, remove it."""
        if self.current is None or notice_id != self.current.id:
            return
        if self._written_again():
            # A new request the flush did not answer (its save began before the file was
            # written again): removed here, a script waiting for the file to go took that
            # save for its own. The next look raises it.
            log.info("flag file %s written again since its drain; kept", self.flag_file)
        else:
            try:
                self.flag_file.unlink()
            except FileNotFoundError:
                # Gone already: removed by the agent before a restart, whose drain this one
                # restored flushed. Said again, the log read of a second request.
                pass
            except OSError as error:
                log.error("cannot remove flag file %s: %s", self.flag_file, error)
                return
            else:
                log.info("flag file %s handled and removed", self.flag_file)
            if self._deadline_ahead():
                # The machine goes then: cleared here, the drain was never sent as terminate
                # at its deadline, and the jobs trained on past their flush until the machine
                # went. Retired past its deadline by the agent, as any notice with one.
                self._kept = True
                self._keep()
                return
        # Cleared: its deadline, kept where it stood, goes too (a job started later read it).
        self.kept.withdraw(_mtime_of(self.current.id))
        if self._emit is not None:
            self._emit(self.current.model_copy(update={"action": "clear"}))
        self.current = None


def _mtime_of(notice_id: str) -> int:
    """The mtime of the flag file the notice `local/flag/<mtime hex>` stands for."""
    try:
        return int(notice_id.rpartition("/")[2], 16)
    except ValueError:
        return -1


def build(settings: Settings, context: WatcherContext) -> LocalWatcher:
    flag = settings.flag_file or context.runtime_dir / FLAG_NAME
    return LocalWatcher(Path(flag), settings.flag_interval, context)


__all__ = [
    "FLAG_CLOCK_SLACK",
    "FLAG_NAME",
    "MAX_FLAG_BYTES",
    "FlagError",
    "LocalWatcher",
    "build",
    "flag_report",
    "read_flag",
    "unread_deadline",
    "written_anchor",
]
