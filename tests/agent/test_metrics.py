"""Metrics and health: the observer on its own, and a real agent scraped over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import math
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent import metrics as metrics_module
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.agent.config import ConfigError, load_settings
from forewarn.agent.metrics import (
    MAX_CONNECTIONS,
    REQUEST_SECONDS,
    MetricsError,
    MetricsObserver,
    MetricsService,
    notice_time,
)
from forewarn.agent.observers import build_observers
from forewarn.agent.protocol import AckRequest, Notice
from forewarn.agent.telemetry import FILE_NAME as TELEMETRY_FILE
from forewarn.agent.telemetry import read_records
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers import REGISTRY
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from support import (
    DEAD_LOOPBACK,
    AgentProcess,
    Subscriber,
    agent_env,
    eventually,
    eventually_async,
    run_forewarn,
    shifted_wall_clock,
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

NOW = datetime(2026, 11, 30, 3, 0, tzinfo=timezone.utc)


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), math.nan)


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in found.items() if n == name and wanted <= set(have))


def make_notice(
    action: str = "drain",
    *,
    notice_id: str = "aws/rebalance/1",
    deadline: datetime | None = NOW + timedelta(minutes=10),
    detail: dict[str, Any] | None = None,
) -> Notice:
    return Notice(
        id=notice_id,
        seq=1,
        action=action,
        reason="rebalance-recommendation",
        provider="aws",
        deadline=deadline,
        noticed_at=NOW,
        sent_at=NOW,
        detail=detail or {},
    )


def scrape(observer: MetricsObserver) -> Samples:
    from prometheus_client import generate_latest

    return samples(generate_latest(observer.registry).decode())


# The observer on its own.


def test_notice_counts_lead_time_delay_and_nearest_deadline():
    clock = [NOW.timestamp()]
    observer = MetricsObserver(clock=lambda: clock[0])
    stated = format_time(NOW - timedelta(seconds=2))
    observer.on_notice(make_notice(detail={"notice_time": stated}), escalated=False)
    found = scrape(observer)
    labels = {"provider": "aws", "reason": "rebalance-recommendation"}
    assert value(found, "forewarn_notices_total", action="drain", **labels) == 1
    assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 1
    assert value(found, "forewarn_notice_lead_seconds_sum", **labels) == 600
    assert value(found, "forewarn_detection_delay_seconds_sum", provider="aws") == 2
    assert value(found, "forewarn_nearest_deadline_seconds") == 600
    assert value(found, "forewarn_active_notices") == 1

    clock[0] += 60  # the gauge is computed when scraped
    assert value(scrape(observer), "forewarn_nearest_deadline_seconds") == 540

    # A repeat or an escalation of the same notice is counted, but its lead time is not.
    observer.on_notice(make_notice("terminate"), escalated=True)
    found = scrape(observer)
    assert value(found, "forewarn_notices_total", action="terminate", **labels) == 1
    assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 1

    observer.on_notice(make_notice("clear", deadline=None), escalated=False)
    found = scrape(observer)
    assert math.isnan(value(found, "forewarn_nearest_deadline_seconds"))
    assert value(found, "forewarn_active_notices") == 0


def test_a_notice_that_gains_its_deadline_later_has_its_lead_time_recorded_once():
    """A drain first published without a deadline (`notify drain --id X`, then the same id
    with `--deadline`) was never counted in forewarn_notice_lead_seconds: only the first
    publication was looked at, though the notice has a deadline."""
    observer = MetricsObserver(clock=lambda: NOW.timestamp())
    labels = {"provider": "aws", "reason": "rebalance-recommendation"}
    observer.on_notice(make_notice(deadline=None), escalated=False)
    assert total(scrape(observer), "forewarn_notice_lead_seconds_count", **labels) == 0
    observer.on_notice(make_notice(deadline=NOW + timedelta(minutes=5)), escalated=False)
    observer.on_notice(make_notice(deadline=NOW + timedelta(minutes=4)), escalated=False)
    found = scrape(observer)
    assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 1
    assert value(found, "forewarn_notice_lead_seconds_sum", **labels) == 300


def test_a_notice_raised_again_after_its_expiry_is_not_measured_again():
    """A notice retired past its deadline plus the grace and reported again by its provider
    is the same occurrence (same id, first noticed_at): its lead time and detection delay
    were observed again at each re-raise, every grace period for as long as IMDS showed it."""
    observer = MetricsObserver(clock=lambda: NOW.timestamp())
    labels = {"provider": "aws", "reason": "rebalance-recommendation"}
    stated = {"notice_time": format_time(NOW - timedelta(seconds=2))}
    raised = make_notice(detail=stated)
    observer.on_notice(raised, escalated=False)
    for _ in range(3):
        observer.on_expired(make_notice("clear", deadline=None))
        observer.on_notice(make_notice("clear", deadline=None), escalated=False)
        assert value(scrape(observer), "forewarn_active_notices") == 0
        observer.on_notice(raised, escalated=False)
    found = scrape(observer)
    assert value(found, "forewarn_active_notices") == 1
    assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 1
    assert value(found, "forewarn_detection_delay_seconds_count", provider="aws") == 1
    # A notice withdrawn by its provider and raised later is a new occurrence.
    observer.on_notice(make_notice("clear", deadline=None), escalated=False)
    observer.on_notice(raised, escalated=False)
    found = scrape(observer)
    assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 2


def test_retired_notices_are_remembered_up_to_a_bound(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(metrics_module, "EXPIRED_KEPT", 2)
    observer = MetricsObserver(clock=lambda: NOW.timestamp())
    for number in range(5):
        notice_id = f"aws/rebalance/{number}"
        observer.on_notice(make_notice(notice_id=notice_id), escalated=False)
        observer.on_expired(make_notice("clear", notice_id=notice_id, deadline=None))
        observer.on_notice(
            make_notice("clear", notice_id=notice_id, deadline=None), escalated=False
        )
    assert len(observer._expired) == 2 and len(observer._first_seen) == 2
    # The oldest was forgotten: raised again, it is measured as a new notice.
    observer.on_notice(make_notice(notice_id="aws/rebalance/0"), escalated=False)
    labels = {"provider": "aws", "reason": "rebalance-recommendation"}
    assert value(scrape(observer), "forewarn_notice_lead_seconds_count", **labels) == 6


def test_nearest_deadline_is_the_earliest_active_one():
    observer = MetricsObserver(clock=lambda: NOW.timestamp())
    observer.on_notice(make_notice(notice_id="a"), escalated=False)
    observer.on_notice(
        make_notice(notice_id="b", deadline=NOW + timedelta(seconds=90)), escalated=False
    )
    observer.on_notice(make_notice(notice_id="c", deadline=None), escalated=False)
    assert observer.active_notices() == (3, 90)
    observer.on_notice(make_notice("clear", notice_id="b", deadline=None), escalated=False)
    assert observer.active_notices() == (2, 600)


class _ClearOnFirstUse:
    """The observer's lock, which lets the event loop retire a notice at the moment a scrape
    first takes it: between the two gauges' reads when they were read apart."""

    def __init__(self, observer: MetricsObserver) -> None:
        self.observer = observer
        self.inner = threading.Lock()
        self.armed = False

    def __enter__(self) -> None:
        if self.armed:
            self.armed = False
            self.observer.on_notice(make_notice("clear", deadline=None), escalated=False)
        self.inner.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


