"""Prometheus metrics, `/healthz` and `/readyz` on one small HTTP server (the `metrics` extra).

The agent imports this module only when `metrics_address` is set, so prometheus-client stays
an optional dependency. The observer's hooks run on the agent's event loop; the HTTP server
runs on its own daemon threads and reads shared state under a lock.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import platform
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.timefmt import parse_time
from forewarn.providers.health import AGENT_KINDS, APPROVAL_OUTCOMES

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        disable_created_metrics,
        generate_latest,
    )
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector
except ModuleNotFoundError as missing:
    if missing.name != "prometheus_client":
        raise  # a broken install of it keeps its own error
    from forewarn.protocol.install import extra_hint

    # The bare "No module named 'prometheus_client'" named neither the extra nor the
    # command; forewarn is on no package index, so the hint names this install's source.
    raise ModuleNotFoundError(
        f"{__name__} needs prometheus_client: {extra_hint('metrics')}",
        name="prometheus_client",
    ) from None

from .observer import Deliveries, Observer
from .protocol import AckRequest, Notice
from .throttle import WarningThrottle

if TYPE_CHECKING:
    from forewarn.providers.registry import Registry

log = logging.getLogger("forewarn.agent.metrics")

# Every counter and histogram would also export a `_created` series: twice the series for a
# timestamp no alert or dashboard here reads.
disable_created_metrics()

# How many retired notices are remembered, so that one raised again is not measured again.
EXPIRED_KEPT = 1000

# The provider name under which the runner reports the agent's own errors.
AGENT = "agent"

# The agent's own error kind that is started at 0 beside each provider's `watcher-failed`.
AGENT_ERROR_KINDS = ("state",)
# The actions a notice of any reason can be counted under: a drain may be escalated.
STARTED_ACTIONS = ("drain", "terminate")
# What a saved ack's flush is counted under: the acked notice's action, or none active.
FLUSH_TRIGGERS = ("drain", "terminate", "periodic")

# A watcher that knows when the provider itself issued a notice puts that moment here, as
# RFC 3339, so the detection delay (noticed_at - notice_time) can be measured.
NOTICE_TIME_KEY = "notice_time"

# From a 0 s hibernate notice through AWS's 2 min and Azure's 15 min to GCP's 60 min host
# maintenance and the days of a scheduled event.
LEAD_BUCKETS = (0, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400, 604800)
DELAY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
FLUSH_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)

# The HTTP server shares the agent's file descriptors with its ZeroMQ sockets, and libzmq
# aborts the whole process when an accept finds none left (observed: 1,000 idle connections
# under the usual limit of 1,024 killed the agent). So connections beyond this many are closed
# at once, and each must finish within REQUEST_SECONDS however slowly its bytes trickle in: a
# read timeout alone is reset by every byte.
MAX_CONNECTIONS = 32
REQUEST_SECONDS = 5.0
# Connections closed for being over the cap are logged at most this often, with a count.
REFUSAL_LOG_INTERVAL = 60.0
# The agent's loop reports its parts' liveness every second. A loop blocked by a sync call (a
# hung filesystem under the state write, a watcher that never yields) reports nothing, and the
# last report, all alive, would be served for ever: after this long without one the loop itself
# is dead in /healthz (part `event-loop`).
LOOP_SILENCE = 5.0


class MetricsError(ForewarnError, RuntimeError):
    """The metrics server cannot listen; the text names the address and why."""


class MetricsObserver(Observer):
    """Turns the agent's events into metrics and tracks readiness."""

    def __init__(
        self, clock: Callable[[], float] = time.time, specs: Registry | None = None
    ) -> None:
        self.clock = clock
        if specs is None:
            from forewarn.providers.registry import REGISTRY

            specs = REGISTRY
        self.specs: Registry = specs
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._deadlines: dict[str, datetime] = {}  # active notices that have a deadline
        self._active: set[str] = set()
        self._first_seen: set[str] = set()  # notices whose detection delay is recorded
        # Notices whose lead time is recorded: apart, since a notice may get its deadline
        # after its first publication.
        self._lead_seen: set[str] = set()
        # Notices retired past their end, newest last: one its provider raises again is the
        # same occurrence, not measured again. Bounded, oldest forgotten first.
        self._expired: dict[str, None] = {}
        # Active notices past their deadline plus the grace that their provider still shows
        # (`on_overdue`), with their provider and reason, until published again.
        self._overdue: dict[str, tuple[str, str]] = {}
        self._polled_ok: dict[str, bool] = {}
        self._parts: dict[str, bool] = {}
        # time.monotonic() of the last liveness report; until the first, of the construction:
        # /healthz is served from then on, and a start that hung before the loop's first
        # report (a state directory on a hung filesystem) was 200 for as long as it hung.
        self._parts_at = time.monotonic()
        self.loop_silence = LOOP_SILENCE
        self._started = False
        self._stopping = False  # not ready from here: stopping can take STOP_GRACE and more
        self._stopped = False
        registry = self.registry
        self.notices = Counter(
            "forewarn_notices",
            "Notices published, by provider, reason and action (escalations count as terminate).",
            ["provider", "reason", "action"],
            registry=registry,
        )
        self.escalations = Counter(
            "forewarn_escalations",
            "Drains sent as terminate by the agent because their deadline is within the exit "
            "margin, at their first send too (also counted in forewarn_notices as terminate), "
            "once per escalation (that terminate sent again, its deadline moved, is no other): "
            'forewarn_notices_total{action="terminate"} - ignoring(action) '
            "forewarn_escalations_total are the other terminates published (provider "
            "terminates, and the re-sends).",
            ["provider", "reason"],
            registry=registry,
        )
        build = Gauge(
            "forewarn_build_info",
            "Always 1; the labels say which forewarn and Python run.",
            ["version", "python"],
            registry=registry,
        )
        build.labels(_version(), platform.python_version()).set(1)
        self.lead_time = Histogram(
            "forewarn_notice_lead_seconds",
            "Time from noticing a notice to its deadline, once per notice that has a deadline.",
            ["provider", "reason"],
            buckets=LEAD_BUCKETS,
            registry=registry,
        )
        self.detection_delay = Histogram(
            "forewarn_detection_delay_seconds",
            "Time from the provider's own notice time (detail.notice_time) to the agent "
            "noticing it, once per notice that states one.",
            ["provider"],
            buckets=DELAY_BUCKETS,
            registry=registry,
        )
        self.expired = Counter(
            "forewarn_notices_expired",
            "Notices retired because they outlived their deadline plus the grace (or, without "
            "a deadline, the manual lifetime).",
            ["provider", "reason"],
            registry=registry,
        )
        self.unacked = Counter(
            "forewarn_unacked_terminates",
            "Terminates whose deadline passed while some client that received or held them had "
            "not acked them (once per notice and deadline; the agent's log names the clients).",
            ["provider", "reason"],
            registry=registry,
        )
        self.polls = Counter(
            "forewarn_polls", "Polls of a provider's endpoint.", ["provider"], registry=registry
        )
        self.poll_errors = Counter(
            "forewarn_poll_errors",
            "Failed polls, by provider and kind of error.",
            ["provider", "kind"],
            registry=registry,
        )
        self.last_poll = Gauge(
            "forewarn_last_successful_poll_timestamp_seconds",
            "Unix time of the last successful poll of each provider; 0 until its first, so "
            "an alert on its age fires for a provider that never succeeded.",
            ["provider"],
            registry=registry,
        )
        self.subscribers = Gauge(
            "forewarn_subscribers", "Clients that listen and ack.", registry=registry
        )
        self.clients_refused = Counter(
            "forewarn_clients_refused",
            "Acking clients refused (not tracked, so not waited for): as many as the agent "
            "tracks were tracked already.",
            registry=registry,
        )
        self.flush = Histogram(
            "forewarn_flush_seconds",
            "Checkpoint flush time reported in acks, by what triggered it "
            "(drain, terminate, or periodic when the ack names no active notice).",
            ["trigger"],
            buckets=FLUSH_BUCKETS,
            registry=registry,
        )
        self.failed_flushes = Counter(
            "forewarn_failed_flushes", "Acks that report a failed flush.", registry=registry
        )
        self.approvals = Counter(
            "forewarn_approvals",
            "Events a watcher approved with its provider (Azure StartRequests answered 200: "
            "sent), failed to approve, or did not approve (skipped: started, gone, shared, or "
            "a type not to approve).",
            ["provider", "outcome"],
            registry=registry,
        )
        registry.register(_NoticeGauges(self))
        self._notifiers: list[Observer] = []
        registry.register(_NotifierCounts(self))
        self._conditions: Callable[[], dict[str, dict[str, str]]] = dict
        registry.register(_Conditions(self))
        ready = Gauge(
            "forewarn_ready",
            "1 once every configured watcher has polled successfully, else 0.",
            registry=registry,
        )
        ready.set_function(lambda: 1.0 if self.readiness()[0] else 0.0)

    def watch_notifiers(self, notifiers: list[Observer]) -> None:
        """Export what `notifiers` delivered, failed to deliver, dropped and hold, read from
        their `deliveries()` at each scrape."""
        with self._lock:
            self._notifiers = list(notifiers)

    def notifier_deliveries(self) -> dict[str, Deliveries]:
        with self._lock:
            notifiers = list(self._notifiers)
        found: dict[str, Deliveries] = {}
        for notifier in notifiers:
            found.update(notifier.deliveries())
        return found

    def watch_conditions(self, source: Callable[[], dict[str, dict[str, str]]]) -> None:
        with self._lock:
            self._conditions = source

    def standing_conditions(self) -> list[tuple[str, str]]:
        """(part, kind) of each standing problem now; none when they cannot be read (a
        dict changed while copied), rather than a failed scrape."""
        with self._lock:
            source = self._conditions
        try:
            return sorted((part, kind) for part, kinds in source().items() for kind in kinds)
        except Exception:
            log.debug("standing conditions not read", exc_info=True)
            return []

    # Observer hooks (event loop thread).

    def on_start(self, providers: list[str]) -> None:
        with self._lock:
            for name in providers:
                self._polled_ok.setdefault(name, False)
            self._started = True
        for name in providers:
            self.polls.labels(name)
            if not self._polled_ok.get(name):
                self.last_poll.labels(name).set(0)
        self._start_series(providers)

    def _start_series(self, providers: list[str]) -> None:
        # A labelled counter appears at its first increment, and increase()/rate() take that
        # first sample as the baseline: the event that created the series is never seen, and a
        # spot VM's first terminate is mostly its only one. So the series one alerts on start
        # at 0: each reason the provider declares, drain and terminate (clears are no alert),
        # the terminates a job missed (unacked), and the crash and state-write errors. Bounded
        # by the providers' declared reasons.
        # Histograms too: rate(forewarn_flush_seconds_bucket[1d]) read nothing of the first
        # flush, the one a job makes at its first notice.
        for name in providers:
            reasons = self.specs[name].reasons if name in self.specs else ()
            for reason in reasons:
                for action in STARTED_ACTIONS:
                    self.notices.labels(name, reason, action)
                self.escalations.labels(name, reason)
                self.expired.labels(name, reason)
                self.unacked.labels(name, reason)
                self.lead_time.labels(name, reason)
            self.detection_delay.labels(name)
            for kind in AGENT_KINDS:
                self.poll_errors.labels(name, kind)
            if name in self.specs and self.specs[name].approves:
                for outcome in APPROVAL_OUTCOMES:
                    self.approvals.labels(name, outcome)
        for trigger in FLUSH_TRIGGERS:
            self.flush.labels(trigger)
        for kind in AGENT_ERROR_KINDS:
            self.poll_errors.labels(AGENT, kind)

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        self.notices.labels(notice.provider, notice.reason, notice.action).inc()
        if escalated:
            self.escalations.labels(notice.provider, notice.reason).inc()
        with self._lock:
            self._overdue.pop(notice.id, None)  # changed or cleared: overdue no more
            if notice.action == "clear":
                self._active.discard(notice.id)
                self._deadlines.pop(notice.id, None)
                if notice.id not in self._expired:
                    self._first_seen.discard(notice.id)
                    self._lead_seen.discard(notice.id)
                return
            self._expired.pop(notice.id, None)
            self._active.add(notice.id)
            if notice.deadline is not None:
                self._deadlines[notice.id] = notice.deadline
            else:
                self._deadlines.pop(notice.id, None)
            first = notice.id not in self._first_seen
            self._first_seen.add(notice.id)
            first_deadline = notice.deadline is not None and notice.id not in self._lead_seen
            if first_deadline:
                self._lead_seen.add(notice.id)
        if first_deadline and notice.deadline is not None:
            lead = (notice.deadline - notice.noticed_at).total_seconds()
            self.lead_time.labels(notice.provider, notice.reason).observe(max(0.0, lead))
        if not first:
            return
        stated = notice_time(notice.detail)
        if stated is not None:
            delay = (notice.noticed_at - stated).total_seconds()
            self.detection_delay.labels(notice.provider).observe(max(0.0, delay))

    def on_restored(self, notice: Notice) -> None:
        # Active again after a restart: in the gauges, but its lead time was recorded when it
        # was first published.
        with self._lock:
            self._active.add(notice.id)
            self._first_seen.add(notice.id)
            if notice.deadline is not None:
                self._deadlines[notice.id] = notice.deadline
                self._lead_seen.add(notice.id)

    def on_liveness(self, parts: dict[str, bool]) -> None:
        with self._lock:
            self._parts = dict(parts)
            self._parts_at = time.monotonic()

    def liveness(self) -> tuple[bool, dict[str, bool]]:
        """(alive, part -> running): alive while every part of the agent runs, and the loop
        that reports them has reported within `loop_silence` seconds."""
        with self._lock:
            parts = dict(self._parts)
            reported = self._parts_at
        parts["event-loop"] = time.monotonic() - reported < self.loop_silence
        return all(parts.values()) and not self._stopped, parts

    def on_expired(self, notice: Notice) -> None:
        self.expired.labels(notice.provider, notice.reason).inc()
        with self._lock:
            self._expired[notice.id] = None
            while len(self._expired) > EXPIRED_KEPT:
                oldest = next(iter(self._expired))
                del self._expired[oldest]
                if oldest not in self._active:
                    self._first_seen.discard(oldest)
                    self._lead_seen.discard(oldest)

    def on_overdue(self, notice: Notice) -> None:
        with self._lock:
            self._overdue[notice.id] = (notice.provider, notice.reason)

    def overdue_notices(self) -> dict[tuple[str, str], int]:
        """How many active notices are overdue, by (provider, reason)."""
        with self._lock:
            found = list(self._overdue.values())
        return {key: found.count(key) for key in set(found)}

    def on_unacked(self, notice: Notice, clients: list[str]) -> None:
        self.unacked.labels(notice.provider, notice.reason).inc()

    def on_poll(self, provider: str, ok: bool, error_kind: str | None) -> None:
        # The runner reports the agent's own problems (a state write, a crashed part) as
        # errors of provider `agent`, and a watcher's crash or hang as its error
        # `watcher-failed` or `watcher-stalled`: errors to count, but no poll of any endpoint.
        if provider != AGENT and error_kind not in AGENT_KINDS:
            self.polls.labels(provider).inc()
        if ok:
            self.last_poll.labels(provider).set(self.clock())
            with self._lock:
                self._polled_ok[provider] = True
        else:
            self.poll_errors.labels(provider, error_kind or "unknown").inc()

    def on_approval(self, provider: str, outcome: str) -> None:
        self.approvals.labels(provider, outcome).inc()

    def on_ack(self, ack: AckRequest, notice: Notice | None) -> None:
        if ack.outcome == "failed":
            self.failed_flushes.inc()
            return
        if ack.outcome != "saved" or ack.flush_seconds is None:
            return
        trigger = notice.action if notice is not None else "periodic"
        self.flush.labels(trigger).observe(ack.flush_seconds)

    def on_subscribers(self, count: int) -> None:
        self.subscribers.set(count)

    def on_client_refused(self) -> None:
        self.clients_refused.inc()

    def on_stopping(self) -> None:
        with self._lock:
            self._stopping = True

    def on_stop(self) -> None:
        with self._lock:
            self._stopped = True

    # Read at scrape time (HTTP threads).

    def active_notices(self) -> tuple[int, float]:
        """(notices now active, seconds to the nearest of their deadlines), read at one
        instant: negative when passed, NaN when none has a deadline."""
        with self._lock:
            count = len(self._active)
            deadlines = [deadline.timestamp() for deadline in self._deadlines.values()]
        return count, (min(deadlines) - self.clock()) if deadlines else math.nan

    def readiness(self) -> tuple[bool, dict[str, bool]]:
        """(ready, provider → has polled successfully). Readiness latches per provider: one
        flapping endpoint after a good start does not take the agent out of service."""
        with self._lock:
            providers = dict(self._polled_ok)
            ready = self._started and not self._stopping and not self._stopped
            ready = ready and all(providers.values())
        return ready, providers


