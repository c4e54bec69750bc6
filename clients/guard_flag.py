"""The flag file (`checkpoint-now` in the runtime directory): a save asked for by hand, handled
by the guard when no agent with the local provider runs.

`FlagFileRequests` takes the file (its identity: device, inode, mtime), asks for a save, and
removes it once every job on the node that reads it has saved (see flagjobs); a deadline
written in it stays in force past the save, and the job saves again and exits within its
margin of it, as the agent sends such a drain as a terminate. The job whose save removes it
keeps that deadline beside it (see protocol.flagkept), so that a job started before the
deadline saves and exits by it too, as the agent replays the drain to a client that connects
late.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from forewarn.protocol.flagfile import (
    FlagError,
    flag_deadline,
    flag_deadline_is_duration,
    flag_mtime_text,
    flag_written,
    outlives_boot,
    past_when_read,
    read_flag,
    unread_deadline,
    written_anchor,
)
from forewarn.protocol.flagkept import (
    GRACE_SECONDS,
    KeptDeadline,
    KeptDeadlines,
    same_boot,
    this_boot,
)
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.protocol.wire import runtime_dir

from .event import Event
from .flagjobs import FlagJobs, Identity
from .guard_report import FLAG_DEADLINE
from .guard_state import GuardState
from .proctime import boot_seconds, steady_seconds

log = logging.getLogger("forewarn.clients")

FLAG_NAME = "checkpoint-now"
# The reason a save answers when a flag file's deadline came within the exit margin.


class FlagFileRequests(GuardState):
    """The flag file side of `CheckpointGuard`."""

    if TYPE_CHECKING:

        def _inherited_margin(self) -> float: ...  # NoticeRequests'

    def _init_flag_file(self, flag_file: str | Path | None) -> None:
        """Where the flag file is ("default": the runtime directory's), and this job's place
        among the jobs on the node that read it."""
        # A flag file the guard took but could not remove (see `_record`).
        self._flag_kept: tuple[int, int, int] | None = None
        # The background save a flag file asked for: the file goes once that is durable.
        self._flag_step: int | None = None
        if flag_file == "default":
            self.flag_file: Path | None = runtime_dir() / FLAG_NAME
        else:
            self.flag_file = Path(flag_file) if flag_file else None
        # The other jobs on this node that take the flag file themselves: it goes once every
        # one has saved for it (see flagjobs). The flag this guard's pending save answers, and
        # the one it saved for while others still save.
        self._flag_jobs = FlagJobs(self.flag_file) if self.flag_file is not None else None
        if self._flag_jobs is not None:
            self._flag_jobs.join()
        self._flag_found: Identity | None = None
        self._flag_waits: Identity | None = None
        # The deadline written in the last flag file taken (read as the agent reads it): the
        # drain stays in force past its save, and the job saves again and exits within its
        # margin of it, as the agent sends such a drain as terminate. Taken for a plain drain,
        # the job trained on past its save until the machine went at the deadline.
        self._flag_deadline: datetime | None = None
        # That deadline by `steady_seconds()`, where it was written as a duration (`5m`): five
        # minutes of real time, which a step of the wall clock (NTP's first sync) does not
        # shorten or stretch, as the agent keeps it.
        self._flag_deadline_at: float | None = None
        # The flag that deadline came from while its file is not handled yet (no job's save
        # removed it): gone meanwhile, it was removed by hand, which withdraws the deadline as
        # the agent clears a drain whose file goes before every client flushed.
        self._flag_open: Identity | None = None
        self._flag_unremovable = False  # a save could not remove it: only its owner can
        self._flag_refused: Identity | None = None  # a link or directory there, warned about
        # The flag last taken and its deadline (on the boot clock for a duration), kept past
        # the exit check that clears `_flag_deadline`: the save that removes the file writes
        # it beside the file for the jobs that start later (see protocol.flagkept).
        self._flag_taken: KeptDeadline | None = None
        # The boot clock at this guard's last look that found no flag file: a file found
        # later was written since (`written_anchor`).
        self._flag_empty_at: float | None = None
        # Whether the first look that found no file read the kept deadlines (once: a job that
        # runs sees each later flag itself).
        self._flag_kept_read = False
        # The flag this job's save answered, durable: (its mtime_ns, the step saved). An agent
        # started since raises its kept deadline again as the drain `local/flag/<mtime>`,
        # which that save answers already (see `_answered_by_flag_save`).
        self._flag_answered: tuple[int, int] | None = None

    def _flag_recorded(self, step: int, reasons: dict[str, str | None], durable: bool) -> None:
        """A save of `step` was recorded (see CheckpointGuard._record): the flag file it
        answers goes, or waits for the background save to be durable."""
        if "flag" in reasons and self.flag_file is not None:
            if durable or (self.durable_step is not None and self.durable_step >= step):
                self._flag_done(self._flag_found, step)
            else:
                # A background save: the file goes once it is durable, as the agent removes it
                # only once the clients acked. Removed at the snapshot, it told a script that
                # waits for it to go that the save was made seconds before it was. It counts
                # once meanwhile.
                with self._lock:
                    self._flag_kept = _identity(self.flag_file)
                    self._flag_step = step
        elif durable and self._flag_step is not None and step >= self._flag_step:
            self._flag_saved(True)  # a final save that cancelled the flag's background save

    def _remove_flag(self, identity: Identity | None) -> None:
        """Remove the flag `identity`, handled: every job reading it saved for it."""
        assert self.flag_file is not None
        try:
            self.flag_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            self._flag_unremovable = True
            # Another user's file in a directory this one may only enter (the agent's 0750
            # /run/forewarn, reached through its group): the save is made, and raising here
            # crashed the loop right after it. The file counts once; touching it counts again.
            self._flag_kept = _identity(self.flag_file)
            log.warning(
                "forewarn: cannot remove the flag file %s (%s): it counts once; its owner "
                "removes it, or touches it to ask again",
                self.flag_file,
                error.strerror or error,
            )
            return
        self._flag_open = None  # handled: its deadline stands, the file gone by this save
        self._keep_flag_deadline(identity)

    def _keep_flag_deadline(self, identity: Identity | None) -> None:
        """Keep the deadline of the flag `identity`, just handled, beside it for the jobs
        that start before it passes; a flag without one withdraws an older one kept there."""
        taken, jobs = self._flag_taken, self._flag_jobs
        if jobs is None or identity is None or taken is None or taken.flag != identity:
            return
        kept = KeptDeadlines(jobs.directory)
        if taken.deadline is None:
            kept.keep(taken)  # written only where an older deadline must be withdrawn
            return
        kept.make_directory()
        kept.keep(taken)

    def _flag_done(self, identity: Identity | None, step: int) -> None:
        """This job's save of `step` for the flag `identity` is durable: the file goes if every
        other job reading it has saved too; else it counts once here and the last job's save
        (or the ticker, once the others are gone) removes it."""
        if identity is not None:
            self._flag_answered = (identity[2], step)
        jobs = self._flag_jobs
        written_again = (
            identity is not None
            and self.flag_file is not None
            and _identity(self.flag_file) != identity
        )
        if written_again:
            # Written again since this job took it: a new request (a deadline added) this save
            # does not answer, which the next look takes, as the agent keeps a flag written
            # again since its drain. Removed here, it went unread.
            if jobs is not None and identity is not None:
                jobs.saved_for(identity)
            if identity is not None and identity == self._flag_open:
                assert self.flag_file is not None
                if _identity(self.flag_file) is None:  # gone before this save: by hand
                    self._flag_gone(identity, saved=False)
            return
        if jobs is None or identity is None:
            self._remove_flag(identity)
            return
        jobs.saved_for(identity)
        if jobs.all_saved(identity):
            self._remove_flag(identity)
            return
        if not jobs.joined:
            log.warning(
                "forewarn: cannot join or see the other jobs that read the flag file %s in %s "
                "(another user's): the file is left for their save to remove (remove that "
                "directory if none of them runs)",
                self.flag_file,
                jobs.directory,
            )
        with self._lock:
            self._flag_kept = self._flag_waits = identity

    def _flag_saved(self, durable: bool) -> None:
        """The background save the flag file asked for is durable (or failed: the file then
        counts again, and asks for another save)."""
        found = _identity(self.flag_file) if self.flag_file is not None else None
        with self._lock:
            kept, self._flag_kept = self._flag_kept, None
            step, self._flag_step = self._flag_step, None
            if not durable and found is not None:
                self._pending["flag"] = None  # the retry answers it
                self._wake = True
        if durable and found is not None and found == kept and step is not None:
            self._flag_done(found, step)  # not if touched again meanwhile: that asks again
        elif durable and found is None and kept is not None and kept == self._flag_open:
            self._flag_gone(kept, saved=False)  # removed by hand while the save was made

    def _answered_by_flag_save(self, event: Event) -> bool:
        """Whether the drain `event` is the agent's for a flag file this job took itself and
        saved for (no agent ran then; one started since raised its kept deadline again): it
        is acked with that save's step, and no second save is made. Saved again, the job wrote
        the same state twice within seconds, a large model's checkpoint minutes of its lead;
        the deadline stays in force either way (the job's own, and the agent's terminate)."""
        answered = self._flag_answered
        if answered is None or event.id != f"local/flag/{answered[0]:x}":
            return False
        step = answered[1]
        self._handled.add(event.id)
        if self.notices is not None:
            # A drain's save, as the guard's own are acked: arriving after the agent made the
            # drain a terminate (same id), it counts for no terminate.
            self.notices.ack(event.id, step=step, action="drain")
        log.info(
            "forewarn: drain %s is the flag file this job saved for at step %d: acked, no "
            "second save",
            event.id,
            step,
        )
        return True

    def _flag_is_ours(self) -> bool:
        """The agent's local provider handles the flag file when it runs; otherwise we do.
        Until the agent has been heard from, or given up on, nobody takes it: both taking it
        would flush twice."""
        notices = self.notices
        if notices is None:
            return True
        if notices.alive:
            if notices.agent is None:
                return False  # alive (a notice came) but no heartbeat yet says what it runs
            return "local" not in notices.agent.get("providers", ())
        return time.monotonic() - self._started >= notices.heartbeat_timeout

    def _check_flag_removed(self) -> None:
        """The flag whose deadline is in force went before it was handled (see `_flag_gone`)."""
        taken = self._flag_open
        if taken is None or self.flag_file is None:
            return
        found = _identity(self.flag_file)
        if found == taken:
            return
        if found is not None:
            self._flag_open = None  # written again: the next look takes the new request
            return
        with self._lock:
            saved = "flag" not in self._pending and self._flag_step is None
        self._flag_gone(taken, saved=saved)

    def _flag_gone(self, taken: Identity, *, saved: bool) -> None:
        """The flag `taken`, whose deadline is in force, is gone and no save of this job
        removed it. Removed by hand (before this job saved, while another job still saved,
        or by its owner where no job could remove it), the request is withdrawn and the
        deadline with it, as the agent clears a drain whose file goes before every client
        flushed. Removed by the save of the last job to save, it stands. Where that cannot be
        told (this job holds no place among the jobs), it stands too: kept, the job exits
        early; dropped, it trained on until the machine went."""
        self._flag_open = None
        jobs = self._flag_jobs
        if jobs is None or not jobs.joined:
            return
        by_hand = self._flag_unremovable or not saved or not jobs.all_saved(taken)
        if not by_hand:
            return
        with self._lock:
            dropped, self._flag_deadline = self._flag_deadline, None
        if dropped is not None:
            log.warning(
                "forewarn: the flag file %s was removed before every job saved for it: its "
                "deadline %s is withdrawn, as the agent clears its drain",
                self.flag_file,
                format_time(dropped),
            )

    def _check_flag(self) -> None:
        flag = self.flag_file
        if flag is None or "flag" in self._pending or not self._flag_is_ours():
            return
        found = _identity(flag)
        jobs = self._flag_jobs
        if found is None:
            self._flag_empty_at = boot_seconds()
            if not self._flag_kept_read:
                self._flag_kept_read = True
                self._take_kept_deadline()
            return
        self._flag_kept_read = True  # the file there is the request in force
        if found == self._flag_waits and jobs is not None:
            if jobs.all_saved(found):  # the other jobs saved since, or are gone
                self._flag_waits = None
                self._remove_flag(found)
            return
        if found != self._flag_kept and found != self._flag_refused:
            try:
                deadline, is_duration, _, unread, written = _read_flag(flag, self._anchor)
            except FlagError as error:
                # A link (or a directory) there: the agent refuses it, no drain raised. Taken
                # here, the same `ln -s` saved the job with no agent and nothing with one.
                self._flag_refused = found
                log.warning("forewarn: the flag file %s %s", flag, error.strerror)
                return
            log.info("forewarn: flag file %s found", flag)
            if unread is not None:
                # As the agent warns (the local watcher): someone who wrote `terminate 10m`,
                # or a time past already, meant a deadline the save cannot keep.
                log.warning(
                    "forewarn: flag file %s: first line %s; the save has no deadline",
                    flag,
                    unread,
                )
            if jobs is not None:
                jobs.join()  # a directory made since the guard was
            stale = None
            if deadline is not None:
                now, up = utcnow(), boot_seconds()
                started = None if up is None else now - timedelta(seconds=up)
                stale = past_when_read(deadline, now, written, started)
            if stale is not None:
                # As the agent reads it: a flag file left over, whose deadline every job
                # started since took for a terminate due at once, exiting at its first step
                # (an earlier boot's too, past before this boot began, 300 s past or not).
                log.warning(
                    "forewarn: flag file %s: its first line %s; the save has no deadline",
                    flag,
                    stale,
                )
                deadline = None
            if deadline is not None:
                log.info("forewarn: flag file %s: deadline %s", flag, format_time(deadline))
            if jobs is not None:
                # A new request: an older flag's kept deadline is withdrawn with it, as the
                # agent clears that drain; removed by hand, it left the older one in force
                # for the jobs started after.
                KeptDeadlines(jobs.directory).keep(KeptDeadline(found, None))
            boot_id, booted = this_boot()
            with self._lock:
                # A flag written again is a new request: its deadline (or none) replaces the
                # earlier one, as the agent clears the earlier notice.
                self._flag_deadline = deadline
                self._flag_deadline_at = None
                if deadline is not None and is_duration:
                    left = (deadline - utcnow()).total_seconds()
                    self._flag_deadline_at = steady_seconds() + left
                self._flag_taken = KeptDeadline(
                    found,
                    deadline,
                    self._flag_deadline_at if boot_seconds() is not None else None,
                    boot_id,
                    booted,
                    deadline is not None and is_duration,
                )
                self._flag_found = found
                self._flag_open = found if deadline is not None else None
                self._flag_unremovable = False
                self._pending["flag"] = None
            # Its deadline judged before the save is woken: woken first, a deadline already
            # within the exit margin made a save that did not exit while the loop raced the
            # ticker, and the exit a second save one step later.
            self._check_flag_deadline()
            with self._lock:
                self._wake = True

    def _anchor(self, mtime_ns: int) -> datetime:
        """When the file found with `mtime_ns` counts as written (`written_anchor`, as the
        agent counts it): where a step of the wall clock since the writing shows, this first
        read, with a warning. A duration (`5m`) counts from it, and a time is judged against
        it, as the agent judges it: against the mtime, a time written before a step back of
        the clock was "past already when the file was written", and the save had no deadline."""
        mtime, now = flag_written(mtime_ns), utcnow()
        flag = self.flag_file
        anchor = written_anchor(
            mtime,
            now,
            boot_seconds(),
            self._flag_empty_at,
            lambda: flag is not None and outlives_boot(flag),
        )
        if anchor == mtime:
            return anchor
        log.warning(
            "forewarn: flag file %s: its mtime %s is not when it was written by this clock "
            "(read at %s: the clock was stepped since); a duration in it counts from now",
            self.flag_file,
            flag_mtime_text(mtime_ns),
            format_time(now),
        )
        return anchor

    def _take_kept_deadline(self) -> None:
        """A flag handled before this job started (every job then saved for it, the file
        removed) whose deadline stands: the job saves for it and exits within its margin of
        the deadline, as the agent replays the kept drain to a client that connects late. A job
        that saved for the agent's drain of that flag before the agent stopped only exits by
        it."""
        jobs = self._flag_jobs
        if jobs is None:
            return
        kept = KeptDeadlines(jobs.directory).in_force()
        if kept is None or kept.deadline is None:
            return
        # The agent's drain for that flag, which this job saved for while the agent ran (it
        # has stopped since, and the job took the flag file over): saved again, every job on
        # the node wrote a second checkpoint seconds after losing the agent.
        drain = f"local/flag/{kept.flag[2]:x}"
        saved = drain in self._handled
        if saved:
            log.warning(
                "forewarn: the flag file %s's deadline %s stands and this job saved for it "
                "already (drain %s): with no agent to send it as terminate, it exits within "
                "the exit margin of it (%s)",
                self.flag_file,
                format_time(kept.deadline),
                drain,
                self._withdraw_hint(kept.deadline),
            )
        else:
            log.warning(
                "forewarn: the flag file %s was handled before this job started and its "
                "deadline %s stands: saving, and exiting within the exit margin of it (%s)",
                self.flag_file,
                format_time(kept.deadline),
                self._withdraw_hint(kept.deadline),
            )
        at = None
        if kept.boot_deadline is not None and same_boot(kept, this_boot()):
            up = boot_seconds()
            if up is not None:  # an earlier boot's reading is nothing to this boot's clock
                at = steady_seconds() + (kept.boot_deadline - up)
        with self._lock:
            self._flag_deadline = kept.deadline
            self._flag_deadline_at = at
            # Its save names the flag it answers, which is gone: it removes nothing, and no
            # removal by hand can withdraw it now (`_flag_open` None), as for the jobs that
            # saved for the file.
            self._flag_found = kept.flag
            self._flag_open = None
            if not saved:
                self._pending["flag"] = None
        self._check_flag_deadline()  # before the save is woken, as for a flag file read
        if not saved:
            with self._lock:
                self._wake = True

    def _withdraw_hint(self, deadline: datetime) -> str:
        """How an operator withdraws a flag's deadline that stands for every job started until
        it is dead (the machine was not taken; a job under a restart policy exits at each
        start): the flag file written again without one, a new request, as the agent clears
        the drain then. Empty, not touched: a file still there keeps its line, and `touch`
        raised the same deadline again, counted from the touch. No ";" in it: the exit
        line's causes end at the first."""
        dead = format_time(deadline + timedelta(seconds=GRACE_SECONDS))
        return (
            f"every job started before {dead} exits for it too: if the machine is not being "
            f"taken, write {self.flag_file} again, empty (`: > {self.flag_file}`), to "
            "withdraw it, and each job saves once and trains on"
        )

    def _check_flag_deadline(self) -> None:
        deadline = self._flag_deadline
        if deadline is None or self._exit:
            return
        at = self._flag_deadline_at
        left = at - steady_seconds() if at is not None else (deadline - utcnow()).total_seconds()
        if left > self._inherited_margin():
            return
        log.warning(
            "forewarn: the flag file's deadline %s is within the exit margin: saving and exiting",
            format_time(deadline),
        )
        with self._lock:
            self._flag_deadline = None
            # Said in the exit line: a job restarted on a machine that was not taken exits for
            # the kept deadline until it is dead, and the operator reads the line for why.
            self._pending[FLAG_DEADLINE] = (
                f"{format_time(deadline)} ({self._withdraw_hint(deadline)})"
            )
            self._exit_by.add(FLAG_DEADLINE)
            self._exit = True
            self._wake = True


def _read_flag_deadline(flag: Path) -> datetime | None:
    """The deadline the flag file holds (None: none, or it cannot be read: the drain stands).
    FlagError: the path is no flag file (a link, a directory), refused as the agent does."""
    return _read_flag(flag)[0]


def _read_flag(
    flag: Path, anchor: Callable[[int], datetime] = flag_written
) -> tuple[datetime | None, bool, int, str | None, datetime | None]:
    """The flag file's deadline, as `_read_flag_deadline` (a duration counted from when the
    file counts as written, `anchor` of its mtime: the mtime itself unless given; a time
    judged against it), whether it was written as a duration (`5m`: counted on the boot
    clock) rather than a time, the mtime read (0 when none), why its first line is no
    deadline (None: it is one, or there is none), and when the file counts as written (None
    when it was not read)."""
    try:
        found = read_flag(flag)
    except FlagError:
        raise
    except OSError:
        return None, False, 0, None, None
    if found is None:
        return None, False, 0, None, None
    mtime_ns, content = found
    if content is None:
        return None, False, mtime_ns, None, None
    written = anchor(mtime_ns)
    deadline = flag_deadline(content, mtime_ns, written)
    is_duration = deadline is not None and flag_deadline_is_duration(content)
    return deadline, is_duration, mtime_ns, unread_deadline(content, written), written


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells one flag file from the next: its inode and modification time (None when
    there is none)."""
    try:
        found = path.lstat()  # a link is its own, not its target's: the agent follows none
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_mtime_ns)


__all__ = ["FLAG_DEADLINE", "FLAG_NAME", "FlagFileRequests"]
