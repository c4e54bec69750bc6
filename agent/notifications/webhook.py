"""Deliver each published notice to an HTTP webhook (JSON or a Slack-compatible message).

`on_notice` only appends to a bounded queue: delivery runs in its own task with its own
timeout and retries, so a slow or hung receiver never delays the event socket. A notice whose
retries all failed for want of a receiver is kept and tried again less often (`KEPT_RETRY`)
until delivered or superseded by a newer notice of its id. With a state
directory, the notices not delivered yet are kept in `webhook-pending.json` there
(`pending.py`), and a restarted agent delivers them first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import socket
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from forewarn.protocol.timefmt import NEAR_SECONDS, format_time, utcnow
from forewarn.providers.backoff import Backoff
from forewarn.providers.httpdate import parse_http_date

from ..board import EXPIRED_KEY
from ..observer import Deliveries, Observer
from ..protocol import Notice
from .owed import OwedClears
from .pending import MAX_DONE, DoneKey, PendingFile, done_key, named
from .proxy import Proxy
from .settings import WebhookSettings, read_headers_file

log = logging.getLogger("forewarn.webhook")

USER_AGENT = "forewarn-webhook/1"
# Answers worth another try besides every 5xx: the receiver is busy, not refusing this
# message. Every 5xx, as the docs say: a receiver behind Cloudflare answers 520-524 while it
# is down or slow, and such a notice was dropped at the first answer.
RETRY_STATUSES = frozenset({408, 425, 429})
# A receiver's Retry-After is honoured up to this, so one notice cannot hold the queue for
# as long as a receiver likes.
RETRY_AFTER_CAP = 60.0
# In the state directory: the notices not delivered yet, delivered first after a restart.
PENDING_FILE = "webhook-pending.json"
# A notice kept across a restart whose deadline passed more than this before its delivery is
# delivered marked late: a drain whose deadline passed hours ago showed "0 s left" in Slack,
# as if it were happening now. Delivered, not dropped: the machine it speaks of may be gone
# (reclaimed, logs and all) and the channel is then the only record that it was warned. A
# minute covers the restart itself and the retries' backoff, when "0 s left" is still news.
LATE_AFTER = 60.0
# How often a stop looks whether the notices held are delivered (see `settle`).
SETTLE_POLL = 0.02
# A notice whose retries all failed for want of a receiver (a connection error, a timeout, a
# 5xx) is kept, and tried again once at a time after this backoff (first wait, longest wait,
# in seconds), until delivered or superseded by a newer notice of its id: given up on, it
# was lost while the agent ran on (a Slack outage, a network cut longer than the retries).
KEPT_RETRY = (30.0, 600.0)


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    """What tells a file changed (modified, replaced): None when there is none to read."""
    if path is None:
        return None
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size, status.st_ino


def late_by(notice: Notice) -> float | None:
    """Seconds since `notice`'s deadline when it passed more than LATE_AFTER ago, else None."""
    if notice.action == "clear" or notice.deadline is None:
        return None
    past = (utcnow() - notice.deadline).total_seconds()
    return past if past > LATE_AFTER else None


def old_by(notice: Notice) -> float | None:
    """Seconds since `notice` was sent when it has no deadline and was sent more than
    LATE_AFTER ago, else None: without a deadline, only its age tells a kept notice from
    news."""
    if notice.action == "clear" or notice.deadline is not None:
        return None
    age = (utcnow() - notice.sent_at).total_seconds()
    return age if age > LATE_AFTER else None


def span(seconds: float) -> str:
    """`seconds` (a minute or more) as a person reads an age: `5 min`, `3 h 12 min`, `2 d 4 h`."""
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


AGENT_DOWN = "while the agent was down"
RECEIVER_DOWN = "while the receiver did not answer"


