"""Tell the cluster: a Kubernetes Event for every notice (on the Node, and on the Pod when the
agent knows it), and optionally a cordon on terminate, as aws-node-termination-handler's
`emitKubernetesEvents` and `cordonOnly` do.

Requests run in their own task from a bounded queue, so a slow API server never delays the
event socket; each answer is bounded in time and size, so it cannot hold later notices
either. A refusal (403) is logged once with the permission and the kustomize component that
grants it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from forewarn.protocol.errors import ConfigError
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.providers.backoff import Backoff
from forewarn.providers.fetch import fetch
from forewarn.providers.kubernetes.api import (
    cordon_request,
    retry_after,
    status_message,
    uid_refused,
)
from forewarn.providers.kubernetes.config import Cluster, node_name, resolve
from forewarn.providers.kubernetes.kubeconfig import off_loop
from forewarn.providers.kubernetes.settings import Settings as KubernetesSettings
from forewarn.providers.kubernetes.watch import certificate_refused

from ..observer import Deliveries, Observer
from ..protocol import Notice
from ..state import write_atomic
from .owed import OwedClears
from .pending import named
from .warned import MAX_WARNED, WARNED_FILE, encode_warned, load_warned
from .webhook import cleared_why

log = logging.getLogger("forewarn.kubernetes")

REPORTING_CONTROLLER = "forewarn.dev/agent"
REQUEST_TIMEOUT = 10.0
# The answer to an Event or a cordon is the object, a few kilobytes; nothing needs more.
MAX_ANSWER = 1 << 20
ATTEMPTS = 4
# Fetching a kubeconfig's credentials (its exec plugin: a cloud CLI not logged in yet, a token
# service out of reach) is retried from 1 s, doubling, up to once a minute.
CREDENTIALS_FIRST = 1.0
CREDENTIALS_MAX = 60.0
# The API server's Retry-After (a 429 of API Priority and Fairness, a 503) is waited for up to
# this, the backoff's own ceiling, so that one notice holds the ones behind it only so long.
RETRY_AFTER_MAX = 10.0
# What to grant, by request, when the API server refuses it.
GRANTS = {
    "event": "create on events.k8s.io events (packaging/kubernetes/components/notifications)",
    "cordon": "patch on nodes (packaging/kubernetes/components/cordon)",
}


# 4xx answers worth another attempt: 429, the API server shedding load; 409 to a cordon.
# An Event's 409 is an answer: its name is its notice's (`event_name`), so one taken is
# that Event made before (an answer lost, a restart making what a stop cut off).
RETRIED = frozenset({409, 429})
# How often a stop looks whether the notices held are reported (see `settle`).
SETTLE_POLL = 0.02
# How often a `kubernetes-events.json` that could not be written is tried again while no
# Event is made (one made writes it anyway): a full disk freed, a mount made writable.
WARNED_RETRY = 1.0
# The condition `status` and `forewarn_condition` show while that file cannot be written.
WARNED_CONDITION = "kubernetes-events"
# An Event whose attempts all went unanswered (an API server restarting for an upgrade, down,
# shedding load) is kept and tried again after this, doubling up to KEPT_MAX; at most
# MAX_KEPT of them, the oldest dropped past it with a warning.
KEPT_RETRY = 5.0
KEPT_MAX = 300.0
MAX_KEPT = 1000
# A cordon whose attempts all went unanswered is tried again from KEPT_RETRY, doubling up to
# this while its terminate is in force: the machine goes within minutes, and every minute
# the node stays schedulable the scheduler may place a pod whose work goes with it.
CORDON_RETRY_MAX = 30.0

# An Event is about these: (the object it regards, the namespace it is made in).
Target = tuple[dict[str, str], str]


def camel(reason: str) -> str:
    """`spot-interruption` → `SpotInterruption`, the form Event reasons take."""
    return "".join(part.capitalize() for part in reason.split("-"))


# The API server refuses a note over 1024 bytes (Go's len: bytes, not characters).
NOTE_LIMIT = 1024


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, never inside a character."""
    return text.encode()[: max(0, limit)].decode(errors="ignore")


def _micro_time(moment: datetime) -> str:
    """A MicroTime: RFC 3339 in UTC with exactly six fraction digits (the API server parses
    it so). From the shared formatter: strftime's `%Y` wrote year 1 as `1`."""
    whole = format_time(moment.replace(microsecond=0))
    return f"{whole[:-1]}.{moment.microsecond:06d}Z"