def test_one_scrape_never_shows_a_deadline_without_its_notice_or_the_reverse():
    """A CI run scraped `forewarn_active_notices` 1 beside a NaN nearest deadline: the notice
    was retired between the two gauges' reads."""
    observer = MetricsObserver(clock=lambda: NOW.timestamp())
    observer.on_notice(make_notice(), escalated=False)
    lock = _ClearOnFirstUse(observer)
    observer._lock = lock  # type: ignore[assignment]
    lock.armed = True
    found = scrape(observer)
    assert not lock.armed, "the scrape read the observer's state under its lock"
    active = value(found, "forewarn_active_notices")
    nearest = value(found, "forewarn_nearest_deadline_seconds")
    assert (active, math.isnan(nearest)) == (0, True), (active, nearest)


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        ({"notice_time": "2026-11-30T02:59:58Z"}, NOW - timedelta(seconds=2)),
        ({"notice_time": "2026-11-30T03:59:58+01:00"}, NOW - timedelta(seconds=2)),
        ({"notice_time": "yesterday"}, None),
        ({"notice_time": 12}, None),
        ({"noticeTime": "2026-11-30T02:59:58Z"}, None),  # only the documented key counts
        ({}, None),
    ],
)
def test_notice_time_reads_only_an_rfc3339_notice_time(
    detail: dict[str, Any], expected: datetime | None
):
    assert notice_time(detail) == expected


def test_polls_errors_acks_and_subscribers():
    observer = MetricsObserver(clock=lambda: 1234.5)
    observer.on_start(["aws"])
    observer.on_poll("aws", False, "connect")
    observer.on_poll("aws", False, "connect")
    observer.on_poll("aws", True, None)
    observer.on_subscribers(3)
    notice = make_notice("terminate")
    observer.on_ack(AckRequest(op="ack", notice_id=notice.id, flush_seconds=1.5), notice)
    observer.on_ack(AckRequest(op="ack", flush_seconds=0.5), None)
    observer.on_ack(AckRequest(op="ack", outcome="failed"), None)
    observer.on_ack(AckRequest(op="ack", outcome="resumed", restore_seconds=4), None)
    found = scrape(observer)
    assert value(found, "forewarn_polls_total", provider="aws") == 3
    assert value(found, "forewarn_poll_errors_total", provider="aws", kind="connect") == 2
    assert value(found, "forewarn_last_successful_poll_timestamp_seconds", provider="aws") == 1234.5
    assert value(found, "forewarn_subscribers") == 3
    assert value(found, "forewarn_flush_seconds_sum", trigger="terminate") == 1.5
    assert value(found, "forewarn_flush_seconds_count", trigger="periodic") == 1
    assert value(found, "forewarn_failed_flushes_total") == 1


def test_the_agents_own_errors_are_no_polls():
    """The runner reports the agent's own problems (a state file it cannot write, a part
    that crashed) as failed polls of provider `agent`: they showed as
    `forewarn_polls_total{provider="agent"}`, a provider that polls nothing, listed beside
    the watchers and with an error ratio of 1."""
    observer = MetricsObserver()
    observer.on_start(["local"])
    observer.on_poll("agent", False, "state")
    observer.on_poll("agent", False, "control-failed")
    found = scrape(observer)
    assert value(found, "forewarn_poll_errors_total", provider="agent", kind="state") == 1
    assert total(found, "forewarn_poll_errors_total", provider="agent") == 2
    assert {dict(labels).get("provider") for (name, labels) in found if "polls" in name} == {
        "local"
    }
    assert observer.readiness() == (False, {"local": False})


def test_ready_only_once_every_watcher_polled_well_and_until_stop():
    observer = MetricsObserver()
    assert observer.readiness() == (False, {})
    observer.on_start(["local", "aws"])
    observer.on_poll("local", True, None)
    assert observer.readiness() == (False, {"local": True, "aws": False})
    observer.on_poll("aws", False, "connect")
    assert not observer.readiness()[0]
    observer.on_poll("aws", True, None)
    assert observer.readiness()[0]
    observer.on_poll("aws", False, "connect")  # readiness latches: one bad poll is not an outage
    assert observer.readiness()[0]
    observer.on_stop()
    assert not observer.readiness()[0]


