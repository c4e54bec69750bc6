"""The AWS watcher: polls the IMDS notice paths, each at its own cadence, over one reused
connection, and reports new, changed and withdrawn notices.

- `spot/instance-action` `{"action", "time"}`: terminate, deadline `time` (hibernate: now);
- `events/recommendations/rebalance` `{"noticeTime"}`: drain, no deadline;
- `events/maintenance/scheduled` `[{EventId, Code, State, NotBefore, ...}]`: drain with
  NotBefore as deadline; canceled or completed: clear;
- `autoscaling/target-lifecycle-state` `Terminated` (or back to the warm pool, stopped or
  hibernated): terminate.

AWS never withdraws a spot interruption or a rebalance recommendation. When one disappears
anyway (a stop and start, a simulator), the rebalance drain is cleared, but the interruption
is kept: a terminate is final, and a vanished interruption is likelier a glitch than a reprieve
(unless a single answer showed it: another host's, see `tracker.py`).
A notice is withdrawn on absence only when two answers in a row lack it, and a path's one
notice changed (another time or action) only when two answers in a row show the change
(`tracker.py`).
A notice the agent retired past its deadline plus a grace is forgotten (`forget`): a path
that still shows it raises it again on its next poll. Not a spot interruption whose time had
already passed when it was first seen (the agent started late, the clock is ahead): that one
is raised once, and raised again only if it changes (then as a new notice), also after an
agent restart; and one first seen in time is raised again after a restart past its time as
without one (`aws-spot.json` in the state directory remembers which is which). A scheduled
reboot or stop published in the boot before, and still listed after it, is not raised again
(`boots.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import httpx
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.report import Report

from ..backoff import Backoff
from ..base import Emit, ParseError, PollHealth, WatcherContext, stall_bound
from ..boot import boot_id, machine_started
from ..skew import report_on_clock, resume_skew, take_skew
from .boots import BOOT_FILE, RebootRecord
from .client import Answer, ImdsClient, ImdsError
from .imds import (
    ASG_PATH,
    IDENTITY_PATH,
    NOTICE_TIME,
    PROVIDER,
    REBALANCE_PATH,
    SCHEDULED_PATH,
    SPOT_PATH,
    PartialParse,
    parse_identity,
    parse_instance_action,
    parse_lifecycle_state,
    parse_rebalance,
    parse_scheduled,
)
from .retired import SPOT_FILE, load_spot_memory, save_spot_memory
from .settings import DEFAULT_URL, Settings
from .tracker import ABSENT_ANSWERS, PathTracker

log = logging.getLogger("forewarn.providers.aws")

DETECT_SECONDS = 1.0
# The health condition that holds a token failure's cause and fix (hop limit 1, IMDSv1 only)
# until IMDS answers.
TOKEN_CONDITION = "imds-token"
# After a 429 (IMDS throttles each instance's queries; AWS: "retry with exponential
# backoff"), no path is asked again for THROTTLE_FIRST seconds, doubling at each 429 up to
# THROTTLE_CEILING: AWS's own spot cadence, so a 2-minute interruption notice still comes
# in time.
THROTTLE_FIRST = 1.0
THROTTLE_CEILING = 5.0
# Token failures after which detection asks for the identity document without a token.
_PROBED_TOKENLESS = ("token-timeout", "token-http-403", "token-http-404", "token-http-405")


@dataclass
class WatchedPath:
    name: str
    path: str
    interval: float
    parse: Callable[[bytes], list[Report]]
    tracker: PathTracker
    # Whether a 404 means "nothing here" (all notice paths) rather than an error.
    absent_on_404: bool = True
    next_due: float = 0.0
    failing: bool = False
    answers: int = 0  # answers read since the watcher started


def watched_paths(
    settings: Settings,
    clock: Callable[[], float],
    aws_now: Callable[[], datetime] = lambda: utcnow(),
) -> list[WatchedPath]:
    """The enabled paths with their parsers and trackers, fastest first. `aws_now`: the time
    by AWS's clock (a hibernation's deadline), as IMDS's own times are."""
    jitter = settings.time_jitter

    def spot(body: bytes) -> list[Report]:
        return parse_instance_action(body, now=aws_now())

    candidates = [
        WatchedPath(
            "spot",
            SPOT_PATH,
            settings.spot_interval,
            spot,
            PathTracker(
                single=True,
                volatile=("time",),
                clear_on_absence=False,
                jitter=jitter,
                clock=clock,
                once_if_past=True,
            ),
        ),
        WatchedPath(
            "rebalance",
            REBALANCE_PATH,
            settings.rebalance_interval,
            parse_rebalance,
            PathTracker(
                single=True, volatile=("noticeTime", NOTICE_TIME), jitter=jitter, clock=clock
            ),
        ),
        WatchedPath(
            "scheduled",
            SCHEDULED_PATH,
            settings.scheduled_interval,
            parse_scheduled,
            PathTracker(single=False, jitter=jitter, clock=clock, done_after_window=True),
        ),
        WatchedPath(
            "asg",
            ASG_PATH,
            settings.asg_interval,
            parse_lifecycle_state,
            PathTracker(single=True, jitter=jitter, clock=clock),
        ),
    ]
    return sorted((p for p in candidates if p.interval > 0), key=lambda p: p.interval)


