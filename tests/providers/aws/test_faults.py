"""Faults: the watcher counts each, logs one line per distinct error, keeps polling, and
sees a notice raised after the fault ends within two poll periods."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import httpx
import pytest
import respx
from aws_support import watching
from forewarn.providers.aws.imds import SPOT_PATH, TOKEN_PATH
from forewarn.providers.aws.settings import Settings
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.aws.watch import THROTTLE_CEILING, AwsWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from support import WatcherRun, free_port

# Twice the default cadence, to keep the suite fast; "two poll periods" scales with it.
INTERVAL = 0.25
TIMEOUT = 0.3
# Scheduling slack on a loaded two-core machine; the assertion stays far below what any
# backoff (or a missed poll) would produce.
SLACK = 0.6
CADENCE = {
    "spot_interval": INTERVAL,
    "rebalance_interval": INTERVAL,
    # The 5 s paths at 0.5 s, so that every path has polled again soon after a fault ends.
    "scheduled_interval": 0.5,
    "asg_interval": 0.5,
}


def log_lines(caplog: pytest.LogCaptureFixture, kind: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "forewarn.providers" and f": {kind}: " in record.getMessage()
    ]


async def recovers(
    run: WatcherRun,
    kind: str,
    end_fault: Callable[[], None],
    raise_notice: Callable[[], None],
    caplog: pytest.LogCaptureFixture,
    backoff: float = 0.0,
) -> None:
    """`backoff`: the longest wait the watcher may be in when the fault ends (a 429's)."""
    started = time.monotonic()
    # Still polling through the fault: errors keep coming for over two poll periods.
    await run.until(
        lambda: (
            run.health.errors_by_kind.get(kind, 0) >= 3
            and time.monotonic() - started > 2 * INTERVAL
        )
    )
    end_fault()
    raised = time.monotonic()
    raise_notice()
    _report, seen = await run.report_at(action="terminate")
    assert seen - raised <= backoff + 2 * INTERVAL + TIMEOUT + SLACK, f"took {seen - raised:.2f}s"
    lines = log_lines(caplog, kind)
    assert len(lines) == 1, lines
    await run.until(lambda: run.health.last_error is None)  # recovered


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ({"kind": "status", "status": 500}, "http-500"),
        ({"kind": "status", "status": 503}, "http-503"),
        ({"kind": "status", "status": 429}, "http-429"),
        ({"kind": "status", "path": SPOT_PATH, "status": 200, "body": "<html>garbage"}, "bad-spot"),
        (
            {"kind": "status", "path": SPOT_PATH, "status": 200, "body": '{"action": "termin'},
            "bad-spot",
        ),
        ({"kind": "hang", "path": SPOT_PATH, "seconds": 10}, "timeout"),
        ({"kind": "hang", "path": TOKEN_PATH, "seconds": 10}, "token-timeout"),
        ({"kind": "status", "path": TOKEN_PATH, "status": 503}, "token-http-503"),
    ],
    ids=["500", "503", "429", "garbage", "truncated-json", "timeout", "token-hangs", "token-503"],
)
async def test_a_fault_is_counted_logged_once_and_outlived(
    sim: ImdsSimulator,
    server: SimServer,
    caplog: pytest.LogCaptureFixture,
    fault: dict[str, object],
    kind: str,
) -> None:
    caplog.set_level(logging.INFO)
    fault_id = sim.add_fault(**{"path": "/latest/meta-data/", **fault})  # type: ignore[arg-type]
    # Only a hang needs the short timeout; with it, a status fault on a loaded machine also
    # counted a slow answer or two as timeouts, which are not the fault under test.
    timeout = TIMEOUT if fault["kind"] == "hang" else 5.0
    # After a 429 the watcher backs off (1 s, 2 s, 4 s, with a fifth either way of jitter):
    # the notice comes after the wait it is in when the throttling ends.
    backoff = THROTTLE_CEILING * 1.2 if kind == "http-429" else 0.0
    async with watching(server.url, timeout=timeout, **CADENCE) as run:
        await recovers(
            run,
            kind,
            lambda: sim.remove_fault(fault_id),
            lambda: sim.raise_notice("spot", {}),
            caplog,
            backoff,
        )
        assert run.health.errors_by_kind[kind] == run.health.errors