# The HTTP server.


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_healthz_says_dead_when_the_loop_stops_reporting():
    """An agent whose event loop was blocked by a sync call (seen: a control handler that
    slept) stopped its watchdog pings, but /healthz, answered from another thread, kept
    serving the loop's last report, all alive, with 200 for as long as the block lasted."""
    service = MetricsService("127.0.0.1", 0)
    service.loop_silence = 0.3
    try:
        service.on_liveness({"control": True, "heartbeats": True})
        assert get(service.url + "/healthz")[0] == 200
        _status, body = eventually(
            lambda: (answer := get(service.url + "/healthz"))[0] == 503 and answer,
            5,
            "healthz 503 once the loop is silent",
        )
        assert json.loads(body)["parts"] == {
            "control": True,
            "heartbeats": True,
            "event-loop": False,
        }
        service.on_liveness({"control": True, "heartbeats": True})
        assert get(service.url + "/healthz")[0] == 200
    finally:
        service.close()


def test_healthz_says_dead_when_the_loop_never_reports():
    """The metrics server answers from the agent's construction on; a start that hung before
    the loop's first report (a state directory on a hung filesystem) was answered 200,
    `{"alive": true, "parts": {}}`, for as long as it hung: the silence counts from the
    server's start too."""
    service = MetricsService("127.0.0.1", 0)
    service.loop_silence = 0.3
    try:
        _status, body = eventually(
            lambda: (answer := get(service.url + "/healthz"))[0] == 503 and answer,
            5,
            "healthz 503 while the loop has never reported",
        )
        assert json.loads(body) == {"alive": False, "parts": {"event-loop": False}}
        service.on_liveness({"control": True})
        assert get(service.url + "/healthz")[0] == 200
    finally:
        service.close()


def test_the_ipv6_wildcard_serves_ipv4_clients_too():
    """`[::]:PORT`, the manifests' address, must reach Prometheus on IPv6-only, dual-stack and
    IPv4-only clusters: one socket, dual-stack whatever net.ipv6.bindv6only says."""
    if not socket.has_ipv6:
        pytest.skip("this Python has no IPv6")
    try:
        service = MetricsService("::", 0)
    except MetricsError as error:
        pytest.skip(f"no IPv6 here: {error}")
    try:
        server = service.server.socket
        assert server.family == socket.AF_INET6
        assert server.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        port = service.server.server_port
        assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    finally:
        service.close()


