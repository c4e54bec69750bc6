"""What the guard says about its saves and exits: the exit line, each save's log line, and an
exit's save that is still running.

`exit_line` is the one line a process logs when it exits on a notice or signal (which
notice, from which provider, at which step, where the checkpoint went); `ExitReporting` logs
each recorded save and, from the ticker, an exit's save still running every
EXIT_SAVE_WARN_SECONDS with the time left to the terminate's deadline.
"""

from __future__ import annotations

import logging
import shlex
import time

from forewarn.protocol.oneline import one_line

from .event import Event
from .guard_state import GuardState
from .saveresult import SaveResult

log = logging.getLogger("forewarn.clients")

# The reason of an exit for a flag file's deadline, its detail the deadline and how an
# operator withdraws it (guard_flag.FLAG_DEADLINE).
FLAG_DEADLINE = "flag deadline"
# The id of the agent's notice for a flag file (providers.local): `local/flag/<mtime>`.
FLAG_ID = "local/flag/"

# An exit's save still running says so this often: after a SIGTERM, or without a store, nothing
# bounds it, and a hung one (a stalled network filesystem) said nothing until the SIGKILL.
EXIT_SAVE_WARN_SECONDS = 30.0
# An exit's save not ended this close to the terminate's deadline is said at once: the first
# of the lines above came 30 s into the save, after a shorter lead's SIGKILL, and two torchrun
# ranks stuck in their exit's save (one in a write, the other waiting for its part) were
# killed at the deadline with nothing in their logs. The margin a save of several ranks
# gives its S3 requests (EXIT_SAVE_MARGIN_SECONDS).
EXIT_SAVE_LATE_SECONDS = 5.0
# An exit waits for the loop's next `due` at most this long, or twice its longest recent step,
# before the guard says the loop is late: below it a step boundary is near.
UNANSWERED_MIN_SECONDS = 2.0