class AwsWatcher:
    """Watches EC2's instance metadata service for interruption and maintenance notices."""

    name: ClassVar[str] = PROVIDER

    def __init__(
        self,
        settings: Settings,
        health: PollHealth,
        *,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.health = health
        self.clock = clock
        self.client = ImdsClient(
            imds_url(settings.url),
            timeout=settings.timeout,
            token_ttl=settings.token_ttl,
            imdsv1=settings.imdsv1,
            clock=clock,
            transport=transport,
        )
        # How far this instance's clock is ahead of AWS's, by the answers' Date (`skew.py`):
        # zero within TRUSTED_SKEW. The times IMDS gives go out moved by it (`_on_this_clock`).
        self._ahead = timedelta(0)
        self.paths = watched_paths(settings, clock, lambda: utcnow() - self._ahead)
        self._explained: set[str] = set()
        # While IMDS throttles: the backoff, and no request before `_throttled_until`.
        self._throttle = Backoff(THROTTLE_FIRST, THROTTLE_CEILING)
        self._throttled_until = 0.0
        # Spot polls go to `heightened_interval` while a warning is active (see `heightened`).
        self.spot = next((path for path in self.paths if path.name == "spot"), None)
        self._warnings = [path for path in self.paths if path.name in ("rebalance", "scheduled")]
        # Which spot interruptions were stale or in time when first seen, kept across
        # restarts (see `forget` and `retired.py`).
        this_boot, self.booted = boot_id(), machine_started()
        self._spot_path = state_dir / SPOT_FILE if state_dir is not None else None
        self._spot_memory = (
            load_spot_memory(self._spot_path, this_boot) if self._spot_path else None
        )
        self._spot_unsaved = False
        # Interruptions seen in an earlier boot, and those of them held back (logged once).
        self._spot_before = set(self._spot_memory.before) if self._spot_memory else set()
        self._spot_held: set[str] = set()
        # By path, the notice restored after a restart that the path's first answer reports
        # again (`restored`).
        self._restated: dict[str, str] = {}
        # The scheduled reboots and stops published in this boot, and those that ended the
        # boot before (IMDS lists one `active` for a while after it happened).
        self.reboots = RebootRecord(
            state_dir / BOOT_FILE if state_dir is not None else None,
            this_boot,
            self.booted,
            health,
        )
        if self.spot is not None and self._spot_memory is not None:
            self.spot.tracker.retired_before = set(self._spot_memory.retired)
            for notice_id in self._spot_memory.in_time:
                self.spot.tracker.seen_in_time(notice_id)

    def progress_bound(self) -> float | None:
        """Its longest interval between polls, and a round of polls (each due path after a
        token, each within `timeout`); none when every path is turned off."""
        if not self.paths:
            return None
        longest = max(max(self.interval(path) for path in self.paths), THROTTLE_CEILING)
        return stall_bound(longest, self.settings.timeout * (len(self.paths) + 1))

    async def detect(self) -> bool:
        """True when an EC2 instance identity document can be read within one second."""
        try:
            return await asyncio.wait_for(self._detect(), DETECT_SECONDS)
        except (asyncio.TimeoutError, ImdsError, ParseError, httpx.HTTPError) as error:
            log.debug("aws: detect: %s", error or type(error).__name__)
            return False

    async def _detect(self) -> bool:
        started = self.clock()
        try:
            answer = await self.client.get(IDENTITY_PATH, timeout=DETECT_SECONDS / 2)
        except ImdsError as error:
            if error.kind not in _PROBED_TOKENLESS:
                return False
            # A token PUT that connects but never answers is the signature of EC2 with hop
            # limit 1 seen from a container; one refused (403/404/405) that of an endpoint
            # serving only IMDSv1 (kube2iam in front of IMDS). A tokenless probe tells EC2
            # (401 or 200) apart from anything else, so the watcher can start and explain
            # the fix.
            left = DETECT_SECONDS - (self.clock() - started) - 0.05
            if left <= 0:
                return False
            response = await self.client.http.get(IDENTITY_PATH, timeout=left)
            if response.status_code == 401:
                return True
            if response.status_code == 403 and error.kind == "token-http-403":
                self.health.not_detected = _turned_off(response.headers.get("Server"))
            answer = Answer(response.status_code, response.content)
        if answer.status != 200:
            return False
        parse_identity(answer.body)
        return True

    async def watch(self, emit: Emit) -> None:
        """Poll until cancelled; never raises on bad data or transport errors."""
        if not self.paths:
            log.warning("aws: every path is turned off (all intervals are 0); nothing to watch")
            await asyncio.Event().wait()
        for path in self.paths:
            path.next_due = self.clock()
        while True:
            now = self.clock()
            due = [path for path in self.paths if path.next_due <= now]
            for path in due:
                # A fixed rate, not a fixed delay; a slow answer never makes polls pile up.
                path.next_due = max(path.next_due + self.interval(path), now)
            for path in due:
                if not await self.poll(path, emit):
                    break  # a token failure or a 429 fails every path alike; try again later
            self._pull_spot_forward()
            self._pull_unconfirmed_forward()
            for path in self.paths:
                path.next_due = max(path.next_due, self._throttled_until)
            wait = min(path.next_due for path in self.paths) - self.clock()
            await asyncio.sleep(max(0.0, wait))

    @property
    def answered(self) -> bool:
        """Every path answered ABSENT_ANSWERS times: a notice from before an agent restart
        that none reported again is gone (until then the agent keeps it). Not at the first
        answer: one stray answer (another host's IMDS) withdrew it and the next raised it
        again, as a path's own notices are not withdrawn at one answer without them."""
        return all(path.answers >= ABSENT_ANSWERS for path in self.paths)

    @property
    def heightened(self) -> bool:
        """A rebalance recommendation or a scheduled-maintenance drain is active: an
        interruption notice is likelier now, so spot/instance-action is polled faster."""
        return self.settings.heightened_interval > 0 and any(
            path.tracker.seen for path in self._warnings
        )

    def interval(self, path: WatchedPath) -> float:
        if path is self.spot and self.heightened:
            return min(path.interval, self.settings.heightened_interval)
        return path.interval

    def _pull_spot_forward(self) -> None:
        # A warning that just appeared must not wait out the calm cadence's next spot poll.
        if self.spot is not None and self.heightened:
            soonest = self.clock() + self.settings.heightened_interval
            self.spot.next_due = min(self.spot.next_due, soonest)

    def _pull_unconfirmed_forward(self) -> None:
        # A notice one answer has shown may be another host's (IMDS mid-rollout): raised at
        # once, it is withdrawn after ABSENT_ANSWERS answers without it. At the ASG or
        # scheduled path's own 5 s that was 10 s of a terminate (or drain) for nothing, and a
        # job whose save took less exited for it. Asked again soon, a stray one is gone
        # within a second, and a real one is confirmed by its second answer. So is a notice
        # one answer lacked (`withdrawing`): a cancel is cleared before its escalation.
        soon = self.settings.heightened_interval
        if soon <= 0:
            return
        for path in self.paths:
            if path.tracker.unconfirmed or path.tracker.withdrawing:
                path.next_due = min(path.next_due, self.clock() + soon)

    async def poll(self, path: WatchedPath, emit: Emit) -> bool:
        """One poll of one path; False when the failure concerns IMDS as a whole (a token
        failure, or a 429: the next poll of any path waits out the backoff)."""
        try:
            answer = await self.client.get(path.path)
        except ImdsError as error:
            self._failed(path, error.kind, self._describe(error), shown=error.explained())
            if error.kind == "token-http-429":  # throttled as a GET's 429 is
                self._throttled_until = self.clock() + self._throttle_wait()
            if error.hint is not None:
                # Logged once, the cause and fix scrolled away; `status` shows only the
                # error's kind. Held as a condition until IMDS answers.
                self.health.condition(TOKEN_CONDITION, error.explained())
            return not (error.kind.startswith("token") or error.kind == "unauthorized")
        except Exception as error:  # never let a surprise stop the watch
            self._failed(path, "internal", f"GET {path.path}: {type(error).__name__}: {error}")
            return True
        self.health.condition(TOKEN_CONDITION, None)
        if answer.status != 429:
            self._throttle.reset()
        self._take_skew(answer.date)
        if answer.status == 404 and path.absent_on_404:
            reports: list[Report] = []
        elif answer.status == 200:
            try:
                reports = self._on_this_clock(path.parse(answer.body))
            except PartialParse as error:
                # Counted as an error, and what could be read is still reported.
                self._failed(path, f"bad-{path.name}", str(error))
                partial = path.tracker.keep_times(self._on_this_clock(error.reports))
                for report in path.tracker.update(self._shown(path, partial)):
                    _log_report(report)
                    emit(report)
                # As for an answer read whole: a notice adopted after a restart is reported
                # again (else the agent withdrew an interruption restored without a
                # deadline), and a spot interruption's sighting is remembered.
                self._restate(path, emit)
                self._note_published(path)
                self._note_first_sightings(path)
                path.answers += 1
                return True
            except ParseError as error:
                self._failed(path, f"bad-{path.name}", str(error))
                return True
        else:
            self._failed(path, f"http-{answer.status}", _status_message(path.path, answer))
            if answer.status == 429:
                self._throttled_until = self.clock() + self._throttle_wait()
                return False
            return True
        for report in path.tracker.update(self._shown(path, reports)):
            _log_report(report)
            emit(report)
        self._restate(path, emit)
        self._note_published(path)
        self._note_first_sightings(path)
        path.failing = False
        path.answers += 1
        # Success is only reported when no path is failing, so that one broken path among
        # healthy ones does not make the health log flap between "error" and "recovered".
        if not any(other.failing for other in self.paths):
            self.health.success()
        return True

    def _throttle_wait(self) -> float:
        """Seconds no path is asked after a 429: 1 s doubling to THROTTLE_CEILING, which the
        jitter never passes (it spread 5 s to 6 s, past AWS's spot cadence)."""
        return self._throttle.next()

    def _take_skew(self, date: str | None) -> None:
        """Take the skew of this instance's clock from an answer's `Date`, when it moved by
        CLOCK_MOVED or more (a `Date` has whole seconds); without one that reads, the skew
        known stands. The notices then go out again on the clock as it is: their detail
        carries the skew, so the trackers see a change."""
        ahead = take_skew(self._ahead, date, utcnow(), self.health, "aws", "IMDS")
        if ahead is not None:
            self._ahead = ahead

    def _on_this_clock(self, reports: list[Report]) -> list[Report]:
        """IMDS's times (NotBefore, NotAfter, an interruption's time, noticeTime) as this
        instance's clock reads them: the board and the job time them by it. On a clock 2 h
        behind, a reboot 30 min away was 2 h 30 min away, and its terminate came 2 h after
        the reboot; 2 h ahead, a terminate at once that stood to NotAfter."""
        return [report_on_clock(report, self._ahead) for report in reports]

    def _shown(self, path: WatchedPath, reports: list[Report]) -> list[Report]:
        """What a path shows, less the scheduled events and spot interruptions that ended an
        earlier boot."""
        if path.name == "scheduled":
            return self.reboots.held_back(reports)
        if path is self.spot and self._spot_before:
            return [report for report in reports if not self._ended_a_boot(report)]
        return reports

    def _ended_a_boot(self, report: Report) -> bool:
        """`report` is a spot interruption seen in an earlier boot, due before this one began:
        the stop that ended that boot, still listed."""
        deadline, booted = report.deadline, self.booted
        if report.id not in self._spot_before or booted is None:
            return False
        if not isinstance(deadline, datetime) or deadline > booted:
            return False
        if report.id not in self._spot_held:
            self._spot_held.add(report.id)
            log.warning(
                "aws: %s was seen in an earlier boot and was due before this boot began: it "
                "is what ended that boot; not raised while IMDS shows it unchanged",
                report.id,
            )
        return True

    def _note_published(self, path: WatchedPath) -> None:
        if path.name == "scheduled":
            self.reboots.published(seen.report for seen in path.tracker.seen.values())

    def restored(self, reports: list[Report]) -> None:
        """The agent's notices of this provider restored after a restart (`RestoreAware`).
        The spot interruption and the rebalance recommendation have no id at IMDS: each path's
        tracker takes its restored one for the notice it holds (`PathTracker.adopt`), and the
        path's first answer reports it again as it stands, so the agent does not withdraw it
        for want of a report while a change of it waits for its second answer (a rebalance
        that answer does not show is let go: the agent withdraws it, as before). A scheduled
        event's tracker is told of it, so an answer that lists it `canceled` or `completed`
        clears it at once (held, it waited for every path's second answer)."""
        if not any(path.answers for path in self.paths):
            mine = [report for report in reports if report.provider == self.name]
            self._ahead = resume_skew(mine, self.health, "IMDS")
        by_reason = {
            "spot-interruption": "spot",
            "rebalance-recommendation": "rebalance",
            "scheduled-maintenance": "scheduled",
        }
        for report in reports:
            name = by_reason.get(report.reason)
            path = next((p for p in self.paths if p.name == name), None)
            if report.provider != self.name or path is None or path.answers:
                continue
            if not path.tracker.single:
                path.tracker.expect(report)  # a scheduled event: cleared when listed canceled
                continue
            adopted = path.tracker.adopt(report)
            if adopted is not None:
                self._restated[path.name] = adopted

    def _restate(self, path: WatchedPath, emit: Emit) -> None:
        """At a path's first answer, the notice adopted from before the restart again, if
        the path still holds it (the agent keeps what is reported; it is no change)."""
        notice_id = self._restated.pop(path.name, None)
        report = path.tracker.restate(notice_id) if notice_id is not None else None
        if report is not None:
            emit(report)

    def forget(self, notice_id: str) -> None:
        """`notice_id` is past its deadline plus a grace: IMDS still showing it on the next
        poll reports it again (the agent keeps it active, overdue; or raises it again if it
        was retired meanwhile), as AWS keeps an interruption until the end."""
        for path in self.paths:
            if not path.tracker.forget(notice_id):
                continue
            if path is not self.spot and path.tracker.stale(notice_id):
                log.info(
                    "aws: %s retired past the end of its window; not raised again while IMDS "
                    "shows it unchanged",
                    notice_id,
                )
            elif path.tracker.stale(notice_id):
                log.info(
                    "aws: %s retired; %s; not raised again while IMDS shows it unchanged",
                    notice_id,
                    # Due the moment seen, as a hibernation has no two-minute lead: no late
                    # agent or clock ahead to look for.
                    "a hibernation begins when announced"
                    if path.tracker.hibernation(notice_id)
                    else "its time was already past when first seen",
                )
                self._remember_spot("retired", notice_id)
            else:
                # At every grace while IMDS shows it: the agent says once that it is overdue.
                log.debug(
                    "aws: %s past its end; reported again while IMDS still shows it", notice_id
                )

    def _remember_spot(self, key: str | None = None, notice_id: str = "") -> None:
        """Save `notice_id` as `retired` or `in_time` for a restarted agent; a failed write
        is tried again at the next poll."""
        memory, path = self._spot_memory, self._spot_path
        if memory is None or path is None:
            return
        if (key is not None and memory.add(key, notice_id)) or self._spot_unsaved:
            self._spot_unsaved = not save_spot_memory(path, memory, self.health)

    def _note_first_sightings(self, path: WatchedPath) -> None:
        for notice_id in path.tracker.in_time:
            self._remember_spot("in_time", notice_id)
        path.tracker.in_time.clear()
        for notice_id in path.tracker.recognised:
            log.info(
                "aws: %s was retired before the agent restarted (%s); not raised again while "
                "IMDS shows it unchanged",
                notice_id,
                "a hibernation begins when announced"
                if path.tracker.hibernation(notice_id)
                else "its time already past when first seen",
            )
        path.tracker.recognised.clear()
        self._remember_spot()

    def _describe(self, error: ImdsError) -> str:
        """The cause and fix the first time an error kind has one; a reminder afterwards."""
        if error.hint is None:
            return error.message
        if error.kind in self._explained:
            return f"{error.message} (again; see the first message for the cause)"
        self._explained.add(error.kind)
        return error.explained()

    def _failed(
        self, path: WatchedPath, kind: str, message: str, *, shown: str | None = None
    ) -> None:
        path.failing = True
        self.health.error(kind, message, shown=shown)

    async def aclose(self) -> None:
        await self.client.aclose()


def imds_url(configured: str | None) -> str:
    """The base URL to use; `127.0.0.1:1338` means http. IMDS has no https."""
    url = (configured or DEFAULT_URL).strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if not url.startswith("http://"):
        raise ValueError(f"aws.url: IMDS speaks plain http, got {configured!r}")
    return url


def _turned_off(server: str | None) -> str:
    """Why detection said no when the token PUT and a tokenless GET both answered 403: what
    an EC2 instance whose metadata endpoint is turned off answers (another cloud's metadata
    server may answer so too; its `Server` tells them apart). Said where `--provider auto`
    logs why AWS was not picked: there it was only "its detection probe said no", and the
    agent ran on without AWS, its spot interruptions unread."""
    by = f" (Server: {server[:60]!r})" if server else ""
    return (
        f"the token PUT and a tokenless GET of {IDENTITY_PATH} answered 403{by}: on EC2 that "
        "is the instance metadata endpoint turned off, and no interruption notice can be read "
        "until it is on (aws ec2 modify-instance-metadata-options --instance-id <id> "
        "--http-endpoint enabled, or HttpEndpoint: enabled in the launch template)"
    )


def _status_message(path: str, answer: Answer) -> str:
    hint = {
        403: "IMDS refused the request (metadata endpoint disabled?)",
        429: "IMDS is throttling this instance; backing off",
        500: "IMDS failed",
        503: "IMDS is unavailable",
    }.get(answer.status, "unexpected status")
    return f"GET {path}: {answer.status}: {hint}"


def _log_report(report: Report) -> None:
    # DEBUG: the agent logs each notice it is told of (`seen at`, then `notice ACTION ID ...
    # deadline=...`); at INFO this was a third line for one fact, in another time format.
    deadline = format_time(report.deadline) if isinstance(report.deadline, datetime) else "none"
    log.debug("aws: %s %s (%s), deadline %s", report.action, report.id, report.reason, deadline)


def build(settings: Settings, context: WatcherContext) -> AwsWatcher:
    return AwsWatcher(settings, context.health, state_dir=Path(context.state_dir))


__all__ = [
    "THROTTLE_CEILING",
    "THROTTLE_FIRST",
    "AwsWatcher",
    "WatchedPath",
    "build",
    "imds_url",
    "watched_paths",
]