def test_the_ipv6_wildcard_falls_back_to_ipv4_on_a_kernel_without_ipv6(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A kernel booted with ipv6.disable=1 refuses every IPv6 socket (EAFNOSUPPORT): `[::]`
    (every address) is then every IPv4 address, with a warning, not an agent that exits."""
    real = socket.socket

    class NoIPv6(real):  # type: ignore[misc, valid-type]
        def __init__(self, family: int = -1, *args: Any, **kwargs: Any) -> None:
            if family == socket.AF_INET6:
                raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
            super().__init__(family, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(socket, "socket", NoIPv6)
        service = MetricsService("::", 0)
        # Any other IPv6 address is not "every address": it still fails, naming it.
        with pytest.raises(MetricsError, match=r"metrics_address \[::1\]:\d+: cannot listen"):
            MetricsService("::1", 0)
    try:
        assert service.server.server_address[0] == "0.0.0.0"
        assert get(f"http://127.0.0.1:{service.server.server_port}/healthz")[0] == 200
        assert "this kernel has no IPv6" in caplog.text
    finally:
        service.close()


def test_service_serves_metrics_health_and_readiness():
    service = MetricsService("127.0.0.1", 0)
    try:
        assert get(service.url + "/healthz") == (
            200,
            '{"alive": true, "parts": {"event-loop": true}}\n',
        )
        service.on_liveness({"control": False, "heartbeats": True})
        assert get(service.url + "/healthz") == (
            503,
            '{"alive": false, "parts": {"control": false, "heartbeats": true, '
            '"event-loop": true}}\n',
        )
        service.on_liveness({"control": True, "heartbeats": True})
        status, body = get(service.url + "/readyz")
        assert status == 503 and json.loads(body)["ready"] is False
        service.on_start(["local"])
        service.on_poll("local", True, None)
        status, body = get(service.url + "/readyz")
        assert status == 200 and json.loads(body) == {
            "ready": True,
            "providers": {"local": True},
            "waiting": [],
        }
        status, body = get(service.url + "/metrics")
        assert status == 200 and value(samples(body), "forewarn_ready") == 1
        assert get(service.url + "/nope")[0] == 404
    finally:
        service.on_stop()


@pytest.fixture(scope="module")
def shared_metrics() -> Iterator[MetricsService]:
    service = MetricsService("127.0.0.1", 0)
    # No agent loop reports liveness here: /healthz stays 200 only while the loop's silence is
    # under its bound, and these examples outlasted LOOP_SILENCE (5 s) in a run under load
    # (503 at an example that the server had answered). What is checked is that it serves on.
    service.loop_silence = float("inf")
    try:
        yield service
    finally:
        service.on_stop()


_REQUEST_LINES = st.sampled_from(
    [
        b"GET /metrics HTTP/1.0\r\n\r\n",  # HTTP/1.0 without Host
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
        b"GET /../../etc/passwd HTTP/1.1\r\n\r\n",
        b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello
    ]
)


@settings(max_examples=40)
@given(st.one_of(_REQUEST_LINES, st.binary(max_size=2000)))
def test_whatever_a_client_sends_the_metrics_server_answers_or_closes_and_serves_on(
    shared_metrics: MetricsService, sent: bytes
):
    address = shared_metrics.server.server_address[:2]
    with (
        socket.create_connection(address, timeout=10) as peer,
        contextlib.suppress(ConnectionResetError, BrokenPipeError),
    ):
        peer.sendall(sent)
        peer.shutdown(socket.SHUT_WR)  # the request is all there is
        while peer.recv(65536):
            pass  # until the server closes; a server that never does fails on the timeout
    assert get(shared_metrics.url + "/healthz")[0] == 200


def test_metrics_config_key_env_and_loopback_rule(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("FOREWARN_METRICS_ADDRESS", raising=False)
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    assert load_settings().metrics_listen() is None  # off by default
    monkeypatch.setenv("FOREWARN_METRICS_ADDRESS", "127.0.0.1:9464")
    assert load_settings().metrics_listen() == ("127.0.0.1", 9464)
    assert load_settings(metrics_address="off").metrics_listen() is None
    assert load_settings(metrics_address="[::1]:9464").metrics_listen() == ("::1", 9464)
    with pytest.raises(ConfigError, match=r"metrics_address.*not a loopback"):
        load_settings(metrics_address="0.0.0.0:9464")
    remote = load_settings(metrics_address="0.0.0.0:9464", allow_remote=True)
    assert remote.metrics_listen() == ("0.0.0.0", 9464)
    with pytest.raises(ConfigError, match=r"metrics_address.*HOST:PORT"):
        load_settings(metrics_address="9464")
    with pytest.raises(ConfigError, match=r"metrics_address.*not an IP address"):
        load_settings(metrics_address="prometheus.example:9464")


def test_build_observers_refuses_a_taken_port_and_a_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("FOREWARN_CONFIG", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics_address 127.0.0.1:{port}: cannot listen"):
            build_observers(load_settings(metrics_address=f"127.0.0.1:{port}", telemetry=False))
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "forewarn.agent.metrics")
    # The extra is named on the source pip installed from (forewarn is on no index).
    with pytest.raises(
        ConfigError, match=r"prometheus_client is not installed: \S*pip install .*\[metrics\]"
    ):
        build_observers(load_settings(metrics_address="127.0.0.1:0", telemetry=False))
    assert build_observers(load_settings(telemetry=False)) == []


# A real agent.


def metrics_url(agent: AgentProcess, timeout: float = 30.0) -> str:
    return agent.metrics_url(timeout)


def scrape_url(url: str) -> Samples:
    status, body = get(url + "/metrics")
    assert status == 200
    return samples(body)


def test_every_metric_moves_when_a_notice_flows(tmp_path: Path):
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    flag = tmp_path / "run" / "checkpoint-now"
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        eventually(lambda: get(url + "/readyz")[0] == 200, what="readyz")
        assert get(url + "/healthz")[0] == 200
        before = scrape_url(url)
        assert value(before, "forewarn_subscribers") == 0
        assert math.isnan(value(before, "forewarn_nearest_deadline_seconds"))

        with Subscriber(agent.events, ("notice", "client/metrics-test")) as client:
            eventually(lambda: value(scrape_url(url), "forewarn_subscribers") == 1, what="sub")
            deadline = datetime.now(timezone.utc) + timedelta(minutes=10)
            reply = agent.control(
                {"op": "notify", "action": "drain", "deadline": format_time(deadline)}
            )
            assert reply["ok"], reply
            notice_id = reply["notice"]["id"]
            assert client.notice()["id"] == notice_id
            reply = agent.control(
                {
                    "op": "ack",
                    "notice_id": notice_id,
                    "client": "metrics-test",
                    "flush_seconds": 1.5,
                    "step": 10,
                }
            )
            assert reply["ok"], reply
            flag.write_text("")  # a local notice that states its own notice time
            assert client.notice()["detail"]["notice_time"]
            # The poll that found the flag counts itself only after emitting the notice: the
            # scrape may come between the two.
            polls_before = value(before, "forewarn_polls_total", provider="local")
            eventually(
                lambda: (
                    value(scrape_url(url), "forewarn_polls_total", provider="local") > polls_before
                ),
                what="a counted poll",
            )
            after = scrape_url(url)

    manual = {"provider": "local", "reason": "manual"}
    assert value(after, "forewarn_notices_total", action="drain", **manual) == 2
    assert value(after, "forewarn_notice_lead_seconds_count", **manual) == 1
    assert 590 < value(after, "forewarn_notice_lead_seconds_sum", **manual) <= 600
    assert value(after, "forewarn_detection_delay_seconds_count", provider="local") == 1
    assert 0 <= value(after, "forewarn_detection_delay_seconds_sum", provider="local") < 10
    assert value(after, "forewarn_flush_seconds_sum", trigger="drain") == 1.5
    assert value(after, "forewarn_flush_seconds_count", trigger="drain") == 1
    assert 0 < value(after, "forewarn_nearest_deadline_seconds") <= 600
    assert value(after, "forewarn_active_notices") == 2
    assert value(after, "forewarn_subscribers") == 1
    assert value(after, "forewarn_polls_total", provider="local") > value(
        before, "forewarn_polls_total", provider="local"
    )
    assert value(after, "forewarn_last_successful_poll_timestamp_seconds", provider="local") >= (
        value(before, "forewarn_last_successful_poll_timestamp_seconds", provider="local")
    )
    assert (
        abs(
            value(after, "forewarn_last_successful_poll_timestamp_seconds", provider="local")
            - time.time()
        )
        < 30
    )
    assert value(after, "forewarn_ready") == 1


def test_poll_errors_counted_and_not_ready_while_a_watcher_cannot_poll(tmp_path: Path):
    env = agent_env(
        tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}"
    )
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env) as agent:
        url = metrics_url(agent)
        # Of whatever kind: a refused connection, or a watcher that cannot start.
        eventually(
            lambda: total(scrape_url(url), "forewarn_poll_errors_total", provider="aws") > 0,
            what="an aws poll error",
        )
        eventually(lambda: value(scrape_url(url), "forewarn_polls_total", provider="local") > 0)
        status, body = get(url + "/readyz")
        assert status == 503
        assert json.loads(body) == {
            "ready": False,
            "providers": {"local": True, "aws": False},
            "waiting": ["aws"],
        }
        assert get(url + "/healthz")[0] == 200


def test_readyz_turns_ready_at_the_first_successful_poll(tmp_path: Path):
    # The flag file's directory is a regular file: every look at the flag fails until it is
    # replaced by a directory.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    env = agent_env(
        tmp_path,
        FOREWARN_METRICS_ADDRESS="127.0.0.1:0",
        FOREWARN_LOCAL_FLAG_FILE=str(blocker / "checkpoint-now"),
    )
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        eventually(
            lambda: (
                value(scrape_url(url), "forewarn_poll_errors_total", provider="local", kind="stat")
                > 0
            ),
            what="a failed look at the flag file",
        )
        status, body = get(url + "/readyz")
        assert status == 503 and json.loads(body)["waiting"] == ["local"]
        blocker.unlink()
        blocker.mkdir()
        eventually(lambda: get(url + "/readyz")[0] == 200, what="readyz after a good poll")


def _open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


@pytest.mark.slow(12)
def test_idle_and_trickling_metrics_connections_cannot_use_up_the_agents_descriptors(
    tmp_path: Path,
):
    """libzmq aborts the agent when an accept finds no descriptor left, and the HTTP server
    shares them: connections that never finish a request are capped and cut at a deadline."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, env=env) as agent:
        assert agent.proc is not None
        url = metrics_url(agent)
        host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
        before = _open_fds(agent.proc.pid)
        with socket.create_connection((host, int(port)), timeout=5) as trickling:
            trickling.settimeout(0.2)  # also the pace: a byte every 0.2 s
            trickling.sendall(b"GET /metrics HTTP/1.0\r\n")
            started = time.monotonic()
            cut = False
            while not cut and time.monotonic() - started < REQUEST_SECONDS + 3:
                try:
                    trickling.sendall(b"X")  # a header that never ends, never a pause
                    cut = trickling.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    cut = True
            assert cut, "a connection trickling a request in was never cut"
        idle = []
        try:
            for _ in range(3 * MAX_CONNECTIONS):
                peer = socket.create_connection((host, int(port)), timeout=5)
                peer.sendall(b"G")
                idle.append(peer)
            # 30 s: under a loaded machine, 96 accepts and 32 handler threads took over 10 s.
            eventually(lambda: "closed unanswered" in agent.output(), 30, "connections refused")
            assert _open_fds(agent.proc.pid) <= before + MAX_CONNECTIONS + 4
            assert agent.control({"op": "status"})["ok"]

            def answers() -> bool:
                try:
                    return get(url + "/healthz")[0] == 200
                except OSError:  # closed unanswered while the cut ones still count
                    return False

            eventually(answers, 30, "healthz answers again")
        finally:
            for peer in idle:
                peer.close()


def test_agent_exits_2_naming_a_taken_metrics_port(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS=f"127.0.0.1:{port}")
        result = run_forewarn("agent", "--provider", "local", env=env)
    assert result.returncode == 2
    assert f"metrics_address 127.0.0.1:{port}: cannot listen" in result.stderr


def test_metrics_address_flag_reaches_the_agent(tmp_path: Path):
    agent = AgentProcess(
        tmp_path, providers=("local",), args=("--metrics-address", "127.0.0.1:0")
    ).start()
    try:
        assert get(metrics_url(agent) + "/healthz")[0] == 200
    finally:
        agent.stop()
    result = run_forewarn("agent", "--metrics-address", "0.0.0.0:9464", env=agent_env(tmp_path))
    assert result.returncode == 2 and "metrics_address" in result.stderr


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_readyz_with_a_live_provider_simulator(provider: str, tmp_path: Path):
    """Against a faithful simulator the watcher polls well, so the agent becomes ready."""
    loader = REGISTRY[provider].simulate
    assert loader is not None
    simulate = loader()
    script = simulate.drill_script()
    assert script is not None
    extra = dict(script.get("env", {}))
    with SimServer(simulate.make_simulator()) as server:
        extra[f"FOREWARN_{provider.upper()}_URL"] = server.url
        env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", **extra)
        with AgentProcess(tmp_path, providers=("local", provider), env=env) as agent:
            url = metrics_url(agent)
            eventually(lambda: get(url + "/readyz")[0] == 200, what=f"{provider} ready")
            found = scrape_url(url)
    assert value(found, "forewarn_polls_total", provider=provider) >= 1
    assert value(found, "forewarn_last_successful_poll_timestamp_seconds", provider=provider) > 0


def test_scrape_shows_build_escalations_and_a_provider_that_never_succeeded(tmp_path: Path):
    """Issue 18: forewarn_build_info; an escalation told apart from a provider terminate; a
    last-successful-poll series (0) for a provider that never answered; no _created series."""
    env = agent_env(
        tmp_path,
        FOREWARN_METRICS_ADDRESS="127.0.0.1:0",
        FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}",
        FOREWARN_EXIT_MARGIN="2s",
    )
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env) as agent:
        url = metrics_url(agent)
        eventually(lambda: total(scrape_url(url), "forewarn_poll_errors_total", provider="aws"))
        # A drain 4 s out is re-sent as terminate when 2 s (the exit margin) are left.
        agent.control({"op": "notify", "action": "drain", "deadline": _in(4)})
        agent.control({"op": "notify", "action": "terminate", "deadline": _in(60)})

        def escalated() -> Samples | None:
            got = scrape_url(url)
            count = value(got, "forewarn_escalations_total", provider="local", reason="manual")
            return got if count == 1 else None

        found = eventually(escalated, what="the escalation")
        body = get(url + "/metrics")[1]
    assert value(found, "forewarn_last_successful_poll_timestamp_seconds", provider="aws") == 0
    assert value(found, "forewarn_last_successful_poll_timestamp_seconds", provider="local") > 0
    builds = [
        (dict(labels), v) for (name, labels), v in found.items() if name.endswith("build_info")
    ]
    assert len(builds) == 1 and builds[0][0]["version"] and builds[0][1] == 1
    terminates = value(
        found, "forewarn_notices_total", provider="local", reason="manual", action="terminate"
    )
    assert terminates == 2  # one escalated drain, one terminate from the start
    assert "_created" not in body


