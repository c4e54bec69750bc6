"""What a telemetry file says about the job and the capacity: the flush (robust mean for the
tax, median, p95 for whether a notice covers it), restore, notice lead and notice-to-saved
times, the terminate notices over the observed span, and how many came too late to use."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

from forewarn.clients.adaptive import quantile, robust_mean
from forewarn.protocol.timefmt import parse_time

from ..board import DEFAULT_GRACE


@dataclass(frozen=True)
class TelemetrySummary:
    """What a telemetry file says about the job and the capacity."""

    records: int
    span_seconds: float
    terminate_notices: int
    flush_seconds: float | None  # robust mean: the tax
    flushes: int
    restore_seconds: float | None
    resumes: int
    steps_lost: float | None
    notice_lead_seconds: float | None
    response_seconds: float | None  # p95 of notice to saved checkpoint
    drained: bool | None
    reasons: dict[str, int]
    flush_median_seconds: float | None = None
    flush_p95_seconds: float | None = None  # whether a notice covers the flush
    # Terminate notices not followed by a saved checkpoint before their deadline.
    late_notices: int = 0
    # The stall and durable times, where acks carry them separately (background uploads).
    flush_source: str = "flush_seconds"
    coverage_source: str = "flush_seconds"
    # A background save's upload after its stall (robust mean of durable - stall, where acks
    # carry both): an interruption in it loses the interval before the checkpoint too.
    upload_seconds: float | None = None
    # Reclaims that began as a drain with a deadline (DigitalOcean's reclaim mail, GCP host
    # maintenance) which the agent sent as terminate at its exit margin: their lead is the
    # drain's, and the job saved on the drain and trained on.
    drained_first: int = 0
    # Reclaims whose notices reached no acking client and no ack named: no job held them (a
    # machine between jobs). Interruptions of the capacity, but none too late for a job.
    unattended_notices: int = 0
    # Drains saved on that never became a terminate (AWS's rebalance recommendation, GCP's
    # live migration, a maintenance cancelled): each is a save the job made and the overhead
    # model does not count.
    drain_saves: int = 0

    @property
    def mtbi_seconds(self) -> float | None:
        if not self.terminate_notices or self.span_seconds <= 0:
            return None
        return self.span_seconds / self.terminate_notices

    @property
    def late_share(self) -> float | None:
        """Share of terminate notices a job held that came too late to save on: without a
        usable notice. Those no job held are left out of both counts."""
        held = self.terminate_notices - self.unattended_notices
        if held <= 0:
            return None
        return self.late_notices / held


def _median(values: list[float]) -> float | None:
    return median(values) if values else None


def _number(record: dict[str, Any], name: str) -> float | None:
    value = record.get(name)
    return None if value is None else float(value)


def summarize_telemetry(*sources: Iterable[dict[str, Any]]) -> TelemetrySummary:
    """The flush (robust mean, median, p95), medians of restore and notice lead, the p95 of
    notice-to-saved time, and the terminate notices (one per id, escalated drains included)
    over the observed span, with those that came too late to save on.

    Each source is one agent's records (one machine); the span is the sum of each run's
    first-to-last time (a run begins at a `start` record), so machines in a row or side by
    side, and the runs of one machine whose state outlives it, count their running time only.
    An ack with `stall_seconds` (what training waited) and `durable_seconds` (until the
    checkpoint was safe) has the first count for the tax and the second for the notice.
    """
    count = 0
    span = 0.0
    terminated: dict[tuple[int, str], float] = {}  # (source, id) -> when the terminate was sent
    # One reclaim per group of terminate notices: a notice sent while another of the same
    # run is still in force (as the agent's board keeps it: until its clear, or its deadline
    # plus the grace) is the same reclaim reported again, as the overhead model takes further
    # notices in a lead window. Two providers on one machine (GCP's preemption and the
    # kubelet's node shutdown on a GKE spot node) report each reclaim twice: it was counted
    # as two interruptions, the one not saved on as too late.
    reclaims: list[list[tuple[int, str]]] = []  # the (source, id) of each reclaim's notices
    # The run's terminates in force: their reclaim, and until when at the latest.
    in_force: dict[tuple[int, str], tuple[int, float]] = {}
    deadlines: dict[tuple[int, str], float] = {}  # the last each terminate was sent with
    first_deadlines: dict[tuple[int, str], float] = {}  # the lead it gave when first sent
    # A drain with a deadline, as first sent: (sent, deadline). Its escalation has the same id
    # and the exit margin for a lead; the lead the provider gave is the drain's.
    drains: dict[tuple[int, str], tuple[float, float]] = {}
    began_as_drain: set[int] = set()  # reclaims whose first notice was such a drain
    drain_ids: set[tuple[int, str]] = set()  # every drain, with a deadline or without
    reasons: dict[str, int] = {}
    drain_leads: dict[int, float] = {}  # the drain's lead, for reclaims that began as one
    saved_at: dict[tuple[int, str], list[float]] = {}  # when saved acks for a notice arrived
    acked: set[tuple[int, str]] = set()  # notices some ack named, saved or failed
    # Notices sent with an acking client subscribed, or by an agent that did not say: a job
    # may have held them.
    held: set[tuple[int, str]] = set()
    stalls: list[float] = []
    durables: list[float] = []
    uploads: list[float] = []  # durable - stall, of acks that carry both
    split = False
    restores: list[float] = []
    lost_steps: list[float] = []
    for index, records in enumerate(sources):
        first: float | None = None
        last: float | None = None
        for record in records:
            count += 1
            at = parse_time(str(record["at"])).timestamp()
            kind = record["kind"]
            if kind == "start":
                in_force.clear()  # a new run: the machine of the last one is gone
            if kind == "start" and first is not None and last is not None:
                # A state directory on a disk that outlives the machine (a GCP spot VM
                # stopped on preemption, an Azure one deallocated) holds several runs; the
                # days between them had no capacity and saw no interruptions.
                span += last - first
                first = last = None
            first = at if first is None else min(first, at)
            last = at if last is None else max(last, at)
            if kind == "notice" and record.get("action") == "drain":
                drain_ids.add((index, str(record.get("id"))))
            if (
                kind == "notice"
                and record.get("action") == "drain"
                and record.get("deadline")
                and (index, str(record.get("id"))) not in drains
            ):
                drains[(index, str(record.get("id")))] = (
                    parse_time(str(record.get("sent_at") or record["at"])).timestamp(),
                    parse_time(str(record["deadline"])).timestamp(),
                )
            if kind in ("notice", "escalation") and record.get("action") == "terminate":
                key = (index, str(record.get("id")))
                clients = record.get("clients")
                if not isinstance(clients, (int, float)) or clients > 0:
                    held.add(key)
                if key in terminated:
                    # Sent again with the deadline its provider moved (a maintenance
                    # postponed): a save before the new one was in time. With the first
                    # deadline only, it counted as a notice come too late to save on.
                    if record.get("deadline"):
                        deadlines[key] = parse_time(str(record["deadline"])).timestamp()
                        if key in in_force:
                            # In force until the new deadline: another provider's notice
                            # meanwhile is this reclaim reported again, not a second one.
                            reclaim, until = in_force[key]
                            in_force[key] = (reclaim, max(deadlines[key] + DEFAULT_GRACE, until))
                    continue
                sent = parse_time(str(record.get("sent_at") or record["at"])).timestamp()
                terminated[key] = sent
                if record.get("deadline"):
                    deadlines[key] = parse_time(str(record["deadline"])).timestamp()
                    first_deadlines[key] = deadlines[key]
                current = [reclaim for reclaim, until in in_force.values() if until >= sent]
                if current:
                    reclaim = current[0]
                else:
                    reclaim = len(reclaims)
                    reclaims.append([])
                    reason = str(record.get("reason"))
                    reasons[reason] = reasons.get(reason, 0) + 1
                    if key in drains:
                        # The drain came first: the provider's lead ran from it, and the
                        # job saved on it and trained on until this terminate.
                        began_as_drain.add(reclaim)
                        drain_leads[reclaim] = max(drains[key][1] - drains[key][0], 0.0)
                reclaims[reclaim].append(key)
                # Published past its deadline (the agent was down), from when it came.
                in_force[key] = (reclaim, max(deadlines.get(key, math.inf), sent) + DEFAULT_GRACE)
            elif kind == "notice" and record.get("action") == "clear":
                in_force.pop((index, str(record.get("id"))), None)
            if kind == "ack" and record.get("notice_id") is not None:
                acked.add((index, str(record["notice_id"])))
            if kind == "hold" and record.get("notice_id") is not None:
                # A job (`forewarn wait --client`) held it after its publication.
                held.add((index, str(record["notice_id"])))
            if kind == "ack" and record.get("outcome") == "saved":
                flush = _number(record, "flush_seconds")
                stall = _number(record, "stall_seconds")
                durable = _number(record, "durable_seconds")
                split = split or stall is not None or durable is not None
                if stall is not None and durable is not None:
                    uploads.append(max(durable - stall, 0.0))
                stall = stall if stall is not None else flush
                durable = durable if durable is not None else flush
                if stall is not None:
                    stalls.append(stall)
                if durable is not None:
                    durables.append(durable)
                if record.get("notice_id") is not None:
                    saved_at.setdefault((index, str(record["notice_id"])), []).append(at)
            if kind == "resume":
                if record.get("restore_seconds") is not None:
                    restores.append(float(record["restore_seconds"]))
                if record.get("steps_lost") is not None:
                    lost_steps.append(float(record["steps_lost"]))
        in_force.clear()
        if first is not None and last is not None:
            span += last - first
    # Only a save at or after the terminate protects the work; a drain's earlier ack does not.
    # A reclaim is saved on by a save for any of its notices, timed from its first notice,
    # before the earliest deadline among them.
    response_times: list[float] = []
    leads: list[float] = []
    late = 0
    unattended = 0
    for number, keys in enumerate(reclaims):
        sent = min(terminated[key] for key in keys)
        after = [
            moment for key in keys for moment in saved_at.get(key, []) if moment >= terminated[key]
        ]
        if after:
            response_times.append(min(after) - sent)
        due = min((deadlines[key] for key in keys if key in deadlines), default=None)
        first_due = min(
            (first_deadlines[key] for key in keys if key in first_deadlines), default=None
        )
        if number in drain_leads:
            leads.append(drain_leads[number])
        elif first_due is not None:
            # Published past its deadline (the agent saw it late): it gave no lead, not a
            # negative one. A deadline moved later since gave the job no more lead then.
            leads.append(max(first_due - sent, 0.0))
        if not any(key in held or key in acked for key in keys):
            # Reached no job, and none saved or failed on it: nothing was at risk.
            unattended += 1
        elif not after or (due is not None and min(after) > due):
            late += 1
    return TelemetrySummary(
        records=count,
        span_seconds=span,
        terminate_notices=len(reclaims),
        flush_seconds=robust_mean(stalls) if stalls else None,
        flushes=len(stalls),
        restore_seconds=_median(restores),
        resumes=len(restores),
        steps_lost=_median(lost_steps),
        notice_lead_seconds=_median(leads),
        response_seconds=quantile(response_times, 0.95) if response_times else None,
        drained=len(response_times) == len(reclaims) - unattended
        if len(reclaims) > unattended
        else None,
        reasons=reasons,
        flush_median_seconds=_median(stalls),
        flush_p95_seconds=quantile(durables, 0.95) if durables else None,
        late_notices=late,
        flush_source="stall_seconds" if split else "flush_seconds",
        coverage_source="durable_seconds" if split else "flush_seconds",
        upload_seconds=robust_mean(uploads) if uploads else None,
        drained_first=len(began_as_drain),
        drain_saves=sum(1 for key in drain_ids if key not in terminated and key in saved_at),
        unattended_notices=unattended,
    )


__all__ = ["TelemetrySummary", "summarize_telemetry"]
