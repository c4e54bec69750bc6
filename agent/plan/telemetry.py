"""What a telemetry file says about the job and the capacity: medians of the flush, restore,
notice lead and notice-to-saved times, and the terminate notices over the observed span."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

from forewarn.protocol.timefmt import parse_time


@dataclass(frozen=True)
class TelemetrySummary:
    """What a telemetry file says about the job and the capacity."""

    records: int
    span_seconds: float
    terminate_notices: int
    flush_seconds: float | None
    flushes: int
    restore_seconds: float | None
    resumes: int
    steps_lost: float | None
    notice_lead_seconds: float | None
    response_seconds: float | None
    drained: bool | None
    reasons: dict[str, int]

    @property
    def mtbi_seconds(self) -> float | None:
        if not self.terminate_notices or self.span_seconds <= 0:
            return None
        return self.span_seconds / self.terminate_notices


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def summarize_telemetry(*sources: Iterable[dict[str, Any]]) -> TelemetrySummary:
    """Medians of flush, restore, notice lead and notice-to-saved time, and the terminate
    notices (one per id, escalated drains included) over the observed span.

    Each source is one agent's records (one machine); the span is the sum of each source's
    first-to-last time, so machines in a row or side by side both count their running time.
    """
    count = 0
    span = 0.0
    terminated: dict[tuple[int, str], float] = {}  # (source, id) -> when the terminate was sent
    reasons: dict[str, int] = {}
    leads: list[float] = []
    saved_at: dict[tuple[int, str], list[float]] = {}  # when saved acks for a notice arrived
    flushes: list[float] = []
    restores: list[float] = []
    lost_steps: list[float] = []
    for index, records in enumerate(sources):
        first: float | None = None
        last: float | None = None
        for record in records:
            count += 1
            at = parse_time(str(record["at"])).timestamp()
            first = at if first is None else min(first, at)
            last = at if last is None else max(last, at)
            kind = record["kind"]
            if kind in ("notice", "escalation") and record.get("action") == "terminate":
                key = (index, str(record.get("id")))
                if key in terminated:
                    continue
                sent = parse_time(str(record.get("sent_at") or record["at"])).timestamp()
                terminated[key] = sent
                reason = str(record.get("reason"))
                reasons[reason] = reasons.get(reason, 0) + 1
                if record.get("deadline"):
                    leads.append(parse_time(str(record["deadline"])).timestamp() - sent)
            elif kind == "ack" and record.get("outcome") == "saved":
                if record.get("flush_seconds") is not None:
                    flushes.append(float(record["flush_seconds"]))
                if record.get("notice_id") is not None:
                    saved_at.setdefault((index, str(record["notice_id"])), []).append(at)
            elif kind == "resume":
                if record.get("restore_seconds") is not None:
                    restores.append(float(record["restore_seconds"]))
                if record.get("steps_lost") is not None:
                    lost_steps.append(float(record["steps_lost"]))
        if first is not None and last is not None:
            span += last - first
    # Only a save at or after the terminate protects the work; a drain's earlier ack does not.
    responses = {
        notice_id: min(moment for moment in saved_at.get(notice_id, []) if moment >= sent) - sent
        for notice_id, sent in terminated.items()
        if any(moment >= sent for moment in saved_at.get(notice_id, []))
    }
    return TelemetrySummary(
        records=count,
        span_seconds=span,
        terminate_notices=len(terminated),
        flush_seconds=_median(flushes),
        flushes=len(flushes),
        restore_seconds=_median(restores),
        resumes=len(restores),
        steps_lost=_median(lost_steps),
        notice_lead_seconds=_median(leads),
        response_seconds=_median(list(responses.values())),
        drained=len(responses) == len(terminated) if terminated else None,
        reasons=reasons,
    )


__all__ = ["TelemetrySummary", "summarize_telemetry"]