def test_a_drain_first_reported_inside_the_exit_margin_counts_as_an_escalation(
    tmp_path: Path,
):
    """A drain whose deadline is already within the exit margin goes out as terminate at
    once: it was counted as a provider terminate (forewarn_escalations_total stayed 0), so
    the documented difference (notices{terminate} minus escalations) was wrong."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_EXIT_MARGIN="600s")
    flag = tmp_path / "run" / "checkpoint-now"
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent, agent.subscriber() as sub:
        url = metrics_url(agent)
        reply = agent.control({"op": "notify", "action": "drain", "deadline": _in(120)})
        assert reply["notice"]["action"] == "terminate"
        first = sub.notice()
        assert first["action"] == "terminate"
        flag.write_text("2m")  # a watcher's drain, 2 min out
        # The replay for this subscriber's own subscription can come after the notify (the
        # heartbeat that made it ready may have gone out first): a repeat is not the flag's.
        flagged = sub.notice()
        while flagged["id"] == first["id"]:
            flagged = sub.notice()
        assert flagged["id"].startswith("local/flag/") and flagged["action"] == "terminate"

        def both_counted() -> Samples | None:
            got = scrape_url(url)
            return got if total(got, "forewarn_escalations_total") == 2 else None

        found = eventually(both_counted, what="both counted as escalations")
    manual = {"provider": "local", "reason": "manual"}
    assert value(found, "forewarn_notices_total", action="terminate", **manual) == 2
    assert value(found, "forewarn_escalations_total", **manual) == 2
    # Still a first publication: its lead time is recorded once, as for any notice.
    assert value(found, "forewarn_notice_lead_seconds_count", **manual) == 2


def test_an_escalated_terminate_sent_again_counts_one_escalation(tmp_path: Path) -> None:
    """`forewarn notify drain --deadline 20s` under a 30 s exit margin goes out as terminate
    (one escalation); the agent's wall clock stepped back 10 min sends it again, its deadline
    moved with the step, and so does a `notify drain --id` moving it 5 s earlier: each
    re-send of that terminate counted another escalation (3 for one drain sent as terminate
    once), and `increase(forewarn_escalations_total[1h])` read three escalations. Each
    re-send is a publication (`forewarn_notices_total{action="terminate"}`), not an
    escalation; its log line still says the drain it was."""
    shifted, offset = shifted_wall_clock(tmp_path)
    env = agent_env(
        tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_EXIT_MARGIN="30s", **shifted
    )
    with AgentProcess(tmp_path, env=env) as agent, agent.subscriber() as sub:
        url = metrics_url(agent)
        reply = agent.control({"op": "notify", "action": "drain", "deadline_in": 20})
        notice_id = reply["notice"]["id"]
        assert sub.notice(10)["action"] == "terminate"
        offset.write_text("-600")
        moved = sub.notice(10)
        assert (moved["id"], moved["action"]) == (notice_id, "terminate")
        earlier = parse_time(moved["deadline"]) - timedelta(seconds=5)
        agent.control(
            {"op": "notify", "action": "drain", "id": notice_id, "deadline": format_time(earlier)}
        )
        again = sub.notice(10)
        assert (again["id"], again["action"]) == (notice_id, "terminate")

        def published() -> Samples | None:
            got = scrape_url(url)
            manual = {"provider": "local", "reason": "manual", "action": "terminate"}
            return got if value(got, "forewarn_notices_total", **manual) == 3 else None

        found = eventually(published, what="the three terminates counted")
    assert value(found, "forewarn_escalations_total", provider="local", reason="manual") == 1
    lines = [x for x in agent.output().splitlines() if f" notice terminate {notice_id} " in x]
    assert len(lines) == 3 and all("(escalated from drain: " in x for x in lines), lines


def _in(seconds: float) -> str:
    return format_time(datetime.now(timezone.utc) + timedelta(seconds=seconds))


def test_nearest_deadline_goes_negative_then_clears_when_the_notice_expires(tmp_path: Path):
    """Issue 18: `forewarn_nearest_deadline_seconds` stayed negative forever. Past its deadline
    it is negative (the machine is overdue), and once the notice is retired (deadline plus
    `notice_grace`) the series reads NaN again, with the expiry counted."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_NOTICE_GRACE="2s")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        reply = agent.control({"op": "notify", "action": "terminate", "deadline": _in(2)})
        assert reply["ok"], reply
        first = scrape_url(url)
        assert 0 < value(first, "forewarn_nearest_deadline_seconds") <= 2
        assert value(first, "forewarn_active_notices") == 1
        eventually(
            lambda: value(scrape_url(url), "forewarn_nearest_deadline_seconds") < 0,
            what="a passed deadline",
        )

        def retired() -> Samples | None:
            got = scrape_url(url)
            return got if math.isnan(value(got, "forewarn_nearest_deadline_seconds")) else None

        found = eventually(retired, what="the expired notice to leave the gauge")
        assert value(found, "forewarn_active_notices") == 0
        # The expiry is counted before the notice is retired, and a scrape reads the counter
        # before the gauges: the next scrape has it.
        later = scrape_url(url)
    assert value(later, "forewarn_notices_expired_total", provider="local", reason="manual") == 1