def slack_text(notice: Notice, host: str, *, kept: bool = False, held: str = AGENT_DOWN) -> str:
    """One line a person reads in a channel. `kept`: the notice was kept, `held` says when
    (across a restart of the agent, or held back while the receiver did not answer); once
    its deadline is more than LATE_AFTER past, the line says it is late, and one without a
    deadline sent more than LATE_AFTER ago says it is old."""
    what = {"drain": "checkpoint and continue", "terminate": "checkpoint and exit now"}
    late = late_by(notice) if kept else None
    old = old_by(notice) if kept else None
    if notice.action == "clear":
        head = f"forewarn on {host}: clear ({notice.reason} from {notice.provider})"
        head += cleared_why(notice)
    elif late is not None and notice.deadline is not None:
        # No "checkpoint and exit now": whatever it asked for was due long ago.
        head = (
            f"forewarn on {host}: LATE, expired {held}: "
            f"{notice.action.upper()} ({notice.reason} from {notice.provider}); deadline "
            f"{format_time(notice.deadline)}, {span(late)} ago"
        )
    elif old is not None:
        # A drain without a deadline kept for days (a rebalance recommendation, a cordon)
        # read as news: "checkpoint and continue", nothing to tell it was old.
        head = (
            f"forewarn on {host}: OLD, kept {held}: "
            f"{notice.action.upper()} ({notice.reason} from {notice.provider}); sent "
            f"{format_time(notice.sent_at)}, {span(old)} ago"
        )
    else:
        head = (
            f"forewarn on {host}: {notice.action.upper()} ({notice.reason} from "
            f"{notice.provider}): {what[notice.action]}"
        )
        if notice.deadline is not None:
            left = max(0.0, (notice.deadline - utcnow()).total_seconds())
            # Near, to the second; far, as an age is said (it said `25939800 s left`).
            shown = f"{left:.0f} s" if left < NEAR_SECONDS else span(left)
            head += f"; deadline {format_time(notice.deadline)} ({shown} left)"
    note = notice.detail.get("note")
    if isinstance(note, str) and note:
        head += f"; note: {visible(note[:200])}"
    return slack_escape(f"{head} [{notice.id}]")


def visible(text: str) -> str:
    """`text` with each character that is not printable (a line break, a tab) as `\\uXXXX`,
    as `forewarn watch` shows a note: a note's line break split the Slack message, and its
    second line read as a message of its own."""
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def cleared_why(notice: Notice) -> str:
    """`, expired: why` (or `, withdrawn: why`) when the agent, not the provider, cleared
    `notice`, as `forewarn watch` shows it; else "". A bare "clear" read as the provider's
    all-clear where the agent had only stopped waiting past the deadline and its grace."""
    for key in (EXPIRED_KEY, "withdrawn"):
        why = notice.detail.get(key)
        if isinstance(why, str) and why:
            return f", {key}: {why[:200]}"
    return ""


def slack_escape(text: str) -> str:
    """`text` as Slack reads it literally: `&`, `<` and `>` are its markup, so a note such as
    `ETA <5 min` showed mangled and `<!channel>` in one notified the whole channel."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def body(
    notice: Notice, format: str, host: str, *, kept: bool = False, held: str = AGENT_DOWN
) -> bytes:
    """The POST's body; `json` is the notice as published (protocol v1), late or not."""
    if format == "slack":
        import json

        return json.dumps({"text": slack_text(notice, host, kept=kept, held=held)}).encode()
    return notice.model_dump_json().encode()


def retry_after(value: str | None) -> float:
    """Seconds a Retry-After header (seconds or an HTTP date) asks to wait, at most
    RETRY_AFTER_CAP; 0 when absent or unreadable."""
    if not value:
        return 0.0
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            seconds = (parse_http_date(value) - utcnow()).total_seconds()
        except ValueError:
            return 0.0
    if not math.isfinite(seconds):
        return 0.0
    return min(RETRY_AFTER_CAP, max(0.0, seconds))