class _NoticeGauges(Collector):
    """`forewarn_active_notices` and `forewarn_nearest_deadline_seconds` from one read of the
    observer's state. As two callback gauges, a scrape read them at two moments, and a notice
    retired in between showed as still active beside a NaN deadline."""

    def __init__(self, observer: MetricsObserver) -> None:
        self._observer = observer

    def collect(self) -> Iterator[GaugeMetricFamily]:
        count, nearest = self._observer.active_notices()
        yield GaugeMetricFamily("forewarn_active_notices", "Notices now active.", value=count)
        yield GaugeMetricFamily(
            "forewarn_nearest_deadline_seconds",
            "Seconds left to the nearest deadline of an active notice, negative when passed; "
            "NaN when no active notice has a deadline.",
            value=nearest,
        )
        overdue = GaugeMetricFamily(
            "forewarn_notices_overdue",
            "Active notices past their deadline plus the grace that their provider still shows "
            "(the machine not taken yet): kept active, not sent again.",
            labels=["provider", "reason"],
        )
        for (provider, reason), count in sorted(self._observer.overdue_notices().items()):
            overdue.add_metric([provider, reason], count)
        yield overdue


class _NotifierCounts(Collector):
    """`forewarn_notifier_deliveries_total` and `forewarn_notifier_pending`, read from the
    notifiers at scrape time: a receiver refusing every notice showed only in the log. Each
    configured notifier's series exist from the start, at 0, so increase() sees the first
    failure; none without a notifier."""

    def __init__(self, observer: MetricsObserver) -> None:
        self._observer = observer

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counts = self._observer.notifier_deliveries()
        if not counts:
            return
        deliveries = CounterMetricFamily(
            "forewarn_notifier_deliveries",
            "What each notifier did: notices for the webhook, requests (Events, cordons) for "
            "kubernetes; delivered, failed (given up on) or dropped (queue full).",
            labels=["notifier", "outcome"],
        )
        pending = GaugeMetricFamily(
            "forewarn_notifier_pending",
            "Notices each notifier has not delivered yet (waiting, or being retried).",
            labels=["notifier"],
        )
        for name, count in sorted(counts.items()):
            deliveries.add_metric([name, "delivered"], count.delivered)
            deliveries.add_metric([name, "failed"], count.failed)
            deliveries.add_metric([name, "dropped"], count.dropped)
            pending.add_metric([name], count.pending)
        yield deliveries
        yield pending