def test_a_notice_restored_at_start_shows_in_the_gauges(tmp_path: Path):
    """A manual notice restored from the state file after a restart is active (status lists
    it, clients receive it) but was missing from `forewarn_active_notices` and
    `forewarn_nearest_deadline_seconds` (NaN): the deadline alert never fired for it."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        reply = agent.control({"op": "notify", "action": "drain", "deadline": _in(600)})
        assert reply["ok"], reply
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        status = agent.control({"op": "status"})
        assert [notice["id"] for notice in status["active"]] == [reply["notice"]["id"]]
        found = scrape_url(url)
        assert value(found, "forewarn_active_notices") == 1
        assert 0 < value(found, "forewarn_nearest_deadline_seconds") <= 600
        # Not published anew: no counter moves for it.
        assert total(found, "forewarn_notices_total") == 0
        assert total(found, "forewarn_notice_lead_seconds_count") == 0
        assert f"notice {reply['notice']['id']} restored from" in agent.output()
        agent.control({"op": "clear", "id": reply["notice"]["id"]})
        cleared = scrape_url(url)
    assert value(cleared, "forewarn_active_notices") == 0
    assert math.isnan(value(cleared, "forewarn_nearest_deadline_seconds"))


def test_a_drain_that_came_within_the_margin_while_the_agent_was_down_is_an_escalation(
    tmp_path: Path,
):
    """A restored drain whose deadline is now within the exit margin goes out as terminate at
    start, but was logged as `restored`, missing from `forewarn_escalations_total` and
    `forewarn_notices_total`, and absent from telemetry, so `forewarn plan` did not count the
    interruption."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        reply = agent.control({"op": "notify", "action": "drain", "deadline": _in(300)})
        assert reply["notice"]["action"] == "drain"
    notice_id = reply["notice"]["id"]
    # The margin is 600 s now: the restored drain is inside it.
    env["FOREWARN_EXIT_MARGIN"] = "600s"
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent, agent.subscriber() as sub:
        url = metrics_url(agent)
        assert sub.notice()["action"] == "terminate"
        found = scrape_url(url)
        output = agent.output()
    manual = {"provider": "local", "reason": "manual"}
    assert value(found, "forewarn_escalations_total", **manual) == 1
    assert value(found, "forewarn_notices_total", action="terminate", **manual) == 1
    assert value(found, "forewarn_active_notices") == 1
    # Its lead time was recorded when it was first published, before the restart.
    assert total(found, "forewarn_notice_lead_seconds_count") == 0
    assert f"notice terminate {notice_id} manual (local)" in output
    records = list(read_records(tmp_path / "state" / TELEMETRY_FILE))
    assert [(r["kind"], r["action"]) for r in records if r.get("id") == notice_id] == [
        ("notice", "drain"),
        ("escalation", "terminate"),
    ]


