"""Background saves (`CheckpointGuard(background=True)`, `save_state`): the loop waits for a
snapshot in host memory only, the upload and commit run on the saver's thread.

`BackgroundSaves` starts a save, joins one already in flight for the same step, acks the
notices a save answered once it is durable (or records its failure for the next `due()` and
asks for a retry), makes an exit's final save (waiting for the save in flight or cancelling
it), and waits for the last one in close(), bounded by its progress.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .event import Event
from .guard_report import ExitReporting
from .guard_state import TICK_SECONDS
from .saveresult import SaveResult

if TYPE_CHECKING:
    import threading

    from .adaptive import AdaptiveInterval
    from .checkpoint import BackgroundSaver, CheckpointStore, Generation, SaveTiming

log = logging.getLogger("forewarn.clients")

# The retry of a failed background save: the first at the next `due()`, a blip of the
# storage's costs one step; each failure in a row after that doubles the wait, from this many
# seconds, up to RETRY_MAX_SECONDS. Retried at the next step every time, a dead store cost a
# snapshot copy and a failed upload every other step for as long as it stayed dead.
RETRY_FIRST_SECONDS = 5.0
RETRY_MAX_SECONDS = 300.0


def retry_delay(failures: int) -> float:
    """Seconds before the retry after `failures` background saves failed in a row."""
    if failures <= 1:
        return 0.0
    return min(RETRY_FIRST_SECONDS * 2.0 ** min(failures - 2, 32), RETRY_MAX_SECONDS)


# A save-and-continue: the reasons (`_pending`'s keys) whose save may wait, with training
# going on, for the background save in flight to end: it could only start after it anyway.
_DEFERRABLE = frozenset({"periodic", "retry", "drain", "flag"})
_ASKED_WORDS = {"drain": "drain's", "flag": "flag file's"}


# A final save still within its estimate is on course when that estimate ends this long
# before the deadline at least (`_exit_save_moving`).
ON_COURSE_SECONDS = 1.0


@dataclass
class _Refusals:
    """Saves refused at once in a row (saves given up as stalled still hold their copies),
    and the steps whose save was held back since the last one (`_refusal_held`)."""

    count: int = 0
    skipped: int = 0
    first_step: int = 0


def _deferrable(pending: Mapping[str, Any]) -> bool:
    """Whether only saves that continue training ask (see `_skips_scheduled`). A drain counts
    when a notice asked for it (its value is the notice's id); `request("drain")`, the loop's
    own ask, sets None and, as every `request()`, waits for the upload instead (the end of a
    run asks so, and the loop leaves right after its save)."""
    if not set(pending) <= _DEFERRABLE:
        return False
    return "drain" not in pending or pending["drain"] is not None


class BackgroundSaves(ExitReporting):
    """The background-save side of `CheckpointGuard`. It says what it saved through
    `ExitReporting` (its base), as a save the loop waits for does."""

    store: CheckpointStore | None
    saver: BackgroundSaver | None
    _awaiting: dict[int, tuple[str, ...]]  # step -> notices its ack is owed to
    _unrecorded: set[int]
    _early: dict[int, tuple[SaveTiming, Generation | None, BaseException | None]]
    _refused_told: set[str]  # notices acked `failed` for a save that failed unrecorded
    _refusals: _Refusals | None  # while saves are refused at once (`_refusal_held`)
    _flag_step: int | None
    _failures_in_row: int
    _retry_at: float
    # The save in flight a save was last skipped for, and the drain or flag file it was for.
    _skipped_for: tuple[int, tuple[str, ...]] | None
    _exit_saving: int | None  # the step of the exit's save while `final()` runs
    _closing: bool  # close() waits for the save in flight: the loop has left
    every_steps: int | None  # CheckpointGuard's schedule, and when it last saved
    every_seconds: float | None
    _last_save: float
    adaptive: AdaptiveInterval | None  # every="auto": fed each upload (see _background_done)
    _adaptive_lock: threading.Lock

    if TYPE_CHECKING:
        # CheckpointGuard's own, and FlagFileRequests'.

        def _record(
            self, step: int, seconds: float | None, *, durable: bool = True
        ) -> tuple[SaveResult, dict[str, str | None], list[Event], bool]: ...

        def save_failed(
            self, step: int, error: BaseException, owed: tuple[str, ...] = ()
        ) -> None: ...

        def _flag_saved(self, durable: bool) -> None: ...

        def _exit_save_limit(self) -> Callable[[], float] | None: ...

        def _deadline_ahead(self) -> bool: ...

    def _init_background(self, background: bool | BackgroundSaver) -> None:
        """Background saves (save_state): the loop waits for a snapshot in host memory only.
        `background` is a saver, True for one made for the store, or False for none."""
        self.saver = None
        self._failure = None
        # Background saves failed in a row, and when (time.monotonic()) the retry they ask
        # for is due: until then `due()` asks for no save for the retry alone.
        self._failures_in_row = 0
        self._retry_at = 0.0
        self._skipped_for = None
        self._exit_saving = None
        self._closing = False
        self._awaiting = {}
        # Background saves started whose notices save_state has not recorded yet, and the
        # completions that came first (a save of a few bytes can commit that fast): acked
        # once recorded, else the ack would go out without the notices it answers.
        self._unrecorded = set()
        self._early = {}
        self._refused_told = set()
        self._refusals = None
        if background is not False:
            self._start_background(background)

    def _skips_scheduled(self, step: int) -> bool:
        """due(): whether the save due at `step` is skipped, because only a save-and-continue
        asks for it (a periodic step, the retry of a failed save, a drain notice, the flag
        file) while the background save before it is still uploading. Said once per save in
        flight; the first step after that save ends saves (a drain's or the flag file's save
        stays pending until then). A signal, a `request()` (the end of a run) or an exit still
        waits for it in save_state, an exit cancelling it when the time left says so. Waited
        for, a stalled upload held the loop at its next periodic step until it was given up
        (EXIT_STALL_SECONDS, 120 s): training stopped for minutes of an S3 outage for a save
        that could not be made anyway; and a drain that came during a slow upload held the
        loop for the rest of that upload (1.9 s against a 0.3 s copy), where the save it asks
        for could only start once that upload ended anyway."""
        saver = self.saver
        if saver is None or self._exit:
            return False
        if self._refusal_held(saver):
            return True
        in_flight = saver.in_flight
        if in_flight is None or in_flight == step:
            return False
        if saver.give_up_if_stalled():
            return False  # its failure (on_done recorded it) is raised by this due()
        with self._lock:
            if not _deferrable(self._pending):
                return False
            asked = tuple(sorted(set(self._pending) & {"drain", "flag"}))
            # Said once per save in flight, and again when a drain comes after a periodic
            # step was skipped for it: that line did not say the drain waits.
            told = self._skipped_for == (in_flight, asked)
            self._skipped_for = (in_flight, asked)
            self._due_since = None  # no save is running for this step: none is timed
        if not told and asked:
            log.info(
                "forewarn: the %s save due at step %d waits: the background save of step %d "
                "is still uploading (%s); training goes on, and the first step after it ends "
                "saves for it",
                " and ".join(_ASKED_WORDS[reason] for reason in asked),
                step,
                in_flight,
                _uploading_words(saver.stalled_seconds()),
            )
        elif not told:
            log.info(
                "forewarn: the save due at step %d is skipped: the background save of step %d "
                "is still uploading (%s); the first step after it ends saves",
                step,
                in_flight,
                _uploading_words(saver.stalled_seconds()),
            )
        return True

    def _refusal_held(self, saver: BackgroundSaver) -> bool:
        """due(): whether the save a drain, the flag file, the schedule or the retry asks for
        is held back, because a save now would be refused at once (saves given up as stalled
        still hold their copies) and the refusal's back-off (`retry_delay`) is not over.
        Tried at every step, a drain on a mount hung for an hour was refused at every step:
        at 10 steps/s, 36,000 ERROR lines and as many `failed` acks. The first step after one
        of the stuck saves ends saves (checked at every step, so a drain waits no longer for
        the back-off); an exit, a signal, `request()` or a drain notice not yet told of the
        refusal is never held."""
        with self._lock:
            refusals = self._refusals
            if refusals is None or not _deferrable(self._pending):
                return False
            if self._notice_ids - self._refused_told:
                return False  # a notice not told yet: its `failed` ack goes out now
        if not saver.refusing():
            with self._lock:
                self._refusals = None  # storage moves again: this step saves
            return False
        with self._lock:
            if time.monotonic() >= self._retry_at:
                return False  # the back-off's try: refused again, and said once
            refusals.skipped += 1
            self._due_since = None  # no save is running for this step: none is timed
        return True

    def _save_in_background(
        self,
        saver: BackgroundSaver,
        step: int,
        state: Mapping[str, Any],
        metadata: Mapping[str, Any] | None,
        in_flight: int | None,
    ) -> SaveResult:
        """save_state with a saver: an exit's final save, this step's save already in flight
        joined, or a new background save once the one in flight is done."""
        assert self.store is not None
        if self._exit:
            return self._final_save(saver, step, state, metadata)
        if in_flight == step:
            return self._join_in_flight(step)
        waited_since = time.monotonic()  # the wait for the save in flight is part of the stall
        if in_flight is not None:
            # The save in flight is waited for here, in ticks, not inside saver.save(): an exit
            # asked for meanwhile (SIGTERM during a slow or stalled upload) then goes through
            # final(), which cancels that upload when the deadline (or a signal's lack of one)
            # leaves no time for it. Waited for inside save(), the exit waited for the whole
            # upload, then a second one of this step, and a stalled connection held the loop
            # there until the platform's SIGKILL took both.
            # Bounded by progress, as close() is: an upload stuck in a write (a hung mount)
            # held the loop here for as long as the mount stayed hung; it is given up and
            # raised as that save's failure (the retry is asked for, as after any failure).
            while saver.in_flight is not None and not self._exit:
                if saver.give_up_if_stalled():
                    break
                saver.wait(TICK_SECONDS)
            if self._exit:
                return self._final_save(saver, step, state, metadata)
            if self._failure is not None:
                self._raise_failure()
        from .checkpoint.errors import CheckpointError

        with self._lock:
            self._unrecorded.add(step)
        try:
            # The notices it answers named, as a synchronous save's are: a job resumed from
            # this generation acks them without saving again (`ANSWERED_NOTICES`).
            timing = saver.save(
                step,
                state,
                metadata=self._save_metadata(step, metadata),
                waited_since=waited_since,
            )
        except BaseException as error:
            with self._lock:
                if step in self._early:
                    # Failed before it was recorded (refused while saves given up still hold
                    # their copies, or its snapshot failed): its failure named no notice, so
                    # the agent heard `failed` for none of the drains it was for and waited
                    # on them with no word. Those are the notices still pending (they stay so,
                    # for the next save to answer); each is told once, not at every step the
                    # drain asks again and is refused again.
                    told = self._refused_told
                    self._awaiting[step] = tuple(sorted(self._notice_ids - told))
                    told.update(self._notice_ids)
            self._recorded(step)
            if isinstance(error, CheckpointError):
                with self._lock:
                    self._failure = None  # the saver raised it itself: once is enough
            raise
        result, reasons, events, past_exit = self._record(step, timing.stall_seconds, durable=False)
        with self._lock:
            self._awaiting[step] = result.notices
        # An exit asked for while this save waited for the one in flight is answered by it
        # (the loop leaves, close() waits for the commit): the exit line names it.
        from .checkpoint.manifest import generation_name

        where = f"{self.store.url}/{generation_name(step)}"
        self._log_saved(result, reasons, events, where, past_exit, uploading=True)
        # After the line: a completion that came first (a failure within milliseconds) is
        # said now, after the save it ends, not before it.
        self._recorded(step)
        return result

    def _exit_save_moving(self, since: float, left: float | None = None) -> str | bool:
        """For the exit's save still running near its deadline (`_check_exit_save_late`): what
        the saver is doing when its bytes moved within TAIL_QUIET_SECONDS (its final save
        writing, or the background save it waits for first); False while `final()` has not
        begun either for at most TAIL_QUIET_SECONDS after `since` (it decides and copies the
        state), True otherwise. A final save writing at full pace into a lead shorter than it
        needs was said to wait on its storage (a hung mount), read as a storage fault."""
        from .checkpoint.background import TAIL_QUIET_SECONDS

        saver = self.saver
        if saver is None:
            return True
        quiet = saver.final_quiet_seconds()
        if quiet is not None:
            if quiet >= TAIL_QUIET_SECONDS:
                return True
            needed = saver.final_seconds_needed()
            if left is not None and needed is not None and 0 < needed <= left - ON_COURSE_SECONDS:
                # Within its estimate, which ends before the deadline: "in a lead shorter than
                # it needs" was said of a final save of 3.2 s 4.8 s before its deadline, which
                # committed 0.5 s later. Said at a later tick if it runs past its estimate.
                return False
            return f"it is still writing (its bytes moved {quiet:.0f}s ago)"
        in_flight = saver.in_flight
        if in_flight is not None and saver.stalled_seconds() < TAIL_QUIET_SECONDS:
            return (
                f"it waits for the background save of step {in_flight}, still moving "
                f"({saver.progress_words()})"
            )
        # False: final() deciding or copying, or not called yet.
        return not (in_flight is None and time.monotonic() - since < TAIL_QUIET_SECONDS)

    def _close_background(self) -> None:
        """close(): wait for the save in flight, and say when the last one failed unsaved."""
        if self.saver is not None:
            with self._lock:
                self._closing = True  # a failure now is retried at no step (`_closed_on`)
            self._wait_for_background(self.saver)
            with self._lock:
                # The last background save failed and the loop left before its retry: exit 0
                # marked the Job complete (torchrun reported success) with the run's last
                # steps saved nowhere, never to be redone.
                unsaved = "retry" in self._pending and self._exit_code == 0
                if unsaved:
                    self._exit_code = 1
            if unsaved:
                log.error(
                    "forewarn: the last background checkpoint failed and was not saved again "
                    "before close(): exit_code is 1, so the job is restarted from the last "
                    "durable checkpoint (%s)",
                    f"step {self.durable_step}" if self.durable_step is not None else "none",
                )

    def _recorded(self, step: int) -> None:
        """save_state has recorded what the background save of `step` answers: a completion
        that came before that is handled now."""
        with self._lock:
            self._unrecorded.discard(step)
            early = self._early.pop(step, None)
        if early is not None:
            self._background_done(*early)

    def _join_in_flight(self, step: int) -> SaveResult:
        """A save asked for at the step whose background save is still in flight (a drain
        arriving at a periodic step): that save already holds this step's state. Saving it
        again would wait for the whole upload, then fail in the background on the committed
        generation (`GenerationExistsError`, raised by the next `due()`); instead this save
        is that one, and the notices it answers are acked when it commits."""
        started = time.monotonic()
        result, _reasons, _events, _past_exit = self._record(step, None, durable=False)
        late: tuple[str, ...] = ()
        with self._lock:
            owed = self._awaiting.get(step)
            if self.durable_step is not None and self.durable_step >= step:
                late = result.notices  # it committed a moment ago
            elif owed is not None:
                self._awaiting[step] = tuple(sorted(set(owed) | set(result.notices)))
            else:
                # It failed a moment ago: the retry it asked for answers these notices too.
                self._notice_ids.update(result.notices)
        if self.notices is not None:
            for notice_id in late:
                # That save's own flush was acked with it; this one measured none. A
                # background save answers no exit: what it answered were drains.
                self.notices.ack(notice_id, step=step, action="drain")
        log.info(
            "forewarn: step %d is already being saved in the background; the %s save is that one",
            step,
            ", ".join(result.reasons) or "requested",
        )
        return replace(result, flush_seconds=time.monotonic() - started)

    def _final_save(
        self,
        saver: BackgroundSaver,
        step: int,
        state: Mapping[str, Any],
        metadata: Mapping[str, Any] | None,
    ) -> SaveResult:
        seconds_left = self._seconds_left()
        in_flight = saver.in_flight
        # Said before the save, which may wait on an upload and then on storage until the
        # deadline's SIGKILL: logged only once durable, a job killed mid-save left no line
        # saying a terminate came or what its save did.
        log.warning(
            "forewarn: the exit's save of step %d starts (%s left)%s",
            step,
            "unknown time" if seconds_left is None else f"{seconds_left:.1f}s",
            ""
            if in_flight is None or in_flight == step
            else f"; the background save of step {in_flight} is still uploading",
        )
        with self._lock:
            self._exit_saving = step
        try:
            # Bounded by the deadline as it stands while the save runs, as a synchronous
            # exit's save is: taken once here, a deadline moved later gave the save up at the
            # old one plus the grace, and one moved earlier left it to the SIGKILL unsaid.
            # So is the wait for an upload already in flight (`left`): taken once, it gave
            # the upload up at the old deadline although minutes remained, or waited past a
            # deadline moved earlier, the exit's own save then cut off by the SIGKILL.
            final = saver.final(
                step,
                state,
                seconds_left,
                metadata=self._save_metadata(step, metadata),
                timeout=self._exit_save_limit(),
                waited=self._deadline_ahead,
                left=lambda: self._seconds_left(passed=True),
            )
        except BaseException as error:
            with self._lock:
                self._exit_saving = None
                owed_ids = tuple(n for ids in self._awaiting.values() for n in ids)
            self.save_failed(step, error, owed_ids)
            raise
        with self._lock:
            self._exit_saving = None
            self._failure = None  # an older save's failure is superseded by this one
            owed = sorted({notice for ids in self._awaiting.values() for notice in ids})
            self._awaiting.clear()
        # With nothing in flight the reason says so alone ("no background save was running").
        what = {"waited": "waited for", "cancelled": "cancelled"}.get(final.choice)
        log.warning(
            "forewarn: final checkpoint at step %d (%s left): %s%s",
            step,
            "unknown time" if seconds_left is None else f"{seconds_left:.1f}s",
            "" if what is None else f"{what} the background save; ",
            final.reason,
        )
        result, reasons, events, past_exit = self._record(step, final.durable_seconds)
        if self.notices is not None:
            # Drains whose background save this one replaced are answered by it too.
            answered: list[str | None] = [*sorted(set(result.notices) | set(owed))]
            for notice_id in answered or [None]:
                self.notices.ack(
                    notice_id,
                    step=step,
                    flush_seconds=final.durable_seconds,
                    stall_seconds=final.stall_seconds,
                    durable_seconds=final.durable_seconds,
                    choice=final.choice,
                    note=final.reason[:500],
                )
        where = f"{self.store.url}/{final.generation.name}" if self.store else None
        self._log_saved(result, reasons, events, where, past_exit)
        return replace(
            result,
            generation=final.generation,
            choice=final.choice,
            choice_reason=final.reason,
        )

    def _start_background(self, background: bool | BackgroundSaver) -> None:
        from .checkpoint.background import BackgroundSaver

        if isinstance(background, BackgroundSaver):
            self.saver = background
        elif self.store is None:
            raise ValueError("background=True needs store=CheckpointStore(...)")
        else:
            self.saver = BackgroundSaver(self.store)
        if self.agreement is not None:
            raise ValueError(
                "background=True saves one process's state; with several ranks save through "
                "DCP (forewarn.clients.checkpoint.async_save_dcp)"
            )
        self.saver.on_done = self._background_done

    def _background_done(
        self, timing: SaveTiming, generation: Generation | None, error: BaseException | None
    ) -> None:
        """On the saver's thread: ack the notices the save answered, now that it is durable,
        or record the failure for the next `due()` and ask for another save."""
        from .checkpoint.background import CopiesHeldError

        retry_in, failures, answered_exit = 0.0, 0, False
        refused = isinstance(error, CopiesHeldError)
        refusals: _Refusals | None = None
        skipped = 0
        exit_saving: int | None = None
        periodic, closing = "", False
        with self._lock:
            if timing.step in self._unrecorded:
                self._early[timing.step] = (timing, generation, error)  # see _recorded
                return
            owed = self._awaiting.pop(timing.step, ())
            flagged = self._flag_step == timing.step
            if error is not None:
                from .checkpoint.background import BackgroundSaveError

                self._failure = BackgroundSaveError(timing.step, error)
                self._pending.setdefault("retry", None)
                # The notices it answered are still owed a save: the retry acks them once it
                # is durable (the agent releases a drain only on a "saved" ack).
                self._notice_ids.update(owed)
                self._wake = True  # the next due() raises the failure (see _hold_retry)
                self._failures_in_row += 1
                retry_in = retry_delay(self._failures_in_row)
                if refused:
                    # At least the first back-off step: tried again at the next step, the
                    # refusal came again at once (nothing it waits for ends that fast).
                    retry_in = max(retry_in, RETRY_FIRST_SECONDS)
                    refusals = self._refusals = self._refusals or _Refusals(first_step=timing.step)
                    refusals.count += 1
                    skipped, refusals.skipped = refusals.skipped, 0
                self._retry_at = time.monotonic() + retry_in
                failures = self._failures_in_row
                # Before the loop's next due() raises it: that due() is the step it said.
                periodic = self._periodic_step()
                closing = self._closing
                if self._exit_saving not in (None, timing.step):
                    # The save in flight the exit's save waits for (`final()`): that one is
                    # under way and saves the state without it. "Saving again at the next
                    # step" promised a step the loop never takes.
                    exit_saving = self._exit_saving
                elif self._exit and self._exit_code:
                    # This save answered the exit (the loop left, close() waited for it): the
                    # state of the exit is not saved, which 143 would claim (see exit_code).
                    self._exit_code = 1
                    answered_exit = True
            else:
                self._failures_in_row = 0
                self._refusals = None
                self.durable_step = max(self.durable_step or 0, timing.step)
                if timing.durable_seconds is not None:
                    self._slowest_flush = max(self._slowest_flush, timing.durable_seconds)
        if error is None and self.adaptive is not None and timing.durable_seconds is not None:
            # The upload W after the stall `_record` fed as the flush: an interruption in it
            # loses the interval before too, and no interval below it is worth planning.
            with self._adaptive_lock:
                self.adaptive.record_upload(max(timing.durable_seconds - timing.stall_seconds, 0.0))
                self.every_seconds = self.adaptive.seconds
        if flagged:
            self._flag_saved(error is None)
        if refusals is not None and error is not None:
            self._log_refused(timing.step, error, refusals, skipped, retry_in)
        elif error is not None:
            log.error(
                "forewarn: the background checkpoint of step %d failed: %s; %s",
                timing.step,
                error,
                _no_retry(self.durable_step)
                if answered_exit
                else _exit_saves(exit_saving)
                if exit_saving is not None
                else _closed_on(self.durable_step)
                if closing
                else _next_try(retry_in, failures, self._periodic_before(retry_in, periodic)),
            )
        else:
            log.info(
                "forewarn: step %d durable after %.3fs (training waited %.3fs)",
                timing.step,
                timing.durable_seconds or 0.0,
                timing.stall_seconds,
            )
        if self.notices is None or (refused and not owed):
            # A refusal that answers no notice newly: the agent was told of the first, and a
            # `failed` ack naming none at every back-off step told it nothing new.
            return
        for notice_id in owed or (None,):
            self.notices.ack(
                notice_id,
                step=timing.step,
                flush_seconds=timing.durable_seconds if error is None else None,
                outcome="saved" if error is None else "failed",
                stall_seconds=timing.stall_seconds,
                durable_seconds=timing.durable_seconds if error is None else None,
                # Why it failed, as a synchronous save's failed ack says: without it the
                # agent's log and `status` named the failed save with no cause.
                note=None if error is None else f"{type(error).__name__}: {error}"[:500],
                # A background save answers no exit (the exit's save is the final one): the
                # notices it answered were drains, and one the agent sends as terminate by
                # now is not answered by it.
                action=None if notice_id is None else "drain",
            )

    def _log_refused(
        self, step: int, error: BaseException, refusals: _Refusals, skipped: int, retry_in: float
    ) -> None:
        """The refusal of a save, once per back-off step (`_refusal_held`), with what happens
        next: the retry is not "at the next step" nor "at step 1002", as a failed upload's
        line says, but the first step after one of the stuck saves ends."""
        again = (
            ""
            if refusals.count == 1
            else f" again ({refusals.count} refusals since step {refusals.first_step}; "
            f"{skipped} steps held back since the last one)"
        )
        log.error(
            "forewarn: the background checkpoint of step %d was refused%s: %s; training goes "
            "on, and the first step after one of those saves ends saves (a drain, the flag "
            "file and the schedule wait for it); until then it is tried again in %.0f s at "
            "the earliest (an exit's save is never refused)",
            step,
            again,
            error,
            retry_in,
        )

    def _periodic_step(self) -> str:
        """Under the lock, a failure just recorded: the step the schedule saves again at. The
        loop's next `due()` raises the failure, and the step it raises it at saves nothing:
        where that is the periodic step or past it, the step after it saves; otherwise the
        periodic step does (the schedule counts from the failed save). Said as "the next
        periodic step", the saves came steps later than a reader counted (at 37 and 42 after
        a retry at 32, every 5 steps), or one step after it. The loop's next step is not
        known: a counter may rise by more than one a step (micro-batches, samples, a
        DataLoader that skips), so the periodic step is said as the first step from it on:
        said as `step 40`, a loop counting in threes saved at 42, or, its step raising the
        failure at 42 already, at 45."""
        every = self.every_steps
        if not every or every == 1:
            return ""
        seen, due_at = self._seen_step, self._next_step
        if seen is None:
            return ""
        if due_at > seen + 1:
            return (
                f"the first step from step {int(due_at)} on (the next periodic step, every "
                f"{every} steps) after the one that raises this failure"
            )
        return (
            "the step after the one that raises this failure (the periodic step, every "
            f"{every} steps, is that one or past)"
        )

    def _periodic_before(self, retry_in: float, periodic: str = "") -> str | None:
        """When the schedule's next save comes, if it may come before the retry's wait is
        over (which holds back only a save the retry alone asks for): said as the next try
        (`periodic`: `_periodic_step()`, taken when the failure was recorded)."""
        if self.every_steps == 1:
            return "the next step (a periodic save at every step)"
        if self.every_steps:
            return periodic or f"the next periodic step (every {self.every_steps} steps)"
        if self.every_seconds is not None:
            periodic_in = max(self._last_save + self.every_seconds - time.monotonic(), 0.0)
            if periodic_in < retry_in:
                return f"the next periodic save, in {periodic_in:.0f} s"
        return None

    def _raise_failure(self) -> None:
        with self._lock:
            error, self._failure = self._failure, None
            self._hold_retry()
        if error is not None:
            if self.saver is not None:
                from .checkpoint.errors import CheckpointError

                with contextlib.suppress(CheckpointError):
                    self.saver.check()  # the saver's copy of it: reported here, once
            raise error

    def _hold_retry(self) -> None:
        """Under the lock, the failure being raised: when the retry is all that asks for a
        save and its wait is not over, the steps after this one save nothing until the ticker
        finds it over (`_check_retry`). Anything else asking (a notice, the flag file, a
        signal, a periodic step) sets `_wake` itself and is never held back."""
        if set(self._pending) == {"retry"} and not self._exit:
            self._wake = time.monotonic() >= self._retry_at

    def _check_retry(self) -> None:
        """The ticker's: a retry held back whose wait is over is due at the next step."""
        if self._wake or "retry" not in self._pending or time.monotonic() < self._retry_at:
            return
        with self._lock:
            if "retry" in self._pending:
                self._wake = True

    def _wait_for_background(self, saver: BackgroundSaver) -> None:
        """close(): wait for the save in flight, however long (it is the last state there
        is). A terminate whose deadline passes meanwhile is said once, while the process is
        still there to say it: the platform's SIGKILL is due and that step is not durable."""
        from .checkpoint import background

        told = False
        while (step := saver.in_flight) is not None:
            # Bounded by progress, as at the interpreter's exit: a save stuck in a write (a
            # hung mount, a storage service that stopped answering) held close(), and the
            # process, as long as the mount stayed hung, and the job was never restarted.
            if saver.stalled_seconds() >= background.EXIT_STALL_SECONDS:
                self._give_up_on(saver, step)
                return
            saver.wait(TICK_SECONDS)
            if told or not self._exit or saver.in_flight is None:
                continue
            left = self._seconds_left()
            if left is not None and left <= 0:
                told = True
                log.warning(
                    "forewarn: the terminate's deadline passed while close() waits for the "
                    "background save of step %d: it is still uploading and not durable yet",
                    step,
                )
        saver.wait()

    def _give_up_on(self, saver: BackgroundSaver, step: int) -> None:
        last = saver.last_durable
        log.error(
            "forewarn: close() stops waiting for the background save of step %d: it %s (a hung "
            "mount or a storage service that stopped answering?); it is not committed, and the "
            "last durable generation is %s",
            step,
            saver.stall_words(saver.stalled_seconds()),
            last.name if last is not None else "none",
        )
        with self._lock:
            if self._exit and self._exit_code:
                # It answered the exit: that state is not saved, which 143 would claim.
                self._exit_code = 1


