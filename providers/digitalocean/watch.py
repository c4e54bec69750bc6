"""The DigitalOcean watcher: droplet metadata for detection and identity, and the mailbox
where DigitalOcean announces a Spot droplet's reclaim (it has no in-guest reclaim API).

Every new mail in the watched folder is judged once (`mail.judge`); a reclaim notice for this
droplet becomes a `drain` report (reason `reclaim`) with a deadline, which the agent's board
escalates to `terminate` in time. The last UID handled is kept in the state directory, so a
restart never raises the same mail again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import httpx
from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.report import Report

from ..backoff import Backoff
from ..base import Emit, ParseError, WatcherContext, stall_bound
from ..boot import machine_started
from ..errortext import error_text
from ..fetch import Answer, fetch, within
from .clock import ServiceClock, judging_clock, on_droplet_clock
from .imap import (
    ANSWERS_PER_CALL,
    FETCH_LIMIT,
    IDLE_PAUSE,
    Fetched,
    FetchRefused,
    MailboxError,
    MailboxSession,
    ServerFailure,
    load_credentials,
)
from .seen import ACTIVE_FILE, STATE_FILE, ActiveReclaims, SeenMail
from .settings import Settings

if TYPE_CHECKING:
    from .mail import MatchRules, Verdict

log = logging.getLogger("forewarn.providers.digitalocean")

DETECT_TIMEOUT = 1.0
METADATA_TIMEOUT = 2.0  # per read
# Per request, all reads together: httpx bounds each read only, and an answer trickled a
# byte a second kept the watcher (reading no mail) until the runner's stall bound, about 54
# minutes of a 2 h lead. Droplet metadata answers in milliseconds.
METADATA_DEADLINE = 5.0
T = TypeVar("T")


class MetadataUnavailable(ForewarnError):
    """Neither droplet metadata nor the settings say which droplet this is."""


@dataclass(frozen=True)
class Droplet:
    id: str | None
    name: str | None
    # The metadata service's clock, from the Date of its first answer (`clock.py`); None
    # when metadata was not read (id and name configured) or sent no Date.
    clock: ServiceClock | None = None


def parse_droplet_id(status: int, body: str) -> str:
    """The answer of `GET /metadata/v1/id`: a number, else ParseError."""
    if status != 200:
        raise ParseError(f"/metadata/v1/id answered HTTP {status}")
    text = body.strip()
    if not (text.isascii() and text.isdigit()):
        raise ParseError(f"/metadata/v1/id is not a droplet id: {text[:40]!r}")
    return text


def parse_hostname(status: int, body: str) -> str:
    if status != 200:
        raise ParseError(f"/metadata/v1/hostname answered HTTP {status}")
    text = body.strip()
    if not text or any(char.isspace() for char in text):
        raise ParseError(f"/metadata/v1/hostname is not a name: {text[:60]!r}")
    return text


async def _metadata_get(client: httpx.AsyncClient, url: str) -> Answer:
    """GET `url`, read whole within METADATA_DEADLINE (and a megabyte); else an httpx error."""
    return await fetch(client, "GET", url, deadline=METADATA_DEADLINE, timeout=METADATA_TIMEOUT)


async def identify(settings: Settings, client: httpx.AsyncClient) -> Droplet:
    """This droplet's id and name: configured values first, droplet metadata for the rest."""
    base = settings.metadata_url()
    droplet_id, name = settings.droplet_id, settings.droplet_name
    clock: ServiceClock | None = None
    if droplet_id is None or name is None:
        try:
            if droplet_id is None:
                response = await _metadata_get(client, base + "/metadata/v1/id")
                clock = ServiceClock.read(response.headers.get("Date"))
                droplet_id = parse_droplet_id(response.status_code, response.text)
            if name is None:
                response = await _metadata_get(client, base + "/metadata/v1/hostname")
                clock = clock or ServiceClock.read(response.headers.get("Date"))
                name = parse_hostname(response.status_code, response.text)
        except (httpx.HTTPError, ParseError) as error:
            # A reset connection is a ReadError with no message of its own.
            problem = str(error).strip() or error_text(error)
            if droplet_id is None and name is None:
                raise MetadataUnavailable(
                    f"droplet metadata at {base}: {problem}; set digitalocean.droplet_id "
                    "or digitalocean.droplet_name when it is not reachable"
                ) from None
            log.info("digitalocean: metadata incomplete (%s); matching on what is set", problem)
    return Droplet(droplet_id, name, clock)


def match_rules(settings: Settings, droplet: Droplet) -> MatchRules:
    """How the settings recognise `droplet`'s reclaim mails: the watcher's, and the drill's
    (`forewarn drill digitalocean` checks its mail against the same rules). The first call
    loads the mail parser (`_mail`): the watcher makes it in a thread off the loop."""
    return _mail().MatchRules.build(
        sender=settings.sender,
        subject=settings.subject,
        droplet_id=droplet.id,
        droplet_name=droplet.name,
        lead=settings.lead,
        max_age=settings.max_age,
        require_dkim=settings.require_dkim,
    )


