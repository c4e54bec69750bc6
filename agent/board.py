"""The notice board: the agent's memory of active notices and the rules that decide what is sent.

- The same notice reported again sends nothing; anything a client would act on differently
  (action, deadline, reason, the provider's own detail such as AWS terminate -> stop)
  re-sends it with the same id; a clear withdraws it.
- Escalation is a function of the current deadline, evaluated each time: a drain whose
  deadline is within the exit margin is sent as terminate (same id); if the deadline moves
  out of the margin again it is a drain again. The margin is the larger of a floor and twice
  the slowest flush clients reported; a margin that narrows later undoes no escalation.
- Nothing stays active forever: a notice past its deadline plus a grace, and a local notice
  without a deadline past its lifetime, is retired with a `clear` whose detail says why. A
  provider that reports it again raises it again (same id), with a fresh grace, as the same
  occurrence: its first `noticed_at`, and still saved for if a client had saved for it.
- It remembers which acking clients received each notice, so a provider can act once all of
  them have flushed, and which notices some client has saved for.

The board does no I/O: it returns the notices to publish, and the runner sends them.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import logging
import math
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar

from forewarn.protocol.fields import Action
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from forewarn.providers.skew import CLOCK_AHEAD, TRUSTED_SKEW

from .limits import ACKED_BY_LISTED
from .protocol import Notice, Report
from .steadyclock import steady_seconds

log = logging.getLogger("forewarn.agent")

# Deadlines that move by less than this between polls are the same deadline: providers (and
# AWS's own mock) recompute times on every answer, and a re-send per poll would be noise.
DEADLINE_TOLERANCE = timedelta(seconds=1)
# A forward step of the wall clock of more than this, on a clock within TRUSTED_SKEW of its
# provider's before, leaves it more than TRUSTED_SKEW off after: every watcher that reads its
# provider's `Date` then sees the new skew and moves the deadline. A smaller step (NTP setting
# a clock a few minutes behind right) neither the watcher nor the board can tell from one
# that makes the clock wrong: the wall clock is taken as it is.
STEP_SEEN = 2 * TRUSTED_SKEW
# After such a step, how long (on the boot clock) a provider's deadline that names a moment is
# judged on the later of the wall clock and the boot clock's reading at its last report, unless
# its watcher reports it again sooner: the longest a watcher goes between two reads of its
# provider's clock at the defaults (GCP's upcoming-maintenance, every 60 s), and a request.
STEP_SETTLE = 70.0
# How many recent flushes count when sizing the exit margin.
FLUSH_WINDOW = 20
# Numbers reserved per write of the seq mark: one write per this many messages.
SEQ_BLOCK = 10_000
DEFAULT_GRACE = 300.0
# The least time a watcher is given to report a notice past its end again (`due`): the grace,
# but never less than a poll of the slowest cadence tests and drills give a watcher (a GCP
# long-poll's one-second `timeout_sec` and its answer), so a short grace does not retire a
# notice its provider still shows before the watcher could say so.
CONFIRM_FLOOR = timedelta(seconds=3)
DEFAULT_MANUAL_LIFETIME = 3600.0
# `detail.expired` on the clear that retires a notice.
EXPIRED_KEY = "expired"
# Who acked a notice when the ack named no client (`record_ack`).
ANONYMOUS = "(anonymous)"
# How many provider notices the board remembers while it does not show them (retired, or
# saved for before a restart) until their provider reports them again or withdraws them.
REMEMBERED = 256
# The clients a notice waits for (subscribers that received it, holds), kept per notice to
# be named when they leave before their ack: twice the acking clients the publisher tracks
# (MAX_CLIENTS).
MAX_ACKED_KEPT = 8192
# The acks kept per notice past which an ack from a client the notice does not wait for (no
# subscriber holds its id, no hold names it) is answered but not kept; a waited-for client's
# ack is always kept. An ack's `client` is any id: one made up per retry, or a script acking
# in a loop, grew the agent by some 600 bytes an ack for as long as the notice stayed active;
# kept up to 8,192 per notice, 64 notices of 200-byte ids took 162 MiB (past the Kubernetes
# manifests' 128Mi) and each heartbeat's `acked_by` 0.3 s of CPU (1.1 s at load 10).
MAX_STRANGERS_KEPT = 256
# The holds (`forewarn wait --client`) kept per notice: each is a client the notice waits for.
MAX_HELD = 256
# What a provider notice's deadline held on `NoticeBoard.clock` is (`deadline_kinds`): given
# as a duration (`Report.deadline_is_duration`), or kept on the boot clock by its watcher
# (`Report.deadline_on_boot_clock`).
DEADLINE_DURATION = "duration"
DEADLINE_BOOT_CLOCK = "boot-clock"
DEADLINE_KINDS = (DEADLINE_DURATION, DEADLINE_BOOT_CLOCK)


class Sequencer:
    """Agent-wide, strictly increasing message numbers.

    Numbering starts at the larger of the last persisted mark and the current time in
    milliseconds. With `reserve`, numbers are handed out in blocks: `reserve(mark)` is called
    (and must persist `mark`) before any number up to `mark` is used, so a restarted agent,
    even after SIGKILL and a replay storm that ran far ahead of the clock, keeps counting up.
    """

    def __init__(
        self,
        start: int = 0,
        reserve: Callable[[int], None] | None = None,
        block: int = SEQ_BLOCK,
    ) -> None:
        self.value = max(start, int(utcnow().timestamp() * 1000))
        self.reserve = reserve
        self.block = block
        self.reserved = self.value
        if reserve is not None:
            self._extend()

    def next(self) -> int:
        if self.reserve is not None and self.value + 1 > self.reserved:
            self._extend()
        self.value += 1
        return self.value

    def _extend(self) -> None:
        assert self.reserve is not None
        self.reserved = self.value + self.block
        self.reserve(self.reserved)


@dataclass
class Entry:
    notice: Notice  # as last published
    report: Report  # as last reported (escalation changes the notice, not the report)
    raised_at: datetime  # when the board (re)raised it: the expiry clock of a re-raise
    manual: bool = False
    expected: set[str] = field(default_factory=set)  # acking clients that received it
    acked: set[str] = field(default_factory=set)
    flushed: bool = False
    saved: bool = False  # some client reported a saved flush for it
    # Restored from the state file after a restart, or held while its provider's watcher was
    # built again after a crash, and not reported again by its provider yet.
    restored: bool = False
    # When, by `NoticeBoard.clock` (no step of the wall clock moves it): it awaits its
    # provider's report for the grace from then.
    restored_clock: float | None = None
    restored_after: str = "the agent restarted"  # what it awaits a report after, for the clear
    # Clients that are no subscribers held it (`hold`: a shell job's `forewarn wait --client`):
    # kept apart from `expected`, whose subscribers a restarted agent learns again as they
    # reconnect, where these never do.
    held: set[str] = field(default_factory=set)
    # When the board raised it by `NoticeBoard.clock`, which no step of the wall clock moves;
    # None when not known (restored from an earlier boot): see `ages`.
    raised_clock: float | None = None
    # Its deadline by `NoticeBoard.clock`, for a deadline given as a duration (`forewarn
    # notify --deadline 15m`), or one its watcher keeps on the boot clock (a GCP stop, from
    # its last report): a step of the wall clock moves the wall-clock deadline with it
    # (`_follow_steps`). None for a deadline that names a moment, which a step leaves be.
    deadline_clock: float | None = None
    # A provider notice's deadline by `NoticeBoard.clock` as of its provider's last report:
    # saved (the same boot only), so that a restored notice is judged on that clock until its
    # watcher reports it again (`_judged_deadline`). None for a manual notice, one without a
    # deadline, and one held on `deadline_clock`.
    reported_clock: float | None = None
    # Until this reading of `NoticeBoard.clock`, after a forward step of the wall clock of more
    # than STEP_SEEN, it is judged on the later of its deadline and `reported_clock` (see
    # `_judged_deadline`); None when no such step came since its last report.
    step_settle: float | None = None
    # The deadline it was last judged past at (`NoticeBoard.overdue`): told once per deadline,
    # not at every heartbeat; a deadline moved later is told again when it passes.
    overdue_at: datetime | None = None
    # Clients that received it as a terminate (or held it) and left before their ack: the
    # jobs whose steps were lost (killed mid-save, crashed), named with the others at the
    # deadline (`NoticeBoard.overdue`). Only by this agent: a restart forgets them.
    gone: set[str] = field(default_factory=set)
    # Restored after a restart: the clients that had received it before, not acked then
    # (`received_by`). Only for saying who did not ack by the deadline: a job that died while
    # the agent was down never reconnects, and its terminate passed its deadline in silence.
    # They count for no flush (`expected` does): a job that ended in between is among them.
    received_before: set[str] = field(default_factory=set)
    # Restored from a state file that did not say which clients had received it (an agent
    # older than `received_by`): past its deadline, some of them may not have acked.
    receivers_unknown: bool = False
    # Clients that acked it `outcome=failed` (their save raised: a full disk, a refused
    # write) and no saved ack since, with the note they gave (blank when none): not acked,
    # their state is not saved, but named so past the deadline, not as gone before their ack,
    # which read as if they never tried and hid the cause. Kept across a restart.
    failed: dict[str, str] = field(default_factory=dict)
    # When this machine started, for a manual notice restored from the state of an earlier
    # boot (`restore`'s `booted`): a deadline before it passed before this boot began, and
    # the notice is retired at once (`_ends`). None for any other.
    booted: datetime | None = None
    # The first ACKED_BY_LISTED named clients of `acked`, sorted, kept as acks come in
    # (`record_ack`) for every heartbeat, and the size of `acked` they were taken at; None
    # after another change of `acked`, taken again when next asked (`NoticeBoard.listed`).
    listed: list[str] | None = field(default=None, repr=False, compare=False)
    listed_at: int = field(default=-1, repr=False, compare=False)
    # Past its end (its deadline plus the grace), its watcher asked whether the provider still
    # shows it (`forget`): retired at this time unless reported again first (`due`). None
    # when not asked. Retired at once, a notice AWS, GCP or Azure kept showing came back at the
    # next poll: a clear and the same terminate at every grace, each asking the jobs again.
    confirm_by: datetime | None = None
    # When its provider was last heard showing it past its end: the grace runs from here.
    shown_at: datetime | None = None
    # When its provider was first heard showing it past its end (`NoticeBoard.overdue_since`):
    # overdue, not over. None before that, and again once its deadline changes.
    overdue_since: datetime | None = None


@dataclass
class Overdue:
    """A terminate whose deadline passed while clients that received it had not acked it."""

    notice: Notice
    deadline: datetime
    clients: list[str]  # sorted: those that received it (or hold it) and did not ack
    gone: list[str] = field(default_factory=list)  # sorted: of those, the ones that left
    # Of those, the ones whose save failed (their failed ack's note, blank when none).
    failed: dict[str, str] = field(default_factory=dict)
    # Restored from a state file that did not say who had received it before the restart.
    receivers_unknown: bool = False


@dataclass
class Remembered:
    """What the board keeps of a provider notice it does not show (retired past its end, or
    saved for before a restart) until its provider reports it again, which raises the same
    occurrence, or withdraws it."""

    noticed_at: datetime | None  # when first noticed; None when not known (after a restart)
    saved: bool  # some client saved for it
    acked: set[str] = field(default_factory=set)
    expected: set[str] = field(default_factory=set)
    flushed: bool = False  # flushed by every client: its provider was told, once
    # The action the acks (and `flushed`) were for; None when not known (a state file of an
    # agent before it): a drain's acks are no terminate's (`NoticeBoard._restamp`).
    action: Action | None = None


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _on_one_reading(
    method: Callable[Concatenate[NoticeBoard, _P], _R],
) -> Callable[Concatenate[NoticeBoard, _P], _R]:
    """Run a `NoticeBoard` method on one reading of its clocks (`NoticeBoard._one_reading`)."""

    @functools.wraps(method)
    def on_one_reading(board: NoticeBoard, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with board._one_reading():
            return method(board, *args, **kwargs)

    return on_one_reading


class NoticeBoard:
    def __init__(
        self,
        sequencer: Sequencer,
        exit_margin_floor: float,
        now: Callable[[], datetime] = utcnow,
        *,
        grace: float = DEFAULT_GRACE,
        manual_lifetime: float = DEFAULT_MANUAL_LIFETIME,
        clock: Callable[[], float] | None = None,
        clock_vouched: Callable[[str], bool] | None = None,
        clock_skews: Callable[[], Mapping[str, float]] | None = None,
    ) -> None:
        self.sequencer = sequencer
        self.exit_margin_floor = exit_margin_floor
        self.now = now
        # Seconds on a clock that NTP, a resume or a live migration never steps, and that
        # counts a suspend as the wall clock does: how long ago each notice was raised (`ages`).
        self.clock = clock or steady_seconds
        # Whether a provider's watcher has read its service's clock, and so re-times its
        # deadlines after a forward step of the wall clock (`_settle_after_a_step`); every
        # provider's when not given. One that has not (DigitalOcean mail without droplet
        # metadata) is judged on the wall clock at once: held the settle's 70 s for a
        # re-timing that never comes, a terminate due 20 s after NTP's first sync went out
        # 50 s after its deadline.
        self.clock_vouched = clock_vouched or (lambda provider: True)
        # The skew of this machine's clock each provider's watcher holds now (`PollHealth.ahead`,
        # seconds; none when not given): with the skews its reports carry, what tells a report
        # its watcher made before it saw a step of the wall clock (`_made_before_the_step`).
        self.clock_skews = clock_skews or dict
        # Each provider's skew as last known (`clock_skews`, its reports), and as it was just
        # before the last forward step of more than STEP_SEEN (`_settle_after_a_step`).
        self.skews: dict[str, float] = {}
        self.skews_before_step: dict[str, float] = {}
        # Until this reading of `clock` after that step, a report made on a skew from before
        # it is judged on the clock it was made on: the wall clock's lead then.
        self.step_until: float | None = None
        self.lead_before_step = 0.0
        self.grace = timedelta(seconds=grace)
        self.manual_lifetime = timedelta(seconds=manual_lifetime)
        self.entries: dict[str, Entry] = {}
        # Provider notices retired past their end, by id: when first noticed, and whether a
        # client saved for them. A provider still showing one raises it again, and that is the
        # same occurrence: with a new `noticed_at` and no `saved`, a job that had rightly kept
        # training under a terminate an earlier job acted on was made to exit at every re-raise.
        # Provider notices some client saved for before an agent restart come back the same way
        # (without their first `noticed_at`, which the state file does not keep).
        # Who acked it, and whether every client had flushed it, too: a re-raise that forgot
        # them was flushed by every client again when acked again, and its provider's after-ack
        # action (an Azure approval, the flag file's removal) fired twice for one notice.
        self.remembered: dict[str, Remembered] = {}
        self.flushed_at_raise: list[str] = []  # see take_flushed
        self.moved: list[Notice] = []  # see take_moved
        self.confirming: list[Notice] = []  # see take_confirming
        self.found_overdue: list[Notice] = []  # see take_overdue
        # Provider notices retired while still reported, as last reported, until their provider
        # reports them again or withdraws them: what a watcher built after a crash is handed
        # (`provider_reports`), as its predecessor kept them. Without them an Azure Started event
        # retired while no watcher ran was raised again with a new deadline.
        self.retired: dict[str, Report] = {}
        self.flushes: deque[float] = deque(maxlen=FLUSH_WINDOW)
        self.clients: set[str] = set()
        # Until this reading of `clock` no notice counts as flushed by every client
        # (`hold_flushes`).
        self.flushes_held_until: float | None = None
        # The wall clock's lead over `clock` when last looked at: a change is a step.
        self.wall_lead = self._wall_lead()
        # The wall clock's and `clock`'s readings the call being made judges by, None between
        # calls (`_one_reading`).
        self._reading: tuple[datetime, float] | None = None

    # What is active.

    def active(self) -> list[Notice]:
        return sorted((entry.notice for entry in self.entries.values()), key=lambda n: n.seq)

    def manual(self) -> list[Notice]:
        """Manual notices as asked for (a drain stays a drain even while sent as terminate),
        which is how they are saved: escalation is derived again after a restart."""
        return [
            entry.notice.model_copy(update={"action": entry.report.action})
            for entry in self.entries.values()
            if entry.manual
        ]

    def provider_notices(self) -> list[Notice]:
        """Provider notices as reported (escalation is derived again), which is how they are
        saved: a restarted agent keeps them until their watcher has answered."""
        return [
            entry.notice.model_copy(update={"action": entry.report.action})
            for entry in self.entries.values()
            if not entry.manual
        ]

    def windows(self) -> dict[str, datetime]:
        """The end of the window of each provider notice that has one (`Report.until`),
        saved beside the notices: the notice does not carry it."""
        return {
            notice_id: entry.report.until
            for notice_id, entry in self.entries.items()
            if not entry.manual and entry.report.until is not None
        }

    def overdue_told(self) -> dict[str, datetime]:
        """The deadline each active notice was last judged past at (`overdue`), by id: saved,
        so that a restarted board does not tell the same missed deadline again."""
        return {
            notice_id: entry.overdue_at
            for notice_id, entry in self.entries.items()
            if entry.overdue_at is not None
        }

    def raised(self) -> dict[str, datetime]:
        """When each notice was (re)raised, where that is not its `noticed_at` (a provider
        notice raised again after it was retired, a manual one changed by a second notify):
        saved beside the notices, whose end it sets, so that a restarted board ends them when
        this one would have."""
        return {
            notice_id: entry.raised_at
            for notice_id, entry in self.entries.items()
            if entry.raised_at != entry.notice.noticed_at
        }

    def ages(self) -> dict[str, float]:
        """Seconds since each active notice was raised (not since it was last changed or
        escalated), by `clock`: `forewarn ack --client ID --flush-seconds D` tells by it
        whether a save began before the notice. The notice's `noticed_at` cannot tell once the
        wall clock stepped since (NTP correcting a clock that ran ahead): a save for it read as
        begun before it, or a save begun before it as begun after. Not for notices restored
        without their reading of the clock (`restore`'s `raised_clock`)."""
        now = self._clock()
        return {
            notice_id: max(0.0, now - entry.raised_clock)
            for notice_id, entry in self.entries.items()
            if entry.raised_clock is not None
        }

    def deadline_clocks(self) -> dict[str, float]:
        """The deadlines given as a duration, by id, on `clock`: saved, so that a restarted
        agent (same boot) still moves them with a step of the wall clock."""
        return {
            notice_id: entry.deadline_clock
            for notice_id, entry in self.entries.items()
            if entry.deadline_clock is not None
        }

    def deadline_kinds(self) -> dict[str, str]:
        """What each provider notice's deadline in `deadline_clocks()` is (DEADLINE_KINDS), by
        id: saved beside them, so that a restarted agent hands its watcher the report as it
        was, whatever its provider (`restore`)."""
        return {
            notice_id: DEADLINE_DURATION
            if entry.report.deadline_is_duration
            else DEADLINE_BOOT_CLOCK
            for notice_id, entry in self.entries.items()
            if entry.deadline_clock is not None and not entry.manual
        }

    def reported_clocks(self) -> dict[str, float]:
        """The provider notices' deadlines on `clock` as of their last report, by id: saved,
        so that a restarted agent (same boot) judges a restored notice on that clock until
        its watcher reports it again (`_judged_deadline`)."""
        return {
            notice_id: entry.reported_clock
            for notice_id, entry in self.entries.items()
            if entry.reported_clock is not None
        }

    def raised_clocks(self) -> dict[str, float]:
        """When each active notice was raised by `clock`, where known: saved with the boot
        id, so that a board restored in the same boot still has the notices' `ages`."""
        return {
            notice_id: entry.raised_clock
            for notice_id, entry in self.entries.items()
            if entry.raised_clock is not None
        }

    def restored_from(self) -> set[str]:
        """Providers with restored notices their watcher has not reported again yet."""
        return {entry.report.provider for entry in self.entries.values() if entry.restored}

    def restored_reports(self, provider: str) -> list[Report]:
        """The restored notices of `provider` not reported again yet, as reported: what its
        watcher would remember had it run before the restart (`RestoreAware`)."""
        return [
            entry.report
            for entry in self.entries.values()
            if entry.restored and entry.report.provider == provider
        ]

    def provider_reports(self, provider: str) -> list[Report]:
        """The active notices of `provider`, restored or not, and those retired while still
        reported, as reported: what a watcher built again after a crash would remember had it
        not crashed (`RestoreAware`)."""
        active = [
            entry.report
            for entry in self.entries.values()
            if not entry.manual and entry.report.provider == provider
        ]
        return active + [r for r in self.retired.values() if r.provider == provider]

    def await_reports(self, provider: str, after: str) -> None:
        """Hold the active notices of `provider` as restored: its watcher crashed, and the one
        built next may never see one withdrawn meanwhile (it learns of withdrawals by what
        leaves its provider's list). As after a restart, those it does not report again once
        it has answered are withdrawn (`withdraw_restored`). `after` says what happened."""
        now = self._clock()
        for entry in self.entries.values():
            if entry.manual or entry.report.provider != provider or entry.restored:
                continue
            entry.restored, entry.restored_clock, entry.restored_after = True, now, after

    def withdraw_restored(self, provider: str, why: str | None = None) -> list[Notice]:
        """Clear the restored notices of `provider` that its watcher, having answered, did not
        report again: the provider withdrew them while the agent was down, or while no watcher
        of it ran. `why` (else "not reported by <provider> since <what happened>") goes in
        `detail.withdrawn`."""
        ids = [
            notice_id
            for notice_id, entry in self.entries.items()
            if entry.restored and entry.report.provider == provider
        ]
        cleared = []
        for notice_id in ids:
            entry = self.entries[notice_id]
            withdrawn = why or f"not reported by {provider} since {entry.restored_after}"
            detail = {**entry.report.detail, "withdrawn": withdrawn}
            notice = self.clear(notice_id, detail=detail)
            if notice is not None:
                cleared.append(notice)
        return cleared

    def flushed_ids(self, provider: str) -> list[str]:
        """The active notices of `provider` every client has flushed (restored ones too)."""
        return [
            notice_id
            for notice_id, entry in self.entries.items()
            if entry.flushed and not entry.manual and entry.report.provider == provider
        ]

    def get(self, notice_id: str) -> Notice | None:
        entry = self.entries.get(notice_id)
        return entry.notice if entry else None

    def saved(self) -> list[str]:
        """Ids of active notices that at least one client has saved for."""
        return [entry.notice.id for entry in self.entries.values() if entry.saved]

    def saves_to_keep(self) -> list[str]:
        """What the state file keeps of the saves: the active notices some client saved for,
        and the provider notices remembered as saved for until their provider reports them."""
        kept = [notice_id for notice_id, kept in self.remembered.items() if kept.saved]
        return self.saved() + kept

    def acked_by(self, notice_id: str | None = None) -> dict[str, set[str]]:
        """The clients that acked each active notice (or only `notice_id`), saved so that a
        restarted agent still counts them: a notice acked by one client before a restart and
        by the other after is then flushed by every client. Those of the provider notices
        remembered while retired too: raised again after a restart, one every client had
        flushed is not flushed (its provider told) a second time."""
        acked = {
            entry.notice.id: set(entry.acked)
            for entry in self.entries.values()
            if entry.acked and notice_id in (None, entry.notice.id)
        }
        for kept_id, kept in self.remembered.items():
            if kept.acked and notice_id in (None, kept_id):
                acked[kept_id] = set(kept.acked)
        return acked

    def has_acked(self, notice_id: str, client: str) -> bool:
        """Whether `client`'s ack of `notice_id` is kept (`acked_by`), without copying it."""
        entry = self.entries.get(notice_id)
        if entry is not None:
            return client in entry.acked
        kept = self.remembered.get(notice_id)
        return kept is not None and client in kept.acked

    def acks_kept(self, notice_id: str) -> int:
        """How many acks of `notice_id` are kept: `len(acked_by(notice_id)[notice_id])`."""
        entry = self.entries.get(notice_id)
        if entry is not None:
            return len(entry.acked)
        kept = self.remembered.get(notice_id)
        return 0 if kept is None else len(kept.acked)

    def listed(self) -> dict[str, list[str]]:
        """The first ACKED_BY_LISTED named clients (ANONYMOUS left out) that acked each
        notice on the board, sorted: what every heartbeat and `status` name. Kept as acks come
        in: sorting every kept id at each heartbeat took 0.3 s of CPU at the old bound."""
        found = {}
        for notice_id, entry in self.entries.items():
            if entry.listed is None or entry.listed_at != len(entry.acked):
                named = (client for client in entry.acked if client != ANONYMOUS)
                entry.listed = heapq.nsmallest(ACKED_BY_LISTED, named)
                entry.listed_at = len(entry.acked)
            if entry.listed:
                found[notice_id] = list(entry.listed)
        return found

    def acked_to_save(self) -> dict[str, list[str]]:
        """`acked_by()` in the order the state file keeps them (it keeps the first
        MAX_ACKED_SAVED): the clients that receive the notice or listen for notices first,
        each part sorted. Sorted alone, 64 client ids that no subscriber holds (acks from
        scripts, an id made up per retry) pushed out a job's ack, and after a restart the
        notice waited for that job to ack again, which it never does."""
        return {
            entry.notice.id: self._listening_first(entry.acked, entry.expected)
            for entry in self.entries.values()
            if entry.acked
        }

    def acked_for(self) -> dict[str, str]:
        """The action each notice's acks in `acked_by()` were for, by id: saved beside them, so
        that a restarted agent does not count a drain's acks for the terminate it comes back
        as (`restore`). None for a remembered notice whose action is not known."""
        found: dict[str, str] = {
            entry.notice.id: entry.notice.action for entry in self.entries.values() if entry.acked
        }
        for kept_id, kept in self.remembered.items():
            if kept.acked and kept.action is not None:
                found[kept_id] = kept.action
        return found

    def _listening_first(self, clients: set[str], expected: set[str]) -> list[str]:
        listening = clients & (expected | self.clients)
        return sorted(listening) + sorted(clients - listening)

    def expected_by(self) -> dict[str, set[str]]:
        """The acking clients each flushed notice was flushed by, saved so that a restarted
        agent knows which notices every client had flushed: it does not wait for their acks
        again, nor call them flushed a second time. Not those of a notice not flushed yet:
        while flushes are held after a restart its clients are only those reconnected so far,
        and a second restart then counted it flushed by every client when they had acked."""
        expected = {
            entry.notice.id: set(entry.expected)
            for entry in self.entries.values()
            if entry.acked and entry.flushed
        }
        for kept_id, kept in self.remembered.items():
            if kept.acked and kept.flushed:
                expected[kept_id] = set(kept.expected)
        return expected

    def escalated(self, notice_id: str) -> bool:
        """Whether the notice goes out as terminate for a drain its provider reported (its
        deadline is within the exit margin): an escalation even when it is the first send."""
        entry = self.entries.get(notice_id)
        return (
            entry is not None
            and entry.notice.action == "terminate"
            and entry.report.action == "drain"
        )

    def escalated_ids(self) -> list[str]:
        """Ids of the drains sent as terminate, which a restart keeps sending as terminate."""
        return [notice_id for notice_id in self.entries if self.escalated(notice_id)]

    @property
    def exit_margin(self) -> float:
        slowest = max(self.flushes, default=0.0)
        return max(self.exit_margin_floor, 2.0 * slowest)

    # Changes.

    @_on_one_reading
    def report(
        self,
        report: Report,
        *,
        manual: bool = False,
        raised_at: datetime | None = None,
        deadline_clock: float | None = None,
    ) -> Notice | None:
        """Take a watcher's report; return the notice to publish, or None when nothing changed.
        `deadline_clock`: the report's deadline by `clock`, where it was given as a duration
        (it then follows a step of the wall clock)."""
        if report.action == "clear":
            return self.clear(report.id, detail=report.detail)
        # A step since the board last looked was seen before this report is judged by it
        # (`_on_one_reading`).
        entry = self.entries.get(report.id)
        stale = not manual and self._made_before_the_step(report)
        self._took_skew(report, manual=manual)
        if deadline_clock is None and report.deadline_is_duration and report.deadline:
            report, deadline_clock = self._on_clock(report, entry)
        elif deadline_clock is None and report.deadline_on_boot_clock and report.deadline:
            # Its watcher keeps it on the boot clock (a GCP stop): the deadline stands as
            # reported, and is held on `clock` from now, so that a step of the wall clock
            # before the next report moves it (`_follow_steps`) as the watcher will. Taken
            # for a moment, 90 minutes forward retired the hour's drain at once with a clear.
            deadline_clock = self._clock() + (report.deadline - self._now()).total_seconds()
            if stale:
                # A moment moved by the skew from before the step (`_made_before_the_step`):
                # read on the wall clock as it was then. Taken as made now, a Karpenter
                # termination 30 min away on a node 2 h behind, reported again before the
                # watcher saw NTP's step, was 90 min past: a terminate, the job out early.
                deadline_clock = self._reading_before_the_step(report.deadline)
                on_clock = self._on_the_clock(deadline_clock)
                report = report.model_copy(update={"deadline": on_clock})
            stale = False  # held on `clock` from here: no settle on the moment
        judged = report
        if stale and report.deadline is not None:
            # A deadline naming a moment, on the skew from before the step: judged on the
            # later of it and where the clock it was made on puts it (`_judged_deadline`)
            # until its watcher reports it on the new skew (`step_settle`).
            made_on = self._on_the_clock(self._reading_before_the_step(report.deadline))
            judged = report.model_copy(update={"deadline": max(report.deadline, made_on)})
        action = self._action_for(judged)
        if entry is not None:
            entry.deadline_clock = deadline_clock
            self._heard_past_end(entry)
        if entry is None:
            remembered = self.remembered.pop(report.id, None)
            self.retired.pop(report.id, None)
            if remembered is not None and remembered.noticed_at is not None:
                report = report.model_copy(update={"noticed_at": remembered.noticed_at})
            notice = self._stamp(report, action)
            entry = Entry(
                notice,
                report,
                raised_at=raised_at or self._now(),
                manual=manual,
                expected=set(self.clients),
                raised_clock=self._clock(),
                deadline_clock=deadline_clock,
            )
            entry.reported_clock = self._reading_of(report, entry)
            if stale and entry.reported_clock is not None and report.deadline is not None:
                entry.reported_clock = self._reading_before_the_step(report.deadline)
                entry.step_settle = self.step_until
            if remembered is not None:
                # Saved for as a drain is not for the terminate it comes back as.
                entry.saved = remembered.saved and not _asks_more(remembered.action, action)
            # Acked (and flushed) for the action it had when retired: raised again as another
            # (a drain retired past its deadline comes back as terminate), it is acked anew.
            if remembered is not None and remembered.action in (None, action):
                entry.acked = set(remembered.acked)
                entry.flushed = remembered.flushed
                if remembered.flushed:
                    entry.expected = set(remembered.expected)
                elif self._newly_flushed(entry):
                    # Every client acked it, the last one after its expiry (`record_ack`).
                    self.flushed_at_raise.append(report.id)
            self.entries[report.id] = entry
            return notice
        if stale and report.deadline is not None:
            # Made before its watcher saw the step (a report queued as it landed, a deadline
            # first read then): on the skew from before, so no word on the step. Judged as
            # reported, it went out as terminate, 90 min past by a clock 2 h ahead; a notice
            # first reported without a deadline had no settle to hold it.
            entry.restored = False
            entry.step_settle = self.step_until
            entry.reported_clock = self._reading_before_the_step(report.deadline)
        elif self._settling(entry) and not self._retimed(entry, report):
            # Made before its watcher saw the step (a node event within its CLOCK_CHECK of
            # it): still on the skew from before, so no word on the step. Taken as one, it
            # ended the settle and went out as terminate, 90 min past by a clock 2 h ahead.
            action = self._action_for(report, entry)
        else:
            entry.restored = False
            entry.step_settle = None  # its watcher has spoken since the step
            entry.reported_clock = self._reading_of(report, entry)
        # A drain sent as terminate stays terminate while its deadline stands, even when the
        # margin has shrunk since (faster flushes): its clients may be exiting already. Also
        # when it is re-sent for its reason or detail alone (an Azure event's Resources).
        held = (
            entry.notice.action == "terminate"
            and entry.report.action == report.action
            and not _deadline_moved(entry.notice.deadline, report.deadline)
        )
        if held:
            action = "terminate"
        if action == entry.notice.action and not self._changed(entry.notice, report):
            entry.report = report
            if entry.notice.detail.get(CLOCK_AHEAD) != report.detail.get(CLOCK_AHEAD):
                # Kept true for a replay and `status`, with no re-send (`_detail_changed`).
                entry.notice = entry.notice.model_copy(update={"detail": report.detail})
            return None
        entry.report = report
        # Sent again (a new deadline, action or detail): overdue no more until its new end
        # passes while it is still shown.
        entry.confirm_by = entry.shown_at = entry.overdue_since = None
        self._restamp(entry, action)
        if not entry.flushed:
            # Once flushed, the set it was flushed by stays as it was: it is saved, and a
            # restarted agent counts the notice flushed when every one of them had acked.
            entry.expected |= self.clients
        return entry.notice

    @_on_one_reading
    def clear(self, notice_id: str, detail: dict[str, Any] | None = None) -> Notice | None:
        self.remembered.pop(notice_id, None)
        self.retired.pop(notice_id, None)
        entry = self.entries.pop(notice_id, None)
        if entry is None:
            return None
        cleared = entry.report.model_copy(
            update={"action": "clear", "noticed_at": self._now(), "detail": detail or {}}
        )
        return self._stamp(cleared, "clear")

    @_on_one_reading
    def due(self) -> tuple[list[Notice], list[Notice]]:
        """(escalations, expiries) that are due now: drains whose deadline came within the
        exit margin, re-sent as terminate; notices past their end, retired with a clear.
        A deadline given as a duration is first moved by any step of the wall clock: those
        moved and still drains are for `take_moved`."""
        self._follow_steps()
        now = self._now()
        expired = []
        for notice_id, entry in list(self.entries.items()):
            ends = self._ends(entry)
            if ends is not None and now >= ends and self._asks_first(entry):
                # Overdue or over: its watcher is asked (`take_confirming`), and a report of it
                # before `confirm_by` keeps it active, overdue (`report`).
                entry.confirm_by = _plus(now, max(self.grace, CONFIRM_FLOOR))
                self.confirming.append(entry.notice)
            elif ends is not None and now >= ends:
                notice = self.clear(notice_id, detail=self._expiry_detail(entry, ends))
                if notice is not None:
                    expired.append(notice)
                if not entry.manual:
                    self._remember(
                        entry.notice.id,
                        Remembered(
                            entry.notice.noticed_at,
                            entry.saved,
                            set(entry.acked),
                            set(entry.expected),
                            entry.flushed,
                            entry.notice.action,
                        ),
                    )
                    self.retired[notice_id] = entry.report
                    while len(self.retired) > REMEMBERED:
                        del self.retired[next(iter(self.retired))]
        escalated = []
        for entry in self.entries.values():
            if entry.notice.action == "drain" and self._action_for(entry.report, entry) == (
                "terminate"
            ):
                escalated.append(self._restamp(entry, "terminate"))
        return escalated, expired

    @_on_one_reading
    def overdue(self) -> list[Overdue]:
        """The terminates whose deadline has passed since the last call while some client that
        received it (or holds it) had not acked: the operator's first question after a lost
        step is which job never answered, and the agent said nothing at the deadline. Each
        notice once per deadline (a deadline moved later is judged again when it passes)."""
        now = self._now()
        found = []
        for entry in self.entries.values():
            deadline = self._judged_deadline(entry)
            if deadline is None or now < deadline:
                continue
            # Within DEADLINE_TOLERANCE the same deadline: the state file keeps milliseconds,
            # and a restored deadline on the boot clock reads a little off the one told.
            said_at = entry.overdue_at
            if said_at is not None and said_at >= deadline - DEADLINE_TOLERANCE:
                continue
            entry.overdue_at = deadline
            missing = self._unacked(entry)
            told = bool(missing) or (entry.receivers_unknown and not entry.flushed)
            if entry.notice.action == "terminate" and told:
                failed = {c: n for c, n in entry.failed.items() if c in missing}
                gone = sorted((entry.gone & missing) - set(failed))
                found.append(
                    Overdue(
                        entry.notice,
                        deadline,
                        sorted(missing),
                        gone,
                        receivers_unknown=entry.receivers_unknown,
                        failed=failed,
                    )
                )
        return found

    @staticmethod
    def _unacked(entry: Entry) -> set[str]:
        """The clients that received `entry` (or hold it) and have not acked it: those still
        waited for, those that left first, whose leaving let it count as flushed by the
        clients left (the job killed mid-save is the one whose steps were lost), and those
        that had received it before a restart and never came back to ack it."""
        waiting = set() if entry.flushed else entry.expected - entry.acked
        return waiting | ((entry.gone | entry.received_before) - entry.acked)

    def receivers_unknown_past_deadline(self) -> list[str]:
        """The active terminates past their deadline, restored from a state file that did not
        say which clients had received them (sorted): some may not have acked. Not flushed,
        or warned of so: the clients still there flushing it after the restart's hold does not
        name those that were not, and `status` dropped it then, seconds after the warning."""
        now = self._now()
        return sorted(
            notice_id
            for notice_id, entry in self.entries.items()
            if entry.receivers_unknown
            and entry.notice.action == "terminate"
            and (not entry.flushed or entry.overdue_at is not None)
            and (deadline := self._judged_deadline(entry)) is not None
            and now >= deadline
        )

    def unacked_past_deadline(self) -> dict[str, list[str]]:
        """The clients that received each active terminate now past its deadline and have
        not acked it, by id (sorted): what `status` shows beside the notice."""
        now = self._now()
        found: dict[str, list[str]] = {}
        for notice_id, entry in self.entries.items():
            deadline = self._judged_deadline(entry)
            if entry.notice.action != "terminate" or deadline is None or now < deadline:
                continue
            missing = self._unacked(entry)
            if missing:
                found[notice_id] = sorted(missing)
        return found

    def gone_past_deadline(self) -> dict[str, list[str]]:
        """Of the clients `unacked_past_deadline` names, those that left before their ack (a
        subscriber gone, a hold whose process ended), by id (sorted): the agent's warning
        says so of each, and `status` said only "its deadline passed", as if the job were
        still there and late. Kept across a restart (`gone_to_save`)."""
        found: dict[str, list[str]] = {}
        for notice_id, missing in self.unacked_past_deadline().items():
            entry = self.entries[notice_id]
            gone = entry.gone.intersection(missing) - set(entry.failed)
            if gone:
                found[notice_id] = sorted(gone)
        return found

    def failed_to_save(self) -> dict[str, dict[str, str]]:
        """The clients whose save of each active notice failed, not acked since, by id: a
        drain's too, which `status` shows while it is active (only in the log, a job that
        failed to save for a drain showed in `status` as if nothing were wrong), and which a
        restarted agent keeps."""
        return {
            notice_id: dict(entry.failed)
            for notice_id, entry in self.entries.items()
            if entry.failed
        }

    def record_failure(self, notice_id: str | None, client: str | None, note: str | None) -> bool:
        """`client` acked `notice_id` `outcome=failed`: its save raised. Not an ack (its
        state is not saved), but kept to be named so past the deadline. True when kept anew
        (for the state file); a client that acked it saved already stays acked."""
        entry = self.entries.get(notice_id) if notice_id else None
        if entry is None or not client or client in entry.acked:
            return False
        waited_for = client in entry.expected or client in self.clients
        if (
            client not in entry.failed
            and not waited_for
            and len(entry.failed) >= MAX_STRANGERS_KEPT
        ):
            return False  # bounded as the acks kept are
        before = entry.failed.get(client)
        entry.failed[_one_copy(client)] = note or ""
        return before != entry.failed[client]

    def save_failed(self, notice_id: str, client: str) -> str | None:
        """The note of `client`'s failed save of `notice_id` (blank when none), or None when
        it has no failed save not acked since."""
        entry = self.entries.get(notice_id)
        return None if entry is None else entry.failed.get(client)

    def gone_to_save(self) -> dict[str, set[str]]:
        """The clients that left each active notice before their ack, by id: saved, so
        that a restarted agent still names them, and says they left. Forgotten, a terminate
        the clients left had flushed (saver acked, trainer gone) was shown after a restart
        as if every job had answered, and one not flushed named trainer as if still late."""
        found = {}
        for notice_id, entry in self.entries.items():
            gone = entry.gone - entry.acked
            if gone:
                found[notice_id] = gone
        return found

    def gone_before_ack(self) -> dict[str, list[str]]:
        """The clients that received each active notice (or held it) and left before their
        ack, whose save did not fail (`failed_to_save` names those), by id (sorted): what
        `status` shows beside the notice, before its deadline or without one too."""
        found: dict[str, list[str]] = {}
        for notice_id, entry in self.entries.items():
            gone = entry.gone - entry.acked - set(entry.failed)
            if gone:
                found[notice_id] = sorted(gone)
        return found

    def received_by(self) -> dict[str, set[str]]:
        """The clients that received each notice not flushed yet and have not acked it (this
        run's and those restored), saved so that a restarted agent still names them when its
        deadline passes: a job that died while the agent was down never reconnects."""
        return {
            entry.notice.id: self._unacked(entry)
            for entry in self.entries.values()
            if not entry.flushed
        }

    @_on_one_reading
    def next_due(self) -> datetime | None:
        """When `due` next has work, if ever."""
        margin = timedelta(seconds=self.exit_margin)
        times = []
        for entry in self.entries.values():
            deadline = self._judged_deadline(entry)
            if entry.notice.action == "drain" and entry.report.action == "drain" and deadline:
                times.append(_minus(deadline, margin))
            ends = self._ends(entry)
            if ends is not None:
                times.append(ends)
            if entry.step_settle is not None:
                times.append(self._on_the_clock(entry.step_settle))  # judged on the wall again
        return min(times, default=None)

    # Clients and acks.

    def client_joined(self, client: str) -> bool:
        """An acking client subscribed: it receives every active notice by replay. True when
        a notice not flushed yet has a new receiver (`received_by` changed)."""
        client = _one_copy(client)
        self.clients.add(client)
        new = False
        for entry in self.entries.values():
            entry.gone.discard(client)  # back: it receives the replay, and may ack yet
            if not entry.flushed:
                new |= client not in entry.expected and client not in entry.acked
                entry.expected.add(client)
        return new

    def hold(self, notice_id: str, client: str) -> bool:
        """A job that is no subscriber (a shell job's `forewarn wait --client`) received the
        notice and will ack it as `client`: it counts among the clients the notice waits for,
        as a subscriber that received it does. False when there is nothing to hold: the notice
        is not active, every client flushed it already, or `client` acked it already."""
        entry = self.entries.get(notice_id)
        if entry is None or entry.flushed or client in entry.acked or client in entry.expected:
            return False
        if len(entry.expected) >= MAX_ACKED_KEPT or len(entry.held) >= MAX_HELD:
            return False  # bounded as the acks kept are: a flood of ids holds nothing more
        client = _one_copy(client)
        entry.expected.add(client)
        entry.held.add(client)
        return True

    def let_go(self, notice_id: str, client: str) -> bool:
        """The job that held `notice_id` for `client` is gone before its ack (a shell loop
        killed while it saved): it counts no more, as a subscriber that leaves. True when the
        notice is now flushed by every client left."""
        entry = self.entries.get(notice_id)
        if entry is None or client not in entry.held:
            return False
        entry.held.discard(client)
        if client not in self.clients:  # a subscriber by that id still counts
            self._went(entry, client)
            entry.expected.discard(client)
        return self._newly_flushed(entry)

    def held_by(self) -> dict[str, list[str]]:
        """The clients holding each notice not flushed yet (`hold`), sorted: for the state
        file, so that a restarted agent still waits for their acks."""
        return {
            notice_id: sorted(entry.held)
            for notice_id, entry in self.entries.items()
            if entry.held and not entry.flushed
        }

    def unacked_clients(self, notice_id: str) -> set[str]:
        """The clients subscribed now that have not acked `notice_id`: once it is flushed by
        every client, those that joined since (they received it by replay)."""
        entry = self.entries.get(notice_id)
        return set() if entry is None else self.clients - entry.acked

    def client_left(self, client: str) -> list[str]:
        """An acking client went away; returns notices that are now flushed by everyone left."""
        self.clients.discard(client)
        done = []
        for notice_id, entry in self.entries.items():
            self._went(entry, client)
            entry.expected.discard(client)
            entry.received_before.discard(client)  # it reconnected, and left as jobs do
            if self._newly_flushed(entry):
                done.append(notice_id)
        return done

    @staticmethod
    def _went(entry: Entry, client: str) -> None:
        """`client`, which `entry` waited for, is gone: kept to be named (`status`, and at a
        terminate's deadline) if it left without its ack (bounded as the acks kept are). A
        drain's too: one without a deadline is never past it, and a job gone before its save
        for it was said only in the log's "flushed by every client left" line."""
        if (
            client in entry.expected
            and client not in entry.acked
            and len(entry.gone) < MAX_ACKED_KEPT
        ):
            entry.gone.add(client)

    def _follow_steps(self) -> None:
        """Move each deadline held on `clock` to where that clock puts it on the wall clock
        now, when a step of the wall clock has set the two apart by the tolerance or more. A
        notice moved is re-published (same id) through `take_moved`, a terminate too (one
        asked for, or a drain escalated): its subscribers kept the deadline from before the
        step while escalation and expiry followed the move. A drain the move brings inside
        the exit margin is escalated by `due` instead."""
        now, clock = self._now(), self._clock()
        self._settle_after_a_step(now, clock)
        for entry in self.entries.values():
            if entry.deadline_clock is None or entry.report.deadline is None:
                continue
            moved = _plus_seconds(now, entry.deadline_clock - clock)
            if not _deadline_moved(entry.report.deadline, moved):
                continue
            log.warning(
                "notice %s: the wall clock was stepped; its deadline, kept on the boot clock, "
                "moves from %s to %s",
                entry.report.id,
                format_time(entry.report.deadline),
                format_time(moved),
            )
            entry.report = entry.report.model_copy(update={"deadline": moved})
            action = self._action_for(entry.report, entry)
            if entry.notice.action == "drain" and action == "terminate":
                continue  # escalated by `due`, with the deadline moved
            self.moved.append(self._restamp(entry, action))

    def _wall_lead(self) -> float:
        return self.now().timestamp() - self.clock()

    @contextmanager
    def _one_reading(self) -> Iterator[None]:
        """Judge a whole call on one reading of the wall clock and `clock`, taken as it
        starts, a step of the wall clock since the last call seen first
        (`_settle_after_a_step`). Read afresh for each notice, a step landing in the middle of
        a call was judged on by the notices after it and not seen by those before it, nor
        settled: `due()` took the wall clock before the step for Karpenter's taint, after it
        for the node's deletion, and sent the deletion as terminate, 90 min past by a clock
        stepped 2 h forward, half an hour early. On one reading, a step after it is seen by
        the next call, as a whole. A call made inside another takes the outer one's."""
        if self._reading is not None:
            yield
            return
        now, clock = self.now(), self.clock()
        self._reading = (now, clock)
        try:
            self._settle_after_a_step(now, clock)
            self.skews.update(self.clock_skews())
            yield
        finally:
            self._reading = None

    def _now(self) -> datetime:
        """The wall clock, as the call being made read it (`_one_reading`)."""
        return self.now() if self._reading is None else self._reading[0]

    def _clock(self) -> float:
        """`clock`, as the call being made read it (`_one_reading`)."""
        return self.clock() if self._reading is None else self._reading[1]

    def _settle_after_a_step(self, now: datetime, clock: float) -> None:
        """After a forward step of the wall clock of more than STEP_SEEN, judge each provider
        deadline that names a moment on the later of the wall clock and its boot-clock reading
        (`step_settle`) until its watcher reports it again, STEP_SETTLE at most. Taken as a
        moment at once, a step 2 h forward on a right clock put Karpenter's termination 30 min
        away 90 min past: the board retired both drains with a `clear` (a job trains on, and
        flushes again for the re-raise) and the watcher raised them again up to 5 s later,
        moved by the skew it then read; a step landing the deadline inside the exit margin
        sent a terminate, and the job exited before its time. The watcher, not the board,
        says where the deadline is: the board only does nothing on the step meanwhile. Only
        for a watcher that reads its provider's clock (`clock_vouched`): no other re-times."""
        lead = now.timestamp() - clock
        step = lead - self.wall_lead
        if abs(step) < DEADLINE_TOLERANCE.total_seconds():
            return
        before, self.wall_lead = self.wall_lead, lead
        if step <= STEP_SEEN.total_seconds():
            return
        # A report its watcher makes before it sees the step (`_made_before_the_step`), a new
        # notice's too, is judged on the clock as it was.
        self.skews_before_step = dict(self.skews)
        self.step_until = clock + STEP_SETTLE
        self.lead_before_step = before
        for entry in self.entries.values():
            # A local notice (a flag file's time) has no provider clock to be re-timed on.
            local = entry.manual or entry.report.provider == "local"
            if local or entry.reported_clock is None or entry.restored:
                continue
            if self.clock_vouched(entry.report.provider):
                entry.step_settle = clock + STEP_SETTLE

    def _made_before_the_step(self, report: Report) -> bool:
        """Whether `report`, a provider's deadline, was made on the skew its watcher held
        before the last forward step of the wall clock (more than STEP_SEEN, STEP_SETTLE ago
        at most): its skew (`clock_ahead_seconds`, none: zero) nearer the one from before the
        step than the one the step makes. Only where that skew is known (`clock_skews`, or an
        earlier report), for a watcher that reads its provider's clock (`clock_vouched`)."""
        until = self.step_until
        if until is None or self._clock() >= until:
            return False
        if report.action == "clear" or report.deadline is None:
            return False
        if report.deadline_is_duration or (report.deadline_on_boot_clock and not _skew_of(report)):
            # Counted from the wall clock as the report is taken, or by its watcher on the
            # boot clock (a GCP stop, now + what is left, made as it is taken): no moment of
            # the provider's. One held there for its skew (a moment moved by it) is.
            return False
        provider = report.provider
        before = self.skews_before_step.get(provider)
        if provider == "local" or before is None or not self.clock_vouched(provider):
            return False
        step = self.wall_lead - self.lead_before_step
        return _skew_of(report) - before < step / 2

    def _took_skew(self, report: Report, *, manual: bool) -> None:
        """Keep the skew `report` was made on as its provider's last known."""
        if not manual and report.action != "clear" and report.provider != "local":
            self.skews[report.provider] = _skew_of(report)

    def _reading_before_the_step(self, deadline: datetime) -> float:
        """`deadline`, read on the wall clock as it was before the last step, on `clock`."""
        return deadline.timestamp() - self.lead_before_step

    def _on_the_clock(self, reading: float) -> datetime:
        """The wall time at which `clock` will read `reading`."""
        try:
            return _plus(self._now(), timedelta(seconds=reading - self._clock()))
        except OverflowError:  # a reading past any timedelta
            return datetime.max.replace(tzinfo=self._now().tzinfo)

    def _on_clock(self, report: Report, entry: Entry | None) -> tuple[Report, float]:
        """A watcher's deadline given as a duration (the flag file's `5m`, counted from its
        writing on the wall clock), with its reading on `clock`: where the board already holds
        the notice on that clock, its deadline is the one the clock gives (the watcher reports
        the time it first read, and a step since moved it); else the clock is set from now,
        as for a `forewarn notify --deadline`."""
        assert report.deadline is not None
        now, clock = self._now(), self._clock()
        if entry is None or entry.deadline_clock is None:
            return report, clock + (report.deadline - now).total_seconds()
        held = _plus_seconds(now, entry.deadline_clock - clock)
        if _deadline_moved(report.deadline, held):
            report = report.model_copy(update={"deadline": held})
        return report, entry.deadline_clock

    def take_confirming(self) -> list[Notice]:
        """The provider notices past their end whose watchers are to be asked whether the
        provider still shows them (the runner calls `forget`), since the last call."""
        asked, self.confirming = self.confirming, []
        return asked

    def take_overdue(self) -> list[Notice]:
        """The notices found overdue since the last call: past their deadline plus the grace,
        and their provider still shows them (once each, until their deadline changes)."""
        found, self.found_overdue = self.found_overdue, []
        return found

    def overdue_since(self) -> dict[str, datetime]:
        """When each active notice its provider still shows past its end was first found so."""
        return {
            notice_id: entry.overdue_since
            for notice_id, entry in self.entries.items()
            if entry.overdue_since is not None
        }

    def _asks_first(self, entry: Entry) -> bool:
        """Whether `entry`, past its end, is kept if its provider still shows it: a provider's
        notice with a deadline, not yet asked about. Not a manual notice or a flag file's (the
        operator ends those), nor one of a boot that ended (it described that machine), nor
        one restored after a restart that its watcher has not reported since: past its end
        while the agent was down, it is retired at start as before (its watcher raises it
        again if the provider still shows it), not sent to every job as active first."""
        return (
            entry.confirm_by is None
            and not entry.restored
            and not entry.manual
            and entry.report.provider != "local"
            and entry.report.deadline is not None
            and not self._before_this_boot(entry)
        )

    def _heard_past_end(self, entry: Entry) -> None:
        """`entry`'s provider reported it while its watcher was asked whether it still shows
        it: overdue, kept active, and its next grace runs from now."""
        if entry.confirm_by is None:
            return
        entry.confirm_by = None
        entry.shown_at = self._now()
        if entry.overdue_since is None:
            entry.overdue_since = entry.shown_at
            self.found_overdue.append(entry.notice)

    def take_moved(self) -> list[Notice]:
        """The notices whose deadline `due` moved after a step of the wall clock, to publish."""
        moved, self.moved = self.moved, []
        return moved

    def take_flushed(self) -> list[str]:
        """The notices raised again (`report`) flushed by every client already: their
        providers are to be told, as at the ack that completes a notice."""
        done, self.flushed_at_raise = self.flushed_at_raise, []
        return done

    def hold_flushes(self, seconds: float) -> None:
        """Count no notice flushed by every client for `seconds`: a restarted agent knows
        only the clients whose sockets have reconnected, and one ack sent again at once (its
        client's retry) completed a notice other clients, still reconnecting, had not flushed.
        `release_flushes` says which are flushed once the time has come. Timed on `clock`:
        on the wall clock, NTP's step forward ended the hold at once and a step back held
        every flush for as long as the step."""
        self.flushes_held_until = self._clock() + seconds

    def _flushes_held(self) -> bool:
        return self.flushes_held_until is not None and self._clock() < self.flushes_held_until

    def release_flushes(self) -> list[str]:
        """Once the hold has passed: the notices flushed by every client while it lasted."""
        if self.flushes_held_until is None or self._flushes_held():
            return []
        self.flushes_held_until = None
        return [notice_id for notice_id, e in self.entries.items() if self._newly_flushed(e)]

    def record_ack(
        self, notice_id: str | None, client: str | None, flush_seconds: float | None
    ) -> bool:
        """Note a client's flush; true when this ack completes the set for the notice."""
        client = _one_copy(client) if client else client
        if flush_seconds is not None:
            self.flushes.append(flush_seconds)
        entry = self.entries.get(notice_id) if notice_id else None
        if entry is None:
            kept = self.remembered.get(notice_id) if notice_id else None
            if kept is not None:
                # Retired past its end, between the expiry's clear and its provider's next
                # answer, which raises it again with its ackers: lost here, the re-raise
                # waited for this client's ack again (one that had acked for good).
                kept.saved = True
                waited_for = client in kept.expected or client in self.clients
                if client and (waited_for or len(kept.acked) < MAX_STRANGERS_KEPT):
                    kept.acked.add(client)
                elif not client and not kept.expected:
                    kept.acked.add(ANONYMOUS)
            return False
        entry.saved = True
        if client:
            entry.failed.pop(client, None)  # a retry that saved: acked, its failure over
        if client and client not in entry.acked:
            waited_for = client in entry.expected or client in self.clients
            if not waited_for and len(entry.acked) >= MAX_STRANGERS_KEPT:
                # It completes nothing (the notice does not wait for it); answered, and its
                # `wait --client` still passes by the notice: a heartbeat listing
                # ACKED_BY_LISTED clients without it cannot tell, and takes any ack.
                log.debug(
                    "ack of %s from %s not kept: %d kept", notice_id, client, len(entry.acked)
                )
                return False
            self._add_ack(entry, client)
        elif not entry.expected:
            # A client that did not say who it is can only complete a notice nobody else holds.
            self._add_ack(entry, ANONYMOUS)
        return self._newly_flushed(entry)

    @staticmethod
    def _add_ack(entry: Entry, client: str) -> None:
        """Keep `client`'s ack of `entry`, and the clients listed first (`listed`) with it."""
        if client in entry.acked:
            return
        fresh = entry.listed is not None and entry.listed_at == len(entry.acked)
        entry.acked.add(client)
        if not fresh or entry.listed is None:
            entry.listed = None
            return
        entry.listed_at = len(entry.acked)
        if client == ANONYMOUS:
            return
        if len(entry.listed) < ACKED_BY_LISTED or client < entry.listed[-1]:
            bisect.insort(entry.listed, client)
            del entry.listed[ACKED_BY_LISTED:]

    # State.

    @_on_one_reading
    def restore(
        self,
        notices: Iterable[Notice],
        saved: Iterable[str] = (),
        provider: Iterable[Notice] = (),
        escalated: Iterable[str] = (),
        windows: Mapping[str, datetime] | None = None,
        acked_by: Mapping[str, Iterable[str]] | None = None,
        expected_by: Mapping[str, Iterable[str]] | None = None,
        raised: Mapping[str, datetime] | None = None,
        held_by: Mapping[str, Iterable[str]] | None = None,
        raised_clock: Mapping[str, float] | None = None,
        deadline_clock: Mapping[str, float] | None = None,
        reported_clock: Mapping[str, float] | None = None,
        deadline_kind: Mapping[str, str] | None = None,
        received_by: Mapping[str, Iterable[str]] | None = None,
        overdue: Mapping[str, datetime] | None = None,
        gone: Mapping[str, Iterable[str]] | None = None,
        acked_for: Mapping[str, str] | None = None,
        save_failed: Mapping[str, Mapping[str, str]] | None = None,
        booted: datetime | None = None,
    ) -> None:
        """Bring back manual notices saved before a restart (re-stamped, same ids). Their
        expiry clock runs from when they were first noticed, not from the restart. Provider
        notices come back too, marked restored: active (in heartbeats, replays and status) until
        their watcher reports them again or, having answered, does not (`withdraw_restored`).
        The other ids in `saved` are provider notices some client saved for: when their
        provider reports them again they are still saved for, so a job started after the
        restart knows that an earlier job acted on them. A drain in `escalated` was sent as
        terminate, and stays terminate while its deadline stands (as within one run).
        `windows` are the ends of the provider notices' windows (`windows()`): without them
        a notice restored inside its window was retired at once and raised again. `acked_by`
        are the clients that acked each notice (`acked_by()`): they need not ack it again.
        `expected_by` are the clients each was sent to (`expected_by()`): a notice all of
        them had acked is flushed, as it was before the restart. `raised` are the times the
        notices were raised where not their `noticed_at` (`raised()`): their ends run from
        them, as before the restart. `held_by` are the clients holding each (`held_by()`): still
        waited for, as they never reconnect. `raised_clock` are the readings of `clock` when
        they were raised (`raised_clocks()`), given only when that clock has run on since (the
        same boot): their `ages` go on from them. `deadline_clock` are the notices' deadlines
        on that clock where they were given as a duration, a notify's or a flag file's
        (`deadline_clocks()`, the same boot only): they follow a step of the wall clock, as
        before the restart. `reported_clock` are the provider notices' deadlines on that clock
        as of their last report (`reported_clocks()`, the same boot only): until its watcher
        reports it again, a restored notice is judged on them (`_judged_deadline`).
        `deadline_kind` says what each provider notice's deadline in `deadline_clock` is
        (`deadline_kinds()`); one not there (a file of an agent before it) is told by its
        provider: `local`'s is a duration, any other's is kept on the boot clock.
        `received_by` are the clients that had received each notice not flushed and not
        acked it (`received_by()`): named when its deadline passes, reconnected or not; None
        (a file of an agent before it) leaves who they were unknown, which is said instead.
        `overdue` are the deadlines each was told past at (`overdue_told()`): not told again.
        `gone` are the clients that left each terminate before their ack (`gone_to_save()`):
        named past its deadline as gone, unless they come back. `acked_for` is the action
        each notice's acks in `acked_by` were for (`acked_for()`): those of a drain that comes
        back as terminate (its deadline came within the margin while the agent was down) are
        not the terminate's. A notice not in it (a file of an agent before it) keeps its acks
        for whatever it comes back as, as that agent did. `save_failed` are the clients whose
        save of each failed, with their notes (`failed_to_save()`): named so past its
        deadline, unless they ack a saved flush. `booted` is when this machine started, given
        when the notices were saved in an earlier boot: a manual notice whose deadline passed
        before it, or a terminate without one raised before it, is retired at once (the first
        `due()`), not the grace past its deadline (the rest of its lifetime)."""
        saved_ids = set(saved)
        escalated_ids = set(escalated)
        now = self._clock()
        for notice, manual in [*((n, True) for n in notices), *((n, False) for n in provider)]:
            report = Report(
                id=notice.id,
                action=notice.action,
                reason=notice.reason,
                provider=notice.provider,
                deadline=notice.deadline,
                noticed_at=notice.noticed_at,
                detail=notice.detail,
                until=None if manual else (windows or {}).get(notice.id),
            )
            if notice.id in self.entries:
                continue  # saved twice (a hand-edited file): the first stands
            raised_at = (raised or {}).get(notice.id, notice.noticed_at)
            held_on_clock = (deadline_clock or {}).get(notice.id)
            if held_on_clock is not None and report.deadline is not None:
                # Where the clock puts it now, before it is judged: on the wall time a step
                # since the save made stale, a drain went out as terminate at the start.
                report = report.model_copy(update={"deadline": self._on_the_clock(held_on_clock)})
            if held_on_clock is not None and not manual:
                # A flag file's `5m`: its watcher, handed the report (`provider_reports`),
                # reports it again as a duration, which the board keeps on the clock. Any
                # other is one its watcher keeps on the boot clock (a GCP stop, a deadline
                # moved by a skew: `Report.deadline_on_boot_clock`).
                kind = (deadline_kind or {}).get(notice.id)
                if kind not in DEADLINE_KINDS:  # saved before kinds were: told by provider
                    local = notice.provider == "local"
                    kind = DEADLINE_DURATION if local else DEADLINE_BOOT_CLOCK
                duration = kind == DEADLINE_DURATION
                kept = "deadline_is_duration" if duration else "deadline_on_boot_clock"
                report = report.model_copy(update={kept: True})
            self.report(
                report,
                manual=manual,
                raised_at=raised_at,
                deadline_clock=held_on_clock if report.deadline is not None else None,
            )
            entry = self.entries.get(notice.id)
            if entry is None:
                continue
            entry.restored = not manual
            entry.booted = booted if manual else None
            entry.restored_clock = None if manual else self._clock()
            # The reading `report` just took is of the wall time a step may have made stale.
            entry.reported_clock = (
                (reported_clock or {}).get(notice.id) if entry.reported_clock is not None else None
            )
            judged = self._action_for(entry.report, entry)
            if judged != entry.notice.action:
                # A drain whose wall-clock deadline a forward step made stale: it is no
                # terminate before its watcher says so (as within one run, where the watcher
                # moves the deadline with the step).
                entry.notice = self._stamp(entry.report, judged)
            # Raised before the restart: when by this clock only if it was saved in this boot.
            reading = (raised_clock or {}).get(notice.id)
            entry.raised_clock = reading if reading is not None and reading <= now else None
            entry.overdue_at = (overdue or {}).get(notice.id)
            if (
                notice.id in escalated_ids
                and entry.notice.action == "drain"
                and entry.report.action == "drain"
                and entry.report.deadline is not None
            ):
                entry.notice = self._stamp(entry.report, "terminate")
            kept_for = (acked_for or {}).get(notice.id)
            if notice.id in saved_ids and not _asks_more(kept_for, entry.notice.action):
                entry.saved = True  # not a drain's save, for the terminate it came back as
            acks = set(map(_one_copy, (acked_by or {}).get(notice.id, ())))
            if (acked_for or {}).get(notice.id, entry.notice.action) != entry.notice.action:
                acks = set()  # a drain's, and it is a terminate now (or the other way round)
            entry.acked.update(acks)
            entry.listed = None
            expected = (expected_by or {}).get(notice.id)
            if expected is not None and entry.acked and set(expected) <= entry.acked:
                entry.expected = set(expected)
                entry.flushed = True
            # Sent as drain before the restart and as terminate now (its deadline came within
            # the margin while the agent was down): who received the drain, or left before its
            # ack, never received the terminate (as at an escalation within one run). A drain
            # in `escalated` was sent as terminate (saved un-escalated): who received it, or
            # left before its ack, did so for the terminate, and is kept.
            was = "terminate" if notice.id in escalated_ids else notice.action
            changed = entry.notice.action != was
            if not entry.flushed and received_by is None:
                entry.receivers_unknown = True
            elif not entry.flushed and received_by is not None and not changed:
                entry.received_before = set(received_by.get(notice.id, ())) - entry.acked
            if not changed:
                entry.gone = set((gone or {}).get(notice.id, ())) - entry.acked
            # A drain's failed saves are no answer to the terminate it came back as (as at an
            # escalation within one run), nor a terminate's to the drain it is again.
            failed = (save_failed or {}).get(notice.id, {}) if was == entry.notice.action else {}
            entry.failed = {c: n for c, n in failed.items() if c not in entry.acked}
            held = set((held_by or {}).get(notice.id, ())) - entry.acked
            if held and not entry.flushed:
                entry.held |= held
                entry.expected |= held
        # Provider notices not shown (retired, or saved for), kept until their provider reports
        # them again: still saved for, acked by whom they were, and flushed if they were.
        acked_map = {key: set(clients) for key, clients in (acked_by or {}).items()}
        expected_map = {key: set(clients) for key, clients in (expected_by or {}).items()}
        for notice_id in sorted((saved_ids | acked_map.keys()) - self.entries.keys()):
            acked = acked_map.get(notice_id, set())
            expected = expected_map.get(notice_id)
            flushed = bool(acked) and expected is not None and expected <= acked
            kept_for = (acked_for or {}).get(notice_id)
            action: Action | None = (
                "drain" if kept_for == "drain" else "terminate" if kept_for == "terminate" else None
            )
            self._remember(
                notice_id,
                Remembered(
                    None,
                    notice_id in saved_ids,
                    acked,
                    expected or set(),
                    flushed,
                    action,
                ),
            )

    # Internals.

    def _ends(self, entry: Entry) -> datetime | None:
        """When the notice is retired: its deadline (or its re-raise, or the end of the
        provider's window, if later) plus the grace; for a local notice without a deadline,
        its lifetime after it was raised."""
        if entry.confirm_by is not None:
            return entry.confirm_by  # its watcher is asked whether it is still shown
        deadline = entry.report.deadline
        if self._before_this_boot(entry):
            # It described the machine the reboot ended: kept the grace past its deadline, a
            # terminate came back to the job started after the boot, which exited at once.
            return deadline or entry.raised_at
        if deadline is not None and self._settling(entry):
            deadline = self._judged_deadline(entry)  # after a step: see `_settle_after_a_step`
        if deadline is not None:
            # Inside the provider's window the action can still come at any moment: a notice
            # retired there came back at the next poll, a clear and a terminate every grace.
            until = entry.report.until
            ends = max(
                moment
                for moment in (deadline, entry.raised_at, until, entry.shown_at)
                if moment is not None
            )
            ends = _plus(ends, self.grace)
            waited_for = self._awaited_until(entry)
            step = self._stepped_forward(entry)
            if waited_for is not None and step:
                # Restored, and the wall clock stepped forward since it was raised: not
                # retired on the wall time the stepped clock gave it before its watcher has
                # had its chance to report it again (see `_stepped_forward`).
                ends = max(ends, min(_plus(ends, step), waited_for))
            return ends
        if entry.report.provider == "local":
            if entry.raised_clock is not None:
                # Counted on `clock`, as of now: on the wall clock, NTP's step forward (first
                # sync on a VM whose clock was behind) retired a drain at once, with a clear,
                # before the job saved, and a step back kept it for as long as the step.
                age = max(0.0, self._clock() - entry.raised_clock)
                left = self.manual_lifetime - timedelta(seconds=age)
                return _plus(self._now(), left)
            return _plus(entry.raised_at, self.manual_lifetime)
        return self._awaited_until(entry)

    @staticmethod
    def _before_this_boot(entry: Entry) -> bool:
        """Whether `entry`, a manual notice of an earlier boot, had a deadline that passed
        before this machine started (`Entry.booted`), or is a terminate without one raised
        before it (`forewarn notify terminate; sudo reboot`: it asked that boot's jobs to
        exit, and stood the rest of `manual_lifetime` for the jobs started after the boot)."""
        deadline, booted = entry.report.deadline, entry.booted
        if booted is None:
            return False
        if deadline is None:
            return entry.report.action == "terminate" and entry.raised_at < booted
        return deadline < booted

    def _awaited_until(self, entry: Entry) -> datetime | None:
        """Until when a restored provider notice waits for its watcher to report it again;
        None for any other."""
        if entry.restored and entry.restored_clock is not None:
            # A watcher that cannot answer for that long after a restart cannot confirm it
            # either: kept, it would stay active forever (raised again, same occurrence, when
            # the provider is heard reporting it). Counted on `clock`, as of now: on the wall
            # clock, NTP's step forward just after a restart withdrew it before its watcher
            # answered, and a step back kept it for as long as the step.
            waited = max(0.0, self._clock() - entry.restored_clock)
            return _plus(self._now(), self.grace - timedelta(seconds=waited))
        return None

    def _stepped_forward(self, entry: Entry) -> timedelta:
        """How far the wall clock was stepped forward since `entry` was raised, by `clock`'s
        reading then (known in the same boot only); zero otherwise. A restored provider notice
        is not retired on the wall time a clock stepped since gave it: a GCP preemption read
        while the clock was 30 min behind was retired at the start after NTP's step, 'past its
        deadline plus a grace', and raised again by its watcher 100 ms later (same id): the
        job saw terminate, clear, terminate, the clear withdrawing the exit it was saving for.
        It waits for its watcher instead (`_awaited_until`), which reports it again or not
        (`withdraw_restored`). A step back is left be: the wall time then ends it later.
        Where the deadline's own reading of `clock` was saved, the step is the one since the
        notice was last reported: one its watcher had already moved the deadline by before
        the restart is not counted twice."""
        judged, deadline = self._judged_deadline(entry), entry.report.deadline
        if entry.restored and entry.reported_clock is not None and judged and deadline:
            step = judged - deadline
        elif entry.raised_clock is None:
            return timedelta(0)
        else:
            wall = self._now() - entry.raised_at
            step = wall - timedelta(seconds=max(0.0, self._clock() - entry.raised_clock))
        return step if step >= DEADLINE_TOLERANCE else timedelta(0)

    def _reading_of(self, report: Report, entry: Entry) -> float | None:
        """The deadline of `report`, now reported for `entry`, on `clock` (see
        `Entry.reported_clock`)."""
        deadline = report.deadline
        if entry.manual or entry.deadline_clock is not None or deadline is None:
            return None
        return self._clock() + (deadline - self._now()).total_seconds()

    def _judged_deadline(self, entry: Entry) -> datetime | None:
        """The deadline `entry` is escalated and retired by: its report's, except for a
        restored provider notice not reported again yet, whose deadline on `clock` (saved in
        this boot) stands where a forward step of the wall clock since its last report put
        the wall time before it. A GCP maintenance drain (an hour, kept on the boot clock by
        its watcher) read while the clock was 90 minutes behind went out as terminate at the
        start after NTP's step, and a job reconnecting exited an hour before the stop; the
        watcher's answer then made it a drain again. A step back is left be: the wall time
        then ends it later, and its watcher moves it when it answers."""
        deadline = entry.report.deadline
        if deadline is None or entry.reported_clock is None:
            return deadline
        if not entry.restored and not self._settling(entry):
            return deadline
        return max(deadline, self._on_the_clock(entry.reported_clock))

    @staticmethod
    def _retimed(entry: Entry, report: Report) -> bool:
        """Whether `report` re-times `entry`'s deadline: moved, or on another skew."""
        if _deadline_moved(entry.report.deadline, report.deadline):
            return True
        return bool(entry.report.detail.get(CLOCK_AHEAD) != report.detail.get(CLOCK_AHEAD))

    def _settling(self, entry: Entry) -> bool:
        """Whether `entry` is judged on its boot-clock reading after a step (`step_settle`)."""
        if entry.step_settle is None:
            return False
        if self._clock() < entry.step_settle:
            return True
        entry.step_settle = None
        return False

    def _remember(self, notice_id: str, kept: Remembered) -> None:
        self.remembered[notice_id] = kept
        while len(self.remembered) > REMEMBERED:
            del self.remembered[next(iter(self.remembered))]

    def _expiry_detail(self, entry: Entry, ends: datetime) -> dict[str, Any]:
        deadline = entry.report.deadline
        grace = self.grace.total_seconds()
        if self._before_this_boot(entry):
            assert entry.booted is not None
            what = "its deadline passed" if deadline is not None else "raised without a deadline"
            why = (
                f"{what} before this machine started ({format_time(entry.booted)}): it was "
                "for the boot before"
            )
        elif (
            deadline is not None
            and entry.report.until is not None
            and entry.report.until > deadline
        ):
            why = f"past the end of its window plus a grace of {grace:g}s"
        elif deadline is not None:
            why = f"past its deadline plus a grace of {grace:g}s"
        elif entry.restored and entry.report.provider != "local":
            why = (
                f"not reported again by its provider within {grace:g}s after {entry.restored_after}"
            )
        else:
            why = f"no deadline and older than {self.manual_lifetime.total_seconds():g}s"
        return {**entry.report.detail, EXPIRED_KEY: why}

    def _newly_flushed(self, entry: Entry) -> bool:
        if entry.flushed or not entry.acked:
            return False
        if self._flushes_held():
            return False
        if entry.expected - entry.acked:
            return False
        entry.flushed = True
        return True

    def _action_for(self, report: Report, entry: Entry | None = None) -> Action:
        """The action to send for what the provider reports, at the current deadline (that
        of `entry`, holding `report`, as judged by `_judged_deadline`)."""
        deadline = report.deadline if entry is None else self._judged_deadline(entry)
        if report.action != "drain" or deadline is None:
            return report.action
        # A difference of two times never overflows, where `deadline - margin` can.
        left = (deadline - self._now()).total_seconds()
        return "terminate" if left <= self.exit_margin else "drain"

    @staticmethod
    def _changed(published: Notice, report: Report) -> bool:
        """Whether the reason, the deadline or the provider's own detail changed enough since
        clients were told (not since the last report: a deadline that crept by under the
        tolerance per report was never sent again, however far it went)."""
        if report.reason != published.reason:
            return True
        if _deadline_moved(published.deadline, report.deadline):
            return True
        return _detail_changed(published.detail, report.detail)

    def _restamp(self, entry: Entry, action: Action) -> Notice:
        """Send `entry` again as `action` (same id), from its current report. Acks belong to an
        action: a drain's save is a flush-and-continue, a terminate's the exit's save. When
        the action changes (a drain escalated to terminate, one sent as a drain again, a
        provider's own change) the acks of the old one, and its being flushed by every
        client, are not the new one's: every client it reaches now (and the holds not
        answered) is waited for again. Counted for the terminate, a job that saved for the
        drain and then ignored the terminate was not named at its deadline, `status` said
        the terminate was acked by a job that had died before it was sent, and the notice,
        flushed as a drain, was never flushed as a terminate (no Azure approval)."""
        before = entry.notice.action
        entry.notice = self._stamp(entry.report, action)
        if action != before:
            # A save for the drain is no one acting on the terminate: listed in the
            # heartbeat's `acked`, a job started after the change (and `forewarn wait`) took
            # it for a terminate an earlier job had acted on, and one without a deadline
            # asked nothing of it. A terminate's save answers the drain it becomes again.
            entry.saved = entry.saved and not _asks_more(before, action)
            entry.held -= entry.acked
            entry.acked = set()
            entry.listed = None
            entry.flushed = False
            entry.expected = set(self.clients) | entry.held
            entry.gone = set()
            # Nor did those that received the old one before a restart receive this one.
            entry.received_before = set()
            entry.failed = {}  # a failed save of the drain is no answer to the terminate
        return entry.notice

    def _stamp(self, report: Report, action: Action) -> Notice:
        return Notice(
            id=report.id,
            seq=self.sequencer.next(),
            action=action,
            reason=report.reason,
            provider=report.provider,
            deadline=report.deadline,
            noticed_at=report.noticed_at,
            sent_at=self._now(),
            detail=report.detail,
        )


def _asks_more(saved_for: str | None, action: str) -> bool:
    """Whether a save for `saved_for` (None: not known, an older agent's state) leaves
    `action` unanswered: a drain's save (flush and go on) is no terminate's (the exit)."""
    return saved_for == "drain" and action == "terminate"


def _skew_of(report: Report) -> float:
    """The skew `report`'s times were moved by (its CLOCK_AHEAD, seconds): zero without one,
    as a watcher sends a report on a clock that agrees with its provider's."""
    seconds = report.detail.get(CLOCK_AHEAD)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return 0.0
    try:
        number = float(seconds)
    except OverflowError:  # an int past any float
        return 0.0
    return number if math.isfinite(number) else 0.0


def _deadline_moved(before: datetime | None, after: datetime | None) -> bool:
    """Whether the deadline came, went, or moved by the tolerance or more."""
    if before is None or after is None:
        return (before is None) != (after is None)
    return abs(after - before) >= DEADLINE_TOLERANCE


def _detail_changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether the provider's detail changed; times that move by less than the tolerance
    (recomputed per answer) are the same time. The skew the times were moved by
    (CLOCK_AHEAD) is no change of its own: what a client acts on is the deadline, and after
    a step of the wall clock the board had moved it already (`_follow_steps`), so the
    watcher's report of the new skew sent the same drain a second time."""
    before = {key: value for key, value in before.items() if key != CLOCK_AHEAD}
    after = {key: value for key, value in after.items() if key != CLOCK_AHEAD}
    if before.keys() != after.keys():
        return True
    for key, value in after.items():
        old = before[key]
        if value == old:
            continue
        if isinstance(value, str) and isinstance(old, str):
            try:
                if abs(parse_time(value) - parse_time(old)) < DEADLINE_TOLERANCE:
                    continue
            except ValueError:
                pass
        return True
    return False


def _plus(moment: datetime, delta: timedelta) -> datetime:
    try:
        return moment + delta
    except OverflowError:
        return datetime.max.replace(tzinfo=moment.tzinfo)


def _plus_seconds(moment: datetime, seconds: float) -> datetime:
    """`moment` plus `seconds`, or the last (first) time there is when that is past any
    datetime or timedelta: a boot-clock reading of 1e300 in a damaged state file made
    `timedelta` raise, and the agent's escalation task stopped the agent."""
    try:
        return _plus(moment, timedelta(seconds=seconds))
    except OverflowError:
        return (datetime.max if seconds > 0 else datetime.min).replace(tzinfo=moment.tzinfo)


def _one_copy(client: str) -> str:
    """The one copy of `client` every notice's acks, holds and failed saves keep. An id comes
    decoded anew from each message, and a subscriber acks every notice: 4,096 subscribers of
    200-byte ids acking 64 notices kept 64 copies of each, +65 MiB (with one: +9 MiB of set
    slots). Interned strings are freed with their last reference, so a flood of strangers'
    ids holds nothing once their acks are dropped."""
    return sys.intern(client) if type(client) is str else client


def _minus(moment: datetime, delta: timedelta) -> datetime:
    try:
        return moment - delta
    except OverflowError:
        return datetime.min.replace(tzinfo=moment.tzinfo)


__all__ = [
    "ANONYMOUS",
    "DEADLINE_BOOT_CLOCK",
    "DEADLINE_DURATION",
    "DEADLINE_KINDS",
    "DEADLINE_TOLERANCE",
    "DEFAULT_GRACE",
    "DEFAULT_MANUAL_LIFETIME",
    "EXPIRED_KEY",
    "STEP_SEEN",
    "STEP_SETTLE",
    "Entry",
    "NoticeBoard",
    "Overdue",
    "Remembered",
    "Sequencer",
]