class _Conditions(Collector):
    """`forewarn_condition`: 1 for each standing problem `forewarn status` shows as a
    `condition` line (the API server refusing NodeClaims, an IMDS token refused, a state
    file that cannot be written), while it holds. Some come with no poll error at all, and a
    fleet watched by Prometheus never runs `status`. The why stays in `status` and the log:
    as a label, each new wording would be a new series."""

    def __init__(self, observer: MetricsObserver) -> None:
        self._observer = observer

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "forewarn_condition",
            "1 while a standing problem holds (as `forewarn status` shows it): by provider "
            "(`agent` for the agent's own) and condition.",
            labels=["provider", "condition"],
        )
        for part, kind in self._observer.standing_conditions():
            family.add_metric([part, kind], 1.0)
        yield family


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forewarn")
    except PackageNotFoundError:  # a source tree that is not installed
        return "unknown"


def notice_time(detail: dict[str, Any]) -> datetime | None:
    """The provider's own notice time from `detail.notice_time`, or None when absent or not
    an RFC 3339 time."""
    value = detail.get(NOTICE_TIME_KEY)
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer
    timeout = REQUEST_SECONDS

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def _answer(self, *, with_body: bool) -> None:
        observer = self.server.observer
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            status, body, kind = 200, generate_latest(observer.registry), CONTENT_TYPE_LATEST
        elif path == "/healthz":
            alive, parts = observer.liveness()
            status = 200 if alive else 503
            payload = {"alive": alive, "parts": parts}
            body, kind = (json.dumps(payload) + "\n").encode(), "application/json"
        elif path == "/readyz":
            ready, providers = observer.readiness()
            waiting = sorted(name for name, ok in providers.items() if not ok)
            payload = {"ready": ready, "providers": providers, "waiting": waiting}
            status = 200 if ready else 503
            body, kind = (json.dumps(payload) + "\n").encode(), "application/json"
        else:
            status, kind = 404, "text/plain"
            body = b"not found: try /metrics, /healthz or /readyz\n"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's listen backlog is 5: a burst of connections (several scrapers and probes
    # at once, or a flood) waited on the kernel's SYN retransmits, 96 connects took 15 s, and
    # the cap below was never reached, so a flood was served slowly rather than refused. A
    # queued connection holds no descriptor of ours until it is accepted.
    request_queue_size = 128

    def __init__(self, host: str, port: int, observer: MetricsObserver) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.observer = observer
        self.max_connections = MAX_CONNECTIONS
        self.request_seconds = REQUEST_SECONDS
        self._open: dict[socket.socket, float] = {}  # connection -> when it must be done
        self._open_lock = threading.Lock()
        self.refused = 0
        self._refusals = WarningThrottle(REFUSAL_LOG_INTERVAL)
        try:
            super().__init__((host, port), _Handler)
        except OSError as error:
            # `[::]` means every address; on a kernel booted without IPv6 (ipv6.disable=1)
            # those are IPv4's, and the manifests' default must still start there.
            if host != "::" or error.errno != errno.EAFNOSUPPORT:
                raise
            log.warning(
                "metrics_address [::]:%d: this kernel has no IPv6 (%s); listening on "
                "0.0.0.0:%d instead",
                port,
                error.strerror or error,
                port,
            )
            self.address_family = socket.AF_INET
            super().__init__(("0.0.0.0", port), _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6 and self.server_address[0] == "::":
            # Dual-stack: IPv4 clients too, whatever net.ipv6.bindv6only says (1 on some
            # hardened hosts would leave an IPv4-only or dual-stack cluster's scrapes out).
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self._open_lock:
            if len(self._open) < self.max_connections:
                self._open[request] = time.monotonic() + self.request_seconds
                return True
        self._refuse(client_address)
        return False

    def _refuse(self, client_address: Any) -> None:
        self.refused += 1
        held = self._refusals.due()
        if held is not None:
            log.warning(
                "metrics: %d connection(s) closed unanswered (latest from %s): %d are open "
                "already, the most served at once",
                held,
                client_address[0],
                self.max_connections,
            )

    def service_actions(self) -> None:
        # Run by serve_forever between polls: cut the connections past their time. The
        # handler's thread then reads the end of the stream and closes its socket.
        now = time.monotonic()
        with self._open_lock:
            for request, due in self._open.items():
                if due <= now:
                    with contextlib.suppress(OSError):
                        request.shutdown(socket.SHUT_RDWR)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)

    def open_connections(self) -> int:
        with self._open_lock:
            return len(self._open)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A peer that went away mid-answer, or was cut at its deadline, is no error of ours;
        # anything else goes to the log rather than to stderr (socketserver's default).
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("metrics: connection from %s failed", client_address[0], exc_info=True)
        else:
            log.exception("metrics: answering %s failed", client_address[0])