def origin(url: httpx.URL) -> str:
    """`scheme://host[:port]` of `url`, an IPv6 address in brackets as a URL writes it
    ("http://fd00::7:8080" left the reader to guess where the port began)."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}{':' + str(url.port) if url.port else ''}"


class WebhookObserver(Observer):
    def __init__(
        self,
        settings: WebhookSettings,
        url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        state_dir: Path | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        """`state_dir`: where the notices not delivered yet are kept across a restart;
        None keeps them in memory only. `proxy`: the HTTP proxy to post through."""
        self.settings = settings
        self._url = url
        self._proxy = proxy
        self._transport = transport
        self._host = socket.gethostname()
        # Read at start (a bad file stopped the agent then), and again at each attempt once
        # the file changed: a short-lived token rewritten by another agent was sent stale
        # until a restart. A file broken later keeps the last good headers (see _read_headers).
        self._headers = settings.headers()
        self._headers_stamp = _stamp(settings.headers_file)
        self._headers_broken = False
        self._queue: collections.deque[Notice] = collections.deque(maxlen=settings.queue)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._delivering: Notice | None = None  # taken off the queue, not yet done
        # Notices whose retries all failed for want of a receiver, oldest first (KEPT_RETRY).
        self._kept_back: collections.deque[Notice] = collections.deque()
        self._kept_backoff = Backoff(*KEPT_RETRY)
        self._kept_due = 0.0  # loop time of the next try of the oldest kept back
        self._kept: set[tuple[str, int]] = set()  # (id, seq) of notices kept across a restart
        # The notices delivered or given up (a clear takes its id off), oldest first: a
        # restored notice named here needs no delivery after a restart (see pending.py).
        self._done: dict[DoneKey, None] = {}
        # The last notice done of each id not cleared since, oldest first: what a restart
        # that restores none of its id sends the clear of (see on_restore_done).
        self._done_notices: dict[str, Notice] = {}
        # The ids restored or published since the start: a done notice of any other id was
        # cleared while its clear did not reach the pending file.
        self._seen: set[str] = set()
        # Known done at start; None when the pending file named none (an older agent's, or
        # none at all): then every restored notice not in the queue is delivered.
        self._done_at_start: set[DoneKey] | None = None
        # Restored notices queued by on_restored, not yet delivered: the runner sends a drain
        # escalated while the agent was down to on_restored, then to on_notice.
        self._requeued: set[DoneKey] = set()
        # The clears owed at start (see on_restore_done and owed.py).
        self._owed = OwedClears(self._deliver_owed)
        self._providers: set[str] = set()
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self._pending = (
            None
            if state_dir is None
            else PendingFile(
                state_dir / PENDING_FILE,
                self._left,
                lambda: list(self._done),
                lambda: list(self._done_notices.values()),
            )
        )

    @property
    def target(self) -> str:
        """The receiver as logs may name it: scheme and host, never the path (a secret)."""
        return origin(httpx.URL(self._url))

    def on_start(self, providers: list[str]) -> None:
        self._providers = set(providers)
        if self._pending is not None:
            # Read at start, not at construction: the agent holds its state directory's lock
            # by now, so this is not another agent's file.
            loaded = self._pending.load()
            kept = loaded[-self.settings.queue :]
            # The file holds the notice that was being delivered besides a full queue (or
            # `queue` was lowered since): what does not fit is dropped as on_notice drops,
            # by name, not in silence.
            over = loaded[: len(loaded) - len(kept)]
            if over:
                self.dropped += len(over)
                log.warning(
                    "webhook: %d notice(s) kept while the agent was down are more than "
                    "webhook.queue (%d); dropping the oldest: %s",
                    len(loaded),
                    self.settings.queue,
                    named(over),
                )
            if kept:
                log.info(
                    "webhook: %d notice(s) not delivered before the agent stopped are "
                    "delivered first: %s",
                    len(kept),
                    named(kept),
                )
            self._queue.extendleft(reversed(kept))
            self._kept = {(notice.id, notice.seq) for notice in kept}
            done = self._pending.loaded_done
            if done is not None:
                self._done = dict.fromkeys(done[-MAX_DONE:])
                self._done_at_start = set(self._done)
            self._done_notices = {
                notice.id: notice for notice in self._pending.loaded_done_notices[-MAX_DONE:]
            }
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._deliver_all(), name="webhook")
        self._task.add_done_callback(self._died)
        log.info(
            "webhook: delivering notices to %s (%s)%s",
            self.target,
            self.settings.format,
            ""
            if self._proxy is None
            else f" through the proxy {self._proxy.shown} (from {self._proxy.source})",
        )

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        self._seen.add(notice.id)
        if self._owed.reported(notice.id):
            log.info(
                "webhook: %s %s reported again after the restart: its owed clear is not delivered",
                notice.action,
                notice.id,
            )
        superseded = [held for held in self._kept_back if held.id == notice.id]
        if superseded:
            # Delivered after this one, an older state of the notice (a drain after its
            # terminate, a drain after its clear) read as the news of the moment.
            self._kept_back = collections.deque(
                held for held in self._kept_back if held.id != notice.id
            )
            self.dropped += len(superseded)
            log.warning(
                "webhook: %s, kept for %s, superseded by %s %s: not delivered",
                named(superseded),
                self.target,
                notice.action,
                notice.id,
            )
        key = done_key(notice)
        if key in self._requeued:
            self._requeued.discard(key)
            for index, queued in enumerate(self._queue):
                if done_key(queued) == key:
                    self._queue[index] = notice  # queued by on_restored: once is enough
                    self._changed()
                    return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
            oldest = self._queue[0]
            # Named: "dropping the oldest" alone left no way to tell which notice the
            # receiver never got.
            log.warning(
                "webhook: %d notices wait for %s; dropping the oldest, %s %s",
                len(self._queue),
                self.target,
                oldest.action,
                oldest.id,
            )
        self._queue.append(notice)
        self._changed()
        if self._wake is not None:
            self._wake.set()

    def on_restored(self, notice: Notice) -> None:
        self._seen.add(notice.id)
        # The state is written apart from the pending file: a notice the state kept that the
        # pending file neither holds nor names as done was never delivered (the agent died
        # between the two writes, or the pending file could not be written).
        if self._pending is None or notice.action == "clear":
            return
        key = done_key(notice)
        if self._done_at_start is not None and key in self._done_at_start:
            return
        if key in {done_key(queued) for queued in self._left()}:
            return
        log.info(
            "webhook: %s %s restored from the state was not delivered before the agent "
            "stopped; delivering it",
            notice.action,
            notice.id,
        )
        self._kept.add((notice.id, notice.seq))
        self.on_notice(notice, escalated=False)
        self._requeued.add(key)

    def on_restore_done(self, next_seq: Callable[[], int]) -> None:
        # The state drops a notice before its clear goes out, the pending file takes the
        # clear after: an agent killed between the two restored nothing of the id, and the
        # receiver, told of the notice, was never told it ended. Its clear is sent (as
        # subscribers learn it: the heartbeat no longer lists the id) once OWED_HOLD has
        # passed without a report of the id, once: delivered, it takes the id off the done
        # record.
        if self._pending is None:
            return
        queued = {notice.id for notice in self._left() if notice.action == "clear"}
        for notice in list(self._done_notices.values()):
            if notice.id in self._seen or notice.id in queued:
                continue
            now = utcnow()
            clear = notice.model_copy(
                update={
                    "action": "clear",
                    "seq": next_seq(),
                    "noticed_at": now,
                    "sent_at": now,
                    "detail": {},
                }
            )
            self._owed.add(clear)
        # Not at once, but for a provider no watcher runs for (see owed.py); a stop meanwhile
        # leaves it owed at the next start: the pending file still names each done.
        self._owed.start(self._providers)

    def on_poll(self, provider: str, ok: bool, error_kind: str | None) -> None:
        if ok:
            self._owed.answered(provider)

    def _deliver_owed(self, held: Notice) -> None:
        now = utcnow()
        clear = held.model_copy(update={"noticed_at": now, "sent_at": now})
        log.info(
            "webhook: %s, delivered before the agent stopped, was cleared and its clear "
            "not kept (nor reported again since the restart); delivering the clear",
            clear.id,
        )
        self._kept.add((clear.id, clear.seq))
        self.on_notice(clear, escalated=False)

    def on_stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        # Still owed: the pending file names each done, and the next start owes it again.
        self._owed.cancel()
        # Stopping ends deliveries in progress or waiting (a node being reclaimed stops its
        # agent while the terminate's delivery may still be retrying): say which.
        left = self._left()
        if self._pending is not None:
            # A delivery in progress counts as not delivered: the receiver may have it, and
            # gets it again after the restart (at least once, never lost).
            self._pending.write_now()
        if left:
            kept = "" if self._pending is None else f"; kept in {self._pending.path}"
            log.warning(
                "webhook: stopping with %d notice(s) not delivered to %s: %s%s",
                len(left),
                self.target,
                named(left),
                kept,
            )

    async def settle(self) -> None:
        # A reclaimed machine stops its agent moments after the terminate: the POST under
        # way (or queued) is the channel's only word of it, and a pending file on a disk
        # about to vanish saves nothing. Polled: the stop waits a bounded time anyway. Not
        # for the notices kept back: their receiver did not answer for many tries already.
        while (
            self._task is not None
            and not self._task.done()
            and len(self._queue) + (self._delivering is not None)
        ):
            await asyncio.sleep(SETTLE_POLL)

    def _left_count(self) -> int:
        return len(self._kept_back) + len(self._queue) + (self._delivering is not None)

    def _left(self) -> list[Notice]:
        """The notices not delivered yet, oldest first: those kept back, the one being
        delivered, the queue."""
        delivering = [self._delivering] if self._delivering is not None else []
        return list(self._kept_back) + delivering + list(self._queue)

    def _changed(self) -> None:
        if self._pending is not None:
            self._pending.changed()

    def parts(self) -> dict[str, bool]:
        return {} if self._task is None else {"webhook": not self._task.done()}

    def _died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook: delivery stopped: %r", task.exception())

    async def _deliver_all(self) -> None:
        assert self._wake is not None
        async with httpx.AsyncClient(
            timeout=self.settings.timeout,
            # The proxy is chosen in proxy.py: trust_env would also take SSL_CERT_FILE.
            trust_env=False,
            proxy=None if self._proxy is None else self._proxy.url,
            verify=self.settings.verify(),
            transport=self._transport,
            headers={"User-Agent": USER_AGENT, "Content-Type": "application/json"},
        ) as client:
            while True:
                notice, kept_back = await self._next()
                self._delivering = notice
                outcome = await self._deliver(client, notice, kept_back=kept_back)
                self._requeued.discard(done_key(notice))
                self._delivering = None
                if isinstance(outcome, str):
                    self._keep_back(notice, outcome, again=kept_back)
                else:
                    self._kept.discard((notice.id, notice.seq))
                    self._finished(notice)  # delivered or given up: not again at a restart
                    if outcome and self._kept_back:
                        # The receiver answers again: the notices kept back go next.
                        self._kept_backoff = Backoff(*KEPT_RETRY)
                        self._kept_due = 0.0
                self._changed()  # delivered, given up or kept back

    async def _next(self) -> tuple[Notice, bool]:
        """The next notice to deliver, and whether it was kept back: the queue's first, else
        the oldest kept back once its try is due."""
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            if self._queue:
                return self._queue.popleft(), False
            wait = self._kept_due - loop.time()
            if self._kept_back and wait <= 0:
                return self._kept_back.popleft(), True
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait if self._kept_back else None)

    def _keep_back(self, notice: Notice, why: str, *, again: bool) -> None:
        """Keep `notice`, whose tries all failed for want of a receiver, for a later try;
        not when a newer notice of its id came meanwhile (it supersedes this one)."""
        if any(held.id == notice.id for held in self._queue):
            self.dropped += 1
            log.warning(
                "webhook: %s %s, kept for %s, superseded by a newer notice of its id: not "
                "delivered",
                notice.action,
                notice.id,
                self.target,
            )
            return
        # To the back, also one tried again: kept at the head, a notice the receiver keeps
        # failing (a payload its handler trips on) was tried for ever and held back every
        # other. Order within an id holds: a newer notice of its id supersedes it.
        self._kept_back.append(notice)
        while len(self._kept_back) > self.settings.queue:
            oldest = self._kept_back.popleft()
            self.dropped += 1
            log.warning(
                "webhook: %d notices are kept for %s; dropping the oldest, %s %s",
                len(self._kept_back) + 1,
                self.target,
                oldest.action,
                oldest.id,
            )
        wait = self._kept_backoff.next()
        self._kept_due = asyncio.get_running_loop().time() + wait
        if again:
            log.info(
                "webhook: %s %s still not delivered: %s; tried again in %.0f s",
                notice.action,
                notice.id,
                why,
                wait,
                extra={"notice_id": notice.id, "action": notice.action},
            )
            return
        log.warning(
            "webhook: could not deliver %s %s: %s; kept and tried again in %.0f s, then less "
            "often (at most every %.0f s), until delivered or superseded by a newer notice of "
            "its id",
            notice.action,
            notice.id,
            why,
            wait,
            KEPT_RETRY[1],
            extra={"notice_id": notice.id, "action": notice.action},
        )

    def _finished(self, notice: Notice) -> None:
        """Name `notice` as done: a restart does not deliver it again when it is restored."""
        if notice.action == "clear":
            for key in [key for key in self._done if key[0] == notice.id]:
                del self._done[key]
            self._done_notices.pop(notice.id, None)
            return
        key = done_key(notice)
        self._done.pop(key, None)
        self._done[key] = None
        while len(self._done) > MAX_DONE:
            del self._done[next(iter(self._done))]
        self._done_notices.pop(notice.id, None)
        self._done_notices[notice.id] = notice
        while len(self._done_notices) > MAX_DONE:
            del self._done_notices[next(iter(self._done_notices))]

    def _say_kept(self, notice: Notice, held: str, when: str, marked: str) -> None:
        log.warning(
            "webhook: %s %s was kept %s and %s: delivered%s %s",
            notice.action,
            notice.id,
            held,
            when,
            " marked" if self.settings.format == "slack" else "",
            marked,
            extra={"notice_id": notice.id, "action": notice.action},
        )

    async def _deliver(
        self, client: httpx.AsyncClient, notice: Notice, *, kept_back: bool
    ) -> bool | str:
        """Deliver `notice` with its retries (one try when it was kept back): True when
        delivered, False when refused (an answer not retried), else why no try found a
        receiver that took it."""
        restarted = (notice.id, notice.seq) in self._kept
        kept = restarted or kept_back
        held = AGENT_DOWN if restarted else RECEIVER_DOWN
        retries = 0 if kept_back else self.settings.retries
        if restarted:
            # Said whatever the format: a JSON receiver gets the notice as published, and
            # can tell only from its deadline (or its sent_at). (One kept back was logged
            # when it was, not again at each try.)
            late, old = late_by(notice), old_by(notice)
            if late is not None:
                self._say_kept(notice, held, f"its deadline passed {span(late)} ago", "late")
            elif old is not None:
                self._say_kept(notice, held, f"was sent {span(old)} ago", "old")
        backoff = Backoff(0.5, 30.0)
        for attempt in range(retries + 1):
            # Written for each attempt: a Slack line says how many seconds are left, and one
            # written before the retries (up to minutes of them) told a terminate's receiver
            # there was still the time there had been at the first attempt.
            payload = body(notice, self.settings.format, self._host, kept=kept, held=held)
            outcome = await self._attempt(client, payload)
            if outcome is None:
                self.delivered += 1
                log.info(
                    "webhook: delivered %s %s to %s",
                    notice.action,
                    notice.id,
                    self.target,
                    extra={"notice_id": notice.id, "action": notice.action},
                )
                return True
            retry, why, retry_after = outcome
            if not retry:
                self.failed += 1
                log.warning(
                    "webhook: gave up on %s %s after %d attempt(s): %s",
                    notice.action,
                    notice.id,
                    attempt + 1,
                    why,
                    extra={"notice_id": notice.id, "action": notice.action},
                )
                return False
            if attempt == retries:
                return f"{why} ({attempt + 1} attempt(s))"
            await asyncio.sleep(max(backoff.next(), retry_after))
        raise AssertionError("unreachable: the last attempt returns")

    async def _attempt(
        self, client: httpx.AsyncClient, payload: bytes
    ) -> tuple[bool, str, float] | None:
        """None when delivered, else (worth retrying, why, the receiver's Retry-After in
        seconds or 0). Never raises for the network."""
        try:
            # An overall deadline as well: httpx's timeout is per read, so a receiver that
            # trickles bytes could otherwise hold a delivery for ever.
            status, retry_after, location = await asyncio.wait_for(
                self._post(client, payload), self.settings.timeout
            )
        except (asyncio.TimeoutError, httpx.TimeoutException):
            return True, f"{self.target} did not answer within {self.settings.timeout:g}s", 0.0
        except httpx.HTTPError as error:
            return True, f"{self.target}: {self._why(error)}", 0.0
        except ValueError as error:
            # httpx reads a redirect's Location before it hands back the answer, and one it
            # cannot decode (a malformed punycode host, `http://xn--/`) raised IDNAError, a
            # ValueError: it ended the webhook's task, and no later notice was delivered. A
            # redirect is not followed nor retried anyway.
            return False, f"{self.target}: an answer that cannot be read: {self._why(error)}", 0.0
        if 200 <= status < 300:
            return None
        why = f"{self.target} answered {status}"
        if 300 <= status < 400:
            # A redirect is not followed (a 301/302 would turn the POST into a GET, and the
            # notice would go to an address nobody configured); "answered 308" alone left the
            # user to guess why every notice was dropped.
            why += (
                f", a redirect{self._origin(location)}, which is not followed: set "
                "webhook.url to the address it points to"
            )
        return status in RETRY_STATUSES or 500 <= status < 600, why, retry_after

    def _why(self, error: Exception) -> str:
        """The error's type and message, which tell a certificate not trusted from a
        connection refused ("ConnectError" alone did not), without the URL's path, query or
        password: they may be the secret."""
        text = " ".join(str(error).split())
        parts = urlsplit(self._url)
        secrets = [self._url, parts.path, parts.query, parts.password or "", parts.username or ""]
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) > 1:
                text = text.replace(secret, "...")
        text = text[:300]
        return f"{type(error).__name__}: {text}" if text else type(error).__name__

    def _origin(self, location: str | None) -> str:
        """` to <scheme://host:port>` of a redirect's Location (relative to the URL), or ""
        when there is none: never its path, which may hold a secret."""
        if not location:
            return ""
        try:
            return f" to {origin(httpx.URL(self._url).join(location))}"
        except (httpx.InvalidURL, ValueError):  # `.host` decodes the name, and may raise
            return ""

    async def _post(
        self, client: httpx.AsyncClient, payload: bytes
    ) -> tuple[int, float, str | None]:
        # Only the status is used, and the answer's body is never read: `client.post` read
        # all of it into memory, and a receiver streaming a huge body grew the agent by
        # hundreds of MB a second until the timeout.
        # The file's (a token) over the client's: a receiver may want its own User-Agent too.
        # In a thread: the file may sit on a slow or hung mount.
        headers = await asyncio.to_thread(self._read_headers)
        async with client.stream("POST", self._url, content=payload, headers=headers) as response:
            return (
                response.status_code,
                retry_after(response.headers.get("Retry-After")),
                response.headers.get("Location"),
            )

    def conditions(self) -> dict[str, str]:
        problem = None if self._pending is None else self._pending.problem
        return {} if problem is None else {"webhook-pending": problem}

    def _read_headers(self) -> dict[str, str]:
        """The headers of `webhook.headers_file`, read again when it changed; the last good
        ones while it cannot be read (logged once, by the file's path, never a value)."""
        path = self.settings.headers_file
        if path is None:
            return {}
        stamp = _stamp(path)
        if stamp == self._headers_stamp:
            return self._headers
        try:
            self._headers = read_headers_file(path)
        except ValueError as error:
            if not self._headers_broken:
                log.warning(
                    "webhook: webhook.headers_file: %s; sending the headers read before", error
                )
            self._headers_broken = True
            return self._headers
        self._headers_stamp = stamp
        if self._headers_broken:
            log.info("webhook: webhook.headers_file %s read again", path)
        self._headers_broken = False
        return self._headers

    def deliveries(self) -> dict[str, Deliveries]:
        # len() and a reference only: a list of the deque, made on the metrics thread while
        # the loop appends, could raise.
        pending = self._left_count()
        return {"webhook": Deliveries(self.delivered, self.failed, self.dropped, pending)}


__all__ = [
    "LATE_AFTER",
    "WebhookObserver",
    "body",
    "cleared_why",
    "late_by",
    "old_by",
    "origin",
    "retry_after",
    "slack_escape",
    "slack_text",
    "span",
    "visible",
]
