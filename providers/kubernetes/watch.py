"""Watch this node's Node object: list, then watch from the list's resourceVersion.

- A 410 Gone (as an HTTP status or an in-stream ERROR) means the resourceVersion fell out of
  the server's history: list again and watch from the new one. So does a 504 "Too large
  resource version" (ahead of the server, as after an etcd restore).
- The server ends every watch (`timeoutSeconds`, or its own randomized limit): resume from
  the last resourceVersion seen, bookmarks included.
- The token is read from its file for every request, so a rotated token is picked up on the
  next (re)connect; a 401 is retried with the credentials resolved again (the file read, a
  kubeconfig's exec plugin run again).
- A 429 or 503 with `Retry-After` is retried after that long (at most `retry_max`), not
  after the backoff's first 0.2 s.
- A server certificate that fails verification has the CA read again (it rotates).
- Bad configuration (no node name, an unreadable token) is one clear error in PollHealth,
  retried every minute; the agent and its other watchers keep running.
- The NodeClaim is read in the background, never between two watch events: a GET the API
  server holds (a conversion webhook down) held the node's next event, a shutdown's
  terminate, for the GET's whole timeout. One that could not be read while Karpenter
  disrupts the node (403 before the operator applies `components/karpenter`, a transport
  error) is read again with a backoff until it answers or the disruption ends; a 403 is a
  standing condition in `status`.
- The termination timestamp (and an AKS event's NotBefore) is a time on the cluster's clock:
  on a node whose clock is more than 5 min off the API server's `Date`, it goes out as this
  node's clock reads it (`clock`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import ClassVar

import httpx
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.report import Report

from ..backoff import Backoff
from ..base import Emit, ParseError, WatcherContext, stall_bound
from ..errortext import error_text
from ..fetch import AnswerTooLarge, within
from ..httpdate import format_http_date
from ..persist import write_atomically
from ..skew import ServiceClock, report_on_clock, resume_skew, sent_skew, take_skew
from .api import REQUEST_TIMEOUT, ApiError, Gone, NodeApi, TooLarge, read_margin
from .boots import BOOT_FILE, VmEventBoots
from .config import ConfigError, host_boot, node_name, resolve
from .karpenter import KARPENTER_TAINTS, being_disrupted, nodeclaim_name, termination_deadline
from .kubeconfig import off_loop
from .nodes import (
    HostBoot,
    WatchEvent,
    as_restored,
    changes,
    deleted_report,
    node_reports,
    node_uid,
    node_vm_event,
    notice_id,
    parse_event,
    parse_list,
    readded,
)
from .settings import Settings

log = logging.getLogger("forewarn.providers.kubernetes")

CONFIG_RETRY = 60.0
FIRST_RETRY = 0.2
# A stream that ends this fast with nothing in it is a misbehaving server, not a timeout.
SHORT_STREAM = 1.0
# The first wait before reading a NodeClaim again after a failed read (up to `retry_max`).
NODECLAIM_RETRY = 1.0
# The condition `status` shows while the API server refuses to show NodeClaims.
NODECLAIM_REFUSED = "nodeclaim-refused"
# The error kind of a watch the server ended at once with no event.
WATCH_CLOSED = "watch-closed"
# Seconds between two looks at this node's clock against the API server's (carried on the
# boot clock from its last `Date`): how late, at most, a deadline follows NTP's step. A watch
# brings a new `Date` only every watch_timeout (5 min).
CLOCK_CHECK = 5.0
# What `status` names the API server as, in the `clock` condition.
SERVICE = "the Kubernetes API server"
# The marks (`nodes.readded`) of this watcher's notices as it last saw them, in the state
# directory: the agent's state file holds each notice as first sent, and a restarted agent
# that compared those with the Node took a taint whose list was written since (a cordon after
# it) for one set again, and sent its drain again.
MARKS_FILE = "kubernetes-marks.json"
MARK_KEYS = ("unschedulableSet", "taintsSet", "taint")


def _marks_of(report: Report) -> dict[str, object]:
    return {key: report.detail[key] for key in MARK_KEYS if key in report.detail}


def certificate_refused(error: BaseException) -> bool:
    """Whether an httpx error is the API server's certificate failing verification."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(error)