def test_healthz_says_dead_when_the_events_socket_file_is_gone(tmp_path: Path):
    """A /tmp cleaner that removed the events socket file left every client started after it
    unable to subscribe ('no agent'), while `/healthz` said alive and nothing was logged."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, providers=("local",), env=env) as agent:
        url = metrics_url(agent)
        eventually(lambda: get(url + "/healthz")[0] == 200, what="alive at first")
        (tmp_path / "run" / "events").unlink()

        def dead() -> dict[str, Any] | None:
            status, body = get(url + "/healthz")
            return json.loads(body) if status == 503 else None

        found = eventually(dead, what="/healthz to say the events socket is gone")
        output = agent.output()
    assert found["parts"]["events"] is False, found
    assert [name for name, ok in found["parts"].items() if not ok] == ["events"], found
    assert "the events socket file of" in output and "is gone or replaced" in output, output


def test_the_series_alerts_read_are_at_0_before_the_first_notice(tmp_path: Path):
    """A labelled counter used to appear at its first increment, so increase() over the
    scrape that first showed forewarn_notices_total{action="terminate"} at 1 said 0: the
    first terminate of a spot VM, mostly its only one, was never seen."""
    env = agent_env(
        tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0", FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}"
    )
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env) as agent:
        url = metrics_url(agent)
        eventually(lambda: get(url + "/readyz")[1].count("true") >= 1, what="a look")
        found = scrape_url(url)
    for provider in ("local", "aws"):
        reasons = REGISTRY[provider].reasons
        assert reasons
        for reason in reasons:
            for action in ("drain", "terminate"):
                labels = {"provider": provider, "reason": reason, "action": action}
                assert value(found, "forewarn_notices_total", **labels) == 0, labels
            labels = {"provider": provider, "reason": reason}
            assert value(found, "forewarn_escalations_total", **labels) == 0, labels
            assert value(found, "forewarn_notices_expired_total", **labels) == 0, labels
        kind = "watcher-failed"
        assert value(found, "forewarn_poll_errors_total", provider=provider, kind=kind) == 0
    assert value(found, "forewarn_poll_errors_total", provider="agent", kind="state") == 0
    # Bounded: only the providers the agent runs, only their reasons, no clears.
    counters = ("forewarn_notices_total", "forewarn_escalations_total")
    started = [dict(labels) for (name, labels) in found if name in counters]
    assert {labels["provider"] for labels in started} == {"local", "aws"}
    assert all(labels.get("action") != "clear" for labels in started)


def test_the_histograms_start_at_0_too():
    """A labelled histogram appeared at its first observation, so the documented
    `rate(forewarn_flush_seconds_bucket[1d])` took the job's first flush, at its first
    notice, for the baseline and never counted it."""
    observer = MetricsObserver()
    observer.on_start(["aws"])
    found = scrape(observer)
    for trigger in ("drain", "terminate", "periodic"):
        assert value(found, "forewarn_flush_seconds_count", trigger=trigger) == 0, trigger
        assert value(found, "forewarn_flush_seconds_bucket", trigger=trigger, le="+Inf") == 0
    for reason in REGISTRY["aws"].reasons:
        labels = {"provider": "aws", "reason": reason}
        assert value(found, "forewarn_notice_lead_seconds_count", **labels) == 0, labels
    assert value(found, "forewarn_detection_delay_seconds_count", provider="aws") == 0
    lead = {dict(labels)["provider"] for (name, labels) in found if "lead" in name}
    assert lead == {"aws"}


def test_the_unacked_terminates_start_at_0_too():
    """forewarn_unacked_terminates_total appeared at its first increment (walked: an agent
    with local and aws, a job stopped under a 45 s drain, the scrape after its deadline
    showed `{provider="local",reason="manual"} 1.0` and the scrapes before no series at
    all), so increase() over it said 0 for the first terminate a job missed, mostly a spot
    VM's only one: the alert on lost work never fired."""
    observer = MetricsObserver()
    observer.on_start(["local", "aws"])
    found = scrape(observer)
    for provider in ("local", "aws"):
        for reason in REGISTRY[provider].reasons:
            labels = {"provider": provider, "reason": reason}
            assert value(found, "forewarn_unacked_terminates_total", **labels) == 0, labels


