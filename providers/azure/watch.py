"""The Azure Scheduled Events watcher.

It polls `GET /metadata/scheduledevents` (header `Metadata: true`, no proxies) once a second by
default, reacts only when `DocumentIncarnation` changes, keeps the events that name this VM,
and reports them; an event that disappears is cleared. It approves events (`StartRequests`)
after every client flushed, immediately, or never, as configured.

An event that cannot be read (a field of the wrong type, no EventId) is skipped and logged,
named by its EventId when it has one; every other event of the document is read. One of this
VM's events already reported that turns unreadable is kept as it was, not cleared.

An event is cleared when ABSENT_DOCUMENTS documents in a row lack it: one document without it
(IMDS restarted by a host update, its DocumentIncarnation back at 1, or a stray answer)
cleared every event and the next raised them again, so a Preempt's terminate was withdrawn for
a poll and a drain was saved twice. The second document is asked for CONFIRM_DELAY after the
first that lacks an event, not an interval later. A document whose DocumentIncarnation went
back (another host's IMDS, or one restarted) is read only when the next answer is such a one
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import httpx
from forewarn.protocol.oneline import quoted
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.report import Report

from ..backoff import Backoff
from ..base import Emit, ParseError, PollHealth, WatcherContext, stall_bound
from ..boot import boot_id, machine_started
from ..errortext import error_text
from ..fetch import Answer, fetch
from ..httpdate import retry_after_seconds
from ..skew import CLOCK_AHEAD, resume_skew, take_skew
from .approve import APPROVED_FILE, Approver
from .boots import BOOT_FILE, BootRecord
from .events import (
    ID_PREFIX,
    EventsDocument,
    ScheduledEvent,
    cleared,
    concerns,
    event_id_of,
    parse_compute,
    parse_document,
    reports_for,
)
from .namecheck import NameCheck
from .settings import Settings

log = logging.getLogger("forewarn.providers.azure")

EVENTS_PATH = "/metadata/scheduledevents"
INSTANCE_PATH = "/metadata/instance"
COMPUTE_PATH = "/metadata/instance/compute"
INSTANCE_API_VERSION = "2021-02-01"
HEADERS = {"Metadata": "true"}
DETECT_TIMEOUT = 0.9
CONNECT_TIMEOUT = 2.0
# After failures the cadence backs off, but only to a quarter more than the interval: a Spot
# eviction gives 30 s, the endpoint is on the VM, and a healed IMDS must be read again within
# two intervals. A 429's Retry-After is honoured up to RETRY_AFTER_CAP.
BACKOFF_STRETCH = 1.25
BACKOFF_JITTER = 0.1  # each wait spread by up to this fraction either way
RETRY_AFTER_CAP = 5.0
# Unreadable events remembered as logged, so a document is not re-logged at every change.
MALFORMED_LOGGED = 256
# What `status` names the service as, in the `clock` condition.
SERVICE = "Azure's instance metadata"
# Documents in a row without one of this VM's published events after which it is cleared:
# one such document (a host update, a stray answer) is not its end.
ABSENT_DOCUMENTS = 2
# How soon the next document is asked for after one that lacks a published event, rather than
# an interval later: a Reboot cancelled in the last document before its escalation (NotBefore
# less the exit margin) went out as terminate in that interval, and the job exited for a
# reboot that never came. One request per 0.2 s keeps within IMDS's 5 requests/s.
CONFIRM_DELAY = 0.2


class AzureWatcher:
    name: ClassVar[str] = "azure"

    def __init__(
        self,
        settings: Settings,
        health: PollHealth | None = None,
        state_dir: Path | None = None,
        awaiting_flush: Callable[[str], bool] | None = None,
        sent_as: Callable[[str], str | None] | None = None,
    ) -> None:
        self.settings = settings
        # The agent's: whether a client that subscribed since a notice was flushed has not
        # acked it yet (see request_approval).
        self.awaiting_flush = awaiting_flush or (lambda notice_id: False)
        # The agent's: the action each notice went out as last (see request_approval).
        self.sent_as = sent_as or (lambda notice_id: None)
        self._awaited: set[str] = set()  # events whose approval waits for a newcomer, said
        self.health = health or PollHealth(self.name)
        self.base_url = settings.base_url
        self.client = httpx.AsyncClient(
            trust_env=False,  # IMDS must never be reached through a proxy
            headers=HEADERS,
            timeout=httpx.Timeout(settings.request_timeout, connect=CONNECT_TIMEOUT),
            follow_redirects=False,
        )
        self.approvals = Approver(
            self.client,
            self.base_url + EVENTS_PATH,
            settings.api_version,
            settings.request_timeout,
            on_outcome=self.health.approval,
            path=state_dir / APPROVED_FILE if state_dir is not None else None,
            health=self.health,
            retry_first=settings.interval,
            listed=lambda event_id: event_id in self.events,
        )
        # The boot-ending events published in this boot, and those that ended the one before
        # (Azure lists a Started event for minutes after the reboot it caused).
        self.boots = BootRecord(
            state_dir / BOOT_FILE if state_dir is not None else None,
            boot_id(),
            self.health,
            booted=machine_started(),
        )
        self.names: frozenset[str] | None = (
            frozenset({settings.vm_name.lower()}) if settings.vm_name else None
        )
        # A configured name is checked against the events and instance metadata, so a wrong
        # one (the host name of a scale-set instance) is said, not silently matches nothing.
        self.name_check = NameCheck(settings.vm_name.lower()) if settings.vm_name else None
        self.incarnation: int | None = None
        # The events of the last document processed, as received: a document that changes
        # without a DocumentIncarnation bump (Microsoft's own mock drops events that way) is
        # processed too, so a vanished event is cleared instead of staying forever.
        self._raw_events: list[dict[str, object]] | None = None
        self.documents = 0  # documents read (after the first, the slow first call is over)
        self.reports: dict[str, Report] = {}  # published, by notice id
        # Reports of this VM's events restored by the agent after a restart (`restored`): what
        # the first document is compared with, as if this watcher had reported them. Not in
        # `reports`, so one no longer listed is withdrawn by the agent (`detail.withdrawn`).
        self._restored: dict[str, Report] = {}
        self.events: dict[str, ScheduledEvent] = {}  # this VM's published events, by EventId
        # Published events missing from the last documents, by notice id: how many in a row.
        self._missing: dict[str, int] = {}
        self._emit: Emit | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[bool]] = set()
        self._retry_after = 0.0
        # The last document was let pass unread, its incarnation below the one before
        # (`_went_back`).
        self._held_back = False
        self._backoff = Backoff(
            settings.interval, settings.interval * BACKOFF_STRETCH, jitter=BACKOFF_JITTER
        )
        self._odd: set[str] = set()  # events whose odd NotBefore was logged
        # How far this VM's clock is ahead of Azure's, by the answers' Date (`skew.py`): zero
        # within TRUSTED_SKEW. NotBefore goes out moved by it (`_on_this_clock`).
        self._ahead = timedelta(0)
        self._malformed: set[tuple[str, str]] = set()  # unreadable events logged, and why
        self._retired_said: set[str] = set()  # retired Started events held back, logged
        self._detect_started = 0.0

    @property
    def answered(self) -> bool:
        """ABSENT_DOCUMENTS documents read: the agent then withdraws the notices restored from
        before a restart that this watcher did not report (not at the first: one stray
        document withdrew them and the next raised them again, as it would this watcher's
        own)."""
        return self.documents >= ABSENT_DOCUMENTS

    # Detection.

    def progress_bound(self) -> float | None:
        """Its longest wait between polls (the interval stretched by backoff, or a
        Retry-After) and its longest request (the first, which may take minutes)."""
        s = self.settings
        wait = max(s.interval * BACKOFF_STRETCH, RETRY_AFTER_CAP)
        return stall_bound(wait, max(s.first_call_timeout, s.request_timeout))

    async def detect(self) -> bool:
        """True when Azure IMDS answers instance metadata within a second."""
        self._detect_started = asyncio.get_running_loop().time()
        try:
            response = await fetch(
                self.client,
                "GET",
                self.base_url + INSTANCE_PATH,
                params={"api-version": INSTANCE_API_VERSION},
                timeout=DETECT_TIMEOUT,
                deadline=DETECT_TIMEOUT + 0.05,
            )
            if response.status_code != 200:
                return await self._not_detected(f"{INSTANCE_PATH} answered {response.status_code}")
            payload = json.loads(response.content)
        except (httpx.HTTPError, asyncio.TimeoutError) as error:
            return await self._not_detected(f"no answer from {INSTANCE_PATH} ({error})")
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep
            return await self._not_detected(f"{INSTANCE_PATH} did not answer JSON")
        if not isinstance(payload, dict) or not isinstance(payload.get("compute"), dict):
            return await self._not_detected(f"{INSTANCE_PATH} answered without a compute object")
        with contextlib.suppress(ParseError):
            names = parse_compute(response.content)
            if self.names is None:
                self.names = names
            if self.name_check is not None:  # read already: no lookup needed later
                self.name_check.looked_up = names
        return True

    async def _not_detected(self, why: str) -> bool:
        """Record why this is not taken for Azure. A Scheduled Events endpoint that answers
        (Microsoft's mock server, a proxy passing only that path) is worth saying so, when
        the one-second budget of detection leaves time to ask."""
        left = DETECT_TIMEOUT - (asyncio.get_running_loop().time() - self._detect_started)
        try:
            if left < 0.1:
                raise httpx.TimeoutException("no time left")
            events = await fetch(
                self.client,
                "GET",
                self.base_url + EVENTS_PATH,
                params={"api-version": self.settings.api_version},
                timeout=left,
                deadline=left,
            )
            if events.status_code == 200:
                why += (
                    f"; {EVENTS_PATH} does answer: this VM's name cannot be looked up, so run "
                    "--provider azure with azure.vm_name set"
                )
        except Exception:  # best effort: the reason stands without it
            pass
        self.health.not_detected = why
        return False

    # Watching.

    async def watch(self, emit: Emit) -> None:
        self._emit = emit
        self._loop = asyncio.get_running_loop()
        while True:
            started = self._loop.time()
            ok = await self.poll()
            delay = self._next_delay(ok, self._loop.time() - started)
            if ok and self._missing:  # an event gone, or a stray answer: ask again now
                delay = min(delay, CONFIRM_DELAY)
            await asyncio.sleep(delay)

    def _next_delay(self, ok: bool, elapsed: float) -> float:
        interval = self.settings.interval
        if ok:
            self._backoff.reset()
            # Keep the cadence, but never start two requests closer than `interval`.
            return max(0.0, interval - elapsed)
        # Backoff never passes its ceiling by the jitter (it spread 1.25 intervals to 1.375).
        delay = max(self._backoff.next(), self._retry_after)
        self._retry_after = 0.0
        return max(interval, delay)

    async def poll(self) -> bool:
        """One look at Scheduled Events; True when it answered well. Never raises on bad
        answers or transport errors: they are counted in `health`."""
        if self.names is None and not await self._resolve_names():
            return False
        timeout = (
            self.settings.request_timeout if self.documents else self.settings.first_call_timeout
        )
        try:
            # The whole answer within `timeout` and 1 MiB: a dribbling or endless answer
            # must not hold the watcher (or its memory) through a 30 s eviction notice.
            response = await fetch(
                self.client,
                "GET",
                self.base_url + EVENTS_PATH,
                params={"api-version": self.settings.api_version},
                timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT),
                deadline=timeout,
            )
        except httpx.TimeoutException as error:
            what = "the first call" if not self.documents else "a poll"
            self.health.error("timeout", f"{what} timed out after {timeout:g}s ({error!r})")
            return False
        except httpx.HTTPError as error:
            kind = "unreachable" if isinstance(error, httpx.ConnectError) else "transport"
            self.health.error(kind, error_text(error))
            return False
        if response.status_code == 429:
            self._retry_after = _retry_after(response)
            self.health.error("rate-limited", "IMDS answered 429 (about 5 requests/s per VM)")
            return False
        if response.status_code != 200:
            self.health.error(
                f"http-{response.status_code}",
                f"Scheduled Events answered {response.status_code}: {response.text[:200]!r}",
            )
            return False
        try:
            document = parse_document(response.content)
        except ParseError as error:
            self.health.error("bad-answer", str(error))
            return False
        self.documents += 1
        self.health.success()
        if self._went_back(document.incarnation):
            self._retry_failed_approvals()
            return True
        raw_events = [event.raw for event in document.events]
        raw_events += [bad.raw for bad in document.malformed]
        changed = document.incarnation != self.incarnation or raw_events != self._raw_events
        changed = self._clock_moved(response.headers.get("Date")) or changed
        if changed or self._missing:  # an event missing once: gone, or back, at this one
            self._raw_events = raw_events
            self._process(_on_this_clock(document, self._ahead), resend=changed)
        if self.name_check is not None:
            await self._check_configured_name(self.name_check, document)
        self._retry_failed_approvals()
        return True

    def _went_back(self, incarnation: int) -> bool:
        """True for a document to let pass unread: its DocumentIncarnation is below the last
        one read and the answer before it was not such a one too. Another host's IMDS (or one
        restarted by a host update) listing a Preempt for this VM went out as a terminate at
        once, cleared two documents later: a job saved and exited for an eviction that never
        came. A second such document in a row (a restarted IMDS, its count begun again) is
        read, one poll late; an answer back at the count before drops the stray one."""
        went_back = self.incarnation is not None and incarnation < self.incarnation
        self._held_back = went_back and not self._held_back
        if self._held_back:
            log.info(
                "azure: a document with DocumentIncarnation %d after %d (another host's, or "
                "a restarted IMDS): read only if the next answer agrees",
                incarnation,
                self.incarnation,
            )
        return self._held_back

    def _clock_moved(self, date: str | None) -> bool:
        """Take the skew of this VM's clock from an answer's `Date`; True when it moved by
        CLOCK_MOVED or more (NTP's step), so that the events go out again on the clock as it
        is. Without a `Date` that reads, the skew known stands."""
        ahead = take_skew(self._ahead, date, utcnow(), self.health, "azure", SERVICE)
        if ahead is None:
            return False
        self._ahead = ahead
        return True

    async def _check_configured_name(self, check: NameCheck, document: EventsDocument) -> None:
        """Say once, and hold the condition `vm-name`, when the configured name is not what
        the events call this VM while instance metadata's is. Best effort: a lookup that
        fails says nothing (the configured name may be set because it fails)."""
        check.saw(document.events)
        if check.matched:
            self.health.condition("vm-name", None)
            return
        if check.lookup_due():
            check.asked()
            try:
                check.looked_up = await self._instance_names()
            except (httpx.HTTPError, ParseError) as error:
                log.debug("azure: cannot check azure.vm_name against %s: %s", COMPUTE_PATH, error)
        message = check.mismatch()
        if message is not None and "vm-name" not in self.health.conditions:
            log.warning("azure: %s", message)
            self.health.condition("vm-name", message)

    async def _instance_names(self) -> frozenset[str]:
        """This VM's names as instance metadata gives them; ParseError for an answer that is
        not 200 or not compute metadata, httpx.HTTPError when none came."""
        response = await fetch(
            self.client,
            "GET",
            self.base_url + COMPUTE_PATH,
            params={"api-version": INSTANCE_API_VERSION},
            deadline=self.settings.request_timeout,
        )
        if response.status_code != 200:
            raise ParseError(f"HTTP {response.status_code}: {response.text[:200]!r}")
        return parse_compute(response.content)

    async def _resolve_names(self) -> bool:
        try:
            self.names = await self._instance_names()
        except (httpx.HTTPError, ParseError) as error:
            # error_text: httpx's own message is empty for a reset and names no address.
            why = error_text(error) if isinstance(error, httpx.HTTPError) else str(error)
            message = (
                f"cannot read this VM's name from {COMPUTE_PATH} ({why}); no events are "
                "published until it can; set azure.vm_name to skip this lookup"
            )
            self.health.condition("vm-name", message)
            self.health.error("vm-name", message)
            return False
        self.health.condition("vm-name", None)
        log.info("azure: watching events for %s", ", ".join(sorted(self.names)))
        return True

    def _process(self, document: EventsDocument, resend: bool = True) -> None:
        """Report what `document` says; `resend` False when it is the last one again (read
        for an event missing from it): only its clears go out."""
        assert self.names is not None
        now = utcnow()
        previous = {**self._restored, **self.reports}
        ended = self.boots.held_back(document.events)
        retired = self.boots.retired_listed(document.events, ABSENT_DOCUMENTS)
        for event_id in sorted(retired - self._retired_said):
            # Retired by the agent (before a restart) while listed Started: as a watcher that
            # never stopped, which raises it no more, not raised again.
            log.info(
                "azure: event %s was retired while listed Started and is still listed; not "
                "raised again while it is",
                event_id,
            )
        self._retired_said = retired | (self._retired_said & self.boots.retired)
        if ended or retired:
            # Started before this boot began: its reboot (or move) is what ended the last one.
            # Published, it told the job resumed since to stop, for as long as it is listed.
            # Retired while Started: under way, listed until it is over (see `forget`).
            held = ended | retired
            rest = tuple(event for event in document.events if event.event_id not in held)
            shown = EventsDocument(document.incarnation, rest, document.malformed)
        else:
            shown = document
        current = reports_for(
            shown,
            self.names,
            freeze=self.settings.freeze,
            previous=previous,
            now=now,
            ahead=self._ahead,
        )
        if self.answered:  # until then they stand for what was reported before the restart
            self._restored = {}
        self._note_malformed(document)
        self.approvals.keep_only(
            [event.event_id for event in document.events]
            + [bad.event_id for bad in document.malformed if bad.event_id]
            + [event_id for event_id in map(event_id_of, self.reports) if event_id is not None]
        )
        for bad in document.malformed:
            # Unreadable now, but listed: cleared, it would tell clients the event is over.
            kept = previous.get(ID_PREFIX + bad.event_id) if bad.event_id else None
            if kept is not None and kept.id not in current:
                current[kept.id] = kept
        carried = self._carry_missing(current, ended | retired)
        self.incarnation = document.incarnation
        self.events = {
            **{
                event_id: event
                for event_id, event in self.events.items()
                if event.notice_id in carried
            },
            **{event.event_id: event for event in shown.events if event.notice_id in current},
        }
        self.boots.published(self.events.values())
        for event in self.events.values():
            if event.not_before_error and event.event_id not in self._odd:
                self._odd.add(event.event_id)
                log.warning("azure: event %s: %s", event.event_id, event.not_before_error)
        # The events in force before the clears: an event that comes back under a new EventId
        # (Microsoft's mock renames an event at each status change) must never leave clients
        # a moment with its terminate withdrawn and no successor yet.
        outgoing = [
            *(r for notice_id, r in current.items() if resend and notice_id not in carried),
            *cleared(self.reports, current, now),
        ]
        self.reports = current
        for report in outgoing:
            self._send(report)
        if self.settings.approve == "immediately":
            for event in self.events.values():
                self.request_approval(event.event_id, "immediately")

    def _carry_missing(self, current: dict[str, Report], ended: set[str]) -> set[str]:
        """Keep in `current` the events this watcher published that this document lacks, short
        of ABSENT_DOCUMENTS in a row; the notice ids kept (not sent again: unchanged). One
        held back as having ended the boot before is not kept: it is not this boot's."""
        carried: set[str] = set()
        for notice_id, report in self.reports.items():
            if notice_id in current:
                self._missing.pop(notice_id, None)
                continue
            if event_id_of(notice_id) in ended:
                self._missing.pop(notice_id, None)
                continue
            missing = self._missing.get(notice_id, 0) + 1
            if missing >= ABSENT_DOCUMENTS:
                self._missing.pop(notice_id, None)
                continue
            self._missing[notice_id] = missing
            current[notice_id] = report
            carried.add(notice_id)
        return carried

    def _note_malformed(self, document: EventsDocument) -> None:
        problems = [f"{bad.name}: {bad.problem}" for bad in document.malformed]
        self.health.condition("bad-event", "; ".join(problems) + " (skipped)" if problems else None)
        for bad in document.malformed:
            key = (bad.name, bad.problem)
            if key not in self._malformed:
                if len(self._malformed) >= MALFORMED_LOGGED:
                    self._malformed.clear()  # bounded; a problem logged again is no harm
                self._malformed.add(key)
                log.warning(
                    "azure: %s cannot be read, skipped (the document's other events are read): %s",
                    bad.name,
                    bad.problem,
                )

    def _send(self, report: Report) -> None:
        if self._emit is None:
            return
        try:
            self._emit(report)
        except Exception:  # the agent's problem, not a reason to stop watching
            log.exception("azure: emit(%s) failed", report.id)

    def restored(self, reports: list[Report]) -> None:
        """The agent's notices of this provider restored after a restart. Without them, an
        unchanged event went out again as changed: a Started event's deadline (NotBefore is
        empty then) became the first poll's moment, and an event whose report kept an older
        DocumentIncarnation (neighbours' events bump it) took up the document's. Those retired
        at the agent's start-up are among them: an event still listed is raised again with the
        deadline it had, as after `forget`."""
        self._restored = {report.id: report for report in reports if report.provider == self.name}
        if not self.documents:
            self._ahead = resume_skew(self._restored.values(), self.health, SERVICE)

    # Approval.

    def forget(self, notice_id: str) -> None:
        """The agent retired `notice_id` past its deadline plus a grace. One still Scheduled
        (Azure waiting on other tenants past NotBefore) is raised again at the next document,
        read afresh even if its incarnation did not change, with the deadline it had. One
        Started is under way, and is not raised again while it stays listed Started: the boot
        record keeps that, so a restarted agent does not raise it anew either (`boots.py`)."""
        restored = self._restored.get(notice_id)
        if notice_id not in self.reports and restored is not None:
            # Retired at start-up (past its end while the agent was down), before this watcher
            # read a document: Started then, it is retired as it would have been had it run.
            event_id = event_id_of(notice_id)
            if event_id is not None and restored.detail.get("EventStatus") == "Started":
                self._restored.pop(notice_id, None)
                self.boots.retire(event_id)
                self._retired_said.add(event_id)
                log.info(
                    "azure: %s retired while listed Started before the restart; not raised "
                    "again while it is (Azure removes it when it is over)",
                    notice_id,
                )
            return
        if notice_id not in self.reports:
            return
        event = self.events.get(event_id_of(notice_id) or "")
        if event is not None and event.status == "Started":
            # Under way: Azure lists it until it is over (about ten minutes) and then removes
            # it. Raised again, it was a clear and the same terminate, its deadline past, at
            # every grace of that listing, each one stopping the job resumed since.
            self.boots.retire(event.event_id)
            self._retired_said.add(event.event_id)
            self.reports.pop(notice_id, None)
            self._missing.pop(notice_id, None)
            self.events.pop(event.event_id, None)
            log.info(
                "azure: %s retired while listed Started; not raised again while it is (Azure "
                "removes it when it is over)",
                notice_id,
            )
            return
        self.incarnation = None
        log.info("azure: %s retired; raised again while it is still listed", notice_id)

    def approval_counts(self) -> dict[str, int]:
        """Approvals sent (200), failed and skipped so far by this watcher (the agent's
        `forewarn_approvals_total` counts them across watcher restarts)."""
        stats = self.approvals.stats
        return {"sent": stats.sent, "failed": stats.failed, "skipped": stats.skipped}

    def flushed(self, notice_id: str) -> None:
        """Every client that received `notice_id` acked its flush (called by the agent)."""
        event_id = event_id_of(notice_id)
        if event_id is None or self.settings.approve != "after-ack":
            return
        self.request_approval(event_id, "after-ack")

    def request_approval(self, event_id: str, why: str) -> None:
        """Approve one of this VM's events now, on the watcher's loop, unless it may not be."""
        if self.approvals.done(event_id):
            if event_id in self.approvals.restored:
                self.approvals.restored.discard(event_id)
                log.info("azure: event %s was approved before this watcher started", event_id)
            return
        event = self.events.get(event_id)
        if event is None and not self.documents:
            # A restarted agent's clients can ack a restored notice before the first answer:
            # asked again after each good poll, once the events are known.
            self.approvals.retry[event_id] = why
            return
        if event is None:
            self.approvals.skip(event_id, "it is no longer listed")
            return
        if not event.scheduled:
            self.approvals.skip(event_id, f"its status is {event.status}")
            return
        report = self.reports.get(event.notice_id)
        # A Reboot or Redeploy the agent re-sent as terminate before NotBefore is reported as a
        # drain still: flushed as a terminate, its clients saved to exit, as for a Preempt.
        sent = self.sent_as(event.notice_id) or (report.action if report is not None else None)
        if why == "after-ack" and (report is None or sent != "terminate"):
            # A drain's flush is not the last: its clients keep training until the board
            # re-sends it as terminate before NotBefore. Approved now, Azure would start the
            # reboot under them; unapproved, it starts at NotBefore, after they have exited.
            # Judged here, on the event as listed: a flush before the first answer (a
            # restarted agent's clients) is asked again after it, when the report is known.
            self.approvals.skip(event_id, "it is a drain: its clients flushed and kept working")
            return
        if event.event_type not in self.settings.approve_types:
            # An approved Reboot starts within seconds, under clients that flushed a drain
            # and kept training; unapproved, it waits for NotBefore and the board's terminate.
            self.approvals.skip(
                event_id,
                f"its type {event.event_type} is not in azure.approve_types "
                f"({', '.join(self.settings.approve_types)})",
            )
            return
        assert self.names is not None
        if not concerns(event, self.names):
            # Still listed, but Azure moved it to other VMs of the set: kept for a document as
            # a missing event is, it was approved on an ack (with azure.approve_shared), which
            # released the event for VMs this one is not among.
            self.approvals.skip(
                event_id,
                f"it no longer names this VM ({', '.join(sorted(self.names))}): its "
                f"Resources are {quoted(list(event.resources))}",
            )
            return
        others = [r for r in event.resources if r.lower() not in self.names]
        if others and not self.settings.approve_shared:
            self.approvals.skip(
                event_id,
                f"it also names {', '.join(others)} (set azure.approve_shared to approve "
                "events shared with other VMs)",
            )
            return
        if why == "after-ack" and self.awaiting_flush(event.notice_id):
            # A job that started since the flush (the approval refused and tried again until
            # NotBefore) holds the notice by replay and has not saved: approved now, Azure
            # would take the VM under it. Asked again after each poll, and sent once it acks
            # (or leaves); unapproved, the event starts at NotBefore.
            self.approvals.retry[event_id] = why
            if event_id not in self._awaited:
                self._awaited.add(event_id)
                log.info(
                    "azure: approval of event %s waits for a client that subscribed after "
                    "the flush to ack it",
                    event_id,
                )
            return
        if not self.approvals.due(event_id):
            return  # refused before: tried again after its backoff or Retry-After
        self._spawn(event_id, why, event.not_before)

    def _spawn(self, event_id: str, why: str, not_before: datetime | None) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._start_task(event_id, why, not_before)
        else:  # called from another thread
            loop.call_soon_threadsafe(self._start_task, event_id, why, not_before)

    def _start_task(self, event_id: str, why: str, not_before: datetime | None) -> None:
        task = asyncio.get_running_loop().create_task(
            self.approvals.approve(event_id, why, not_before)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _retry_failed_approvals(self) -> None:
        for event_id, why in list(self.approvals.retry.items()):
            self.request_approval(event_id, why)
        for event_id in list(self.approvals.lapsed):
            # Given up at NotBefore, and Azure rescheduled the event later: unapproved, the
            # VM idles until the new NotBefore under a job that saved long before.
            event = self.events.get(event_id)
            resumed = self.approvals.resume(event_id, event.not_before if event else None)
            if resumed is not None:
                self.request_approval(event_id, resumed)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.client.aclose()


def _retry_after(response: Answer) -> float:
    """The wait a 429 asks for (seconds or an HTTP date), at most RETRY_AFTER_CAP."""
    return min(RETRY_AFTER_CAP, retry_after_seconds(response.headers.get("Retry-After")) or 0.0)


def _on_this_clock(document: EventsDocument, ahead: timedelta) -> EventsDocument:
    """`document` with each NotBefore as this VM's clock reads it, `ahead` of Azure's: the
    board and the job time it by this clock. The skew goes in each event's detail."""
    if not ahead:
        return document
    events = []
    for event in document.events:
        try:
            not_before = event.not_before + ahead if event.not_before is not None else None
        except OverflowError:  # a clock off by centuries: left as written
            not_before = event.not_before
        raw = {**event.raw, CLOCK_AHEAD: ahead.total_seconds()}
        events.append(dataclasses.replace(event, not_before=not_before, raw=raw))
    return dataclasses.replace(document, events=tuple(events))


def build(settings: Settings, context: WatcherContext) -> AzureWatcher:
    return AzureWatcher(
        settings,
        context.health,
        Path(context.state_dir),
        awaiting_flush=context.awaiting_flush,
        sent_as=context.sent_as,
    )


__all__ = ["EVENTS_PATH", "INSTANCE_API_VERSION", "AzureWatcher", "build"]
