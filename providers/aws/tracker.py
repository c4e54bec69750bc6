"""Turns what each poll of a path shows into the reports worth sending: new notices, real
changes and withdrawals, never a repeat.

IMDS gives a spot interruption and a rebalance recommendation no id, and a mock such as
amazon-ec2-metadata-mock recomputes their times on every request. So a path that holds one
notice at a time keeps the id of the first sighting for as long as the notice stays, and a
time that stays put or slides along with the clock (within `jitter` seconds) is no change.

A notice whose deadline had already passed when it was first seen (the agent started after
it, or the node's clock is ahead) is stale from the start: with `once_if_past`, the agent
retiring it (`forget`) does not make the next poll that still shows it unchanged raise it
again, which would be a clear and the same terminate at every grace while IMDS keeps it. A
real change of it after that is a new notice, with its own id. The ids of those retired
before an agent restart are handed in (`retired_before`): a first sighting of one, still
past, is taken as retired at once; and those first seen in time (`seen_in_time`): a first
sighting of one past its time is not stale.

A notice that a path withdraws on absence is withdrawn only when ABSENT_ANSWERS answers in a
row lack it: IMDS answering one poll from another host mid-rollout (a 404, or `[]`) cleared
it and the next poll raised it again, so the job's guard went on training under a terminate
withdrawn for a moment, and saved a drain twice. aws-node-termination-handler ends an
interruption only on an explicit `canceled`/`completed`, never on absence; a real withdrawal
here comes one poll later than the first answer without it. Likewise a change of a path's
one notice (another time, another action) is sent once CHANGED_ANSWERS answers in a row show
it: one stray answer carrying another host's notice is not a change. A new notice is sent at
its first answer (a second would cost every real one a poll); on a path that keeps its notice
on absence (spot), one that only that answer showed, missing from the next ABSENT_ANSWERS, was
another host's and is withdrawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forewarn.protocol.timefmt import utcnow
from forewarn.providers.report import Report

from .imds import parse_aws_date


@dataclass
class _Seen:
    report: Report  # the last one sent
    moments: dict[str, datetime | None]  # the volatile times of the last one sent
    sent_at: float  # monotonic time the last one was sent
    past: bool = False  # its deadline had passed when it was first seen
    retired: bool = False  # the agent retired it; kept only to recognise it (`once_if_past`)
    slept_at: float = 0.0  # the machine's time asleep (`PathTracker.slept`) when first seen
    missing: int = 0  # answers in a row since the last that showed it
    shown: int = 1  # answers that showed it (up to 2: only "once" matters, `_stray`)
    # A change of it shown by the last answers (`PathTracker.single`), and by how many in a
    # row: not sent until CHANGED_ANSWERS.
    change: _Seen | None = None
    change_shown: int = 0


@dataclass
class PathTracker:
    """Memory of one IMDS path.

    `single`: the path holds at most one notice (spot, rebalance, ASG state), so whatever it
    shows is the same notice until it goes away. `volatile`: detail keys holding a time that
    may move between polls without the notice changing. `clear_on_absence`: a notice that
    ABSENT_ANSWERS answers in a row lack is withdrawn (a `clear` is sent); otherwise it is
    kept. `once_if_past`: a
    notice first seen with its deadline already passed is not reported again after `forget`
    while it shows unchanged. `wall` is the wall clock deadlines are compared with.
    """

    single: bool
    volatile: tuple[str, ...] = ()
    clear_on_absence: bool = True
    jitter: float = 5.0
    clock: Callable[[], float] = time.monotonic
    once_if_past: bool = False
    # A notice the agent retired past the end of its window (`until`) is not reported again
    # while shown unchanged: a scheduled event still listed `active`
    # after its window was otherwise a clear and the same terminate at every grace.
    done_after_window: bool = False
    wall: Callable[[], datetime] = utcnow
    # Seconds the machine has spent suspended since it booted: a hibernation that IMDS no
    # longer shows after the machine slept is over (see `update`).
    slept: Callable[[], float] = field(default_factory=lambda: time_asleep)
    seen: dict[str, _Seen] = field(default_factory=dict)
    # Ids not stale when first seen: retired and reported again since, or seen in time by
    # the agent before a restart (`seen_in_time`).
    raised_again: set[str] = field(default_factory=set)
    # Ids of stale notices retired before the agent restarted (`once_if_past`), and those of
    # them this tracker has since seen and kept retired (for the watcher to log).
    retired_before: set[str] = field(default_factory=set)
    recognised: list[str] = field(default_factory=list)
    # Ids first seen before their deadline (`once_if_past`), for the watcher to remember
    # across a restart (`seen_in_time`).
    in_time: list[str] = field(default_factory=list)
    # Ids of notices the agent restored after a restart that this tracker has not seen yet
    # (`expect`): an explicit withdrawal of one (a scheduled event listed `canceled`) is
    # sent, where one of a notice never seen is no news.
    expected: set[str] = field(default_factory=set)

    def update(self, reports: list[Report]) -> list[Report]:
        """The reports to send after a successful poll that showed `reports`."""
        now = self.clock()
        out: list[Report] = []
        present: set[str] = set()
        for report in reports:
            slot = "only" if self.single else report.id
            seen = self.seen.get(slot)
            if report.action == "clear":
                if seen is not None:
                    out.append(self._clear(seen.report, report.detail))
                    del self.seen[slot]
                elif report.id in self.expected:
                    # Restored from before a restart and now listed canceled or completed:
                    # held until every path had answered twice (6 s, its escalation armed),
                    # though this answer proves it withdrawn.
                    out.append(report)
                self.expected.discard(report.id)
                continue
            self.expected.discard(report.id)
            present.add(slot)
            if seen is not None:
                seen.missing = 0
                seen.shown = min(seen.shown + 1, 2)
            moments = {key: _moment(report.detail.get(key)) for key in self.volatile}
            if seen is not None and seen.retired:
                if not self._changed(seen, report, moments, now):
                    seen.change = None
                    continue
                if not self._confirmed(seen, report, moments, now):
                    continue
                seen = None  # changed since it was retired: a new notice, its own id
            if seen is None:
                past = self._past(report)
                retired = past and report.id in self.retired_before
                self.seen[slot] = _Seen(
                    report, moments, now, past=past, retired=retired, slept_at=self.slept()
                )
                if retired:
                    self.recognised.append(report.id)
                else:
                    out.append(report)
                if self.once_if_past and not past and isinstance(report.deadline, datetime):
                    self.in_time.append(report.id)
                continue
            report = report.model_copy(update={"id": seen.report.id})
            if not self._changed(seen, report, moments, now):
                seen.change = None
            elif self._confirmed(seen, report, moments, now):
                seen.report, seen.moments, seen.sent_at = report, moments, now
                seen.change = None
                out.append(report)
        for slot in [slot for slot in self.seen if slot not in present]:
            seen = self.seen[slot]
            seen.missing += 1
            seen.change = None  # a change is shown by answers in a row
            # A retired one is counted too: forgotten at one stray answer, its next sighting
            # was a new notice, raised again after the agent had retired it.
            gone_for_good = self.clear_on_absence and seen.missing >= ABSENT_ANSWERS
            if gone_for_good or self._stray(seen) or self._resumed(seen):
                del self.seen[slot]
                if not seen.retired:  # a retired one was cleared by the agent already
                    out.append(self._clear(seen.report, None))
        return out

    def adopt(self, report: Report) -> str | None:
        """Take `report`, a notice of this path the agent restored after a restart, for the
        one the path holds (a path of one notice, before its first answer): the path's notice
        keeps that id across the restart, a change of it is re-sent under it, and a spot
        interruption that IMDS no longer shows is kept, as within one run. Without it the
        watcher took a moved interruption for a new one (a second terminate under another id)
        and the agent cleared the one IMDS stopped showing. Not one whose deadline has passed:
        whether it was stale when first seen is `once_if_past`'s to judge at its sighting.
        Its id, or None when not taken."""
        deadline = report.deadline
        past = isinstance(deadline, datetime) and deadline <= self.wall()
        if not self.single or self.seen or past or report.action == "clear":
            return None
        moments = {key: _moment(report.detail.get(key)) for key in self.volatile}
        # Shown before the restart by the answers that raised it: not a stray one (`_stray`).
        self.seen["only"] = _Seen(report, moments, self.clock(), slept_at=self.slept(), shown=2)
        return report.id

    def expect(self, report: Report) -> None:
        """`report` is a notice the agent restored after a restart, on a path of several
        notices (scheduled events, each by its id): an answer that lists it as withdrawn
        (`canceled`, `completed`) clears it at once, as within one run."""
        if not self.single and report.action != "clear":
            self.expected.add(report.id)

    def restate(self, notice_id: str) -> Report | None:
        """After the path's first answer, the adopted notice `notice_id` as it stands, to be
        reported again; None when the path no longer holds it. On a path that withdraws on
        absence, one that answer did not show is let go: the agent withdraws it, saying it
        was not reported since the restart, as it did before adoption."""
        for slot, seen in list(self.seen.items()):
            if seen.report.id != notice_id or seen.retired:
                continue
            if self.clear_on_absence and seen.missing:
                del self.seen[slot]
                return None
            return seen.report
        return None

    @property
    def unconfirmed(self) -> bool:
        """A notice only one answer has shown, within CONFIRM_WITHIN seconds of it, not yet
        withdrawn or retired: the next answers say whether it was a stray one (another
        host's IMDS), so they are asked soon. Bounded in time: a path failing after it (no
        answers) is not asked at that pace for long."""
        now = self.clock()
        return any(
            seen.shown == 1 and not seen.retired and now - seen.sent_at < CONFIRM_WITHIN
            for seen in self.seen.values()
        )

    @property
    def withdrawing(self) -> bool:
        """A notice this path withdraws on absence that the last answer lacked, short of
        ABSENT_ANSWERS: the next answer says whether it is gone (cancelled, moved to the
        history path) or the last was a stray one, so it is asked soon. Asked at the path's
        own 5 s, a scheduled reboot cancelled just before its escalation to terminate went out
        as terminate in that wait, and the job exited for a reboot that never came."""
        return self.clear_on_absence and any(
            0 < seen.missing < ABSENT_ANSWERS and not seen.retired for seen in self.seen.values()
        )

    def keep_times(self, reports: list[Report]) -> list[Report]:
        """`reports` of an answer read only in part, each without a deadline given the
        deadline and window (`until`) last sent for it. A scheduled event's NotBefore read,
        then unreadable, went out again without a deadline: the board took back the terminate
        it had sent, and the job trained on into the reboot. Its time has not changed as far
        as anyone knows."""
        kept = []
        for report in reports:
            seen = self.seen.get("only" if self.single else report.id)
            last = seen.report if seen is not None and not seen.retired else None
            if (
                report.action != "clear"
                and report.deadline is None
                and last is not None
                and last.deadline is not None
                and last.action == report.action
            ):
                report = report.model_copy(update={"deadline": last.deadline, "until": last.until})
            kept.append(report)
        return kept

    def _confirmed(
        self, seen: _Seen, report: Report, moments: dict[str, datetime | None], now: float
    ) -> bool:
        """Whether a change of a path's one notice has been shown by CHANGED_ANSWERS answers
        in a row. IMDS answering one poll from another host mid-rollout with that host's
        interruption (another time, another action) re-sent the terminate with the other
        host's deadline and again with its own a poll later: a job weighing whether its save
        fits before the deadline weighed the other host's. A path of several notices (the
        scheduled events, each by its EventId) sends its changes at once."""
        if not self.single:
            return True
        if seen.change is not None and not self._changed(seen.change, report, moments, now):
            seen.change_shown += 1
        else:
            seen.change, seen.change_shown = _Seen(report, moments, now), 1
        return seen.change_shown >= CHANGED_ANSWERS

    def _stray(self, seen: _Seen) -> bool:
        """A notice of a path that keeps its notice on absence (a spot interruption) shown by
        one answer only, and by none of the ABSENT_ANSWERS since: another host's, answering
        one poll mid-rollout. Raised at once (a second answer would cost every real one a
        poll), it was then kept to its deadline plus the grace: a job that had not yet saved
        for it exited, and one started meanwhile exited at once. A real one stays listed
        until the instance goes; shown twice, it is kept as before."""
        return (
            not self.clear_on_absence
            and not seen.retired
            and seen.shown == 1
            and seen.missing >= ABSENT_ANSWERS
        )

    def _resumed(self, seen: _Seen) -> bool:
        """A hibernation the machine has slept through since it was first seen: it is over.
        Kept (IMDS has no withdrawal of an interruption, and may miss one for a poll), its
        terminate stood up to its grace (300 s) after the resume, and a job resumed with it
        unread, or started then, saved and exited for nothing."""
        hibernation = seen.report.detail.get("action") == "hibernate"
        return hibernation and self.slept() - seen.slept_at > SLEEP_SEEN

    def forget(self, notice_id: str) -> bool:
        """Drop the memory of a notice the agent retired (past its deadline plus a grace), so
        that the next poll still showing it reports it again. True if it was known here."""
        slots = [
            slot
            for slot, seen in self.seen.items()
            if seen.report.id == notice_id and not seen.retired
        ]
        for slot in slots:
            if (self.once_if_past and self.seen[slot].past) or self._window_over(
                self.seen[slot].report
            ):
                self.seen[slot].retired = True
            else:
                del self.seen[slot]
                self.raised_again.add(notice_id)
        return bool(slots)

    def seen_in_time(self, notice_id: str) -> None:
        """`notice_id` was first seen before its deadline (by the agent before a restart,
        `in_time`): a past deadline at this tracker's first sighting does not make it stale."""
        self.raised_again.add(notice_id)

    def stale(self, notice_id: str) -> bool:
        """`notice_id` is kept retired: shown unchanged, it is not reported again."""
        return any(seen.retired and seen.report.id == notice_id for seen in self.seen.values())

    def hibernation(self, notice_id: str) -> bool:
        """`notice_id` is a spot interruption whose action is `hibernate`."""
        return any(
            seen.report.id == notice_id and seen.report.detail.get("action") == "hibernate"
            for seen in self.seen.values()
        )

    def _window_over(self, report: Report) -> bool:
        if not self.done_after_window:
            return False
        # Only an explicit end (NotAfter): without one, the action may still come after the
        # deadline (a retirement not yet carried out), and raising it again keeps it told.
        return isinstance(report.until, datetime) and report.until <= self.wall()

    def _past(self, report: Report) -> bool:
        # One raised again after its retirement has a past deadline by then, but was not
        # stale when first seen: it is raised again at every grace as before.
        if not self.once_if_past or report.id in self.raised_again:
            return False
        deadline = report.deadline
        return isinstance(deadline, datetime) and deadline <= self.wall()

    def _changed(
        self, seen: _Seen, report: Report, moments: dict[str, datetime | None], now: float
    ) -> bool:
        last = seen.report
        if (report.action, report.reason) != (last.action, last.reason):
            return True
        if _stable(report.detail, self.volatile) != _stable(last.detail, self.volatile):
            return True
        if not self.volatile and report.deadline != last.deadline:
            return True
        # Measured from the last send, not the last poll: a time that creeps a little at
        # every poll must still be re-sent once it has moved by more than the jitter.
        elapsed = now - seen.sent_at
        for key, moment in moments.items():
            before = seen.moments.get(key)
            if (moment is None) != (before is None):
                return True
            if moment is None or before is None:
                continue
            shift = (moment - before).total_seconds()
            # Unchanged (real IMDS) or recomputed from the clock (mocks): the same notice.
            if abs(shift) > self.jitter and abs(shift - elapsed) > self.jitter:
                return True
        return False

    def _clear(self, last: Report, detail: dict[str, Any] | None) -> Report:
        return Report(
            id=last.id,
            action="clear",
            reason=last.reason,
            provider=last.provider,
            detail=detail if detail is not None else last.detail,
        )


def time_asleep() -> float:
    """Seconds this machine has been suspended (or hibernated) since it booted: the boot
    clock counts them, the monotonic clock does not. 0 where there is no boot clock."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
    except (AttributeError, OSError):  # not Linux
        return 0.0


# Answers in a row without a notice after which a path that withdraws on absence withdraws
# it: one stray answer (another host's IMDS, a hiccup) is not a withdrawal.
ABSENT_ANSWERS = 2

# Answers in a row showing the same change of a path's one notice after which the change is
# sent: one stray answer (another host's IMDS with its own notice) is not a change.
CHANGED_ANSWERS = 2

# Seconds after a notice's first answer during which its path is asked again soon, while no
# second answer has shown it (`unconfirmed`).
CONFIRM_WITHIN = 3.0

# Seconds the boot clock must have gained on the monotonic one to count as a sleep: both are
# read a moment apart, and an NTP slew adjusts both alike.
SLEEP_SEEN = 1.0


def _stable(detail: dict[str, Any], volatile: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in detail.items() if key not in volatile}


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_aws_date(value)
    except ValueError:
        return None


__all__ = ["ABSENT_ANSWERS", "CHANGED_ANSWERS", "CONFIRM_WITHIN", "PathTracker"]