class MetricsService(MetricsObserver):
    """The observer together with its HTTP server, listening from construction so that a
    taken port stops the agent at start-up instead of failing silently later."""

    def __init__(
        self,
        host: str,
        port: int,
        clock: Callable[[], float] = time.time,
        specs: Registry | None = None,
    ) -> None:
        super().__init__(clock, specs)
        try:
            self.server = MetricsServer(host, port, self)
        except OSError as error:
            # As it is written: `:::9464` reads as no address at all.
            shown = f"[{host}]" if ":" in host else host
            raise MetricsError(
                f"metrics_address {shown}:{port}: cannot listen ({error.strerror or error})"
            ) from None
        self.thread = threading.Thread(
            target=self._serve,
            name="forewarn-metrics",
            daemon=True,
        )
        self.thread.start()
        bound_host, bound_port = str(self.server.server_address[0]), self.server.server_port
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"
        log.info("serving metrics on %s/metrics, health on /healthz and /readyz", self.url)

    def _serve(self) -> None:
        try:
            self.server.serve_forever(poll_interval=0.2)
        except Exception:
            # The agent sees the dead thread in `parts`; this says why, in its own log.
            log.exception("metrics: the server stopped")

    def on_stop(self) -> None:
        super().on_stop()
        self.close()

    def parts(self) -> dict[str, bool]:
        return {"metrics": self.thread.is_alive()}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


__all__ = [
    "MAX_CONNECTIONS",
    "NOTICE_TIME_KEY",
    "REQUEST_SECONDS",
    "MetricsError",
    "MetricsObserver",
    "MetricsService",
    "notice_time",
]