@pytest.mark.parametrize("spec", list(REGISTRY), ids=lambda spec: spec.name)
def test_a_provider_declares_every_reason_its_watcher_sets(spec: Any):
    """The metrics start a provider's series from its declared reasons: one it sets but does
    not declare would again appear only at its first notice."""
    package = Path(sys.modules[type(spec).__module__].__file__ or "").parent / spec.name
    source = "\n".join(path.read_text() for path in package.glob("*.py"))
    used = set(re.findall(r"""reason\s*[:=][^"'\n]*["']([a-z-]+)["']""", source, re.I))
    used |= set(re.findall(r'\("(?:drain|terminate)", "([a-z-]+)"\)', source))
    from forewarn.protocol.fields import REASONS

    assert used & set(REASONS) <= set(spec.reasons), used


async def test_readyz_says_not_ready_as_soon_as_the_agent_begins_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """/readyz answered 200 from "stopping" until on_stop, the parts' grace, the watchers'
    close and the last state write, though shutdown had begun."""
    from forewarn.agent import runner

    settings = load_settings(
        providers=["local"],
        runtime_dir=tmp_path / "run",
        state_dir=tmp_path / "state",
        metrics_address="127.0.0.1:0",
        control_probe_interval=0,
    )
    agent = runner.Agent(settings)
    (service,) = [o for o in agent.observers.observers if isinstance(o, MetricsService)]
    release = asyncio.Event()
    closing = asyncio.Event()

    async def slow_close(watcher: Any) -> None:
        closing.set()
        await release.wait()

    monkeypatch.setattr(runner.Agent, "_close", staticmethod(slow_close))
    running = asyncio.create_task(agent.run())
    try:
        await eventually_async(lambda: get(service.url + "/readyz")[0] == 200, what="ready")
        agent._stop.set()
        await asyncio.wait_for(closing.wait(), 10)
        status, body = get(service.url + "/readyz")
        assert status == 503, body
        assert get(service.url + "/metrics")[0] == 200  # still served until on_stop
    finally:
        release.set()
        assert await asyncio.wait_for(running, 10) == 0


async def test_a_watcher_crash_counts_as_an_error_but_no_poll(tmp_path: Path):
    """A watcher that crashed and was restarted raised forewarn_polls_total, documented as
    the polls of its endpoint: a watcher crashing in a loop looked like one polling."""
    from forewarn.agent import runner
    from forewarn.providers import PollHealth

    class Crashing:
        name = "crashing"

        async def detect(self) -> bool:
            return True

        async def watch(self, emit: Any) -> None:
            raise RuntimeError("endpoint exploded")

    agent = runner.Agent(
        load_settings(
            providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
        )
    )
    agent.board = NoticeBoard(Sequencer(), 30.0)  # a crash holds its provider's notices there
    agent.watchers = {"crashing": Crashing()}  # type: ignore[dict-item]
    agent._build = lambda name, health: Crashing()  # type: ignore[method-assign,assignment,return-value]
    observer = MetricsObserver()
    observer.on_start(["crashing"])
    health = PollHealth("crashing")
    health.listeners.append(observer.on_poll)
    supervised = asyncio.create_task(agent._supervise("crashing", health))
    try:
        await eventually_async(lambda: health.errors >= 2, what="two crashes")
    finally:
        supervised.cancel()
        await asyncio.gather(supervised, return_exceptions=True)
    found = scrape(observer)
    crashes = health.errors_by_kind["watcher-failed"]
    assert (
        value(found, "forewarn_poll_errors_total", provider="crashing", kind="watcher-failed")
        == crashes
    )
    assert value(found, "forewarn_polls_total", provider="crashing") == 0


def test_approvals_start_at_0_only_for_a_provider_that_approves():
    observer = MetricsObserver()
    observer.on_start(["aws", "azure"])
    observer.on_approval("azure", "sent")
    observer.on_approval("azure", "failed")
    observer.on_approval("azure", "failed")
    found = scrape(observer)
    name = "forewarn_approvals_total"
    assert value(found, name, provider="azure", outcome="sent") == 1
    assert value(found, name, provider="azure", outcome="failed") == 2
    assert value(found, name, provider="azure", outcome="skipped") == 0
    assert {dict(labels)["provider"] for (n, labels) in found if n == name} == {"azure"}


@settings(max_examples=50, deadline=None)
@given(provider=st.text(min_size=1, max_size=20), kind=st.text(min_size=1, max_size=20))
def test_any_label_text_reads_back_as_written_from_the_scrape(provider: str, kind: str):
    """Quotes, backslashes and line breaks in a label (an error kind carrying a provider's
    text) are escaped in the exposition, so a scrape neither breaks nor reads another value."""
    observer = MetricsObserver()
    observer.on_poll(provider, False, kind)
    found = scrape(observer)
    assert value(found, "forewarn_poll_errors_total", provider=provider, kind=kind) == 1