class DigitalOceanWatcher:
    name: ClassVar[str] = "digitalocean"

    def __init__(
        self,
        settings: Settings,
        context: WatcherContext,
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = settings
        self.context = context
        self.health = context.health
        self.base = settings.metadata_url()
        self.client = client or httpx.AsyncClient(trust_env=False, timeout=METADATA_TIMEOUT)
        self.state_path = Path(context.state_dir) / STATE_FILE
        self.active = ActiveReclaims(Path(context.state_dir) / ACTIVE_FILE, self.health)
        self._seen: SeenMail | None = None
        # Shifts found ahead of the pass ("brought forward by 1 hour") while no reclaim stood
        # for them to move, by UID: each is applied once the pass raises a reclaim before it.
        self._waiting_shifts: dict[int, Verdict] = {}
        self.droplet: Droplet | None = None
        self.idle_supported: bool | None = None
        # The mailbox was read once: a reclaim from before an agent restart that neither the
        # active file nor the mail reported again is gone (until then the agent keeps it).
        self.answered = False
        self._session: MailboxSession | None = None
        self._stop = threading.Event()
        # How many connections in a row the server refused to send a mail on, and when it
        # first did (time.monotonic()), by (UIDVALIDITY, UID): see FETCH_REFUSALS.
        self._refused: dict[tuple[int, int], tuple[int, float]] = {}
        # Mails cut at FETCH_LIMIT already said (`_said_cut`), by (UIDVALIDITY, UID): a mail
        # read ahead of a pass is judged again in its place.
        self._cut_said: set[tuple[int, int]] = set()
        # Mails read with a header cut already said (`_said_headers_cut`), keyed alike.
        self._headers_cut_said: set[tuple[int, int]] = set()

    def progress_bound(self) -> float | None:
        """Its longest wait (an IDLE renewal, a poll interval, a reconnection backoff) and a
        mailbox read of a few IMAP answers; none while no mailbox is configured (it then
        waits for good, having said so)."""
        s = self.settings
        if not s.imap_host or s.credentials_file is None:
            return None
        idle = max(s.idle_renew, IDLE_PAUSE) if self.idle_supported is not False else 0.0
        wait = max(idle, s.poll_interval)
        # Until the droplet is known: its two metadata requests come first.
        metadata = 2 * METADATA_DEADLINE if self.droplet is None else 0.0
        return stall_bound(max(wait, s.retry_max), ANSWERS_PER_CALL * s.imap_timeout + metadata)

    # Detection and identity: droplet metadata.

    async def _get(self, path: str, timeout: float) -> httpx.Response:
        return await self.client.get(self.base + path, timeout=timeout)

    async def detect(self) -> bool:
        """True when droplet metadata answers `/metadata/v1/id` with a number within 1 s."""
        try:
            response = await asyncio.wait_for(
                self._get("/metadata/v1/id", DETECT_TIMEOUT), DETECT_TIMEOUT
            )
            parse_droplet_id(response.status_code, response.text)
        except (httpx.HTTPError, ParseError, asyncio.TimeoutError, OSError):
            return False
        return True

    async def identify(self) -> Droplet:
        return await identify(self.settings, self.client)

    # The mailbox.

    def _mailbox_key(self, user: str) -> str:
        s = self.settings
        blob = f"{s.imap_host}\0{s.port()}\0{user}\0{s.imap_mailbox}".encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def _judge(self, uid: int, mail: Fetched, rules: MatchRules, seen: SeenMail) -> Verdict:
        # For a mail without a Message-ID: its bytes, not its UID, which starts over when
        # the server rebuilds the folder (a new UIDVALIDITY) and would raise it again.
        key = "sha256:" + hashlib.sha256(mail.raw).hexdigest()
        # The boot time as of now (now less the clock since boot), read with the mail: read
        # once at the start, a clock hours ahead then and set right by NTP since left it
        # hours late, and this droplet's reclaims were due "before this machine started".
        now, booted, ahead = self._judging_times()
        rules = dataclasses.replace(rules, booted=booted)
        try:
            verdict = reclaim_verdict(mail.raw, rules, key, now, received=mail.received)
            if verdict.report is None:
                return verdict
            # Judged by the service's clock; timed by the droplet's (`on_droplet_clock`).
            return dataclasses.replace(verdict, report=on_droplet_clock(verdict.report, ahead))
        except ParseError as error:
            return _mail().Verdict(None, str(error))
        except Exception as error:
            # A parser bug. Raised on, it would stop the watcher on this mail again after
            # every restart (its UID is never marked handled), and no later mail would be read.
            log.error(
                "digitalocean: mail UID %d cannot be judged (%s: %s); passed over",
                uid,
                type(error).__name__,
                error,
            )
            return _mail().Verdict(None, f"cannot be judged: {type(error).__name__}: {error}")

    def _judging_times(self) -> tuple[datetime, datetime | None, timedelta]:
        """Now and this machine's start, as mail is judged, and how far the droplet's clock
        is ahead: by the droplet's clock (ahead zero), or by the metadata service's where the
        droplet's is more than TRUSTED_SKEW off (`clock.py`), which is then a standing
        condition of the provider's health."""
        local = utcnow()
        service = self.droplet.clock if self.droplet is not None else None
        judged = judging_clock(service, local)
        if service is not None and service.now() is not None:
            # The skew its reports are made on, as `take_skew` holds it for the others: the
            # board tells by it a report made before a step of the wall clock from one made
            # after. Unknown to it, a first reclaim judged just before a step 2 h forward and
            # taken after it went out as terminate, 90 min past, the job out 30 min early.
            self.health.ahead = float(round(judged[1].total_seconds())) if judged else 0.0
        if judged is None or service is None:
            self.health.condition("clock", None)
            return local, machine_started(), timedelta(0)
        now, ahead = judged
        hours = ahead.total_seconds() / 3600
        message = (
            f"this droplet's clock is {abs(hours):.1f} h {'ahead of' if hours > 0 else 'behind'} "
            "the metadata service's Date; reclaim mail is judged by the service's clock, and "
            "deadlines go out as the droplet's clock reads them (`clock_ahead_seconds` in "
            "their detail); set the droplet's clock right"
        )
        if "clock" not in self.health.conditions:
            log.warning("digitalocean: %s", message)
        self.health.condition("clock", message)
        return now, service.started(), ahead

    async def _follow_clock(self, emit: Emit) -> None:
        """Every CLOCK_CHECK seconds while a reclaim stands, put its times on the droplet's
        clock as it is now: NTP setting a clock 3 h ahead right left a reclaim put 3 h later
        on it 3 h late, and the job trained on unsaved into the reclaim."""
        while True:
            await asyncio.sleep(CLOCK_CHECK)
            try:
                self._times_on_clock(emit)
            except Exception as error:  # never let a surprise end the following
                log.error("digitalocean: %s: %s", type(error).__name__, error)

    def _times_on_clock(self, emit: Emit) -> None:
        # The clock is looked at with or without a reclaim: the `clock` condition follows
        # it (looked at only by a mailbox pass, it stood for up to the IDLE renewal after
        # NTP set the clock right).
        # Which reclaims stand is judged as mail is, on the service's clock where the
        # droplet's is far off: on the droplet's own, a step of 3 h forward on a right clock
        # put a reclaim 90 min out 90 min past, and it was dropped here, never moved.
        now, _, ahead = self._judging_times()
        for report in self.active.current(now):
            moved = on_droplet_clock(report, ahead)
            if moved is report:
                continue
            log.info(
                "digitalocean: the droplet's clock moved against the metadata service's: %s "
                "goes out again with deadline %s",
                report.id,
                _when(moved.deadline),
            )
            emit(moved)
            self.active.add(moved, now)

    def _saved_reclaims(self, sent: set[str]) -> list[Report]:
        """The saved reclaims that stand for this droplet, now it is known, not among `sent`:
        judged by the time as mail is (the metadata service's, where the droplet's clock is
        far off). By the droplet's clock, a reclaim saved before a step of 3 h forward (due
        in 90 min) was past at the restart, and dropped."""
        assert self.droplet is not None
        now, _, _ = self._judging_times()
        held = self.active.of_another_boot(now)
        kept = [r for r in self.active.load(now) if r.id not in sent]
        for report in kept:
            log.info("digitalocean: %s still stands after a restart", report.id)
        self.active.identified, self.active.droplet_id = True, self.droplet.id
        for report, saved_for in held:
            if self.droplet.id is not None and saved_for != self.droplet.id:
                log.info(
                    "digitalocean: %s was raised for droplet %s before this machine started, "
                    "not for this droplet (%s: made from its snapshot?); it does not stand",
                    report.id,
                    saved_for,
                    self.droplet.id,
                )
                continue
            log.info("digitalocean: %s still stands after a reboot", report.id)
            kept.append(report)
        return kept

    def _emit_on_clock(self, reports: list[Report], emit: Emit) -> None:
        """Send saved reclaims once the droplet is known, their times on its clock as it is
        now (`on_droplet_clock`); one that moved is saved so."""
        if not reports:
            return
        now, _, ahead = self._judging_times()
        for report in reports:
            moved = on_droplet_clock(report, ahead)
            if moved is not report:
                log.info(
                    "digitalocean: the droplet's clock moved against the metadata service's "
                    "since %s was saved: it goes out with deadline %s",
                    report.id,
                    _when(moved.deadline),
                )
                self.active.add(moved, now)
            emit(moved)

    async def watch(self, emit: Emit) -> None:
        s = self.settings
        # Reclaims raised before a restart still stand until their deadline; those saved in
        # another boot, once this droplet is known to be the one they were raised for. Both
        # are judged and go out once the droplet is known, by the time as mail is judged and
        # on the droplet's clock as it is now (`_saved_reclaims`).
        if not s.imap_host or s.credentials_file is None:
            for report in self.active.load(utcnow()):
                log.info("digitalocean: %s still stands after a restart", report.id)
                emit(report)
            for report, _ in self.active.of_another_boot(utcnow()):
                emit(report)  # no droplet to compare with is read without a mailbox
            self.health.error(
                "config",
                "no mailbox configured (set digitalocean.imap_host and "
                "digitalocean.credentials_file): reclaim emails are not watched",
            )
            await asyncio.Event().wait()
        backoff = Backoff(1.0, s.retry_max)
        sent: set[str] = set()  # reclaims sent before the droplet was known
        while self.droplet is None:
            try:
                self.droplet = await self.identify()
            except MetadataUnavailable as error:
                self.health.error("metadata", str(error))
                if not sent:
                    # Metadata is down: this boot's reclaims go out as saved rather than wait
                    # for it (the agent retires a restored notice not reported within its
                    # grace); they are put on the clock once it answers (`_times_on_clock`).
                    for report in self.active.load(utcnow()):
                        log.info("digitalocean: %s still stands after a restart", report.id)
                        sent.add(report.id)
                        emit(report)
                await asyncio.sleep(backoff.next())
        # Only the metadata service's `Date` re-times a reclaim after a step of the clock.
        self.health.dated = self.droplet.clock is not None
        self._emit_on_clock(self._saved_reclaims(sent), emit)
        # Off the loop: the first call loads and compiles the mail parser (`_mail`), 1.3 to
        # 2.9 s at a load of 10. The first login goes on meanwhile: it needs no rules, and
        # `_read_mailbox` waits for them only once the mailbox is open.
        rules = asyncio.ensure_future(_off_loop(match_rules, self.settings, self.droplet))
        log.info(
            "digitalocean: watching %s:%d/%s for reclaim emails naming droplet %s",
            s.imap_host,
            s.port(),
            s.imap_mailbox,
            " or ".join(
                f"{k} {v}" for k, v in (("id", self.droplet.id), ("name", self.droplet.name)) if v
            ),
        )
        backoff.reset()
        # Reclaims sent while metadata was down went out before the service's clock was known.
        self._times_on_clock(emit)
        following = asyncio.create_task(self._follow_clock(emit))
        try:
            while True:
                try:
                    await self._read_mailbox(emit, rules, backoff)
                except MailboxError as error:
                    self.health.error(error.kind, str(error))
                except (OSError, ValueError) as error:  # state directory trouble, bad data
                    self.health.error("state", f"{type(error).__name__}: {error}")
                finally:
                    self._end_session()
                await asyncio.sleep(backoff.next())
        finally:
            following.cancel()
            rules.cancel()

    async def _read_mailbox(
        self, emit: Emit, building: asyncio.Future[MatchRules], backoff: Backoff
    ) -> None:
        s = self.settings
        assert s.imap_host is not None and s.credentials_file is not None
        credentials = load_credentials(s.credentials_file)  # re-read on each connect: rotation
        session = MailboxSession(
            s.imap_host, s.port(), s.imap_tls, ca_file=s.imap_ca_file, timeout=s.imap_timeout
        )
        self._session = session
        self._stop = stop = threading.Event()
        await self._answered_in_time(session, session.open, credentials, s.imap_mailbox)
        self.idle_supported = session.idle
        key = self._mailbox_key(credentials.user)
        # Kept across sessions: when its file cannot be written, a reconnect must not read
        # the mails handled since as new.
        if self._seen is None or self._seen.mailbox != key:
            self._seen = SeenMail.load(self.state_path, key, self.health)
        seen = self._seen
        seen.begin(session.uidvalidity, session.uidnext)
        backoff.reset()
        rules = await building  # done after the first connection
        while True:
            # Mail delivered before max_age raises nothing: no need to read it (a first
            # start on a large mailbox reads only the last days).
            now, _, _ = self._judging_times()
            since = (now - timedelta(seconds=s.max_age)).date() - timedelta(days=1)
            pending = deque(
                await self._answered_in_time(session, session.new_uids, seen.last_uid, since)
            )
            self._waiting_shifts = {}  # each is read in its place in the pass, if not before
            top = pending[-1] if pending else seen.last_uid
            looked = time.monotonic()
            while pending:
                if time.monotonic() - looked >= LOOK_AHEAD:
                    # Mail that came during a long pass (a first start on thousands of mails)
                    # waited behind all of it: a reclaim is raised at once, and every mail
                    # is still read in its place.
                    newer = await self._answered_in_time(session, session.new_uids, top, since)
                    for uid in newer:
                        await self._read_ahead(session, uid, rules, seen, emit)
                    pending.extend(newer)
                    top = pending[-1]
                    looked = time.monotonic()
                await self._read(session, pending.popleft(), rules, seen, emit)
            self.health.success()
            self.answered = True
            # After the success, so that files still unwritten show in the health.
            if seen.unsaved:
                seen.save()
            self.active.save(utcnow())
            if session.idle:
                # The session holds each answer of IDLE to its own deadline; this bounds the
                # whole wait as a backstop: the renewal (or a pause of a second, after a server
                # that ended IDLE at once), and the answers that open and close it.
                renewal = max(s.idle_renew, IDLE_PAUSE) + ANSWERS_PER_CALL * s.imap_timeout
                await self._answered_in_time(
                    session, session.wait, s.idle_renew, stop, waiting=renewal
                )
                self.idle_supported = session.idle  # False once the server refused IDLE
            else:
                await asyncio.sleep(s.poll_interval)

    async def _fetched(self, session: MailboxSession, uid: int, seen: SeenMail) -> Fetched | None:
        """Mail `uid`, or None when it is passed over (gone, or refused for good)."""
        try:
            mail = await self._answered_in_time(session, session.fetch, uid)
        except FetchRefused as error:
            if not self._refused_again(session.uidvalidity, uid, error):
                raise  # tried again on the next connection
            seen.handled(uid)
            return None
        self._refused.pop((session.uidvalidity, uid), None)
        # Each mail received is progress: a first pass over a large mailbox outlasts
        # the progress bound (only its end counted, and the runner restarted the
        # watcher as hung mid-pass). A server hanging mid-fetch is still caught: each
        # fetch is bounded by ANSWERS_PER_CALL imap_timeout. Judging starts after it.
        self.health.progress()
        if mail is None:  # expunged since the search
            log.info("digitalocean: mail UID %d was gone when fetched; passed over", uid)
            seen.handled(uid)
        return mail

    async def _verdict(self, uid: int, mail: Fetched, rules: MatchRules, seen: SeenMail) -> Verdict:
        # Judged in a thread: a 256 KiB mail takes a second or more, during which
        # the loop sent no heartbeat and no other watcher's notice. The verdict is
        # applied on the loop, one mail after the other, as before.
        started = time.monotonic()
        verdict = await _off_loop(self._judge, uid, mail, rules, seen)
        self._said_cut(uid, mail, verdict)
        self._said_headers_cut(uid, verdict)
        took = time.monotonic() - started
        # A mail slow to judge (a large digest, or one written to be slow) delays
        # the mails after it: worth the operator's eye.
        log.log(
            logging.INFO if took >= _SLOW_JUDGING else logging.DEBUG,
            "digitalocean: mail UID %d (%d bytes) judged in %.2f s",
            uid,
            len(mail.raw),
            took,
        )
        return verdict

    def _said_headers_cut(self, uid: int, verdict: Verdict) -> None:
        """Say, once, that a mail was read with a header cut at the parser's limits: a
        WARNING when it raised nothing (read cut, a reclaim's Subject or From may not match,
        and nothing said why it was passed over), else at INFO."""
        if not verdict.cut_headers:
            return
        key = (self._session.uidvalidity if self._session is not None else 0, uid)
        if key in self._headers_cut_said:
            return
        self._headers_cut_said.add(key)
        # Loaded with the parser that made the verdict (`_mail`).
        limits = importlib.import_module(f"{__package__}.message")
        acted = verdict.report is not None or verdict.replaces
        # The reason may quote the cut header itself: its start is enough.
        why = verdict.why if len(verdict.why) <= 160 else verdict.why[:157] + "..."
        log.log(
            logging.INFO if acted else logging.WARNING,
            "digitalocean: mail UID %d: its %s header%s longer than the %d characters the "
            "watcher reads of one (%d of all of a mail's together), and read cut there; %s",
            uid,
            ", ".join(verdict.cut_headers),
            "s are" if len(verdict.cut_headers) > 1 else " is",
            limits.HEADER_LIMIT,
            limits.HEADERS_BUDGET,
            "it was acted on all the same" if acted else f"it raises nothing ({why})",
        )

    def _said_cut(self, uid: int, mail: Fetched, verdict: Verdict) -> None:
        """Warn, once, of a mail from the reclaim sender with a reclaim subject that was cut
        at FETCH_LIMIT before naming this droplet: a reclaim named after the cut is missed.
        Passed over in a DEBUG line, a 3 MB reclaim digest left nothing to see."""
        if len(mail.raw) < FETCH_LIMIT or verdict.report is not None or verdict.replaces:
            return
        names_neither = _mail().NAMES_NEITHER
        if verdict.why != names_neither:
            return
        key = (self._session.uidvalidity if self._session is not None else 0, uid)
        if key in self._cut_said:
            return
        self._cut_said.add(key)
        log.warning(
            "digitalocean: mail UID %d, from the reclaim sender with a reclaim subject, is "
            "larger than the first %d KiB the watcher reads, and that part %s: a reclaim of "
            "this droplet named after it is missed (look at the mail)",
            uid,
            FETCH_LIMIT // 1024,
            names_neither,
        )

    async def _read(
        self, session: MailboxSession, uid: int, rules: MatchRules, seen: SeenMail, emit: Emit
    ) -> None:
        """Read mail `uid` in its place in the pass and apply its verdict."""
        mail = await self._fetched(session, uid, seen)
        if mail is not None:
            self._handle(uid, await self._verdict(uid, mail, rules, seen), seen, emit)

    async def _read_ahead(
        self, session: MailboxSession, uid: int, rules: MatchRules, seen: SeenMail, emit: Emit
    ) -> None:
        """Read mail `uid`, newer than the pass still going, and apply it at once if it is a
        reclaim, a cancellation or a new time. A cancellation or a new time takes the place of
        every notice before it, those still to be read in the pass too: they raise nothing
        when their place comes (`SeenMail.superseded`). A time given only as a shift of the
        old one ("brought forward by 1 hour") moves the reclaim standing; an older reclaim the
        pass reads after it moves it earlier if its own time, shifted, is earlier (as in its
        place, it moves the earliest). With no reclaim standing it waits until the pass raises
        one before it. A mail that could not be fetched waits for its place in the pass; it
        is read there again."""
        try:
            mail = await self._answered_in_time(session, session.fetch, uid)
        except FetchRefused:
            return
        if mail is None:
            return
        self.health.progress()
        verdict = await self._verdict(uid, mail, rules, seen)
        report = verdict.report
        if verdict.replaces:
            applied = report.id if report is not None else verdict.cancel_id
            if applied is None or seen.was_raised(applied):
                return
            if verdict.shift is not None and not self._earlier(uid, verdict, seen):
                self._waiting_shifts[uid] = verdict  # nothing to move yet
                return
            log.info("digitalocean: mail UID %d came during the pass; applied ahead of it", uid)
            self._replace(uid, verdict, seen, emit)
            seen.replaced_ahead(uid, applied)
            return
        if report is None or seen.was_raised(report.id):
            return
        log.info("digitalocean: mail UID %d came during the pass; read ahead of it", uid)
        self._raise(uid, verdict, report, emit)
        seen.raised_ahead(uid, report.id)
        self._apply_waiting_shifts(uid, seen, emit)

    async def _answered_in_time(
        self, session: MailboxSession, call: Callable[..., T], *args: Any, waiting: float = 0.0
    ) -> T:
        """`call(*args)` of the session in a thread, within ANSWERS_PER_CALL imap_timeout as
        a whole. imap_timeout bounds each read only: a server sending a byte every few
        seconds (a link or proxy in trouble) held the watcher on one answer until the
        runner's stall bound, about 54 minutes of a 2 h lead, with no error said. Past the
        deadline the connection is ended (the blocked read then returns) and the watcher
        reconnects as after any failure. `waiting`: seconds the call waits on purpose (an
        IDLE), given on top."""
        limit = waiting + ANSWERS_PER_CALL * self.settings.imap_timeout
        try:
            return await within(asyncio.to_thread(call, *args), limit)
        except (asyncio.TimeoutError, TimeoutError):
            session.abort()
            raise ServerFailure(
                f"IMAP server {self.settings.imap_host}:{self.settings.port()} sent no "
                f"complete answer to {call.__name__} within {limit:g}s (imap_timeout "
                f"{self.settings.imap_timeout:g}s each of {ANSWERS_PER_CALL} answers); "
                "reconnecting"
            ) from None

    def _refused_again(self, uidvalidity: int, uid: int, error: FetchRefused) -> bool:
        """Count one more refusal of this mail; True when it is to be passed over. A mail
        the server refuses on every connection (Dovecot, for a mail file it cannot read) was
        fetched again forever, and no mail after it was read: one the server refused on
        FETCH_REFUSALS connections is passed over, as a mail that cannot be judged."""
        key = (uidvalidity, uid)
        refusals, first = self._refused.get(key, (0, time.monotonic()))
        refusals += 1
        self._refused[key] = (refusals, first)
        # Both a count and a time: reconnections come a second or two apart, and a passing
        # trouble of the server (an index locked, a restart) outlasting three of them passed
        # over a reclaim mail for good. The mail after it waits that long once, of a lead of
        # hours.
        if refusals < FETCH_REFUSALS or time.monotonic() - first < FETCH_REFUSED_FOR:
            return False
        del self._refused[key]
        log.error(
            "digitalocean: %s, on %d connections in a row over %.0f s; mail UID %d is passed "
            "over, so that the mail after it is read",
            error,
            refusals,
            time.monotonic() - first,
            uid,
        )
        return True

    def _handle(self, uid: int, verdict: Verdict, seen: SeenMail, emit: Emit) -> None:
        report = verdict.report
        applied = report.id if report is not None else verdict.cancel_id
        self._waiting_shifts.pop(uid, None)  # in its place now
        newer = seen.superseded(uid)
        if newer is not None and report is not None and not verdict.replaces:
            self._move_earlier(uid, report, seen, emit)
        if newer is not None and (report is not None or verdict.replaces):
            # A cancellation or new time from newer mail was applied ahead of the pass: it
            # took the place of this mail's notice, which would otherwise stand after it.
            log.info(
                "digitalocean: mail UID %d is a %s, taken the place of by mail UID %d "
                "(applied ahead of the pass): it raises nothing",
                uid,
                verdict.why,
                newer,
            )
            seen.handled(uid, applied)
            return
        if verdict.replaces:
            if applied is not None and seen.was_raised(applied):
                # Read again (a rebuilt folder, another mailbox, a mail applied ahead of the
                # pass): it took effect the first time, and withdrawing now would also
                # withdraw the reclaims that came after.
                log.info("digitalocean: mail UID %d was applied before as %s", uid, applied)
                seen.handled(uid)
                return
            self._replace(uid, verdict, seen, emit)
            seen.handled(uid, applied)
            return
        if report is None:
            log.debug("digitalocean: mail UID %d raises nothing: %s", uid, verdict.why)
            seen.handled(uid)
            return
        if seen.was_raised(report.id):
            log.info("digitalocean: mail UID %d was raised before as %s", uid, report.id)
            seen.handled(uid)
            return
        self._raise(uid, verdict, report, emit)
        seen.handled(uid, report.id)
        self._apply_waiting_shifts(uid, seen, emit)

    def _apply_waiting_shifts(self, uid: int, seen: SeenMail, emit: Emit) -> None:
        """Apply the shifts found ahead of the pass that waited for a reclaim to move, now
        that mail `uid`, before them, raised one: oldest first, as in their places."""
        for at in sorted(later for later in self._waiting_shifts if later > uid):
            verdict = self._waiting_shifts.pop(at)
            applied = verdict.report.id if verdict.report is not None else None
            if applied is None or seen.was_raised(applied):
                continue
            log.info("digitalocean: mail UID %d, a new time, moves the reclaim of UID %d", at, uid)
            self._replace(at, verdict, seen, emit)
            seen.replaced_ahead(at, applied)

    def _move_earlier(self, uid: int, report: Report, seen: SeenMail, emit: Emit) -> None:
        """Mail `uid`, a reclaim the pass reads after a shift from newer mail was applied
        ahead of it: in its place it would have been among the reclaims the shift moves, of
        which it moves the earliest. When this one, shifted, is earlier than the time the
        shift gave, the moved reclaim takes that time. Only for one shift applied ahead of
        this mail: after a cancellation, or a chain of them, the newest stands as it is."""
        newer = [applied for applied, at in seen.replaced.items() if at > uid]
        if len(newer) != 1 or report.deadline is None:
            return
        now = utcnow()
        moved = next((r for r in self.active.current(now) if r.id == newer[0]), None)
        if moved is None or moved.deadline is None:
            return
        shift = moved.detail.get("shift_seconds")
        if moved.detail.get("deadline_source") != "earlier deadline + shift" or not isinstance(
            shift, (int, float)
        ):
            return
        try:
            earlier = report.deadline + timedelta(seconds=shift)
        except OverflowError:
            return
        if earlier >= moved.deadline:
            return
        log.info(
            "digitalocean: mail UID %d, a reclaim read after the new time applied as %s, "
            "moves it earlier: %s",
            uid,
            moved.id,
            format_time(earlier),
        )
        emit(moved.model_copy(update={"deadline": earlier}))
        self.active.add(moved.model_copy(update={"deadline": earlier}), now)

    def _earlier(self, uid: int, verdict: Verdict, seen: SeenMail) -> list[Report]:
        """The reclaims standing that mail `uid` (a cancellation or a new time) takes the
        place of: not its own, and not raised ahead of the pass from newer mail."""
        report = verdict.report
        return [
            r
            for r in self.active.current(utcnow())
            if (report is None or r.id != report.id) and not seen.raised_after(r.id, uid)
        ]

    def _replace(self, uid: int, verdict: Verdict, seen: SeenMail, emit: Emit) -> None:
        """Apply mail `uid`, a cancellation or a new time: raise the new time, if any, and
        withdraw the reclaims standing from mail before it."""
        report = verdict.report
        # Not a reclaim raised ahead of the pass from newer mail: this mail came before it.
        earlier = self._earlier(uid, verdict, seen)
        deadlines = [r.deadline for r in earlier if r.deadline is not None]
        if report is not None and verdict.shift is not None and deadlines:
            # "Brought forward by 1 hour": from the reclaim it moves (the earliest).
            detail = {**report.detail, "deadline_source": "earlier deadline + shift"}
            moved = min(deadlines) + verdict.shift
            report = report.model_copy(update={"deadline": moved, "detail": detail})
        # Emitted before the earlier ones are withdrawn: a client never sees no reclaim in
        # between when the time only moved.
        if report is not None:
            self._raise(uid, verdict, report, emit)
        for old in earlier:
            log.info("digitalocean: mail UID %d %s: %s withdrawn", uid, verdict.why, old.id)
            emit(
                Report(
                    id=old.id,
                    action="clear",
                    reason=old.reason,
                    provider=old.provider,
                    detail={**old.detail, "withdrawn_by": verdict.why},
                )
            )
        self.active.remove([r.id for r in earlier], self._judging_times()[0])

    def _raise(self, uid: int, verdict: Verdict, report: Report, emit: Emit) -> None:
        log.info(
            "digitalocean: mail UID %d is a %s: drain with deadline %s",
            uid,
            verdict.why,
            _when(report.deadline),
        )
        # Emitted before it is recorded: a crash in between raises it once more after the
        # restart, where the other order would lose it.
        emit(report)
        # Judged as mail is (`_times_on_clock`): by the droplet's clock, a step forward just
        # after the emit wrote the reclaim's file without it, and it was never moved.
        self.active.add(report, self._judging_times()[0])

    def _end_session(self) -> None:
        self._stop.set()
        session, self._session = self._session, None
        if session is not None:
            session.abort()

    async def aclose(self) -> None:
        self._end_session()
        await self.client.aclose()


_SLOW_JUDGING = 1.0  # seconds; a reclaim mail of a few KiB takes milliseconds
# Seconds between two looks at the droplet's clock against the service's while a reclaim
# stands (`_follow_clock`): how late, at most, a deadline follows NTP's step.
CLOCK_CHECK = 5.0
# Seconds of a pass over the mailbox between two looks for newer mail (a NOOP and a UID
# SEARCH): how late, at most, a reclaim that came during the pass is raised.
LOOK_AHEAD = 1.0
# Connections in a row on which the server refused to send a mail, and for how long (seconds
# since the first), before it is passed over: a refusal may be the server's passing trouble.
FETCH_REFUSALS = 3
FETCH_REFUSED_FOR = 60.0


async def _off_loop(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` in a daemon thread of its own. Not `asyncio.to_thread`: the agent's
    stop waits for the default executor's threads, and a judgement cannot be interrupted."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():
            outcome()

    def run() -> None:
        try:
            result = work(*args)
        except BaseException as error:  # handed to the awaiting task
            outcome = functools.partial(done.set_exception, error)
        else:
            outcome = functools.partial(done.set_result, result)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name="forewarn-digitalocean-judge", daemon=True).start()
    return await done


def _mail() -> ModuleType:
    """The mail parser (`mail`), loaded on first use: its patterns take about half a CPU-second
    to compile, and an agent of `--provider auto` builds this watcher to probe for
    DigitalOcean on any cloud. Loaded by the watcher once it watches, in a thread off the
    loop (its heartbeats go on), before the first mail is judged. Its dated-time patterns,
    built at their first use (`written.written_times`), are built here with it."""
    module = importlib.import_module(f"{__package__}.mail")
    importlib.import_module(f"{__package__}.written").written_times()
    return module


def reclaim_verdict(
    raw: bytes, rules: MatchRules, key: str, now: datetime, *, received: datetime | None = None
) -> Verdict:
    """`mail.reclaim_verdict`, the parser loaded on first use (`_mail`)."""
    verdict: Verdict = _mail().reclaim_verdict(raw, rules, key, now, received=received)
    return verdict


def build(settings: Settings, context: WatcherContext) -> DigitalOceanWatcher:
    return DigitalOceanWatcher(settings, context)


def _when(deadline: datetime | None) -> str:
    """A deadline for a log line as the agent's lines and the wire give it (`...Z`), or
    `none`: isoformat's `+00:00` and Python's `None` beside them named the same time twice."""
    return format_time(deadline) if deadline is not None else "none"


__all__ = [
    "CLOCK_CHECK",
    "METADATA_DEADLINE",
    "DigitalOceanWatcher",
    "Droplet",
    "MetadataUnavailable",
    "build",
    "identify",
    "machine_started",
    "match_rules",
    "parse_droplet_id",
    "parse_hostname",
]