async def test_a_hanging_token_put_is_explained_once_with_cause_and_fix(
    sim: ImdsSimulator, server: SimServer, caplog: pytest.LogCaptureFixture
) -> None:
    sim.add_fault("hop-limit", seconds=10)
    async with watching(server.url, timeout=0.2) as run:
        await run.until(lambda: run.health.errors_by_kind.get("token-timeout", 0) >= 3)
    (line,) = log_lines(caplog, "token-timeout")
    assert "hop limit" in line and "--http-put-response-hop-limit 2" in line
    assert "hostNetwork" in line
    all_text = "\n".join(record.getMessage() for record in caplog.records)
    assert all_text.count("Fix:") == 1


async def test_connection_refused_then_imds_comes_up(
    sim: ImdsSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    servers: list[SimServer] = []  # built only when the fault ends: binding is listening

    def come_up() -> None:
        servers.append(SimServer(sim, port=port).start())

    try:
        async with watching(f"http://127.0.0.1:{port}", timeout=TIMEOUT, **CADENCE) as run:
            await recovers(run, "connect", come_up, lambda: sim.raise_notice("spot", {}), caplog)
    finally:
        for server in servers:
            server.stop()


class FakeImds:
    """IMDS under respx (as the watcher's transport), for transport faults a real server
    cannot easily produce."""

    def __init__(self) -> None:
        self.fault: Exception | None = None
        self.notice = False

    def spot(self, request: httpx.Request) -> httpx.Response:
        if self.fault is not None:
            raise self.fault
        if request.headers.get("X-aws-ec2-metadata-token") != "tok":
            return httpx.Response(401)
        if self.notice:
            return httpx.Response(
                200, text='{"action": "terminate", "time": "2026-11-30T03:12:00Z"}'
            )
        return httpx.Response(404, text="<html>404 - Not Found</html>")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (httpx.ReadTimeout("timed out"), "timeout"),
        (httpx.ConnectTimeout("timed out"), "timeout"),
        (httpx.ConnectError("[Errno 111] Connection refused"), "connect"),
        (
            httpx.RemoteProtocolError("peer closed connection without sending complete body"),
            "broken-response",
        ),
        (httpx.ReadError("connection reset by peer"), "broken-response"),
    ],
    ids=["read-timeout", "connect-timeout", "refused", "truncated-body", "reset"],
)
async def test_transport_faults(
    caplog: pytest.LogCaptureFixture, error: Exception, kind: str
) -> None:
    fake = FakeImds()
    with respx.mock(base_url="http://imds.test", assert_all_called=False) as mock:
        mock.put(TOKEN_PATH).respond(
            200, text="tok", headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"}
        )
        mock.get(SPOT_PATH).mock(side_effect=fake.spot)
        mock.get(url__regex=r".*").respond(404)
        fake.fault = error
        transport = httpx.MockTransport(mock.async_handler)
        async with watching(
            "http://imds.test",
            transport,
            spot_interval=INTERVAL,
            rebalance_interval=0,
            timeout=TIMEOUT,
        ) as run:

            def end() -> None:
                fake.fault = None

            def notice() -> None:
                fake.notice = True

            await recovers(run, kind, end, notice, caplog)


async def test_detection_does_not_use_up_the_explanation(
    sim: ImdsSimulator, server: SimServer, caplog: pytest.LogCaptureFixture
) -> None:
    sim.add_fault("hop-limit", seconds=10)
    watcher = AwsWatcher(Settings(url=server.url, timeout=0.2), PollHealth("aws"))
    assert await watcher.detect()  # the token PUT hung here first
    task = asyncio.create_task(watcher.watch(lambda report: None))
    try:
        deadline = time.monotonic() + 10
        while watcher.health.errors < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await watcher.aclose()
    (line,) = log_lines(caplog, "token-timeout")
    assert "Fix:" in line


async def test_a_slow_imds_is_said_with_the_setting_that_waits_longer(
    sim: ImdsSimulator, server: SimServer
) -> None:
    # IMDS answering in 1 s against a 0.3 s timeout (as one answering in 5 s against the
    # default 2 s): every poll failed with `GET ... timed out after 0.3s`, and nothing said
    # which setting waits longer, so a slow IMDS stayed unread.
    sim.add_fault("hang", path=SPOT_PATH, seconds=1)
    async with watching(server.url, timeout=TIMEOUT, **CADENCE) as run:
        await run.until(lambda: run.health.errors_by_kind.get("timeout", 0) >= 2, 10, "timeouts")
        said = run.health.last_message or ""
    assert "timed out after 0.3s" in said and "aws.timeout" in said, said