def restored_deadline(
    node: object, node_name: str, restored: Mapping[str, Report]
) -> tuple[str, datetime] | None:
    """Karpenter's deadline as the agent had it before a restart (or a crash of the watcher):
    the deadline of a restored notice of Karpenter's taint or of the deletion, raised for
    this same Node object (its `uid`) while Karpenter still disrupts it, with the NodeClaim
    that owns it. A NodeClaim's termination timestamp, once stamped, does not move, so it
    stands as a read one does; unread, the first list sent those notices again without it,
    their terminates as drains (a job's guard withdrew its exit), until the NodeClaim answered."""
    name = nodeclaim_name(node)
    uid = node_uid(node)
    if name is None or uid is None or not being_disrupted(node):
        return None
    ids = {notice_id(node_name, "taint", key) for key in KARPENTER_TAINTS}
    ids.add(notice_id(node_name, "deleting"))
    for report in restored.values():
        if report.id in ids and report.deadline is not None and report.detail.get("uid") == uid:
            return name, as_written(report)
    return None


def restored_uid(reports: Iterable[Report]) -> str | None:
    """The Node object (its `uid`) restored notices were raised for, if they say."""
    uids = (report.detail.get("uid") for report in reports)
    return next((uid for uid in uids if isinstance(uid, str) and uid), None)


def as_written(report: Report) -> datetime:
    """A restored report's deadline as the cluster's clock wrote it: sent on this node's
    clock, it is moved by the skew in its detail (CLOCK_AHEAD), which would move it twice."""
    assert report.deadline is not None
    skew = sent_skew(report)
    if skew is None:
        return report.deadline
    try:
        return report.deadline - skew
    except OverflowError:  # a time past what a datetime holds: left as it is
        return report.deadline


def as_last_seen(content: bytes, restored: Mapping[str, Report]) -> dict[str, Report]:
    """`restored`, each with the marks MARKS_FILE (`content`) holds for it, where it was kept
    for the same Node object (`uid`); the rest, and all of them when it does not read, as
    restored. Only the marks change: never the ids, actions or deadlines."""
    try:
        saved = json.loads(content)
    except (ValueError, RecursionError):
        return dict(restored)
    marks = saved.get("marks") if isinstance(saved, dict) else None
    uid = saved.get("uid") if isinstance(saved, dict) else None
    if not isinstance(marks, dict) or not isinstance(uid, str):
        return dict(restored)
    out = {}
    for notice, report in restored.items():
        seen = marks.get(notice)
        if isinstance(seen, dict) and report.detail.get("uid") == uid:
            detail = {k: v for k, v in report.detail.items() if k not in MARK_KEYS}
            kept = {k: v for k, v in seen.items() if k in MARK_KEYS}
            report = report.model_copy(update={"detail": {**detail, **kept}})
        out[notice] = report
    return out


