"""Turns what each poll of a path shows into the reports worth sending: new notices, real
changes and withdrawals, never a repeat.

IMDS gives a spot interruption and a rebalance recommendation no id, and a mock such as
amazon-ec2-metadata-mock recomputes their times on every request. So a path that holds one
notice at a time keeps the id of the first sighting for as long as the notice stays, and a
time that stays put or slides along with the clock (within `jitter` seconds) is no change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from forewarn.providers.report import Report

from .imds import parse_aws_date


@dataclass
class _Seen:
    report: Report  # the last one sent
    moments: dict[str, datetime | None]  # the volatile times of the last one sent
    sent_at: float  # monotonic time the last one was sent


@dataclass
class PathTracker:
    """Memory of one IMDS path.

    `single`: the path holds at most one notice (spot, rebalance, ASG state), so whatever it
    shows is the same notice until it goes away. `volatile`: detail keys holding a time that
    may move between polls without the notice changing. `clear_on_absence`: a notice that
    disappears is withdrawn (a `clear` is sent); otherwise it is kept.
    """

    single: bool
    volatile: tuple[str, ...] = ()
    clear_on_absence: bool = True
    jitter: float = 5.0
    clock: Callable[[], float] = time.monotonic
    seen: dict[str, _Seen] = field(default_factory=dict)

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
                continue
            present.add(slot)
            moments = {key: _moment(report.detail.get(key)) for key in self.volatile}
            if seen is None:
                self.seen[slot] = _Seen(report, moments, now)
                out.append(report)
                continue
            report = report.model_copy(update={"id": seen.report.id})
            if self._changed(seen, report, moments, now):
                seen.report, seen.moments, seen.sent_at = report, moments, now
                out.append(report)
        for slot in [slot for slot in self.seen if slot not in present]:
            if self.clear_on_absence:
                out.append(self._clear(self.seen.pop(slot).report, None))
        return out

    def forget(self, notice_id: str) -> bool:
        """Drop the memory of a notice the agent retired (past its deadline plus a grace), so
        that the next poll still showing it reports it again. True if it was known here."""
        slots = [slot for slot, seen in self.seen.items() if seen.report.id == notice_id]
        for slot in slots:
            del self.seen[slot]
        return bool(slots)

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


def _stable(detail: dict[str, Any], volatile: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in detail.items() if key not in volatile}


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_aws_date(value)
    except ValueError:
        return None


__all__ = ["PathTracker"]
