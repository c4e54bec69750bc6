"""Approving a Scheduled Event: `POST StartRequests` once per event, logged and counted.

An approval tells Azure the workload is ready, so the event may start before NotBefore. It
releases the event for every VM listed in its Resources. The watcher decides *when*; this
module only makes sure each event is approved at most once and keeps the books.

The events approved are kept in the state directory (`azure-approved.json`): Azure may wait
for other tenants and list an approved event as Scheduled until it starts, and a restarted
agent that forgot its approval sent it again (`immediately`, at its first document).

A POST refused for a passing reason (no answer, 408, 429, 5xx) is tried again with backoff,
waiting out a Retry-After, until the event's NotBefore (as listed at each try: Azure may
reschedule it later): the approval is what releases a job
that has saved before NotBefore, and IMDS limits a VM to about five requests a second. One
refused for any other reason (a 400: the request itself is wrong) is tried MAX_ATTEMPTS times.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

from ..backoff import Backoff
from ..fetch import Answer, fetch
from ..health import PollHealth
from ..httpdate import retry_after_seconds
from ..persist import read_state_object, write_or_report

log = logging.getLogger("forewarn.providers.azure")

# A POST refused as malformed (any 4xx but 408 and 429) is tried this many times in all: the
# same request is unlikely to fare better, and the event starts at NotBefore anyway.
MAX_ATTEMPTS = 3
# Answers worth trying again: IMDS is busy or throttling (about 5 requests/s per VM), not
# telling the request is wrong.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# The waits between tries of a refused POST double from the watcher's interval up to this
# (the interval, when it is longer), jitter included (a Retry-After may ask for longer).
RETRY_CEILING = 10.0
# How long a refused approval is tried for when its event has no NotBefore to bound it: the
# longest notice a Terminate event gives (PT15M).
RETRY_WITHOUT_NOT_BEFORE = 15 * 60.0
# Failures of one event each logged as a WARNING. Past them a failure is a WARNING at the
# 4th, 8th, 16th... try and once REPEAT_WARNING seconds have passed since the last one said,
# DEBUG otherwise (`said_at`): the tries go on for up to 15 minutes, and at DEBUG an operator
# saw three failures and then nothing, as if the fourth had gone through.
LOUD_FAILURES = 3
REPEAT_WARNING = 60.0
APPROVED_FILE = "azure-approved.json"
# Approvals kept in the file: events are few and leave the list within a day; the oldest go
# first should a document ever list more.
KEEP_APPROVED = 256


@dataclass
class ApprovalStats:
    """The approvals of this watcher so far (`watcher.approvals.stats`); each is also told to
    the agent (`on_outcome`, the watcher's `PollHealth.approval`), which exports them as
    `forewarn_approvals_total`."""

    sent: int = 0  # POSTs that IMDS answered with 200
    failed: int = 0  # POSTs that failed (transport error or another status)
    skipped: int = 0  # approvals asked for but not sent: event started, gone, or shared
    by_reason: dict[str, int] = field(default_factory=dict)  # why approvals were sent


class Approver:
    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        api_version: str,
        timeout: float,
        on_outcome: Callable[[str, str | None], bool] | None = None,
        path: Path | None = None,
        health: PollHealth | None = None,
        retry_first: float = 1.0,
        rng: Callable[[], float] = random.random,
        listed: Callable[[str], bool] | None = None,
    ) -> None:
        self.client = client
        # Whether an EventId is still in the last document read (the watcher's); None: not
        # known, every refusal is a failure.
        self.listed = listed
        self.path = path
        self.health = health
        self.on_outcome = on_outcome
        self.url = url
        self.api_version = api_version
        self.timeout = timeout
        self.stats = ApprovalStats()
        self.approved: dict[str, float] = {}  # EventId -> time.time() of the 200
        self.attempts: dict[str, int] = {}
        self.retry: dict[str, str] = {}  # EventId -> why, for approvals that failed
        self.retry_first = retry_first
        self._rng = rng  # the backoff's jitter (tests fix it)
        self._backoffs: dict[str, Backoff] = {}
        self._not_until: dict[str, float] = {}  # EventId -> monotonic time of its next try
        self._give_up_at: dict[str, float] = {}  # EventId -> time.time() past which it is not
        self._said: dict[str, float] = {}  # EventId -> monotonic time of its last WARNING
        self.skipped: dict[str, str] = {}  # EventId -> why it was not approved
        # EventId -> (the NotBefore its tries ended at, why it was asked for): approvals given
        # up at NotBefore, tried again should Azure reschedule the event later (`resume`).
        self.lapsed: dict[str, tuple[float, str]] = {}
        self._in_flight: set[str] = set()
        self.approved.update(load_approved(path) if path is not None else {})
        # Loaded from the file, not yet asked for again by this watcher (logged when asked).
        self.restored: set[str] = set(self.approved)
        self._unsaved = False

    def done(self, event_id: str) -> bool:
        return event_id in self.approved or event_id in self._in_flight

    def due(self, event_id: str) -> bool:
        """Whether a refused approval's wait (backoff, Retry-After) is over."""
        return time.monotonic() >= self._not_until.get(event_id, 0.0)

    def skip(self, event_id: str, why: str) -> None:
        """Note an approval that may not be sent; counted and logged once per event and cause."""
        self.retry.pop(event_id, None)
        if self.skipped.get(event_id) == why:
            return
        self.skipped[event_id] = why
        self.stats.skipped += 1
        if self._tell("skipped", once=f"{event_id}: {why}"):
            # Else a watcher before this one (it crashed) skipped it already, and said so.
            log.info("azure: not approving event %s: %s", event_id, why)

    async def approve(self, event_id: str, why: str, not_before: datetime | None = None) -> bool:
        """POST StartRequests for one event unless it was approved (or is being) already, or a
        refused try's wait is not over. `not_before` is the event's NotBefore as listed now: a
        refused approval is tried again until then, not after (the event starts anyway)."""
        if self.done(event_id) or not self.due(event_id):
            return False
        attempt = self.attempts.get(event_id, 0) + 1
        if attempt > MAX_ATTEMPTS and event_id not in self._give_up_at:
            self.retry.pop(event_id, None)
            return False
        if not_before is not None:
            # The event's NotBefore as listed now, not at the first try: an event Azure
            # rescheduled later is still worth approving until then (unapproved, the VM
            # idles until it, the job long saved).
            self._give_up_at[event_id] = not_before.timestamp()
        else:
            self._give_up_at.setdefault(event_id, time.time() + RETRY_WITHOUT_NOT_BEFORE)
        self.attempts[event_id] = attempt
        self._in_flight.add(event_id)
        started = time.perf_counter()
        response: Answer | None = None
        try:
            response = await fetch(
                self.client,
                "POST",
                self.url,
                params={"api-version": self.api_version},
                json={"StartRequests": [{"EventId": event_id}]},
                timeout=self.timeout,
                deadline=self.timeout,
            )
            problem = None if response.status_code == 200 else f"HTTP {response.status_code}"
            if problem:
                problem += f": {response.text[:200]!r}"
        except asyncio.CancelledError:
            raise
        except httpx.HTTPError as error:
            problem = f"{type(error).__name__}: {error}"
        finally:
            self._in_flight.discard(event_id)
        elapsed = (time.perf_counter() - started) * 1000
        if problem is None:
            self.approved[event_id] = time.time()
            self._save()
            self._retire(event_id)
            self.stats.sent += 1
            self.stats.by_reason[why] = self.stats.by_reason.get(why, 0) + 1
            self._tell("sent")
            failed = f" after {attempt - 1} failed tries, this one" if attempt > 1 else ""
            log.info("azure: approved event %s (%s)%s in %.0f ms", event_id, why, failed, elapsed)
            return True
        transient = response is None or response.status_code in TRANSIENT_STATUSES
        if not transient and self.listed is not None and not self.listed(event_id):
            # Removed while the POST was on its way (started and ended, or cancelled): IMDS
            # refuses an EventId it no longer lists (400). Said as a warning that the approval
            # failed and would be tried again, for an event that will not come back.
            self._retire(event_id)
            self.skip(event_id, f"it was removed while its approval was on its way ({problem})")
            return False
        self.stats.failed += 1
        self._tell("failed")
        if not transient:
            self._give_up_at.pop(event_id, None)  # bounded by MAX_ATTEMPTS instead
        backoff = self._backoffs.setdefault(
            event_id,
            Backoff(
                self.retry_first,
                max(self.retry_first, RETRY_CEILING),
                jitter=0.1,
                rng=self._rng,
            ),
        )
        # Backoff never passes its ceiling by the jitter (it spread a 10 s wait up to 11 s).
        wait = backoff.next()
        if response is not None:
            wait = max(wait, retry_after_seconds(response.headers.get("Retry-After")) or 0.0)
        give_up_at = self._give_up_at.get(event_id)
        if give_up_at is not None:
            again = give_up_at > time.time() + wait
            bound = "its NotBefore" if not_before is not None else "the time allowed"
            limit = f"until {bound}"
        else:
            again = attempt < MAX_ATTEMPTS
            limit = f"attempt {attempt} of {MAX_ATTEMPTS}"
        if again:
            self.retry[event_id] = why
            self._not_until[event_id] = time.monotonic() + wait
            now = time.monotonic()
            said = self._said.get(event_id)
            loud = said_at(attempt, None if said is None else now - said)
            if loud:
                self._said[event_id] = now
            log.log(
                logging.WARNING if loud else logging.DEBUG,
                "azure: approving event %s failed (attempt %d, tried again in %.1f s, %s): %s%s",
                event_id,
                attempt,
                wait,
                limit,
                problem,
                "; later failures are said at the 4th, 8th, 16th... try and at least once a minute"
                if attempt == LOUD_FAILURES
                else "",
            )
            return False
        self._retire(event_id)
        if give_up_at is not None and not_before is not None:
            self.lapsed[event_id] = (not_before.timestamp(), why)
        log.warning(
            "azure: approving event %s failed (attempt %d, the last: %s): %s; it starts at "
            "its NotBefore",
            event_id,
            attempt,
            limit,
            problem,
        )
        return False

    def resume(self, event_id: str, not_before: datetime | None) -> str | None:
        """An approval given up at its event's NotBefore, when the event is now scheduled
        later: why it was asked for (it is to be tried again, afresh), else None."""
        lapsed = self.lapsed.get(event_id)
        if lapsed is None or not_before is None or not_before.timestamp() <= lapsed[0]:
            return None
        del self.lapsed[event_id]
        self.attempts.pop(event_id, None)
        log.info("azure: event %s was rescheduled: approving it again", event_id)
        return lapsed[1]

    def _retire(self, event_id: str) -> None:
        """No more tries for this event (approved, or given up)."""
        self._said.pop(event_id, None)
        self.retry.pop(event_id, None)
        self._backoffs.pop(event_id, None)
        self._not_until.pop(event_id, None)
        self._give_up_at.pop(event_id, None)

    def keep_only(self, listed: Iterable[str]) -> None:
        """Forget the approvals of events no longer listed (EventIds are not reused); a write
        that failed before is tried again here."""
        listed = set(listed)
        gone = [event_id for event_id in self.approved if event_id not in listed]
        for event_id in gone:
            del self.approved[event_id]
            self.restored.discard(event_id)
        for event_id in [event_id for event_id in self.lapsed if event_id not in listed]:
            del self.lapsed[event_id]
        if gone or self._unsaved:
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        newest = sorted(self.approved.items(), key=lambda item: item[1])[-KEEP_APPROVED:]
        text = json.dumps({"approved": dict(newest)}, indent=1) + "\n"
        self._unsaved = not write_or_report(self.path, text, self.health)

    def _tell(self, outcome: str, once: str | None = None) -> bool:
        """Count the outcome (`PollHealth.approval`); false when `once` was counted before."""
        if self.on_outcome is None:
            return True
        try:
            return self.on_outcome(outcome, once)
        except Exception:  # the metrics' problem: the approval itself stands
            log.exception("azure: counting an approval (%s) failed", outcome)
            return True


def said_at(attempt: int, since_said: float | None) -> bool:
    """Whether the failure of try `attempt` of an approval is a WARNING: each of the first
    LOUD_FAILURES, then the 4th, 8th, 16th... and any REPEAT_WARNING seconds or more after
    the last one said (`since_said`; None: none said yet). The others are DEBUG: a refused
    approval is tried again about every 10 s until NotBefore, and each a WARNING flooded the
    log."""
    if attempt <= LOUD_FAILURES or attempt & (attempt - 1) == 0:
        return True
    return since_said is None or since_said >= REPEAT_WARNING


def load_approved(path: Path) -> dict[str, float]:
    """The approvals saved in `path`, by EventId; none from a missing or unreadable file (an
    approval sent again is the harm, and a smaller one than refusing to start)."""
    payload = read_state_object(path, "azure")
    if payload is None:
        return {}
    approved = payload.get("approved")
    if not isinstance(approved, dict):
        log.warning("azure: ignoring %s: no approved object", path)
        return {}
    return {
        event_id: float(at)
        for event_id, at in approved.items()
        # A time, not a bool; an int past a float's range first (float() would raise).
        if isinstance(at, (int, float))
        and not isinstance(at, bool)
        and abs(at) < 1e15
        and math.isfinite(at)
    }


__all__ = [
    "APPROVED_FILE",
    "MAX_ATTEMPTS",
    "REPEAT_WARNING",
    "RETRY_CEILING",
    "ApprovalStats",
    "Approver",
    "load_approved",
    "said_at",
]