def event_name(notice: Notice, regarding: Mapping[str, str]) -> str:
    """The name of the Event about `regarding` for `notice`, the same at every POST of it:
    a second POST of an Event made (its answer lost to a timeout, or made just before a stop
    and made again after the restart) is refused 409 AlreadyExists, not a second Event. The
    notice's seq and send time keep apart the Events of other sendings of the same notice
    (and of other agents: each has its own). Not the agent's instance: that is the pod's
    hostname, and the new pod of a DaemonSet rollout, making the Event the old one owed at
    its stop (the file is in the hostPath state directory), made a second one."""
    parts = [
        *(f"{key}={regarding[key]}" for key in sorted(regarding)),
        notice.id,
        notice.action,
        str(notice.seq),
        format_time(notice.sent_at),
    ]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return f"forewarn-{digest[:24]}"


def event_body(
    notice: Notice,
    regarding: dict[str, str],
    namespace: str,
    instance: str,
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about `regarding` for one notice."""
    note = f"forewarn: {notice.action} ({notice.reason} from {notice.provider})"
    if notice.action == "clear":
        note += cleared_why(notice)
    if notice.deadline is not None and notice.action != "clear":
        note += f", deadline {format_time(notice.deadline)}"
    user_note = notice.detail.get("note")
    if isinstance(user_note, str) and user_note:
        note += f": {user_note}"
    # Cut in bytes, the user's note first: a note of 1024 characters but more bytes was
    # refused (422) and the Event lost; the notice id at the end is what ties it to forewarn.
    tail = f" [{notice.id}]"
    note = _clip(_clip(note, NOTE_LIMIT - len(tail.encode())) + tail, NOTE_LIMIT)
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": event_name(notice, regarding), "namespace": namespace},
        "eventTime": _micro_time(notice.sent_at),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": notice.action.capitalize(),
        "reason": camel(notice.reason),
        "type": "Normal" if notice.action == "clear" else "Warning",
        "regarding": regarding,
        "note": note,
    }


class KubernetesNotifier(Observer):
    def __init__(
        self,
        settings: KubernetesSettings,
        env: Mapping[str, str] | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        state_dir: Path | None = None,
    ) -> None:
        """`state_dir`: where the notices with a Warning Event standing are kept across a
        restart (see warned.py); None keeps them in memory only."""
        env = os.environ if env is None else env
        self.settings = settings
        self.env = env
        # Only what is cheap is checked at start (the files, the context, the server, its CA):
        # an exec plugin run here held the agent's start for as long as it took, and one that
        # failed (a cloud CLI not logged in) stopped the agent, notices of every provider
        # with it. The credentials are fetched in the notifier's task.
        self.cluster: Cluster = resolve(settings, env, credentials=False)
        self.credential_failures = 0
        self.node = node_name(settings, env)
        pod, pod_namespace = env.get("POD_NAME", "").strip(), env.get("POD_NAMESPACE", "").strip()
        self.pod = (pod, pod_namespace) if pod and pod_namespace else None
        self.pod_uid = env.get("POD_UID", "").strip()
        self.instance = f"forewarn-{socket.gethostname()}"
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        # Each notice with whether to create its Events (a restored one only cordons).
        self._queue: collections.deque[tuple[Notice, bool]] = collections.deque(maxlen=1000)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._reporting: Notice | None = None  # taken off the queue, not yet done
        self._reporting_events = False  # whether its Events are to be made
        # The Events the last run owed at its stop, made first here, oldest first; and the
        # (id, action) of those not made yet.
        self._owed_loaded: list[Notice] = []
        self._owed_at_start: set[tuple[str, str]] = set()
        # Writes of the file come from the loop (at start and stop) and from threads: a
        # write older than one already done is not made (it would bring back a stale file).
        self._write_lock = threading.Lock()
        self._generation = 0
        self._written = 0
        self._refused: set[str] = set()
        self._cordoned = False
        # The terminate whose cordon went unanswered (an API server down, restarting),
        # tried again at `_cordon_due` (monotonic) while a terminate is in force. Before, it
        # was given up on until the next terminate: the node stayed schedulable.
        self._cordon_kept: Notice | None = None
        self._cordon_due: float | None = None
        self._cordon_backoff: Backoff | None = None
        # The terminates in force: once none is, the operator may uncordon (as the docs say
        # to after a withdrawn one), and the next terminate must cordon again.
        self._terminating: set[str] = set()
        # The last notice of each id whose drain or terminate Event was made and its clear's
        # not yet, oldest first; kept in `_warned_path` after each change.
        self._warned: dict[str, Notice] = {}
        self._warned_path = None if state_dir is None else state_dir / WARNED_FILE
        # Why the file cannot be written, while it cannot: a standing condition.
        self._warned_problem: str | None = None
        self.warned_retry = WARNED_RETRY
        # The ids restored or published since the start: a warned notice of any other id was
        # cleared while its Clear Event was not made.
        self._seen: set[str] = set()
        # Whether the file said which Events the last run made (an agent without it did not).
        self._warned_known = False
        # Restored notices whose Event the file does not name as made: made at restore end,
        # unless published meanwhile (an escalation at restore makes its own).
        self._restored_unmade: list[Notice] = []
        self._published: set[str] = set()
        # The Clear Events owed at start, as the webhook's owed clears (owed.py).
        self._owed = OwedClears(self._make_owed)
        # The write of the Events owed after a change (see `_owed_changed`).
        self._owed_dirty = False
        self._owed_writer: asyncio.Task[None] | None = None
        self._providers: set[str] = set()
        # Events whose attempts all went unanswered, oldest first: each notice with the number
        # of its telling and the objects whose Event is still to make; tried again at
        # `_kept_due` (monotonic). Before, they were given up on: an API server upgrade of a
        # minute lost the Drain Event of every notice meanwhile, for good.
        self._kept: list[tuple[Notice, int, list[Target]]] = []
        self._kept_due: float | None = None
        # A kept notice taken out of `_kept` to be tried again: owed until it is made.
        self._retrying: Notice | None = None
        self.kept_retry = KEPT_RETRY
        self._kept_backoff: Backoff | None = None
        # Each notice told is numbered; the number of the last one told of each id, so that a
        # kept Event made late does not stand for a newer notice of its id in the file.
        self._tells = 0
        self._last_tell: dict[str, int] = {}
        self.request_timeout = REQUEST_TIMEOUT
        self.created = 0
        self.sent = 0  # requests that succeeded: Events created and cordons
        self.failed = 0
        self.retries = 0
        self.dropped = 0

    def on_start(self, providers: list[str]) -> None:
        self._providers = set(providers)
        if self._warned_path is not None and self.settings.events:
            # Read at start, not at construction: the agent holds its state directory's lock
            # by now, so this is not another agent's file.
            loaded = load_warned(self._warned_path)
            self._warned_known = loaded is not None
            self._warned = {notice.id: notice for notice in loaded.warned} if loaded else {}
            self._owed_loaded = list(loaded.owed) if loaded else []
            for notice in self._owed_loaded:
                # Owed at the last stop (queued, or under way): made first, in order.
                self._owed_at_start.add((notice.id, notice.action))
                if notice.action == "clear":
                    self._seen.add(notice.id)  # its clear is made: none owed besides
                self._queue.append((notice, True))
            if self._queue:
                log.info(
                    "kubernetes: %d Event(s) not made before the agent stopped; making them: %s",
                    len(self._queue),
                    named([notice for notice, _ in self._queue]),
                )
            if loaded is None:
                # Written now, empty: the next start knows which Events this run made (none
                # yet), and makes those a stop cuts off.
                self._write_warned(*self._encoded())
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name="kubernetes-notifier")
        self._task.add_done_callback(_died)
        wanted = [
            w
            for w, on in (("events", self.settings.events), ("cordon", self.settings.cordon))
            if on
        ]
        log.info("kubernetes: %s for node %s", " and ".join(wanted), self.node)

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        self._seen.add(notice.id)
        self._published.add(notice.id)
        if self._owed.reported(notice.id):
            log.info(
                "kubernetes: %s %s reported again after the restart: its owed Clear Event is "
                "not made",
                notice.action,
                notice.id,
            )
        self._enqueue(notice, events=True)

    def on_restored(self, notice: Notice) -> None:
        self._seen.add(notice.id)
        made = self._warned.get(notice.id)
        # Owed at the stop, and queued at start already (made by now, perhaps).
        owed = any((o.id, o.action) == (notice.id, notice.action) for o in self._owed_loaded)
        if self._warned_known and (made is None or made.action != notice.action) and not owed:
            # Its Event held by the API server (or not yet made) when the agent stopped: the
            # Node showed nothing of a reclaim in force until its clear.
            self._restored_unmade.append(notice)
        # A terminate back from the state file is no new publication, but the agent may have
        # stopped before its cordon went through (the API server slow or down): cordon again,
        # which changes nothing on a node cordoned already. Its Events were the first run's.
        if self.settings.cordon and notice.action == "terminate":
            self._enqueue(notice, events=False)

    def on_restore_done(self, next_seq: Callable[[], int]) -> None:
        for notice in self._restored_unmade:
            if notice.id in self._published:
                continue
            log.info(
                "kubernetes: %s %s restored from the state: its Event was not made before the "
                "agent stopped; making it",
                notice.action,
                notice.id,
            )
            self._enqueue(notice, events=True)
        self._restored_unmade = []
        # An Event carries no `seq`: the clear made here takes none from the agent's count
        # (one taken and never published reads as a lost message to every subscriber).
        for notice in list(self._warned.values()):
            if notice.id in self._seen:
                continue
            self._owed.add(notice)
        # A drain or terminate owed at the stop whose notice nothing restores, and whose
        # clear was not owed with it: made from the file, it would stand as the Node's last
        # word on a notice that ended, as a Warning named in the file does.
        last_owed = {notice.id: notice for notice in self._owed_loaded}
        for notice in last_owed.values():
            if notice.action != "clear" and notice.id not in self._seen:
                self._owed.add(notice)
        # Not at once, but for a provider no watcher runs for: a notice whose Event was made
        # just before a SIGKILL, before the state took it, is named here as one cleared is,
        # and its watcher reports it again at its first answer (owed.py).
        self._owed.start(self._providers)

    def on_poll(self, provider: str, ok: bool, error_kind: str | None) -> None:
        if ok:
            self._owed.answered(provider)

    def _make_owed(self, notice: Notice) -> None:
        now = utcnow()
        clear = notice.model_copy(
            update={"action": "clear", "noticed_at": now, "sent_at": now, "detail": {}}
        )
        log.info(
            "kubernetes: %s %s was cleared while its Clear Event was not made before the "
            "agent stopped; making it",
            notice.action,
            notice.id,
        )
        self._enqueue(clear, events=True)

    def _enqueue(self, notice: Notice, *, events: bool) -> None:
        if len(self._queue) == self._queue.maxlen:
            # The deque would drop the oldest without a word; say so, as the webhook does.
            self.dropped += 1
            log.warning(
                "kubernetes: %d notices wait for the API server; dropping the Event of %s",
                len(self._queue),
                self._queue[0][0].id,
            )
        self._queue.append((notice, events))
        if self._wake is not None:
            self._wake.set()
        # Not before the start: the file is the last run's until `on_start` has read it.
        started = self._task is not None
        if events and started and self._warned_path is not None and self.settings.events:
            self._owed_changed()

    def _owed_changed(self) -> None:
        """The Events owed changed: have the file name them soon, not only at a stop. A
        SIGKILL or an OOM kill skips the stop: a drain and its clear queued behind an API
        server that held the first were then in neither the state nor the file, and the
        restart made neither. Changes made during a write are written together after it."""
        self._owed_dirty = True
        if self._owed_writer is None or self._owed_writer.done():
            loop = asyncio.get_running_loop()
            self._owed_writer = loop.create_task(self._write_owed(), name="kubernetes-owed")

    async def _write_owed(self) -> None:
        while self._owed_dirty:
            self._owed_dirty = False
            # Taken on the loop (the queue changes there), written in a thread (synced). The
            # one under way counts: until it is made, a kill leaves it owed. One made just
            # before this is taken is named too: made again after a restart, it is a 409.
            await asyncio.to_thread(self._write_warned, *self._encoded(current=True))

    def on_stop(self) -> None:
        if self._owed_writer is not None:
            self._owed_writer.cancel()  # the write below is newer
        if self._task is not None:
            self._task.cancel()
            if self._warned_path is not None and self.settings.events:
                # What is queued or under way is kept, and the next start makes it.
                self._write_warned(*self._encoded(current=True))
        # Still owed: the file names each standing, and the next start owes it again.
        self._owed.cancel()
        # Stopping ends the request in progress and those waiting: say which, as the
        # webhook does, rather than lose a terminate's Event (or its cordon) in silence.
        current = [self._reporting] if self._reporting is not None else []
        if self._cordon_kept is not None and self._cordon_kept is not self._reporting:
            current.append(self._cordon_kept)
        left = [n for n, _, _ in self._kept] + current + [notice for notice, _ in self._queue]
        if left:
            log.warning(
                "kubernetes: stopping with %d notice(s) not reported to the API server: %s",
                len(left),
                named(left),
            )

    def parts(self) -> dict[str, bool]:
        return {} if self._task is None else {"kubernetes-notifier": not self._task.done()}

    async def settle(self) -> None:
        # As the webhook's: a terminate's Events (and its cordon) under way at a stop.
        while (
            self._task is not None
            and not self._task.done()
            and (self._queue or self._reporting is not None)
        ):
            await asyncio.sleep(SETTLE_POLL)

    def deliveries(self) -> dict[str, Deliveries]:
        # Requests, not notices: a notice makes an Event for the node and one for the pod,
        # and a terminate a cordon too; dropped counts notices, which make none of them.
        held = [notice for notice, _, _ in self._kept]
        for notice in (self._retrying, self._reporting):
            if notice is not None and all(notice is not other for other in held):
                held.append(notice)
        pending = len(self._queue) + len(held)
        if self._cordon_kept is not None and self._cordon_kept is not self._reporting:
            pending += 1  # a request, as an Event is
        return {"kubernetes": Deliveries(self.sent, self.failed, self.dropped, pending)}

    async def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        # Read every time: the file rotates. In a thread: a kubeconfig's exec plugin whose
        # token expired runs again here, and must not stall the agent's event loop.
        token = await off_loop(self.cluster.token)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _new_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            verify=self.cluster.verify,
            trust_env=False,
            timeout=REQUEST_TIMEOUT,
            transport=self._transport,
        )

    async def _reconnect(self) -> None:
        """Resolve the cluster again, as the watcher does after a 401 or a certificate that
        failed verification: the kubeconfig is read again (a `tokenFile` rotated, a client
        certificate renewed, the plugin run again) and so is the cluster CA (ca.crt, the
        kubeconfig's CA: it rotates). Kept as it was if it cannot be resolved now."""
        try:
            cluster = await off_loop(lambda: resolve(self.settings, self.env))
        except ConfigError as error:
            log.warning("kubernetes: cannot read the cluster's credentials again: %s", error)
            return
        self.cluster = cluster
        if self._client is not None:
            await self._client.aclose()
        self._client = self._new_client()

    async def _credentials(self) -> None:
        """Resolve the cluster with its credentials, with backoff until that succeeds;
        notices queue meanwhile."""
        backoff = Backoff(CREDENTIALS_FIRST, CREDENTIALS_MAX)
        while True:
            try:
                self.cluster = await off_loop(lambda: resolve(self.settings, self.env))
                return
            except ConfigError as error:
                self.credential_failures += 1
                wait = backoff.next()
                log.warning(
                    "kubernetes: cannot get the credentials for the API server: %s; "
                    "trying again in %.0fs (%d notice(s) waiting)",
                    error,
                    wait,
                    len(self._queue),
                )
                await asyncio.sleep(wait)

    async def _run(self) -> None:
        assert self._wake is not None
        try:
            await self._credentials()
            self._client = self._new_client()
            while True:
                if self._cordon_due is not None and time.monotonic() >= self._cordon_due:
                    # Before the notices queued: a node left schedulable loses work, and
                    # a busy queue (Events of other notices) must not hold it back.
                    await self._retry_cordon()
                while not self._queue:
                    self._wake.clear()
                    wait = self._idle_wait()
                    if wait is None:
                        await self._wake.wait()
                        continue
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                    if self._wake.is_set():
                        continue
                    if self._cordon_due is not None and time.monotonic() >= self._cordon_due:
                        await self._retry_cordon()
                    elif self._kept_due is not None and time.monotonic() >= self._kept_due:
                        await self._retry_kept()
                    elif self._warned_problem is not None:
                        await asyncio.to_thread(self._write_warned, *self._encoded())
                notice, events = self._queue.popleft()
                self._reporting, self._reporting_events = notice, events
                try:
                    await self._tell(notice, events)
                except Exception:
                    # One bad notice must not end the notifier.
                    log.exception("kubernetes: could not report %s", notice.id)
                self._reporting = None
                if (notice.id, notice.action) in self._owed_at_start and events:
                    self._owed_at_start.discard((notice.id, notice.action))
                    if not self._owed_at_start:
                        # The last owed at start is done: the file owes it no more.
                        await asyncio.to_thread(self._write_warned, *self._encoded())
        finally:
            if self._client is not None:
                await self._client.aclose()

    def _idle_wait(self) -> float | None:
        """How long the idle notifier waits for a notice before it has something to do: try
        the kept Events again, or write the file that could not be written; None: no limit."""
        waits = []
        if self._warned_problem is not None:
            waits.append(self.warned_retry)
        for due in (self._kept_due, self._cordon_due):
            if due is not None:
                waits.append(max(0.0, due - time.monotonic()))
        return min(waits) if waits else None

    async def _retry_kept(self) -> None:
        """Try the kept Events again, oldest first, one attempt each, while the API server
        answers: the first still unanswered keeps its place and those after it theirs (a
        server still down costs one request, not one per Event, before the next notice).
        Each stays in the list until it is under way, so a stop or a kill meanwhile leaves
        the file owing it."""
        self._kept_due = None
        for entry in list(self._kept):
            self._reporting, self._reporting_events = entry[0], True
            try:
                await self._retry(entry)
            finally:
                self._reporting = None
            if self._kept_due is not None:
                # Unanswered again, kept at the end by `_keep`: back to its place, first.
                self._kept.insert(0, self._kept.pop())
                return
        if self._kept_backoff is not None:
            self._kept_backoff.reset()

    async def _retry(self, entry: tuple[Notice, int, list[Target]]) -> None:
        """One more attempt at a kept Event, owed (`_retrying`) until it is made or kept."""
        self._kept.remove(entry)
        notice, tell, targets = entry
        self._retrying = notice
        try:
            await self._make_events(notice, tell, targets, attempts=1)
        finally:
            self._retrying = None

    async def _kept_of(self, notice_id: str) -> None:
        """The kept Events of `notice_id`, tried before a newer notice of it: made after it,
        the Drain came after its Clear, which a pipeline watching Events took for a drain
        standing. One still unanswered is kept again, before the newer one (kept after it)."""
        for entry in [entry for entry in self._kept if entry[0].id == notice_id]:
            await self._retry(entry)

    def _keep(self, notice: Notice, tell: int, targets: list[Target]) -> None:
        if len(self._kept) >= MAX_KEPT:
            gone, _, _ = self._kept.pop(0)
            self.dropped += 1
            log.warning(
                "kubernetes: %d Events wait for the API server to answer; dropping that of %s",
                MAX_KEPT,
                gone.id,
            )
        self._kept.append((notice, tell, targets))
        if self._kept_due is None:
            if self._kept_backoff is None:
                self._kept_backoff = Backoff(self.kept_retry, KEPT_MAX)
            wait = self._kept_backoff.next()
            self._kept_due = time.monotonic() + wait
            log.warning(
                "kubernetes: the API server did not answer for the Event of %s %s: kept, "
                "trying again in %.0fs",
                notice.action,
                notice.id,
                wait,
            )

    def _targets(self) -> list[Target]:
        """The objects a notice's Events are about: the Node, and the Pod when known."""
        # `kubectl describe` finds an object's Events by its uid too (a field selector on
        # involvedObject.uid): without one, none of these showed there. For a Node it also
        # searches under the node's name as the uid, which is what the kubelet writes.
        node = {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node}
        targets: list[Target] = [(node, self.settings.events_namespace)]
        if self.pod is not None:
            name, namespace = self.pod
            pod = {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace}
            if self.pod_uid:
                pod["uid"] = self.pod_uid
            targets.append((pod, namespace))
        return targets

    async def _make_events(
        self, notice: Notice, tell: int, targets: list[Target], attempts: int = ATTEMPTS
    ) -> None:
        made, unanswered = False, []
        for regarding, namespace in targets:
            url = (
                f"{self.cluster.server}/apis/events.k8s.io/v1/namespaces/"
                f"{quote(namespace, safe='')}/events"
            )
            body = event_body(notice, regarding, namespace, self.instance)
            outcome = await self._send("event", "POST", url, body, attempts=attempts)
            if outcome:
                self.created += 1
                made = True
            elif outcome is None:
                unanswered.append((regarding, namespace))
        if unanswered:
            self._keep(notice, tell, unanswered)
        if self._retrying is notice:
            self._retrying = None  # made, or kept again: the file says which below
        if made and self._last_tell.get(notice.id) == tell:
            await self._note_made(notice)
        elif made or unanswered:
            # Made late, after a newer notice of its id (which the file speaks for), or kept:
            # the file's Events owed change all the same.
            await self._save_events()

    async def _save_events(self) -> None:
        if self._warned_path is not None:
            await asyncio.to_thread(self._write_warned, *self._encoded())

    async def _tell(self, notice: Notice, events: bool) -> None:
        if notice.action == "terminate":
            self._terminating.add(notice.id)
        else:  # cleared, or a drain again
            self._terminating.discard(notice.id)
            if not self._terminating:
                self._cordoned = False
                if self._cordon_kept is not None:
                    # Made now, it would leave the node unschedulable for nothing: the
                    # agent never uncordons.
                    log.info(
                        "kubernetes: no terminate in force: the cordon kept for %s is dropped",
                        self._cordon_kept.id,
                    )
                self._cordon_kept = self._cordon_due = None
        if self.settings.cordon and notice.action == "terminate" and not self._cordoned:
            await self._cordon(notice)
        if not (self.settings.events and events):
            return
        await self._kept_of(notice.id)
        self._tells += 1
        self._last_tell[notice.id] = self._tells
        if any(entry[0].id == notice.id for entry in self._kept):
            # One of its id still unanswered: this one waits behind it, kept, so the Events
            # are made in order. Made at once, a Clear came before its Drain, which stood as
            # the Node's last word (and a restart meanwhile made the Drain, then another Clear).
            self._keep(notice, self._tells, self._targets())
            await self._save_events()
            return
        await self._make_events(notice, self._tells, self._targets())

    async def _cordon(self, notice: Notice, attempts: int = ATTEMPTS) -> None:
        """Cordon the node for the terminate `notice`; unanswered, it is kept and tried again
        (`_retry_cordon`)."""
        # The Node the terminate was raised for, when it says (the kubernetes watcher's
        # do): a terminate restored after that Node was deleted and registered again
        # under its name (the agent's pod goes with the old Node, and starts again on the
        # same boot with its state on the host) cordoned the new one, for good.
        uid = notice.detail.get("uid") if self._about_this_node(notice) else None
        request = cordon_request(
            self.cluster, self.node, True, uid if isinstance(uid, str) else None
        )
        outcome = await self._send(
            "cordon",
            request["method"],
            request["url"],
            request["body"],
            request["headers"]["Content-Type"],
            attempts=attempts,
        )
        if outcome is None:
            self._keep_cordon(notice)
            return
        self._cordon_kept = self._cordon_due = None
        if self._cordon_backoff is not None:
            self._cordon_backoff.reset()
        if outcome:
            self._cordoned = True
            log.info("kubernetes: cordoned node %s for %s", self.node, notice.id)

    def _keep_cordon(self, notice: Notice) -> None:
        if self._cordon_backoff is None:
            self._cordon_backoff = Backoff(self.kept_retry, CORDON_RETRY_MAX)
        wait = self._cordon_backoff.next()
        self._cordon_kept = notice
        self._cordon_due = time.monotonic() + wait
        log.warning(
            "kubernetes: the API server did not answer the cordon of node %s for %s: kept, "
            "trying again in %.0fs",
            self.node,
            notice.id,
            wait,
        )

    async def _retry_cordon(self) -> None:
        """One more attempt at the kept cordon, while a terminate is in force."""
        notice, self._cordon_due = self._cordon_kept, None
        if notice is None or self._cordoned or not self._terminating:
            self._cordon_kept = None
            return
        self._reporting, self._reporting_events = notice, False
        try:
            await self._cordon(notice, attempts=1)
        except Exception:
            log.exception("kubernetes: could not cordon for %s", notice.id)
        finally:
            self._reporting = None

    async def _note_made(self, notice: Notice) -> None:
        """Keep which notices have a Warning standing: a clear made takes its id off."""
        self._warned.pop(notice.id, None)
        if notice.action != "clear":
            self._warned[notice.id] = notice
            while len(self._warned) > MAX_WARNED:
                del self._warned[next(iter(self._warned))]
        if self._warned_path is None:
            return
        # In a thread: the write is synced, and the event loop publishes meanwhile.
        await asyncio.to_thread(self._write_warned, *self._encoded())

    def _encoded(self, *, current: bool = False) -> tuple[bytes, int]:
        """The file's bytes now, and their generation: the Warnings standing, and the Events
        owed (those queued; with `current`, the one under way too, at a stop)."""
        owed = [notice for notice, events in self._queue if events]
        if current and self._reporting is not None and self._reporting_events:
            owed.insert(0, self._reporting)
        # The kept are older than those queued, the one tried again older than the rest.
        older = [notice for notice, _, _ in self._kept]
        if self._retrying is not None:
            older.insert(0, self._retrying)
        owed[:0] = [notice for notice in older if all(notice is not o for o in owed)]
        self._generation += 1
        return encode_warned(list(self._warned.values()), owed), self._generation

    def _write_warned(self, data: bytes, generation: int) -> None:
        if self._warned_path is None:
            return
        try:
            with self._write_lock:
                if generation < self._written:
                    return  # a newer one is written
                write_atomic(self._warned_path, data)
                self._written = generation
        except OSError as error:
            # Shown by `status` and `forewarn_condition` while it lasts, as the agent's own
            # files are: a WARNING alone went unseen, and the restart then made no Event owed.
            problem = (
                f"cannot write {self._warned_path} ({type(error).__name__}: "
                f"{error.strerror or error}): an Event a stop cuts off is not made after the "
                "restart"
            )
            if self._warned_problem is None:
                log.warning("kubernetes: %s; retrying", problem)
            self._warned_problem = problem
            return
        if self._warned_problem is not None:
            log.warning("kubernetes: wrote %s again", self._warned_path)
        self._warned_problem = None

    def conditions(self) -> dict[str, str]:
        problem = self._warned_problem
        return {} if problem is None else {WARNED_CONDITION: problem}

    def _about_this_node(self, notice: Notice) -> bool:
        return notice.provider == "kubernetes" and notice.detail.get("node") == self.node

    async def _send(
        self,
        what: str,
        method: str,
        url: str,
        body: dict[str, Any],
        content_type: str = "application/json",
        *,
        attempts: int = ATTEMPTS,
    ) -> bool | None:
        """One request with retries on errors worth retrying: True when it succeeded, False
        when it was refused, None when every attempt went unanswered (no answer, a 429, a
        5xx, no token or a token refused: an Event is then kept, see `_keep`)."""
        backoff = Backoff(0.5, RETRY_AFTER_MAX)
        why = ""
        refused = False
        for attempt in range(attempts):
            asked: float | None = None
            try:
                # An overall deadline and a cap: httpx's timeout is per read, so an answer
                # trickled a byte at a time held the queue (and every later notice) for
                # minutes, and an endless one was read whole into memory.
                assert self._client is not None
                response = await fetch(
                    self._client,
                    method,
                    url,
                    deadline=self.request_timeout,
                    max_body=MAX_ANSWER,
                    json=body,
                    headers=await self._headers(content_type),
                )
            except httpx.HTTPError as error:
                why = f"{type(error).__name__}: {error}"
                if certificate_refused(error):
                    await self._reconnect()
            except ConfigError as error:
                # No token now (an exec plugin that failed, a token file being replaced):
                # worth another attempt, as a transport error is, not the end of the notice.
                why = str(error)
            else:
                if response.status_code < 300:
                    self.sent += 1
                    return True
                # With the API server's own message: "404" alone did not say which node it
                # does not know, nor "422" what it found wrong with an Event.
                message = " ".join(status_message(response.content).split())[:300]
                why = f"{response.status_code} {message}"
                asked = retry_after(response.headers.get("Retry-After"))
                if response.status_code == 401:
                    # The token, not the permission: it may have rotated on disk after the
                    # server stopped taking the old one. The next attempt reads it again, and
                    # a kubeconfig's credentials too (read once when it is loaded).
                    why = "401: the API server refused the token"
                    await self._reconnect()
                elif what == "event" and response.status_code == 409:
                    # Its name is taken: this Event was made before, by an attempt whose
                    # answer was lost or by the run a stop cut off. Made, and once.
                    log.info("kubernetes: the Event %s was made before", body["metadata"]["name"])
                    self.sent += 1
                    return True
                elif what == "cordon" and uid_refused(response.status_code, response.content):
                    log.info(
                        "kubernetes: node %s was replaced (deleted and registered again) "
                        "since the terminate: not cordoned",
                        self.node,
                    )
                    return False
                elif response.status_code == 403:
                    if what not in self._refused:
                        self._refused.add(what)
                        log.error(
                            "kubernetes: the API server refused the %s (%s): the agent's "
                            "identity needs %s",
                            what,
                            response.status_code,
                            GRANTS[what],
                        )
                    self.failed += 1
                    return False
                elif response.status_code < 500 and response.status_code not in RETRIED:
                    refused = True
                    break
            if attempt + 1 < attempts:
                self.retries += 1
                wait = backoff.next()
                if asked is not None:
                    # Sooner than asked, a shedding API server only sheds the retry too.
                    wait = max(wait, min(asked, RETRY_AFTER_MAX))
                await asyncio.sleep(wait)
        if not refused:
            # Unanswered: kept and tried again (an Event by `_keep`, a cordon `_keep_cordon`).
            log.info("kubernetes: %s not made: %s", what, why)
            return None
        self.failed += 1
        log.warning("kubernetes: %s failed: %s", what, why)
        return False


def _died(task: asyncio.Task[None]) -> None:
    # The task is kept by its notifier: an exception left in it would never be logged.
    if not task.cancelled() and task.exception() is not None:
        log.error("kubernetes: notifier stopped: %r", task.exception())


__all__ = ["KubernetesNotifier", "camel", "event_body", "event_name"]
