"""What the agent's notices ask of the job, as `NoticeRequests` turns them into requests.

A drain asks for a save (once per occurrence), a terminate for a save and an exit, a clear
withdraws what its notice asked. A terminate that was in force before this job started is
sorted by the agent's heartbeat: one an earlier client acted on is inherited (the job trains,
and saves and exits within its margin of the deadline), one nobody acted on acts at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from forewarn.protocol.oneline import one_line
from forewarn.protocol.timefmt import format_time, span_text, utcnow

from .event import Event
from .guard_state import ANSWERED_NOTICES, TICK_SECONDS, GuardState
from .proctime import steady_seconds

log = logging.getLogger("forewarn.clients")


class NoticeRequests(GuardState):
    """The notice side of `CheckpointGuard` (its listener on `Notices` is `_on_event`)."""

    # When this process started, on the wall clock and on the boot clock (see proctime).
    _started_wall: float
    _started_boot: float | None
    # Terminates in force before this job started: id -> deadline, or None.
    _inherited: dict[str, datetime | None]
    # Those still waiting for a heartbeat to say whether an earlier client acted on them.
    _undecided: dict[str, tuple[Event, float]]
    _resumed_step: int | None
    # Since when a drain's save waits for the rest of the agent's replay (`_held_for_replay`).
    _replay_held_since: float | None

    if TYPE_CHECKING:

        def _answered_by_flag_save(self, event: Event) -> bool: ...  # FlagFileRequests'

    def _on_event(self, event: Event) -> None:
        if event.action == "drain":
            self._drains_seen.add(event.id)
            # A terminate sent as a drain again: its deadline moved out of the exit margin.
            self._withdraw_exit(event.id, "is a drain again")
            with self._lock:
                # An inherited terminate's exit was planned for the deadline it had then; as a
                # drain again it no longer asks for one, and the job exited for it all the same.
                planned = self._inherited.pop(event.id, False) is not False
                self._undecided.pop(event.id, None)
            if planned:
                log.warning(
                    "forewarn: terminate %s is a drain again (deadline %s): the exit planned "
                    "for it is dropped; the job saves and continues",
                    one_line(event.id),
                    format_time(event.deadline) if event.deadline else "unknown",
                )
            if event.id in self._handled or self._answered_by_flag_save(event):
                return
            if self._answered_before_resume(event):
                return
            with self._lock:
                # Raised again after a clear heard during a save: the save under way answers
                # this occurrence too, as it answers any drain that comes while it runs.
                self._cleared_in_save.discard(event.id)
                self._pending["drain"] = event.id
                self._notice_ids.add(event.id)
                self._events[event.id] = event
                self._wake = True
        elif event.action == "clear":
            # A notice that comes back after a clear (same id: AWS keeps a rebalance's
            # noticeTime) is a new occurrence and is flushed for again.
            self._handled.discard(event.id)
            self._drains_seen.discard(event.id)
            self._exited_for.discard(event.id)
            with self._lock:
                self._answered.pop(event.id, None)
                self._answered_at_resume.pop(event.id, None)
                self._inherited.pop(event.id, None)
                self._undecided.pop(event.id, None)
                if event.id in self._notice_ids:
                    # Cleared while a save for it is pending or under way (see `_record`).
                    self._cleared_in_save.add(event.id)
            self._withdraw_exit(event.id, "was withdrawn")
        elif event.action == "terminate":
            if event.id in self._exited_for or self._still_inherited(event):
                return
            # Its noticed_at is the drain's when the agent escalated one this job received:
            # taken for a terminate in force before the start (and acted on: this job saved
            # for the drain), the job trained until its own margin, past the agent's.
            inherited = (
                event.noticed_at.timestamp() < self._started_wall
                and event.id not in self._drains_seen
            )
            if inherited and event.id not in self._inherited and self._raised_since_start(event.id):
                inherited = False  # the wall clock stepped back since the start
            if inherited:
                if event.id not in self._inherited:
                    with self._lock:
                        self._undecided[event.id] = (event, time.monotonic())
                    self._decide_inherited()
                else:
                    self._replan_inherited(event)
                return
            with self._lock:
                self._inherited.pop(event.id, None)
                self._undecided.pop(event.id, None)
                self._events[event.id] = event
                self._ask_exit_for(event.id)

    def _answered_before_resume(self, event: Event) -> bool:
        """A drain that the generation this job resumed from answered (the same notice: its
        id and `noticed_at`, `ANSWERED_NOTICES`): acked as saved at the resumed step, no new
        save. Restarted ranks saved again for a drain they had saved for before the restart,
        new to them; on a big model that save can cost a later terminate's deadline."""
        step = self._resumed_step
        with self._lock:
            noticed = self._answered_at_resume.get(event.id)
            if step is None or noticed != format_time(event.noticed_at):
                return False
            self._handled.add(event.id)
            self._answered[event.id] = noticed
        self._ack_answered(event, step)
        return True

    def _drop_answered_at_resume(self) -> None:
        """At the resume: the drains read before it (the agent's replay, while the job loaded
        its checkpoint) that the generation resumed from answered, asked for no save."""
        step = self._resumed_step
        if step is None:
            return
        with self._lock:
            if self._pending.keys() != {"drain"} or self._exit:
                return  # a save is owed anyway: it answers the drains too
            events = [self._events.get(notice_id) for notice_id in self._notice_ids]
            if not all(
                event is not None
                and self._answered_at_resume.get(event.id) == format_time(event.noticed_at)
                for event in events
            ):
                return
            answered = [event for event in events if event is not None]
            for event in answered:
                self._events.pop(event.id, None)
                self._handled.add(event.id)
                self._answered[event.id] = format_time(event.noticed_at)
            self._notice_ids.clear()
            self._pending.clear()
            self._wake = False
        for event in answered:
            self._ack_answered(event, step)

    def _ack_answered(self, event: Event, step: int) -> None:
        log.info(
            "forewarn: drain %s was answered by the checkpoint this job resumed from (step "
            "%d): acked, no new save",
            one_line(event.id),
            step,
        )
        if self.notices is not None:
            # As a save at a step already durable: no flush measured (see `_saved`).
            self.notices.ack(event.id, step=step, action="drain")

    def _held_for_replay(self) -> bool:
        """Whether a save asked for by drains alone waits, at a `due`, for the rest of the
        agent's replay: until every notice it replays to this client has been read
        (`Notices.replayed`), for at most `heartbeat_timeout`. A job starting under a drain
        and a terminate read the drain first and saved for it alone, then for the terminate a
        step later: two full saves where the exit's one answers both, and on a big model the
        second one can cost the deadline. The heartbeat that announces the replay comes before
        it, so a terminate in it is sorted (`_decide_inherited`) as it is read; one still
        undecided (a heartbeat lost or refused) holds nothing: a drain read later is no part
        of a replay."""
        notices = self.notices
        if notices is None or self._exit:
            return False
        with self._lock:
            drains_only = self._pending.keys() == {"drain"}
        if drains_only and self._undecided:
            self._decide_inherited()  # the heartbeat may have come since the last tick
        now = time.monotonic()
        if (
            not drains_only
            or self._exit
            or notices.replayed
            or now - (self._replay_held_since or now) >= notices.heartbeat_timeout
        ):
            self._replay_held_since = None
            return False
        if self._replay_held_since is None:
            self._replay_held_since = now
        return True

    def _raised_since_start(self, notice_id: str) -> bool:
        """Whether the agent raised the notice after this process started, by the notice's age
        on the boot clock (the agent's `ages`), which no step of the wall clock moves. By
        `noticed_at` alone, a clock stepped back since the start (NTP correcting one that ran
        ahead) made a terminate raised after it look inherited: acted on by another job on
        the node, it asked nothing of this one without a deadline, and the job trained on
        unsaved into the kill. Only ever turns "before" into "after"; False where the agent
        gives no age (older, not answering) or the start is not known on that clock."""
        started = self._started_boot
        if started is None or self.notices is None:
            return False
        ages = self.notices.notice_ages()
        age = ages.get(notice_id) if ages is not None else None
        return age is not None and age < steady_seconds() - started

    def _withdraw_exit(self, notice_id: str, why: str) -> None:
        """A terminate cleared, or sent as a drain again, before the save it asked for was
        answered: the machine is not going away, so the save is still made (flush and continue)
        but ends the job only when something else asks for the exit (a signal, another
        terminate, `request(exit=True)`, another rank, or an exit the ranks agreed on)."""
        with self._lock:
            key = "notice:" + notice_id
            if key not in self._exit_by:
                return
            self._exit_by.discard(key)
            if self._exit_by or (self._agreed is not None and self._agreed[1]):
                return
            self._exit = False
        log.warning(
            "forewarn: terminate %s %s before this job's save: the machine is not going away; "
            "the job saves and continues",
            one_line(notice_id),
            why,
        )

    def _still_inherited(self, event: Event) -> bool:
        """A terminate from before this job's start, re-sent for its reason or the provider's
        own detail (an Azure DocumentIncarnation bump) with a later `noticed_at`: the same
        terminate, deadline and all. A new deadline is planned for (`_replan_inherited`)."""
        with self._lock:
            if event.id in self._undecided:
                known: Event | None = self._undecided[event.id][0]
            elif event.id in self._inherited:
                known = self._events.get(event.id)
            else:
                return False
        return known is not None and known.deadline == event.deadline

    def _decide_inherited(self) -> None:
        """Sort the terminates in force before this job started by the agent's heartbeat:
        one listed in `acked` was acted on by an earlier client (`_inherit`: this job trains);
        one nobody acted on is this job's to act on, at once, like any terminate. The agent
        sends its heartbeat right after the replay; a heartbeat that does not list the notice
        as active, or an agent too old to send `acked`, leaves it undecided until
        `heartbeat_timeout` has passed, and then it counts as acted on."""
        if not self._undecided:
            return
        notices = self.notices
        beat = notices.agent if notices is not None else None
        timeout = notices.heartbeat_timeout if notices is not None else 0.0
        now = time.monotonic()
        for notice_id, (event, seen) in list(self._undecided.items()):
            if beat is not None and notice_id in beat.get("active", ()) and "acked" in beat:
                acted = notice_id in beat["acked"]
            elif now - seen < timeout:
                continue
            else:
                acted = True
            with self._lock:
                if self._undecided.pop(notice_id, None) is None:
                    continue
            if acted:
                self._inherit(event)
                continue
            log.warning(
                "forewarn: terminate %s from %s was already in force when this job started "
                "(noticed %s) and no client has acted on it: this job saves and exits now",
                one_line(event.id),
                one_line(event.provider),
                format_time(event.noticed_at),
            )
            with self._lock:
                self._events[event.id] = event
                self._ask_exit_for(event.id)

    def _inherit(self, event: Event) -> None:
        """A terminate that was in force before this job started and that an earlier client
        acted on (it saved and acked). The machine is still here, so it does not make this job
        exit at once: the job trains, and saves and exits `exit_margin` before the notice's
        deadline. Without a deadline, or with one already past, it asks nothing of this job. A
        notice raised after the start or a signal still acts at once; the same notice sent
        again with its deadline moved is planned for at its new deadline
        (`_replan_inherited`)."""
        if event.id in self._inherited:
            return
        left = event.seconds_left
        margin = self._inherited_margin()
        if left is not None and 0 < left <= margin:
            # The exit's moment is past already: said as what it is, an exit now (it said
            # "it does not stop this job at once: ... 30s before its deadline (7s away)"),
            # and asked for now, before it is said: left to the ticker (`_check_inherited`),
            # the next `due` trained a whole step more (or many, with quick steps) first.
            with self._lock:
                self._events[event.id] = event
                self._ask_exit_for(event.id)
            plan = (
                f"its deadline ({span_text(left)} away) is within this job's exit margin "
                f"({margin:g}s): this job saves and exits now"
            )
        elif left is not None and left > 0:
            self._inherited[event.id] = event.deadline
            plan = (
                f"it does not stop this job at once: this job saves and exits {margin:g}s "
                f"before its deadline ({span_text(left)} away)"
            )
        else:
            self._inherited[event.id] = None
            plan = (
                "it does not stop this job: its deadline is "
                + ("past" if left is not None else "unknown")
                + "; it is ignored"
            )
        self._events[event.id] = event
        log.warning(
            "forewarn: terminate %s from %s was already in force when this job started "
            "(noticed %s) and an earlier client acted on it; %s",
            one_line(event.id),
            one_line(event.provider),
            format_time(event.noticed_at),
            plan,
        )

    def _replan_inherited(self, event: Event) -> None:
        """An inherited terminate sent again with its deadline moved (by its provider, or by a
        step of the wall clock the agent followed on the boot clock): the exit is planned for
        the new deadline. The plan kept the old one, and after NTP stepped the clock back 10
        minutes the job's save came 10 minutes after the machine was gone."""
        left = event.seconds_left
        with self._lock:
            if event.id not in self._inherited:
                return
            self._inherited[event.id] = event.deadline if left is not None and left > 0 else None
            self._events[event.id] = event
        log.warning(
            "forewarn: terminate %s, in force before this job started, was sent again with "
            "its deadline moved to %s: %s",
            one_line(event.id),
            format_time(event.deadline) if event.deadline else "none",
            f"this job saves and exits {self._inherited_margin():g}s before it "
            f"({span_text(left)} away)"
            if left is not None and left > 0
            else "it asks nothing of this job",
        )

    def _inherited_margin(self) -> float:
        """How long before an inherited terminate's deadline the job saves and exits: its own
        `exit_margin`, twice its slowest flush, or the agent's margin (the heartbeat's
        `exit_margin`), whichever is largest. The agent's is the operator's floor, or twice the
        slowest flush any job reported: with the guard's 30 s alone, a job that inherited a
        terminate inside the agent's 120 s trained into its last 30 s and its save was cut by
        the kill.

        Plus the longest recent step between `due` calls and two ticks (the step's
        measurement and this check are each good to one): the save begins at the first `due`
        after the exit is decided, and with steps longer than the margin less the save, a
        save that began that late was cut by the kill at the deadline."""
        beat = self.notices.agent if self.notices is not None else None
        agents = beat.get("exit_margin") if beat is not None else None
        margin = max(self.exit_margin, 2 * self._slowest_flush, float(agents or 0.0))
        step = self._pace.longest(time.monotonic())
        return margin if step is None else margin + step + 2 * TICK_SECONDS

    def _check_inherited(self) -> None:
        self._decide_inherited()
        if not self._inherited or self._exit:
            return
        margin = self._inherited_margin()
        now = utcnow()
        for notice_id, deadline in list(self._inherited.items()):
            if deadline is not None and (deadline - now).total_seconds() <= margin:
                with self._lock:
                    self._inherited.pop(notice_id, None)
                    self._ask_exit_for(notice_id)

    def _ask_exit_for(self, notice_id: str) -> None:
        """With `_lock` held: the terminate `notice_id` asks this job to save and exit."""
        self._pending["terminate"] = notice_id
        self._notice_ids.add(notice_id)
        self._exit_by.add("notice:" + notice_id)
        self._exit = True
        self._wake = True


def answered_notices(metadata: Mapping[str, Any]) -> dict[str, str]:
    """The notices a generation's save answered (`ANSWERED_NOTICES` in its metadata): id ->
    `noticed_at` as written. Anything else there (an older guard's generation, a hand-edited
    manifest) answers nothing: the job saves for its notices as if it had not resumed."""
    raw = metadata.get(ANSWERED_NOTICES)
    if not isinstance(raw, dict):
        return {}
    return {
        notice_id: noticed
        for notice_id, noticed in raw.items()
        if isinstance(notice_id, str) and isinstance(noticed, str)
    }


__all__ = ["NoticeRequests", "answered_notices"]