def _uploading_words(stalled: float) -> str:
    """How the save in flight is doing, for the line of a skipped save."""
    if stalled < 1.0:
        return "moving"
    return f"nothing moved for {stalled:.0f} s"


def _no_retry(durable_step: int | None) -> str:
    """What the job is told when the failed save was the exit's: the loop has left, and
    "saving again in ..." promised a save that never came."""
    last = f"step {durable_step}" if durable_step is not None else "none"
    return (
        "it answered the exit, so no later save will come: the process exits with 1 and the "
        f"job resumes from the last durable checkpoint ({last})"
    )


def _closed_on(durable_step: int | None) -> str:
    """What the job is told when the failed save is the one close() waits for: the loop has
    left, and "saving again at the next step" promised a step it never takes."""
    last = f"step {durable_step}" if durable_step is not None else "none"
    return (
        "close() waits for it: no later save will come (the loop has left); the job resumes "
        f"from the last durable checkpoint ({last})"
    )


def _exit_saves(step: int) -> str:
    """What the job is told when the failed save was the one the exit's save waited for."""
    return (
        f"the exit's save of step {step} is under way and saves the state without it (no "
        "retry: the loop has left)"
    )


def _next_try(retry_in: float, failures: int, periodic: str | None = None) -> str:
    """What the job is told of the retry after `failures` failed saves in a row; `periodic`:
    the schedule's next save, which may come first. Said as "saving again in 300 s" alone,
    it was logged seconds apart while a periodic save at every step saved again each time."""
    if retry_in <= 0:
        return "saving again at the next step"
    if periodic is not None:
        return (
            f"{failures} failed in a row: saving again at {periodic}, or in {retry_in:.0f} s "
            "if that comes first (a drain, the flag file or an exit saves at once)"
        )
    return (
        f"{failures} failed in a row: saving again in {retry_in:.0f} s (a periodic step, a "
        "drain, the flag file or an exit saves at once)"
    )


__all__ = ["RETRY_FIRST_SECONDS", "RETRY_MAX_SECONDS", "BackgroundSaves", "retry_delay"]