class KubernetesWatcher:
    name: ClassVar[str] = "kubernetes"

    def __init__(
        self,
        settings: Settings,
        context: WatcherContext,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.context = context
        self.health = context.health
        self.env = os.environ if env is None else env
        self.taints = settings.drain_taints
        self.terminate_taints = settings.imminent_taints
        self.active: dict[str, Report] = {}
        self.resource_version: str | None = None
        self.node_name: str | None = None
        self.seen_node = False
        self.node_uid: str | None = None  # the Node object last seen (kept past its deletion)
        self.host: HostBoot | None = None  # this host's boot, read on connect
        # The AKS VM event types published in this boot, and the one that ended the boot
        # before (Azure shows a Started Reboot for minutes after the reboot): with `host`.
        self.boots: VmEventBoots | None = None
        self._retired_said: set[str | None] = set()  # retired events held back, logged once
        # Past their end, the agent asked whether the Node still shows them (`forget`):
        # reported again, unchanged, at the next list, watch event or BOOKMARK.
        self._forgotten: set[str] = set()
        self.node_missing = False  # listed and not there: not healthy until it appears
        self.api: NodeApi | None = None
        self.delivered = False  # the current stream has delivered an event
        # This provider's notices the agent had before a restart (or a crash of the watcher
        # before this one): they say which Node object it had seen, so that a first list
        # without the node is that node's deletion, not a node that does not exist yet.
        self._restored: dict[str, Report] = {}
        self._marks_saved: object = None  # what MARKS_FILE holds, as this watcher wrote it
        # Counters for tests, benchmarks and the docs' claims.
        self.lists = 0
        self.watches = 0
        self.gones = 0
        self.too_large = 0  # "Too large resource version" answers since the last event
        self.bookmarks = 0
        self.short_streams = 0  # watches in a row that ended at once with no event
        # The last watch was refused (403) after a list that was let through, or answered 410
        # or "Too large resource version" again right after a fresh list: lists stand in for
        # it, but are no recovery of the watcher (`status` keeps the error) until one opens.
        self.watch_refused = False
        # Karpenter's deadline (the NodeClaim's termination timestamp) for the node being
        # disrupted now, by NodeClaim name; and whether the API server refused to show one.
        self.karpenter_deadline: tuple[str, datetime] | None = None
        self.nodeclaims_refused = False  # the last read was refused (403)
        self.nodeclaim_gets = 0
        # The Node object last applied (None once deleted): what the NodeClaim reader looks
        # at, so that it follows the node's later changes.
        self.node_object: object | None = None
        self.nodeclaim_backoff = Backoff(NODECLAIM_RETRY, settings.retry_max)
        self._nodeclaim_reader: asyncio.Task[None] | None = None
        # The Node changed while a read was under way: what it read may predate the stamp.
        self._nodeclaim_stale = False
        # How far this node's clock is ahead of the API server's, by its answers' `Date`
        # (`skew.py`): zero within TRUSTED_SKEW. The deadlines go out moved by it (`_node`).
        self.clock_ahead = timedelta(0)
        # The API server's clock from its last `Date`, carried on the boot clock: a step of
        # this node's clock shows against it within CLOCK_CHECK (`_follow_clock`).
        self.service_clock: ServiceClock | None = None

    def progress_bound(self) -> float | None:
        """A whole watch (a good one counts within its first SHORT_STREAM) with its read
        margin, after a list and a credential plugin, and the longest pause between tries;
        none while the node does not exist (its watches then count as nothing, rightly)."""
        if self.node_missing:
            return None
        s = self.settings
        stream = s.watch_timeout + read_margin(s.watch_timeout)
        return stall_bound(
            max(CONFIG_RETRY, s.retry_max), stream + REQUEST_TIMEOUT + s.exec_timeout
        )

    async def detect(self) -> bool:
        """In a pod with a readable service-account token; no network needed."""
        if not self.env.get("KUBERNETES_SERVICE_HOST"):
            return False
        return os.access(self.settings.token_file, os.R_OK)

    async def _connect(self) -> NodeApi:
        if self.api is None:
            name = node_name(self.settings, self.env)
            self.host = host_boot(self.settings, self.env)
            if self.host is not None and self.boots is None:
                self.boots = VmEventBoots(
                    Path(self.context.state_dir) / BOOT_FILE,
                    self.host.boot_id,
                    self.host.booted_at,
                    self.health,
                )
            # In a thread: a kubeconfig's exec plugin runs here (a cloud CLI, seconds).
            cluster = await off_loop(lambda: resolve(self.settings, self.env))
            self.node_name = name
            self.api = NodeApi(cluster, name)
            log.info("watching node %s via %s", name, cluster.where)
        return self.api

    async def _pause(self, backoff: Backoff, retry_after: float | None = None) -> None:
        """Wait before reconnecting. A stream that delivered events was working: its break
        starts the backoff over, so a stream that breaks every few seconds is resumed at
        once instead of being waited on for up to `retry_max`. A server that said how long
        to wait (429 or 503 with Retry-After) is given that, up to `retry_max`."""
        if self.delivered:
            backoff.reset()
        wait = backoff.next()
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.settings.retry_max))
        await asyncio.sleep(wait)

    async def watch(self, emit: Emit) -> None:
        following = asyncio.create_task(self._follow_clock(emit))
        try:
            await self._watch(emit)
        finally:
            following.cancel()
            if self._nodeclaim_reader is not None:
                self._nodeclaim_reader.cancel()
                self._nodeclaim_reader = None

    async def _watch(self, emit: Emit) -> None:
        backoff = Backoff(FIRST_RETRY, self.settings.retry_max)
        while True:
            self.delivered = False
            try:
                api = await self._connect()
            except ConfigError as error:
                self.health.error("config", str(error))
                await asyncio.sleep(max(CONFIG_RETRY, self.settings.retry_max))
                continue
            try:
                if self.resource_version is None:
                    await self._relist(api, emit)
                healthy = await self._watch_once(api, emit)
                if healthy:
                    backoff.reset()
                    continue
                await self._pause(backoff)
            except Gone as error:
                self.gones += 1
                log.info("kubernetes: %s; listing again", error)
                self.resource_version = None
                # One relist is normal; a 410 right after a fresh list is not: a watch
                # history that never holds the version the lists hand out (a list from an
                # API server replica lagging behind another's watch window). Said in
                # `status`, where the lists that stand in for the watch are no recovery
                # (as for a refused watch): it looked healthy while no watch ever opened and
                # the node's changes came only with the lists, up to retry_max late.
                if self.gones > 1:
                    self.health.error(error.kind, f"{error}; listing again")
                    self.watch_refused = True
                    await self._pause(backoff)
            except TooLarge as error:
                # Ahead of the server: an etcd restored from a snapshot went back to an older
                # version, and a watch from ours waits for a version the server may not reach
                # for hours (client-go's reflector retries it, blind). What the node is now
                # is what the server lists now; the watch follows from there. A watch cache
                # that only lags behind the list answers so too: the pause then spaces the
                # lists out.
                self.too_large += 1
                self.resource_version = None
                if self.too_large > 1:
                    # Again right after a fresh list: the server is not keeping up. Counted,
                    # so that `forewarn status` shows it rather than a healthy blind watch.
                    self.health.error(error.kind, f"{error}; listing again")
                    self.watch_refused = True  # the lists meanwhile are no recovery
                    await self._pause(backoff, error.retry_after)
                else:
                    log.warning("kubernetes: %s; listing again", error)
            except ConfigError as error:
                self.health.error("config", str(error))
                await self._pause(backoff)
            except ApiError as error:
                self.health.error(error.kind, str(error))
                if error.status == 401:
                    # Resolve again: a token file re-read, a kubeconfig's exec plugin re-run,
                    # a client certificate reloaded.
                    await self.aclose()
                elif error.status == 403 and self.resource_version is not None:
                    # The list was let through and the watch refused: a role with `list` and
                    # not `watch` (a hand-written one, an RBAC change half applied). The
                    # watch alone was retried, and a cordon made meanwhile raised nothing
                    # although a list showed it. List again before the next watch: the
                    # node's changes then come within the backoff, and the 403 stays in
                    # `status` (the lists are no recovery) until a watch opens.
                    self.watch_refused = True
                    self.resource_version = None
                await self._pause(backoff, error.retry_after)
            except ParseError as error:
                self.health.error("parse", str(error))
                self.resource_version = None  # do not trust a position after garbage
                await self._pause(backoff)
            except httpx.HTTPError as error:
                kind = "timeout" if isinstance(error, httpx.TimeoutException) else "transport"
                self.health.error(kind, error_text(error))
                if isinstance(error, AnswerTooLarge):
                    # A line over the cap: resumed from the same version, the watch met the
                    # same line at every resume, blind to the node's later changes until the
                    # history dropped that version. List the node as it is now instead.
                    self.resource_version = None
                if certificate_refused(error):
                    # The cluster CA may have rotated: ca.crt (kube-root-ca.crt) or the
                    # kubeconfig's CA holds the new one now. The CA is read when resolving,
                    # so resolve again rather than refuse the new certificate forever.
                    await self.aclose()
                await self._pause(backoff)

    async def _relist(self, api: NodeApi, emit: Emit) -> None:
        listed = await api.list_node()
        # Before the node is applied: after a restart on a clock hours off, its deadline then
        # goes out as the agent restored it, not first as written and then moved.
        self._took_date(api.date, emit, apply=False)
        self.lists += 1
        self.resource_version = listed.resource_version
        self.node_missing = False
        restored, self._restored = self._restored, {}
        mine = {k: r for k, r in restored.items() if r.detail.get("node") == api.node_name}
        if listed.node is not None:
            was = restored_uid(mine.values()) if mine and not self.active else None
            if was is not None and node_uid(listed.node) not in (None, was):
                # Another Node object than the one the agent's notices were raised for (it
                # was deleted and created again while the agent was down): as a watcher that
                # never stopped, the old one's are cleared and the new one's raised afresh.
                # Compared with no uid, the restored cordon stood for the new node's, and a
                # job's guard that had saved for the old one saved nothing for the new one.
                self.active = dict(mine)
                self.node_uid = was
                mine = {}
            if mine and not self.active and self.karpenter_deadline is None:
                self.karpenter_deadline = restored_deadline(listed.node, api.node_name, mine)
            # The agent's notices from before are what a running watcher would have had as
            # its own: a shutdown whose Ready turned Unknown since (the kubelet stopped
            # posting) stands on them, and was cleared at a restart, as if the node were back.
            self._node(
                listed.node,
                api.node_name,
                emit,
                mine if not self.active else None,
                relisted=True,
            )
            self._read_karpenter(listed.node, emit)
        elif self.seen_node:
            self.node_object = None
            self._apply([*self.active.values(), deleted_report(api.node_name, self.node_uid)], emit)
        elif mine:
            self._deleted_while_away(list(mine.values()), api.node_name, emit)
        else:
            self.node_missing = True
        self._success()
        if self.node_missing:
            self.health.error(
                "node-not-found",
                f"node {api.node_name!r} does not exist (yet); is NODE_NAME right? watching",
            )

    def _deleted_while_away(self, restored: list[Report], name: str, emit: Emit) -> None:
        """The node this agent had raised notices for is not listed: it was deleted (before a
        restart, or while the agent or this watcher was down). Its notices are reported again
        with its deletion's terminate, as a watcher that never stopped keeps them. Left to
        the agent, they were retired `notice_grace` after the restart (a clear of the deleted
        node's terminate), and a deletion while the agent was down raised no terminate."""
        uid = restored_uid(restored)
        current = {report.id: report for report in restored}
        deleted = deleted_report(name, uid)
        current.setdefault(deleted.id, deleted)
        self.seen_node = True
        self.node_uid = uid
        self._apply(list(current.values()), emit)

    def restored(self, reports: list[Report]) -> None:
        """The agent's notices of this provider from before a restart (or a crash of the watcher
        before this one), as reported (`RestoreAware`). Used only when the first list does not
        show the node; when it does, what it shows supersedes them."""
        self._restored = {report.id: report for report in reports if report.provider == self.name}
        self.clock_ahead = resume_skew(self._restored.values(), self.health, SERVICE)

    async def _watch_once(self, api: NodeApi, emit: Emit) -> bool:
        """One watch request until the server ends it; True if it did useful work. The
        whole stream is bounded too: a server that dribbles bytes without ever ending a
        line would otherwise hold it past any read timeout."""
        limit = self.settings.watch_timeout + read_margin(self.settings.watch_timeout)
        try:
            return await within(self._stream(api, emit), limit)
        except (asyncio.TimeoutError, TimeoutError):
            raise httpx.ReadTimeout(f"watch: the stream did not end within {limit:g}s") from None

    async def _stream(self, api: NodeApi, emit: Emit) -> bool:
        assert self.resource_version is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with api.watch(self.resource_version, self.settings.watch_timeout) as stream:
            self.watch_refused = False
            self._took_date(api.date, emit)
            self.watches += 1
            # A good answer once the stream has held a while (or at its first event), not as
            # it opens: a server that ended every watch at once looked healthy in `status`
            # while the backoff between its watches made notices up to `retry_max` late.
            held = loop.call_later(SHORT_STREAM, self._held)
            try:
                await self._events(api, stream, emit)
            finally:
                held.cancel()
        if self.delivered or loop.time() - started >= SHORT_STREAM:
            self.short_streams = 0
            return True
        # One can be an API server shutting down as the watch opened; again right after is a
        # server (or a proxy) that ends every watch.
        self.short_streams += 1
        message = (
            f"the API server ended the watch within {SHORT_STREAM:g}s with no event "
            f"({self.short_streams} in a row); reconnecting with a backoff (up to "
            f"retry_max, {self.settings.retry_max:g}s), so notices may be that late"
        )
        if self.short_streams > 1:
            self.health.error(WATCH_CLOSED, message)
        else:
            log.info("kubernetes: %s", message)
        return False

    def _held(self) -> None:
        """The watch has held SHORT_STREAM: a good answer, and a 410 (or a version ahead)
        after it is the history moving on, not one right after a fresh list. A quiet node's
        watch without bookmarks gets one at every resume once the history has passed it."""
        self.gones = 0
        self.too_large = 0
        self._success()

    async def _events(self, api: NodeApi, stream: AsyncIterator[WatchEvent], emit: Emit) -> None:
        """Handle one watch's events as they come, until the server ends it."""
        async for event in stream:
            self.delivered = True
            self.gones = 0
            self.too_large = 0
            self._handle(event, api.node_name, emit)
            if event.type in ("ADDED", "MODIFIED"):
                self._read_karpenter(event.object, emit)
            self._success()

    @property
    def answered(self) -> bool:
        """The node was listed once: a notice from before an agent restart that the list did
        not report again is gone (until then the agent keeps it). Not while the list shows no
        node this watcher has ever seen: a node deleted while the agent was down is still
        gone, and the terminate raised for its deletion must stand until the node is back."""
        return self.lists > 0 and not self.node_missing

    def _success(self) -> None:
        # A watch on a node that does not exist works, but is not what the user wants.
        if not self.node_missing:
            self.health.success(recovered=not self.watch_refused)

    def _handle(self, event: WatchEvent, name: str, emit: Emit) -> None:
        if event.type == "BOOKMARK":
            self.bookmarks += 1
            if self._forgotten and self.node_object is not None:
                # The Node is as last seen up to this version: those asked about stand.
                self._node(self.node_object, name, emit)
        elif event.type == "DELETED":
            self.node_object = None
            self._apply([*self.active.values(), deleted_report(name, self.node_uid)], emit)
        else:
            self._node(event.object, name, emit)
            self.node_missing = False
        self.resource_version = event.resource_version or self.resource_version

    def _read_karpenter(self, node: object, emit: Emit) -> None:
        """Have Karpenter's deadline found for a node it is disrupting: the NodeClaim that owns
        the Node is read (`_read_nodeclaim`), once its termination timestamp is there (it is
        stamped when the NodeClaim is deleted, after the taint: until then each change of the
        Node looks again). In a task of its own: read here, between two watch events, a GET
        the API server held kept the next event (a shutdown's terminate) for its timeout."""
        name = nodeclaim_name(node)
        if name is None or not being_disrupted(node):
            self.karpenter_deadline = None
            return
        if self.karpenter_deadline is not None and self.karpenter_deadline[0] == name:
            return
        self._nodeclaim_stale = True
        if self._nodeclaim_reader is None or self._nodeclaim_reader.done():
            self._nodeclaim_reader = asyncio.create_task(self._read_nodeclaim(emit))

    async def _read_nodeclaim(self, emit: Emit) -> None:
        """Read the NodeClaim of the Node as it is now until it answered for the Node as it is
        (read again when the Node changed meanwhile: the stamp may have come), with a backoff
        after a failure, or the disruption ended. A deadline learned sends the node's notices
        again with it. A 403 was kept for the watcher's life: once the operator applied
        `components/karpenter`, the drain still had no deadline until the agent restarted, and
        a NodeClaim that failed once for a transport error was not read again unless the Node
        changed (a Node being deleted may not change for hours)."""
        failed = False
        while True:
            if failed:
                await asyncio.sleep(self.nodeclaim_backoff.next())
            node = self.node_object
            name = nodeclaim_name(node)
            api = self.api
            if name is None or not being_disrupted(node):
                return
            if self.karpenter_deadline is not None and self.karpenter_deadline[0] == name:
                return
            if api is None:
                failed = True
                continue  # reconnecting: the next try reads it through the new client
            self._nodeclaim_stale = False
            read, deadline = await self._get_deadline(api, name, emit)
            # The Node as it is after the read (an event may have come meanwhile).
            node = self.node_object
            if deadline is not None and nodeclaim_name(node) == name and being_disrupted(node):
                self.karpenter_deadline = (name, deadline)
                self._node(node, api.node_name, emit)
                return
            failed = not read
            if read and not self._nodeclaim_stale:
                return

    async def _get_deadline(
        self, api: NodeApi, name: str, emit: Emit
    ) -> tuple[bool, datetime | None]:
        """GET the NodeClaim: whether it answered, and its termination deadline if any."""
        self.nodeclaim_gets += 1
        try:
            nodeclaim = await api.get_nodeclaim(name)
        except ApiError as error:
            if error.status == 403:
                self._refused(name, api.node_name)
            else:
                log.info("kubernetes: NodeClaim %s not read: %s", name, error)
            return False, None
        except (httpx.HTTPError, ParseError, ConfigError) as error:
            # ConfigError: no token now (a file being replaced, an exec plugin failing); in
            # the reader's task, it would end the task and every read after it.
            log.info("kubernetes: NodeClaim %s not read: %s", name, error)
            return False, None
        self._took_date(api.date, emit)
        self.nodeclaim_backoff.reset()
        if self.nodeclaims_refused:
            self.nodeclaims_refused = False
            self.health.condition(NODECLAIM_REFUSED, None)
            log.info("kubernetes: NodeClaim %s read: the API server shows NodeClaims now", name)
        return True, termination_deadline(nodeclaim)

    def _took_date(self, date: str | None, emit: Emit, *, apply: bool = True) -> None:
        """Take the skew of this node's clock from an answer's `Date` (`take_skew`, which
        holds the `clock` condition); where it moved (NTP's step), the node's notices go out
        again on the clock as it is (`apply`; a list applies the node itself)."""
        service = ServiceClock.read(date)
        if service is not None:
            self.service_clock = service
        self._clock_is(date, emit, apply=apply)

    def _clock_is(self, date: str | None, emit: Emit, *, apply: bool = True) -> None:
        ahead = take_skew(self.clock_ahead, date, utcnow(), self.health, "kubernetes", SERVICE)
        if ahead is None:
            return
        self.clock_ahead = ahead
        if apply and self.node_object is not None and self.node_name is not None:
            self._node(self.node_object, self.node_name, emit)

    async def _follow_clock(self, emit: Emit) -> None:
        """Every CLOCK_CHECK seconds, this node's clock against the API server's as its last
        `Date` and the boot clock since give it: a watch brings a `Date` only as it opens,
        so NTP setting the clock right left a deadline hours off, and `status` said the clock
        was off, for the rest of the watch."""
        while True:
            await asyncio.sleep(CLOCK_CHECK)
            try:
                self._clock_now(emit)
            except Exception as error:  # never let a surprise end the following
                log.error("kubernetes: %s: %s", type(error).__name__, error)

    def _clock_now(self, emit: Emit, *, apply: bool = True) -> None:
        """Take the skew of this node's clock against the API server's as its last `Date`,
        carried on the boot clock, gives it now (`_clock_is`)."""
        service = self.service_clock.now() if self.service_clock is not None else None
        if service is not None:
            self._clock_is(format_http_date(service), emit, apply=apply)

    def _refused(self, name: str, node_name: str) -> None:
        """A 403 on the NodeClaim: said once in the log, and in `status` until it is read."""
        if not self.nodeclaims_refused:
            log.warning(
                "kubernetes: the API server refused to show NodeClaim %s (403): Karpenter's "
                "drain of node %s has no deadline; grant get on nodeclaims.karpenter.sh "
                "(packaging/kubernetes/components/karpenter) to have it; retrying",
                name,
                node_name,
            )
        self.nodeclaims_refused = True
        self.health.condition(
            NODECLAIM_REFUSED,
            "get on nodeclaims (karpenter.sh) is forbidden: Karpenter's drain has no deadline; "
            "apply packaging/kubernetes/components/karpenter",
        )

    def _node(
        self,
        node: object,
        name: str,
        emit: Emit,
        restored: Mapping[str, Report] | None = None,
        *,
        relisted: bool = False,
    ) -> None:
        """Apply the Node as it is now. `restored` (the agent's notices of this node from
        before this watcher) stand for the previous reports when it has none of its own.
        `relisted`: the Node comes from a list, after a gap (a restart, a 410) whose events
        were not seen: a taint removed and added again in it is cleared, then raised, as a
        watch that saw both sends it."""
        uid = node_uid(node)
        # Another object under the name (deleted and created again, maybe while the watch
        # was broken and a relist saw only the new one): the old one's notices are not its
        # notices. Each is cleared, and the new one's are raised afresh, same ids included.
        replaced = uid is not None and self.node_uid is not None and uid != self.node_uid
        previous = {} if replaced else (restored or self.active)
        # The skew as it is now, not as the last look at the clock (CLOCK_CHECK) found it: a
        # VM event set within 5 s of a step 2 h forward went out on the skew from before, 100
        # min past by the stepped clock, and the board, raising it afresh with no earlier
        # reading to hold, sent it as terminate (the job out 20 min early), then a clear.
        self._clock_now(emit, apply=False)
        current = node_reports(
            node,
            name,
            self.taints,
            previous,
            self.host,
            terminate_taints=self.terminate_taints,
            karpenter_deadline=self.karpenter_deadline[1] if self.karpenter_deadline else None,
            clock_ahead=self.clock_ahead,
        )
        # The deadlines are on the cluster's clock; the board and the job time them by this
        # node's: 2 h behind, Karpenter's forced termination came 2 h before the terminate.
        current = [self._on_node_clock(r) if r.deadline is not None else r for r in current]
        current = self._not_the_last_boots_end(node, name, current)
        compared = self._as_last_seen(previous) if restored and not replaced else previous
        again = readded(compared, current, self._ahead_now()) if relisted else []
        for clear in again:
            log.info("kubernetes: clear %s (set again since it was raised)", clear.id)
            emit(clear)
            self.active.pop(clear.id, None)  # raised again below, as new
        if restored and not replaced:
            # The agent is given what it holds; the watcher keeps the Node as listed (who set
            # `spec.unschedulable` and when, there, tells a later gap's cordon lifted and
            # applied again).
            self._apply(as_restored(restored, current, {c.id for c in again}), emit)
            self.active = {report.id: report for report in current}
        else:
            self._apply(current, emit, replaced=replaced)
        self.node_uid = uid or self.node_uid
        self.seen_node = True
        self.node_object = node
        self._save_marks()

    def _save_marks(self) -> None:
        """Keep the marks of the active notices as this Node shows them now (MARKS_FILE), when
        they changed. Not synced: it must outlive the agent, not the machine (a reboot)."""
        marks = {report.id: _marks_of(report) for report in self.active.values()}
        content = {"uid": self.node_uid, "marks": {k: v for k, v in marks.items() if v}}
        if content == self._marks_saved:
            return
        try:
            path = Path(self.context.state_dir) / MARKS_FILE
            write_atomically(path, json.dumps(content, sort_keys=True), sync=False)
        except OSError as error:
            log.info("kubernetes: %s not written (%s)", MARKS_FILE, error)
            return
        self._marks_saved = content

    def _as_last_seen(self, restored: Mapping[str, Report]) -> dict[str, Report]:
        """`restored`, each with the marks this watcher last saw it with (MARKS_FILE) when it
        saw the same Node object: the agent's state file holds the marks each was first
        sent with. Unreadable or absent: as restored."""
        try:
            content = (Path(self.context.state_dir) / MARKS_FILE).read_bytes()
        except OSError:
            return dict(restored)
        return as_last_seen(content, restored)

    def _ahead_now(self) -> timedelta:
        """How far this node's clock is ahead of the API server's now, to the second (its
        last `Date` carried on the boot clock), not zeroed within TRUSTED_SKEW as
        `clock_ahead` is: what a notice's `noticed_at` is compared on with a managedFields
        time (`readded`). `clock_ahead` where no `Date` was read."""
        service = self.service_clock.now() if self.service_clock is not None else None
        return self.clock_ahead if service is None else utcnow() - service

    def _not_the_last_boots_end(
        self, node: object, name: str, current: list[Report]
    ) -> list[Report]:
        """`current` less the VM event that ended this node's previous boot, still shown
        Started (`boots.py`): published, its terminate stopped the job resumed after the
        reboot, at each restart while the condition showed it."""
        if self.boots is None:
            return current
        event = node_vm_event(node)
        held = self.boots.held_back(event)
        shown = notice_id(name, "vm-event", event.type) if event is not None else None
        if self.boots.retired_shown(event) and shown not in self.active:
            # Retired by the agent (before a restart) while shown Started: as a watcher that
            # never stopped, which keeps it and raises nothing, not raised again.
            if shown not in self._retired_said:
                self._retired_said.add(shown)
                log.info(
                    "kubernetes: %s was retired before the agent restarted and is still shown "
                    "Started; not raised again while it is",
                    shown,
                )
            held = True
        if held:
            current = [report for report in current if report.id != shown]
        published = not held and any(report.id == shown for report in current)
        self.boots.published(event if published else None)
        return current

    def forget(self, notice_id: str) -> None:
        """The agent is past `notice_id`'s deadline plus the grace: reported again at the next
        list, watch event or BOOKMARK (the API server confirming the Node as last seen) while
        the Node still shows it, it stays active, overdue. A watch sends only changes, so a
        Karpenter taint standing past its termination time was never reported again, and the
        agent cleared it (a job told it was safe on a node being taken). A Started VM event
        the Node still shows is not raised again while it does (this watcher keeps it, and
        reports no change): the boot record keeps that, so a restarted agent does not raise
        it anew either (`boots.py`)."""
        if notice_id not in self.active:
            return
        if not self._retire_started(notice_id):
            self._forgotten.add(notice_id)

    def _retire_started(self, notice_id: str) -> bool:
        """Whether `notice_id` is the Started VM event the Node shows: retired for this boot."""
        node = self.node_object
        if node is None or self.boots is None or self.node_name is None:
            return False
        try:
            event = node_vm_event(node)
        except ParseError:
            return False
        if event is None or event.status != "Started":
            return False
        if notice_id != vm_event_id(self.node_name, "vm-event", event.type):
            return False
        self.boots.retire(event.type)
        return True

    def _on_node_clock(self, report: Report) -> Report:
        """`report`'s times as this node's clock reads them (`report_on_clock`). Moved by a
        skew, its deadline is one this watcher moves with a step of the node's clock (within
        CLOCK_CHECK, `_follow_clock`): the board holds it on the boot clock until then
        (`deadline_on_boot_clock`). Taken for a moment, NTP's step 2 h forward put it 90 min
        past, and the board retired it with a `clear` (a job trains on) before the watcher
        raised it again, moved, up to 5 s later."""
        moved = report_on_clock(report, self.clock_ahead)
        if moved is report:
            return report
        return moved.model_copy(update={"deadline_on_boot_clock": True})

    def _apply(self, current: list[Report], emit: Emit, *, replaced: bool = False) -> None:
        # Replaced: every notice of the old object is cleared, those the new one has too: a
        # notice sent again under its id without a clear is a repeat to a job's guard, which
        # had saved for it, and it saved nothing for the new node's disruption.
        out = changes(self.active, []) + current if replaced else changes(self.active, current)
        # Those the agent asked about (`forget`) that the Node still shows, unchanged: again.
        sent = {report.id for report in out}
        out += [r for r in current if r.id in self._forgotten and r.id not in sent]
        self._forgotten.clear()
        for report in out:
            log.info("kubernetes: %s %s", report.action, report.id)
            emit(report)
        self.active = {report.id: report for report in current}

    async def aclose(self) -> None:
        if self.api is not None:
            await self.api.aclose()
            self.api = None


vm_event_id = notice_id  # `forget`'s parameter hides the name


def build(settings: Settings, context: WatcherContext) -> KubernetesWatcher:
    return KubernetesWatcher(settings, context)


__all__ = [
    "KubernetesWatcher",
    "build",
    "changes",
    "deleted_report",
    "node_reports",
    "parse_event",
    "parse_list",
]