class ExitReporting(GuardState):
    """The reporting side of `CheckpointGuard`."""

    # The step and causes of the save that answered the exit (see CheckpointGuard.__init__).
    _exit_saved: tuple[int, str] | None
    # The `_due_since` of an exit's save with the number of EXIT_SAVE_WARN_SECONDS it was said
    # to be running for.
    _told_running: tuple[float, int]
    # The `_due_since` of the exit's save last said not to have ended near its deadline.
    _told_late: float | None
    # An exit no `due` has answered yet: when the ticker first saw it, and when it was last
    # said that the loop is late (0: not yet).
    _exit_waiting: tuple[float, float] | None
    # The step `resumed` was given (None before it is called): a durable step equal to it is
    # the resume point, not a save of this run.
    _resumed_step: int | None

    def _log_saved(
        self,
        result: SaveResult,
        reasons: dict[str, str | None],
        events: list[Event],
        where: str | None,
        past_exit: bool,
        *,
        uploading: bool = False,
        wrote: bool = True,
    ) -> None:
        """`uploading`: a background save whose state is copied and whose upload has only
        begun: it is not said to be saved (its upload may fail; "saved at step 8" then came
        before "the background checkpoint of step 8 failed"); "step 8 durable" says when.
        `wrote` False: the step was durable already and nothing was written: not said to be
        saved either (a job started under a drain another job saved for said `saved at step 0
        (drain)` for its resume point, which it never wrote)."""
        exit_saved = self._exit_saved
        if past_exit and exit_saved is not None:
            # A save past the exit's (a loop that went on): the exit stands, but this save is
            # not what it asked for; it was logged "exiting at step 8 on periodic".
            log.warning(
                "forewarn: saved at step %d (%s) after the exit's save at step %d (on %s): the "
                "loop is to leave (SaveResult.exit, should_exit)",
                result.step,
                ", ".join(result.reasons) or "requested",
                exit_saved[0],
                exit_saved[1],
            )
        elif result.exit:
            if not wrote and where is None:
                # The caller's save was not called: "saved by the caller" claimed a save never
                # made (a job started under a terminate, at its resume point).
                where = self._durable_words(result.step) + ": nothing new written"
            log.warning("forewarn: %s", exit_line(result.step, reasons, events, where))
        elif uploading:
            log.info(
                "forewarn: step %d (%s) copied in %.3fs; uploading it in the background",
                result.step,
                ", ".join(result.reasons) or "requested",
                result.flush_seconds or 0.0,
            )
        elif not wrote:
            log.info(
                "forewarn: step %d (%s) is durable already%s: nothing new to save",
                result.step,
                ", ".join(result.reasons) or "requested",
                ", where this run resumed" if result.step == self._resumed_step else "",
            )
        else:
            log.info(
                "forewarn: saved at step %d (%s)",
                result.step,
                ", ".join(result.reasons) or "requested",
            )

    def _durable_words(self, step: int) -> str:
        """`of step N durable already`, and where this run resumed when it is that step."""
        resumed = ", where this run resumed" if step == self._resumed_step else ""
        return f"of step {step} durable already{resumed}"

    def _check_exit_save(self) -> None:
        """An exit's save (due said so with an exit pending, and nothing recorded it yet)
        running for another EXIT_SAVE_WARN_SECONDS: said, with the time to the deadline."""
        since = self._due_since
        if since is None or not self._exit or since == self._due_failed:
            return
        with self._lock:
            if not self._answers_exit():
                return  # a save past the exit's: the exit's own is made
        self._check_exit_save_late(since)
        told = int((time.monotonic() - since) // EXIT_SAVE_WARN_SECONDS)
        last_since, last_told = self._told_running
        if told < 1 or (since == last_since and told <= last_told):
            return
        self._told_running = (since, told)
        with self._lock:
            reasons = dict(self._pending)
            events = [self._events[i] for i in sorted(self._notice_ids) if i in self._events]
        cause = exit_causes(reasons, events)
        waiting = self._barrier_words()
        if waiting is not None:
            log.warning(
                "forewarn: the exit's save of step %d (on %s): %s, still after %gs in all; %s",
                self._due_step,
                cause,
                waiting,
                told * EXIT_SAVE_WARN_SECONDS,
                _deadline_words(events, "it waits until they end"),
            )
            return
        log.warning(
            "forewarn: the exit's save of step %d (on %s) is still running after %gs; %s",
            self._due_step,
            cause,
            told * EXIT_SAVE_WARN_SECONDS,
            _deadline_words(events, "it runs until it ends"),
        )

    def _exit_save_moving(self, since: float, left: float | None = None) -> str | bool:
        """What the exit's save that began at `since` is doing when its bytes are seen moving
        (a background saver's), False while that is not known yet or the save is on course to
        end within the `left` seconds to the deadline, True when it is not moving or cannot
        be known. See BackgroundSaves."""
        return True

    def _barrier_words(self) -> str | None:
        """What this rank does while it waits, its own part of the exit's save done, for the
        other ranks' parts (the last all-reduce, see `_wait_for_ranks_exit_save`); None when it
        is not waiting there."""
        barrier, agreement = self._exit_barrier, self.agreement
        if barrier is None or agreement is None:
            return None
        began, own = barrier
        return (
            f"this rank's part (rank {agreement.rank} of {agreement.world_size}) is saved "
            f"(in {own:.0f}s) and it waits for the other ranks' parts (the exit's last "
            f"all-reduce, {time.monotonic() - began:.0f}s so far)"
        )

    def _check_exit_save_late(self, since: float) -> None:
        """The exit's save that began at `since`, not ended EXIT_SAVE_LATE_SECONDS before the
        terminate's deadline: said once, while the job can still say it. A write stuck in
        the kernel (a hung mount) cannot be given up, and a rank waiting in the commit's
        collectives for such a rank's part cannot leave them (gloo waits for the process
        group's timeout, 30 min): the platform's kill ends both."""
        if since == self._told_late:
            return
        with self._lock:
            reasons = dict(self._pending)
            events = [self._events[i] for i in sorted(self._notice_ids) if i in self._events]
        left = [
            e.seconds_left for e in events if e.action == "terminate" and e.deadline is not None
        ]
        known = [value for value in left if value is not None]
        if not known or min(known) > EXIT_SAVE_LATE_SECONDS:
            return
        moving = self._exit_save_moving(since, min(known))
        if moving is False:
            return  # not known yet: said at a later tick
        self._told_late = since
        durable = self.durable_step
        resumes = f"step {durable}" if durable is not None else "no checkpoint (none is saved)"
        cause = exit_causes(reasons, events)
        nearest = min(known)
        ran = time.monotonic() - since
        # A save begun after the deadline (a job started, or a notice seen, once the deadline
        # had passed with nobody acting on it) was said not to have ended "by the terminate's
        # deadline" and to be "killed at the deadline": it never ran at the deadline, and the
        # kill, overdue, may come at any moment or not at all.
        overdue = nearest + ran <= 0
        when = (
            f"{nearest:.0f}s before the terminate's deadline"
            if nearest > 0
            else f"by the terminate's deadline ({-nearest:.0f}s ago)"
        )
        ended = f"has not ended {when}"
        killed = "killed at the deadline"
        if overdue:
            when = f"begun {-(nearest + ran):.0f}s after the terminate's deadline"
            ended = (
                f"began {-(nearest + ran):.0f}s after the terminate's deadline and has not ended"
            )
            killed = "killed by the platform's kill, overdue now"
        if isinstance(moving, str):
            log.warning(
                "forewarn: the exit's save of step %d (on %s) %s (it has run %.0fs): %s, in a "
                "lead shorter than it needs; %s, the job resumes from %s",
                self._due_step,
                cause,
                ended,
                ran,
                moving,
                killed,
                resumes,
            )
            return
        waiting = self._barrier_words()
        if waiting is not None:
            log.warning(
                "forewarn: the exit's save of step %d (on %s), %s: %s; a rank whose save does "
                "not return holds every rank there until the platform's kill; %s, the job "
                "resumes from %s",
                self._due_step,
                cause,
                when,
                waiting,
                killed,
                resumes,
            )
            return
        if nearest > 0 and ran < EXIT_SAVE_LATE_SECONDS:
            # A terminate EXIT_SAVE_LATE_SECONDS or less before its deadline (`forewarn agent
            # --exit-margin 5s`, a short lead) has its save judged as it begins: one that has
            # run a few seconds was said to wait on a hung mount, a guess nothing supports.
            log.warning(
                "forewarn: the exit's save of step %d (on %s) %s (it has run %.0fs, begun "
                "%.0fs before the deadline): a lead too short to tell a slow save from a hung "
                "one; if it needs more than the %.0fs left it is killed at the deadline, the "
                "job resumes from %s",
                self._due_step,
                cause,
                ended,
                ran,
                nearest + ran,
                nearest,
                resumes,
            )
            return
        log.warning(
            "forewarn: the exit's save of step %d (on %s) %s (it has run %.0fs): it waits on "
            "its storage (a hung mount, a write that does not return) or, with several ranks, "
            "on another rank's part; %s, the job resumes from %s",
            self._due_step,
            cause,
            ended,
            ran,
            killed,
            resumes,
        )

    def _check_exit_unanswered(self) -> None:
        """An exit asked for (terminate, signal) while the loop is away from `due` and
        `due_in_eval` for longer than its steps take (an evaluation pass that does not call
        `due_in_eval`, a hung data loader): only the loop can save, so nothing is, and a kill
        at the deadline loses every step since the last save. That went unsaid: the job's log
        ended at its last step. Said once the loop is late, then every EXIT_SAVE_WARN_SECONDS."""
        now = time.monotonic()
        with self._lock:
            waiting = self._exit and self._wake and self._due_since is None and self._answers_exit()
            reasons = dict(self._pending)
            events = [self._events[i] for i in sorted(self._notice_ids) if i in self._events]
        if not waiting:
            self._exit_waiting = None
            return
        if self._exit_waiting is None:
            self._exit_waiting = (now, 0.0)
            return
        asked, told_at = self._exit_waiting
        away = self._pace.running(now)
        if away is None:
            return
        first = not self._pace.stepped()
        if first:
            # In the first step, the README's `due` after `resumed` before it or not: a step
            # cannot be interrupted, and a first one (a compile) is answered when it ends
            # (README). A loop that calls `due` only before its loop is in that step for
            # ever: it is said once the exit has waited EXIT_SAVE_WARN_SECONDS, or
            # EXIT_SAVE_LATE_SECONDS before the terminate's deadline, whichever comes first
            # (before, never: the SIGKILL at the deadline ended a log that said nothing).
            left = _nearest_left(events)
            near = left is not None and left <= EXIT_SAVE_LATE_SECONDS
            if not near and now - asked < EXIT_SAVE_WARN_SECONDS:
                return
        else:
            late = max(UNANSWERED_MIN_SECONDS, 2 * self._pace.longest_done())
            if away < late or now - asked < UNANSWERED_MIN_SECONDS / 2:
                return
        if told_at and now - told_at < EXIT_SAVE_WARN_SECONDS:
            return
        self._exit_waiting = (asked, now)
        durable = self.durable_step
        if durable is None:
            lost = "every step of this run is lost (it has saved nothing)"
        elif durable == self._resumed_step:
            # The resume point, not a save of this run: a first start's step 0 was never
            # written, and "the last saved" named a checkpoint that does not exist.
            lost = f"the steps after step {durable}, where this run resumed (it has saved "
            lost += "nothing since), are lost"
        else:
            lost = f"the steps after step {durable}, the last saved, are lost"
        if first:
            log.warning(
                "forewarn: %s asked this job to save and exit %.0fs ago, but the loop has "
                "not called due() or due_in_eval() since its first call (at step %s, %.0fs "
                "ago): a first step (a compile, a data loader's warm-up) is answered when it "
                "ends, at the loop's next due(step), and a loop that calls due() only before "
                "it never answers; nothing is saved until it does, and %s if the platform "
                "kills the job first (%s). Call guard.due(step) after every step",
                exit_causes(reasons, events),
                now - asked,
                self._seen_step,
                away,
                lost,
                _deadline_words(events, "nothing bounds the wait"),
            )
            return
        log.warning(
            "forewarn: %s asked this job to save and exit %.0fs ago, but the loop has not "
            "called due() or due_in_eval() for %.0fs (last at step %s; its steps took up to "
            "%.2fs): nothing is saved until it does, and %s if the platform kills the job "
            "first (%s). An evaluation loop answers an exit when it calls "
            "guard.due_in_eval(step) once per batch",
            exit_causes(reasons, events),
            now - asked,
            away,
            self._seen_step,
            self._pace.longest_done(),
            lost,
            _deadline_words(events, "nothing bounds the wait"),
        )


def _nearest_left(events: list[Event]) -> float | None:
    """Seconds to the terminates' nearest deadline (negative once past), None when none is
    known."""
    left = [e.seconds_left for e in events if e.action == "terminate" and e.deadline is not None]
    known = [value for value in left if value is not None]
    return min(known) if known else None


def _deadline_words(events: list[Event], unbounded: str) -> str:
    """The terminates' nearest deadline, in how long or how long ago it passed; `unbounded`
    says what goes on when none is known."""
    nearest = _nearest_left(events)
    if nearest is None:
        return f"no deadline is known: {unbounded} or the platform kills the job"
    if nearest >= 0:
        return f"the terminate's deadline is in {nearest:.0f}s"
    return (
        f"the terminate's deadline passed {-nearest:.0f}s ago: the platform may kill "
        "the job before it ends"
    )


def exit_line(
    step: int, reasons: dict[str, str | None], events: list[Event], where: str | None
) -> str:
    """The one line a process logs when it exits on a notice or signal: which notice, from
    which provider, at which step, and where the checkpoint went."""
    causes = exit_causes(reasons, events)
    return f"exiting at step {step} on {causes}; checkpoint {where or 'saved by the caller'}"


def exit_causes(reasons: dict[str, str | None], events: list[Event]) -> str:
    """What asked for an exit, as `exit_line` names it."""
    if events:
        return ", ".join(_named(event) for event in events)
    if "signal" in reasons:
        # The signal's name, or none when code asked with request("signal", exit=True), as
        # the guard's own warning about a replaced handler suggests.
        return reasons["signal"] or "signal"
    # A flag file's deadline says which and how to withdraw it (guard_flag).
    named = [
        f"{reason} {detail}" if reason == FLAG_DEADLINE and detail else reason
        for reason, detail in reasons.items()
    ]
    return ", ".join(named) or "a request"


def _named(event: Event) -> str:
    """A notice as the exit line names it, each field as received (a publisher that is not
    the agent may send any text in them)."""
    named = (
        f"{one_line(event.action)} {one_line(event.id)} from {one_line(event.provider)} "
        f"({one_line(event.reason)})"
    )
    path = event.detail.get("path")
    if event.action == "terminate" and event.id.startswith(FLAG_ID) and isinstance(path, str):
        # The agent's terminate for a flag file's deadline stands until that deadline: the
        # operator who reads this line on a machine that is not being taken learns how to
        # withdraw it, as the guard's own kept deadline says (guard_flag).
        written = one_line(shlex.quote(path))
        named += (
            f" (the flag file {one_line(path)}'s deadline: if the machine is not being taken, "
            f"write it again, empty (`: > {written}`), to withdraw it, and each job saves once "
            "and trains on)"
        )
    return named


__all__ = [
    "EXIT_SAVE_LATE_SECONDS",
    "EXIT_SAVE_WARN_SECONDS",
    "ExitReporting",
    "exit_causes",
    "exit_line",
]
