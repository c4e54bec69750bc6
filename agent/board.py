"""The notice board: the agent's memory of active notices and the rules that decide what is sent.

- The same notice reported again sends nothing; a changed action or deadline re-sends it with
  the same id; a clear withdraws it.
- A drain with a deadline escalates to terminate (same id) at `deadline - exit_margin`, where
  the margin is the larger of a floor and twice the slowest flush clients reported.
- It remembers which acking clients received each notice, so a provider can act once all of
  them have flushed.

The board does no I/O: it returns the notices to publish, and the runner sends them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from forewarn.protocol.timefmt import utcnow

from .protocol import Notice, Report

log = logging.getLogger("forewarn.agent")

# Deadlines that move by less than this between polls are the same deadline: providers (and
# AWS's own mock) recompute times on every answer, and a re-send per poll would be noise.
DEADLINE_TOLERANCE = timedelta(seconds=1)
# How many recent flushes count when sizing the exit margin.
FLUSH_WINDOW = 20


class Sequencer:
    """Agent-wide, strictly increasing message numbers.

    Numbering starts at the larger of the last persisted value and the current time in
    milliseconds, so a restarted agent (even after SIGKILL) keeps counting upwards.
    """

    def __init__(self, start: int = 0) -> None:
        self.value = max(start, int(utcnow().timestamp() * 1000))

    def next(self) -> int:
        self.value += 1
        return self.value


@dataclass
class Entry:
    notice: Notice  # as last published
    report: Report  # as last reported (escalation changes the notice, not the report)
    manual: bool = False
    escalated: bool = False
    expected: set[str] = field(default_factory=set)  # acking clients that received it
    acked: set[str] = field(default_factory=set)
    flushed: bool = False


class NoticeBoard:
    def __init__(
        self,
        sequencer: Sequencer,
        exit_margin_floor: float,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sequencer = sequencer
        self.exit_margin_floor = exit_margin_floor
        self.now = now
        self.entries: dict[str, Entry] = {}
        self.flushes: deque[float] = deque(maxlen=FLUSH_WINDOW)
        self.clients: set[str] = set()

    # What is active.

    def active(self) -> list[Notice]:
        return sorted((entry.notice for entry in self.entries.values()), key=lambda n: n.seq)

    def manual(self) -> list[Notice]:
        return [entry.notice for entry in self.entries.values() if entry.manual]

    def get(self, notice_id: str) -> Notice | None:
        entry = self.entries.get(notice_id)
        return entry.notice if entry else None

    @property
    def exit_margin(self) -> float:
        slowest = max(self.flushes, default=0.0)
        return max(self.exit_margin_floor, 2.0 * slowest)

    # Changes.

    def report(self, report: Report, *, manual: bool = False) -> Notice | None:
        """Take a watcher's report; return the notice to publish, or None when nothing changed."""
        if report.action == "clear":
            return self.clear(report.id, detail=report.detail)
        entry = self.entries.get(report.id)
        if entry is None:
            action = report.action
            escalated = False
            if self._escalation_due(report):
                action, escalated = "terminate", True
            notice = self._stamp(report, action)
            self.entries[report.id] = Entry(
                notice, report, manual=manual, escalated=escalated, expected=set(self.clients)
            )
            return notice
        action = report.action
        if entry.escalated or (action == "drain" and self._escalation_due(report)):
            action = "terminate"
        if action == entry.notice.action and not self._moved(entry.report, report):
            entry.report = report
            return None
        entry.escalated = action == "terminate" and report.action == "drain"
        entry.report = report
        entry.notice = self._stamp(report, action)
        entry.expected |= self.clients
        return entry.notice

    def clear(self, notice_id: str, detail: dict[str, object] | None = None) -> Notice | None:
        entry = self.entries.pop(notice_id, None)
        if entry is None:
            return None
        cleared = entry.report.model_copy(
            update={"action": "clear", "noticed_at": self.now(), "detail": detail or {}}
        )
        return self._stamp(cleared, "clear")

    def escalate_due(self) -> list[Notice]:
        """Drains whose deadline is within the exit margin, re-sent now as terminate."""
        sent = []
        for entry in self.entries.values():
            due = entry.notice.action == "drain" and self._escalation_due(entry.report)
            if due and not entry.escalated:
                entry.escalated = True
                entry.notice = self._stamp(entry.report, "terminate")
                sent.append(entry.notice)
        return sent

    def next_escalation(self) -> datetime | None:
        """When `escalate_due` next has work, if ever."""
        margin = timedelta(seconds=self.exit_margin)
        times = [
            entry.report.deadline - margin
            for entry in self.entries.values()
            if not entry.escalated and entry.notice.action == "drain" and entry.report.deadline
        ]
        return min(times, default=None)

    # Clients and acks.

    def client_joined(self, client: str) -> None:
        """An acking client subscribed: it receives every active notice by replay."""
        self.clients.add(client)
        for entry in self.entries.values():
            entry.expected.add(client)

    def client_left(self, client: str) -> list[str]:
        """An acking client went away; returns notices that are now flushed by everyone left."""
        self.clients.discard(client)
        done = []
        for notice_id, entry in self.entries.items():
            entry.expected.discard(client)
            if self._newly_flushed(entry):
                done.append(notice_id)
        return done

    def record_ack(
        self, notice_id: str | None, client: str | None, flush_seconds: float | None
    ) -> bool:
        """Note a client's flush; true when this ack completes the set for the notice."""
        if flush_seconds is not None:
            self.flushes.append(flush_seconds)
        entry = self.entries.get(notice_id) if notice_id else None
        if entry is None:
            return False
        if client:
            entry.acked.add(client)
        elif not entry.expected:
            # A client that did not say who it is can only complete a notice nobody else holds.
            entry.acked.add("(anonymous)")
        return self._newly_flushed(entry)

    # State.

    def restore(self, notices: Iterable[Notice]) -> None:
        """Bring back manual notices saved before a restart (re-stamped, same ids)."""
        for saved in notices:
            report = Report(
                id=saved.id,
                action=saved.action,
                reason=saved.reason,
                provider=saved.provider,
                deadline=saved.deadline,
                noticed_at=saved.noticed_at,
                detail=saved.detail,
            )
            self.report(report, manual=True)

    # Internals.

    def _newly_flushed(self, entry: Entry) -> bool:
        if entry.flushed or not entry.acked:
            return False
        if entry.expected - entry.acked:
            return False
        entry.flushed = True
        return True

    def _escalation_due(self, report: Report) -> bool:
        if report.action != "drain" or report.deadline is None:
            return False
        return self.now() >= report.deadline - timedelta(seconds=self.exit_margin)

    @staticmethod
    def _moved(before: Report, report: Report) -> bool:
        """Whether the reason or the deadline changed enough to tell clients again."""
        if report.reason != before.reason:
            return True
        if (report.deadline is None) != (before.deadline is None):
            return True
        if report.deadline is not None and before.deadline is not None:
            return abs(report.deadline - before.deadline) >= DEADLINE_TOLERANCE
        return False

    def _stamp(self, report: Report, action: str) -> Notice:
        return Notice(
            id=report.id,
            seq=self.sequencer.next(),
            action=action,
            reason=report.reason,
            provider=report.provider,
            deadline=report.deadline,
            noticed_at=report.noticed_at,
            sent_at=self.now(),
            detail=report.detail,
        )


__all__ = ["DEADLINE_TOLERANCE", "Entry", "NoticeBoard", "Sequencer"]
