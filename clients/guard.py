"""`CheckpointGuard`: one object that decides when the training loop saves, and whether it exits.

It merges the layers of the field's best practice:
- periodic checkpoints, every N steps and/or every T seconds;
- agent notices: drain → flush and continue (once per notice), terminate → flush and exit;
- SIGTERM / SIGINT / SIGHUP (a terminal that hung up) → flush and exit;
- a flag file → flush and continue (handled here when no agent with the local provider runs).

`due(step)` costs an attribute write and two reads unless something is pending: background
threads (the notice subscriber and a ticker) and the signal handler set the flag, the loop
reads it; the ticker times the steps from the step written (see steppace.py).
`due_in_eval(step)` is the same question asked from inside an evaluation, validation or
prediction loop, where only an exit is worth interrupting for.

This module is the façade: it checks the options, sets the state every part shares
(guard_state), records saves, acks them and sets the exit code, and runs the ticker. Each part
is a module of its own: when to save (guard_due), signals (guard_signals), the agent's notices
and inherited terminates (guard_notices), the flag file (guard_flag), background saves
(guard_background), and what is logged about saves and exits (guard_report).
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forewarn.protocol.timefmt import format_time

from .adaptive import AdaptiveInterval
from .agreement import DEFAULT_AGREE_EVERY, RankAgreement
from .event import Event
from .guard_background import BackgroundSaves
from .guard_due import DueChecks
from .guard_flag import FlagFileRequests
from .guard_notices import NoticeRequests, answered_notices
from .guard_report import ExitReporting, exit_causes, exit_line
from .guard_signals import SignalHandling
from .guard_state import EXIT_SAVE, TICK_SECONDS
from .notices import Notices
from .proctime import process_started, process_started_boot
from .proctime import steady_seconds as steady_seconds  # imported from here before the split
from .reclaim_exit import skip_final_collection
from .restart_store import RestartStoreCheck
from .saveresult import SaveResult
from .steppace import StepPace
from .workers import in_protected_worker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .checkpoint import BackgroundSaver, CheckpointStore

log = logging.getLogger("forewarn.clients")

# A terminate that was in force before this job started (see `_on_event`) makes it save and exit
# this long before the notice's deadline, or twice the slowest flush seen if that is longer.
INHERITED_EXIT_MARGIN = 30.0


def _several_ranks() -> bool:
    """Whether a store's save here is one rank's of several (torch.distributed's group,
    else RANK/WORLD_SIZE), as the store counts them."""
    from .checkpoint.errors import StoreConfigError
    from .checkpoint.ranks import resolve

    try:
        return resolve(None, None).world_size > 1
    except StoreConfigError:
        return False  # the save itself says what is wrong with them


def _a_duration(seconds: object) -> bool:
    """A finite number, zero or more (numpy's included; not a bool, not a string)."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        return False
    number = float(seconds)
    return math.isfinite(number) and number >= 0


def _positive(value: object) -> bool:
    """A finite number above 0 (numpy's included; not a bool, not a string)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    number = float(value)
    return math.isfinite(number) and number > 0


def _whole_steps(value: object) -> bool:
    """A step count: a whole number above 0 (2.0 as well; not a bool, not 1.5)."""
    return _positive(value) and int(value) == value  # type: ignore[call-overload]


def _rank_known() -> bool:
    """Whether this process's rank can be told now: torch.distributed initialised, or the
    launcher's RANK in the environment (torchrun)."""
    from .checkpoint.ranks import initialised_dist

    return initialised_dist() is not None or bool(os.environ.get("RANK"))


class CheckpointGuard(
    DueChecks, SignalHandling, FlagFileRequests, NoticeRequests, BackgroundSaves, ExitReporting
):
    def __init__(
        self,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        *,
        every: str | None = None,
        interruptions_per_day: float | None = None,
        mtbi_seconds: float | None = None,
        adaptive: AdaptiveInterval | None = None,
        store: CheckpointStore | None = None,
        notices: Notices | bool = True,
        flag_file: str | Path | None = "default",
        handle_signals: bool = True,
        events: str | None = None,
        control: str | None = None,
        heartbeat_timeout: float = 3.0,
        agree: bool | RankAgreement | None = None,
        agree_every: int = DEFAULT_AGREE_EVERY,
        exit_margin: float = INHERITED_EXIT_MARGIN,
        background: bool | BackgroundSaver = False,
    ) -> None:
        # Checked here, not where they are used: a string from an environment variable raised
        # a TypeError naming no option, NaN was taken and no periodic save ever came, and
        # agree_every was checked only when torch.distributed had 2+ ranks.
        # A step count is whole: every_steps=1.5 was taken, and saved at steps 2, 4, 6 (2.5:
        # at 3, 6, 9), an interval nobody asked for.
        if every_steps is not None and not _whole_steps(every_steps):
            raise ValueError(
                f"every_steps must be a whole number of steps above 0, got {every_steps!r}"
            )
        if every_seconds is not None and not _positive(every_seconds):
            raise ValueError(f"every_seconds must be positive, got {every_seconds!r}")
        if not _whole_steps(agree_every):
            raise ValueError(
                f"agree_every must be a whole number of steps above 0, got {agree_every!r}"
            )
        if in_protected_worker():
            # Made as a spawn or forkserver DataLoader worker imports the script (a guard at
            # its module level, the loop under `if __name__ == "__main__":`): the main
            # process's guard answers for the job. This one's handlers replaced the worker's
            # own (a WARNING in every worker at every start), it subscribed as a client that
            # never acks, and it took a place among the jobs reading the flag file, which
            # then waited for saves no worker makes.
            notices = notices if isinstance(notices, Notices) else False
            flag_file = None
            handle_signals = False
        self.every_steps = None if every_steps is None else int(every_steps)
        self.every_seconds = every_seconds
        self.store = store
        # every="auto": a time interval kept near the optimum for the measured flush cost and
        # the configured interruption rate (Daly's formula, see forewarn.clients.adaptive).
        self.adaptive: AdaptiveInterval | None = None
        if every == "auto":
            if every_steps is not None or every_seconds is not None:
                raise ValueError(
                    "every='auto' chooses the interval: drop every_steps/every_seconds"
                )
            if adaptive is not None and (
                interruptions_per_day is not None or mtbi_seconds is not None
            ):
                raise ValueError(
                    "give the interruption rate to the guard or to adaptive=AdaptiveInterval(...)"
                    ", not both"
                )
            if adaptive is None:
                if interruptions_per_day is None and mtbi_seconds is None:
                    raise ValueError(
                        "every='auto' needs the interruption rate: interruptions_per_day= or "
                        "mtbi_seconds= (or adaptive=AdaptiveInterval(...))"
                    )
                adaptive = AdaptiveInterval(
                    interruptions_per_day=interruptions_per_day, mtbi_seconds=mtbi_seconds
                )
            self.adaptive = adaptive
            self.every_seconds = adaptive.seconds
        elif every is not None:
            raise ValueError(f"every must be 'auto' or left out, got {every!r}")
        elif adaptive is not None or interruptions_per_day is not None or mtbi_seconds is not None:
            # Read by every="auto" only: without it they were dropped, and a guard given only
            # them made no periodic save at all.
            raise ValueError(
                "adaptive=, interruptions_per_day= and mtbi_seconds= set the interval of "
                "every='auto': add every='auto'"
            )
        # Read by `due` on every step: keep these two plain attributes.
        self._wake = False
        self._next_step: float = self.every_steps if self.every_steps else math.inf

        self._lock = threading.Lock()
        # `adaptive` is fed from the loop (each flush) and from a background save's thread
        # (each upload): its deques must not change while it computes the interval.
        self._adaptive_lock = threading.Lock()
        self._pending: dict[str, str | None] = {}  # reason -> notice id
        self._notice_ids: set[str] = set()
        self._handled: set[str] = set()  # drains already flushed for
        # Notices a save answered, until cleared (id -> noticed_at): written into the next
        # generations' metadata (`_save_metadata`); those of the generation this job resumed
        # from (`resumed`), whose drains are acked without a new save.
        self._answered: dict[str, str] = {}
        self._answered_at_resume: dict[str, str] = {}
        # Notices cleared while a save was asked for them (pending or under way): that save,
        # once done, is acked but does not mark them handled. It did, and the same id raised
        # again (AWS keeps a rebalance's noticeTime) asked the job for no save.
        self._cleared_in_save: set[str] = set()
        # Notices this job received as a drain (until cleared): sent as terminate later (the
        # agent escalates a drain whose deadline came within its margin), it is a terminate
        # raised after the start, whatever its `noticed_at`, and acts at once.
        self._drains_seen: set[str] = set()
        # Notices a save that said exit answered (until cleared): sent again (Azure's event
        # going from Scheduled to Started, a replay), each asked for that save again, and a
        # loop still running after the exit's save (a framework's teardown, one more `due`
        # on the way out) saved and acked it twice inside the window.
        self._exited_for: set[str] = set()
        # A save said exit: a signal now asks for nothing new (a SIGTERM repeat is ignored, a
        # Ctrl-C goes through), as while the exit is pending. Counted as a first signal, it
        # asked for a save no loop would make, and a user's second Ctrl-C, the process
        # waiting on its way out, stopped nothing.
        self._exit_answered = False
        # The step and causes of the save that answered the exit: a loop that goes on past it
        # (a framework's teardown, an epoch finished first) saves again, periodic or on a
        # drain, and those saves are not the exit's (see `_answers_exit`).
        self._exit_saved: tuple[int, str] | None = None
        self._exit = False
        # What asks for the pending exit: "notice:<id>" per terminate, else the reason (signal,
        # peer, request:<reason>). A terminate withdrawn before the save is answered (see
        # `_withdraw_exit`) no longer ends the job when nothing else asks for the exit.
        self._exit_by: set[str] = set()
        self._exit_code = 0  # see `exit_code`
        self._due_since: float | None = None  # when `due` said to save, until it is saved
        self._due_step = 0  # the step it said so at
        # The `_due_since` of a save that raised (nothing runs any more), and of an exit's save
        # with the number of EXIT_SAVE_WARN_SECONDS it was said to be running for.
        self._due_failed: float | None = None
        self._told_running: tuple[float, int] = (0.0, 0)
        self._told_late: float | None = None
        self._exit_barrier: tuple[float, float] | None = None
        self._exit_waiting: tuple[float, float] | None = None
        self._resumed_step: int | None = None
        self._last_save = time.monotonic()
        self._started = self._last_save
        self._started_wall = process_started()
        # And on the boot clock, which the agent ages its notices on (see _raised_since_start).
        self._started_boot = process_started_boot()
        # The step whose state is already durable (a save, or the resume point): a save asked
        # for at that step again has nothing new to write.
        self.durable_step: int | None = None
        if not _a_duration(exit_margin):
            # NaN never came within the margin of an inherited terminate's deadline (the job
            # trained into the kill unsaved), a negative one saved after it, and a string
            # raised on the notices thread.
            raise ValueError(
                f"exit_margin must be a number of seconds, zero or more, got {exit_margin!r}"
            )
        self.exit_margin = float(exit_margin)
        self._slowest_flush = 0.0
        self._events: dict[str, Event] = {}  # the notices that asked for the pending save
        # Terminates in force before this job started: id -> deadline, or None. A wall-clock
        # time, as the agent's: a step of the system clock (NTP, a resume) moves the exit
        # planned for it as it moves the agent's escalation.
        self._inherited: dict[str, datetime | None] = {}
        # Those still waiting for a heartbeat to say whether an earlier client acted on them.
        self._undecided: dict[str, tuple[Event, float]] = {}
        self._replay_held_since: float | None = None
        # The last step `due` was called with and the `due_in_eval` calls so far: read by the
        # ticker into `_pace`, the time between calls that an inherited exit's margin adds.
        self._seen_step: int | None = None
        self._eval_checks = 0
        self._pace = StepPace()
        # With rank agreement: the save the ranks last agreed on (step, exit, and the reasons
        # and notices pending then), which `_record` answers with the agreed exit.
        self._agreed: tuple[int, bool, frozenset[str], frozenset[str]] | None = None

        self._init_flag_file(flag_file)

        if isinstance(notices, Notices):
            self.notices: Notices | None = notices
            self._own_notices = False
        elif notices:
            self.notices = Notices(events, control, heartbeat_timeout=heartbeat_timeout)
            self._own_notices = True
        else:
            self.notices = None
            self._own_notices = False
        if self.notices is not None:
            self.notices.add_listener(self._on_event)
            for event in list(self.notices.active.values()):
                self._on_event(event)

        self._install_signals(handle_signals)

        self._init_agreement(agree, agree_every)
        self._writer_unnoted = store is not None and not in_protected_worker()
        if self._writer_unnoted and (
            agree is not None or self.agreement is not None or _rank_known()
        ):
            self._note_writer()  # else at the first due(), once torch.distributed may be up

        self._init_background(background)

        # torchrun's shared rendezvous store loses a restart of 2+ ranks: rank 0 says so at
        # start, not a worker (the main process's guard answers for the job).
        self._restart_store = RestartStoreCheck(log)
        self._restart_store.pending &= not in_protected_worker()
        self._restart_store.check()

        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="forewarn-guard", daemon=True)
        self._ticker.start()

    def _note_writer(self) -> None:
        """A guard given a store is its job's writer from its start: another live job on the
        store (the same job started twice) is said now, not at this one's first save, an
        interval later (see `Backend.note_writer`). Rank 0's only, as a save's: made before
        `init_process_group` without RANK in the environment (`mp.spawn`), every rank took
        itself for rank 0, so then it waits for the first `due()`."""
        if not self._writer_unnoted or self.store is None:
            return
        self._writer_unnoted = False
        from .checkpoint.errors import CheckpointError
        from .checkpoint.ranks import resolve

        with contextlib.suppress(CheckpointError, OSError):
            if resolve(None, None).rank == 0:
                self.store.backend.note_writer()

    # The training loop's side.

    @property
    def should_exit(self) -> bool:
        """True once this process was asked to exit (terminate, signal, `request(exit=True)`).
        A plain attribute read: safe in any loop, involves no other rank."""
        return self._exit

    @property
    def exit_code(self) -> int:
        """The code to end the process with once the loop is left: 0 unless a save answered
        an exit (`SaveResult.exit`), then 128 + the signal's number, the shell's code for "ended
        by that signal": 130 for SIGINT, 129 for SIGHUP, 143 for SIGTERM and for everything
        else that asks for the exit (a terminate notice is the SIGTERM the platform sends next;
        another rank's exit; `request(exit=True)`). A job that saved for a reclaim has not finished:
        exit 0 marks a Kubernetes Job complete and makes torchrun report success, so the run
        never resumes; 143 is what a SIGTERM'd process would have exited with, which
        Kubernetes (a podFailurePolicy can match it), systemd and torchrun treat as a failure
        to restart. 1 when an exit's save raised (see `save_failed`): the state is not
        saved, which 143 would claim; 1 too when close() finds the last background save
        failed and the loop left before its retry (0 would mark that run complete)."""
        return self._exit_code

    def saved(
        self, step: int, seconds: float | None = None, *, where: str | None = None
    ) -> SaveResult:
        """Record a save at `step` (taking `seconds`, else the time since `due` said so), ack
        the agent (from a background thread: this never waits for the agent), and say whether
        to exit. `where` names the checkpoint (a path or URL) in the exit log line."""
        if seconds is not None and not _a_duration(seconds):
            # A save timed on a wall clock that stepped back, or NaN: taken as is, the adaptive
            # interval raised after the save had counted (the loop left with no ack and its
            # exit unanswered) and the agent refused the ack.
            log.warning(
                "forewarn: saved(%s, seconds=%r): not a number of seconds, zero or more; "
                "the time since due() said so is used instead",
                step,
                seconds,
            )
            seconds = None
        elif seconds is not None:
            seconds = float(seconds)  # a numpy float: the ack is JSON
        if seconds is None and self._due_since is not None:
            seconds = time.monotonic() - self._due_since
        return self._saved(step, seconds, where)

    def _saved(
        self, step: int, seconds: float | None, where: str | None, *, wrote: bool = True
    ) -> SaveResult:
        """`saved`, its `seconds` checked. `wrote` False: the step was durable already and
        nothing was written, so no flush was measured: the ack carries none, nor do the slowest
        flush and the adaptive interval take one. Ranks restarted under a notice each acked a
        flush of 0 s for their resume point, and enough of them pushed the job's real flush out
        of the agent's window: its exit margin fell back to the floor."""
        result, reasons, events, past_exit = self._record(step, seconds if wrote else None)
        if not wrote:
            result = replace(result, flush_seconds=seconds)
        if self.notices is not None:
            drains = _drains(events)
            for notice_id in result.notices or (None,):
                self.notices.ack(
                    notice_id,
                    step=step,
                    flush_seconds=seconds if wrote else None,
                    action=drains.get(notice_id or ""),
                )
        self._log_saved(result, reasons, events, where, past_exit, wrote=wrote)
        return result

    def _record(
        self, step: int, seconds: float | None, *, durable: bool = True
    ) -> tuple[SaveResult, dict[str, str | None], list[Event], bool]:
        """Everything a save changes in the guard but the ack and the log line. `durable`
        False: a background save, durable (and counted as the slowest flush) once committed.
        The last of what it returns: whether the save says exit only as one past the exit's
        save (a loop that went on), not as the exit's own."""
        # A background save's snapshot answers no exit: it is not durable yet.
        if durable and not self._wait_for_ranks_exit_save(step):
            self._agree_exit_after_save(step)
        now = time.monotonic()
        with self._lock:
            agreed, self._agreed = self._agreed, None
            exit_now = self._exit
            later: dict[str, str | None] = {}
            later_ids: set[str] = set()
            if agreed is not None and agreed[0] == step and exit_now and not agreed[1]:
                # An exit asked for after the ranks agreed on this save (a durable one's: after
                # they agreed again once it ended, see `_agree_exit_after_save`): the other
                # ranks go on, so this one does too, and the exit (with what asked for it)
                # waits for the next agreement.
                exit_now = False
                later = {k: v for k, v in self._pending.items() if k not in agreed[2]}
                later_ids = self._notice_ids - agreed[3]
            reasons = {k: v for k, v in self._pending.items() if k not in later}
            self._pending = later
            notice_ids = tuple(sorted(self._notice_ids - later_ids))
            self._notice_ids = later_ids
            self._handled.update(set(notice_ids) - self._cleared_in_save)
            for event in self._events.values():
                if event.id in notice_ids and event.id not in self._cleared_in_save:
                    self._answered[event.id] = format_time(event.noticed_at)
            self._cleared_in_save.difference_update(notice_ids)
            events = [
                self._events.pop(notice_id) for notice_id in notice_ids if notice_id in self._events
            ]
            self._wake = self._exit and not exit_now
            answers_exit = exit_now and self._answers_exit()
            if exit_now:
                self._exit_by.clear()  # answered: a withdrawal now comes too late to matter
                self._exited_for.update(notice_ids)
                self._exit_answered = True
            if answers_exit:
                by = reasons.get("signal")
                stopped_by = signal.Signals[by] if by in ("SIGINT", "SIGHUP") else signal.SIGTERM
                self._exit_code = 128 + stopped_by
        if step >= self._next_step:
            reasons.setdefault("periodic", None)
        if seconds is not None and durable:
            self._slowest_flush = max(self._slowest_flush, seconds)
        if durable:
            self.durable_step = step
        if self.adaptive is not None and seconds is not None:
            with self._adaptive_lock:
                self.adaptive.record_flush(seconds)
                self.every_seconds = self.adaptive.seconds
        self._next_step = step + self.every_steps if self.every_steps else math.inf
        self._last_save = now
        self._due_since = None
        self._flag_recorded(step, reasons, durable)
        if answers_exit:
            self._exit_saved = (step, exit_causes(reasons, events))
            # The rest of the lead is the exit's: Python's final sweep of the heap took a
            # torchrun rank seconds, and torchrun was SIGKILLed waiting for it.
            skip_final_collection()
        result = SaveResult(exit_now, step, tuple(reasons), notice_ids, seconds)
        return result, reasons, events, exit_now and not answers_exit

    def save(self, step: int, write: Callable[[Any], object]) -> SaveResult:
        """Save and record it. With a `store`, `write(gen)` fills a new generation that the
        store commits (files, manifest, marker, LATEST) and the flush seconds are the store's;
        without one, `write(step)` is the user's own save, timed here."""
        if step == self.durable_step:
            # Already durable (the resume point, or a save a moment ago): nothing new to write.
            # This is the answer to an exit asked for before the first step ended.
            where = self.store.url if self.store is not None else None
            already = f"{where} (already there)" if where else None
            return self._saved(step, 0.0, already, wrote=False)
        if self.store is not None:
            from .checkpoint.background import SaveMotion

            # An exit's save is given up a grace past the deadline only once its files' bytes
            # also stop moving (as save_state's): over a slow link, bytes flowing, it was lost.
            motion = SaveMotion()

            def watched(gen: Any) -> object:
                gen.on_open = motion.watch_file
                try:
                    return write(gen)
                finally:
                    motion.completed()

            try:
                flushed = self.store.flush(
                    step,
                    watched,
                    metadata=self._save_metadata(step, None),
                    timeout=self._exit_save_limit(),
                    moving=self._waited_for(motion.moving),
                )
            except BaseException as error:
                self.save_failed(step, error)
                raise
            where = f"{self.store.url}/{flushed.generation.name}"
            result = self.saved(step, flushed.seconds, where=where)
            result = replace(result, generation=flushed.generation)
            return result
        started = time.monotonic()
        try:
            write(step)
        except BaseException as error:
            self.save_failed(step, error)
            raise
        return self.saved(step, time.monotonic() - started)

    def save_failed(self, step: int, error: BaseException, owed: tuple[str, ...] = ()) -> None:
        """Report a save that raised (storage that stopped answering, a full disk, the
        caller's own write), in place of `saved`; `save` and `save_state` call it themselves,
        a caller that saves by itself calls it before letting the error propagate. The notices
        the save answered, and any `owed` from a background save it replaced, are acked
        `failed`; an exit's save says in one ERROR line that the job leaves without its state,
        and `exit_code` becomes 1. Nothing is recorded as saved and the notices stay pending,
        so a loop that catches the error and calls `due()` again saves again."""
        if isinstance(error, (KeyboardInterrupt, SystemExit)) and not self._exit:
            return  # the user stopping the process, not a save that failed
        with self._lock:
            notice_ids: list[str | None] = [*sorted(self._notice_ids | set(owed))]
            events = [self._events[i] for i in notice_ids if i in self._events]
            reasons = dict(self._pending)
            # Not a save past the exit's (a loop that went on): the exit's state is saved.
            exit_now = self._exit and self._answers_exit()
            self._due_failed = self._due_since  # not running any more: not said to be
            if exit_now:
                # Python's own code for the uncaught error: not 143, which says the state was
                # saved and the job is to resume from it.
                self._exit_code = 1
        message = f"{type(error).__name__}: {error}"
        if self.notices is not None:
            drains = {} if exit_now else _drains(events)
            for notice_id in notice_ids or [None]:
                self.notices.ack(
                    notice_id,
                    step=step,
                    outcome="failed",
                    note=message[:500],
                    action=drains.get(notice_id or ""),
                )
        if not exit_now:
            return
        durable = self.durable_step
        last = f"step {durable}" if durable is not None else "none"
        cause = exit_line(step, reasons, events, None).partition(";")[0]
        log.error(
            "forewarn: %s; the checkpoint of step %d was NOT saved (%s); the last durable "
            "checkpoint is %s (the job resumes from there); the process exits with 1",
            cause,
            step,
            message,
            last,
        )

    def loop_failed(self, step: int, error: BaseException) -> bool:
        """Report a training loop that raised `error` (not in a save: that is `save_failed`)
        while a save was owed that it never asked for: a notice that came after its last
        `due`, an exit not answered yet. Those get the `save_failed` answer (acked `failed`,
        and `exit_code` 1 for an exit), as no save will come for them; the agent waited on an
        ack that never came, and a terminate's job exited 0 when it caught the error. With
        nothing owed nothing is acked. Returns whether something was."""
        with self._lock:
            owed = bool(self._notice_ids) or (self._exit and bool(self._exit_by))
        if owed:
            self.save_failed(step, error)
        return owed

    def save_state(
        self, step: int, state: Mapping[str, Any], *, metadata: Mapping[str, Any] | None = None
    ) -> SaveResult:
        """Save `state` (a dict of tensors, nested dicts and lists, plain values) as
        generation `step` of the `store` (file `state.pt`; read it back with
        `forewarn.clients.checkpoint.load_state`), record it, and say whether to exit.

        With `background=True` a periodic or drain save returns once the state is copied to
        host memory (`flush_seconds` is that stall; `generation` is None): the upload and
        commit run on a thread, the agent is acked once the generation is durable, and a
        failure is raised as `BackgroundSaveError` by the next `due()` or save. An exit
        (terminate, SIGTERM) saves synchronously: it waits for a save in flight only if that
        and the final save fit before the notice's deadline, else cancels it, and logs and
        acks what it chose and why. Without `background`, every save is synchronous."""
        if self.store is None:
            raise ValueError("save_state needs CheckpointGuard(store=...)")
        if self._failure is not None and not self._exit:
            self._raise_failure()
        saver = self.saver
        in_flight = saver.in_flight if saver is not None else None
        if step == self.durable_step and in_flight is None:
            where = f"{self.store.url} (already there)"
            return self._saved(step, 0.0, where, wrote=False)
        if saver is None:
            from .checkpoint.background import STATE_FILE, SaveMotion, live_tensors
            from .checkpoint.needs import needs

            needs("torch", "save_state")  # before a generation is begun
            # An exit's save is given up a grace past the deadline only once it also moves
            # nothing (as the background saver's final save): over a slow link, its bytes
            # flowing, it was lost there, on a machine that often stays past its deadline.
            motion = SaveMotion()

            def write(gen: Any) -> None:
                import torch

                # The loop waits in this save: its CPU tensors are hashed in place.
                stable = live_tensors(state)
                try:
                    with gen.open(STATE_FILE) as stream:
                        stream.stable_memory = stable
                        torch.save(dict(state), motion.watch(stream))
                finally:
                    motion.completed()
                    stable.clear()

            try:
                flushed = self.store.flush(
                    step,
                    write,
                    metadata=self._save_metadata(step, metadata),
                    timeout=self._exit_save_limit(),
                    moving=self._waited_for(motion.moving),
                )
            except BaseException as error:
                self.save_failed(step, error)
                raise
            result = self.saved(
                step, flushed.seconds, where=f"{self.store.url}/{flushed.generation.name}"
            )
            return replace(result, generation=flushed.generation)
        return self._save_in_background(saver, step, state, metadata, in_flight)

    def exit_save_timeout(self) -> float | None:
        """How long an exit's synchronous save may take, for a loop that saves by itself
        (`save_dcp(store, step, state, timeout=guard.exit_save_timeout())`, as `save`,
        `save_state` and the framework callbacks pass it): until a grace past the terminate's
        deadline, so storage that stopped answering fails it, saying so, instead of the
        SIGKILL cutting it off silently; None when no exit or no deadline is known (a
        periodic save, a drain's, a signal's: no bound).

        A save of several ranks cannot be left behind on one (the commit's collectives): its
        storage requests are bounded instead (`flush(timeout=)`), to end the margin before
        the deadline, so every rank's job hears of a failure while it can still say so.
        Without it, a loop of its own calling `save_dcp` (the DCP example) had no way to
        bound its exit's save: two torchrun ranks on a stalled S3 endpoint were still in it
        at the SIGKILL 30 s after a GCP preemption, where the bound failed them in 22 s."""
        if not self._exit:
            return None
        left = self._seconds_left()
        if left is None:
            return None
        from .checkpoint import background

        if _several_ranks():
            return max(left - background.EXIT_SAVE_MARGIN_SECONDS, 0.0)
        return max(left, 0.0) + background.FINAL_SAVE_GRACE_SECONDS

    def _exit_save_limit(self) -> Callable[[], float] | None:
        """`exit_save_timeout` asked again as the save runs (`flush(timeout=)`'s callable):
        a terminate's deadline moved earlier during the save bounds it at once. Taken once
        at its start, the bound stayed minutes out and the SIGKILL at the new deadline cut
        the save off without the CommitTimeout and ERROR line a timed-out save gives. Where
        the deadline is no longer known (the notice answered), the first bound runs on; a
        save begun past its deadline still has the grace."""
        first = self.exit_save_timeout()
        if first is None:
            return None
        from .checkpoint import background

        began = time.monotonic()

        def limit() -> float:
            spent = time.monotonic() - began
            left = self._seconds_left(passed=True)
            if left is None:
                return first - spent
            if _several_ranks():  # resolved once, by `flush`: no save is left behind
                return max(left - background.EXIT_SAVE_MARGIN_SECONDS, 0.0)
            grace = background.FINAL_SAVE_GRACE_SECONDS
            return max(left + grace, grace - spent)

        return limit

    def _waited_for(self, moving: Callable[[], bool]) -> Callable[[], bool]:
        """What keeps an exit's save waited for past its `timeout`, which was taken from the
        terminate's deadline when the save began: its bytes still moving, or that deadline
        moved later since (re-sent by the agent, AWS's spot time or Azure's NotBefore) and
        not passed yet. By the old bound alone, a save stalled a moment on its storage was
        given up there, and the job exited unsaved on a machine that had minutes left."""

        def waited() -> bool:
            return moving() or self._deadline_ahead()

        return waited

    def _deadline_ahead(self) -> bool:
        """Whether the terminate's deadline is known and not passed yet."""
        left = self._seconds_left()
        return left is not None and left > 0

    def resumed(
        self, step: int, *, restore_seconds: float | None = None, steps_lost: int | None = None
    ) -> None:
        """Report a resume to the agent (telemetry: restore time and steps lost). The resumed
        step counts as durable: a save asked for before any step has run writes nothing, and
        periodic saves by step count from it.

        With a `store` whose `restore()` loaded the generation of this step, a figure not
        given is the store's: `restore_seconds` the time that restore took, and `steps_lost`
        0 when the generation was an exit's save (the job stopped at its step). Otherwise
        the steps lost are not known here (the job may have trained past its newest save)
        and the agent logs them `unknown`."""
        restored = self.store.last_restored if self.store is not None else None
        if restored is not None and restored.step == step:
            if restore_seconds is None:
                restore_seconds = restored.restore_seconds
            if steps_lost is None and restored.metadata.get(EXIT_SAVE) is True:
                steps_lost = self._none_lost_after(restored.step)
            self._answered_at_resume = answered_notices(restored.metadata)
        self.durable_step = step
        self._resumed_step = step
        if self.every_steps:
            self._next_step = step + self.every_steps
        if self.notices is not None:
            # Just started: give the subscriber a moment to hear the agent's heartbeat.
            deadline = time.monotonic() + 1.5
            while not self.notices.alive and time.monotonic() < deadline:
                time.sleep(0.05)
            self.notices.ack(
                None,
                step=step,
                outcome="resumed",
                restore_seconds=restore_seconds,
                steps_lost=steps_lost,
            )
        self._drop_answered_at_resume()

    def _none_lost_after(self, step: int) -> int | None:
        """0 when the exit's save of `step` that the job resumed from is the store's newest
        generation; None (not known) when a newer one is there: one that did not load or
        verify, or a partial one, so the job had trained past `step` (two reclaims, the second
        one's save unreadable), or when the store cannot be listed."""
        assert self.store is not None
        try:
            newer = [other for other in self.store.steps() if other > step]
        except Exception as exc:  # storage that does not answer: the figure is not known
            log.debug("forewarn: cannot list %s for the steps lost: %s", self.store.url, exc)
            return None
        return None if newer else 0

    def request(self, reason: str = "manual", *, exit: bool = False) -> None:
        """Ask for a save at the next `due` check, from any thread. `request('signal',
        exit=True)` once a save has answered an exit asks for nothing, as the guard's own
        handler takes a signal then: a job's own SIGTERM handler calling it (as the README
        says) hears the platform's repeated SIGTERM (systemd's control-group kill, torchrun's
        forwarded copy, the one after a terminate's save), which saved the same exit twice.
        Another reason still asks."""
        with self._lock:
            if exit and reason == "signal" and self._exit_answered:
                return
            self._pending[reason] = None
            if exit:
                self._exit_by.add("request:" + reason)
                self._exit = True
            self._wake = True

    def close(self) -> None:
        """Stop the guard's threads; with background saves, wait for the one in flight (its
        failure is logged and acked, not raised: close runs on the way out), with a WARNING
        if a terminate's deadline passes meanwhile."""
        self._close_background()
        self._stop.set()
        self._ticker.join(timeout=1)
        self._restore_signals()
        if self._flag_jobs is not None:
            self._flag_jobs.leave()
        if self.notices is not None and self._own_notices:
            self.notices.close()

    def __enter__(self) -> CheckpointGuard:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        code = self._exit_code
        self.close()
        # sys.exit(guard.exit_code) inside the block took the code before close() waited for
        # the background save answering the exit: when that save failed, exit_code became 1
        # (not saved) but the process exited 143 and the job restarted as if it were saved.
        if isinstance(exc, SystemExit) and exc.code == code and self._exit_code != code:
            exc.code = self._exit_code

    # The other threads' side.

    def _tick(self) -> None:
        interval = TICK_SECONDS
        if self.every_seconds is not None:
            interval = min(interval, self.every_seconds / 4)
        while not self._stop.wait(interval):
            elapsed = time.monotonic() - self._last_save
            if self.every_seconds is not None and elapsed >= self.every_seconds:
                with self._lock:
                    self._pending.setdefault("periodic", None)
                    self._wake = True
            self._pace.observe(self._seen_step, self._eval_checks, time.monotonic())
            self._check_flag_removed()
            self._check_flag()
            self._check_flag_deadline()
            self._check_inherited()
            self._check_handlers()
            self._check_exit_save()
            self._check_retry()
            self._check_exit_unanswered()
            self._restart_store.check()


def _drains(events: list[Event]) -> dict[str, str]:
    """The notices a save answered as drains, as this guard knew them when it recorded the
    save: its ack says `action=drain` for them, so that an agent that sent the notice as
    terminate meanwhile counts it for no terminate (the guard saves again for that, the
    exit's save). One it knew as terminate goes without, as before: the exit's save answers
    either."""
    return {event.id: "drain" for event in events if event.action == "drain"}


__all__ = ["CheckpointGuard", "SaveResult", "exit_line"]
