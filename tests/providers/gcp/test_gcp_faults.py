"""Faults: bursts of 503, a long-poll that hangs past timeout_sec, garbage, connection
refused. Each is counted in PollHealth and the watcher recovers within one retry period."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
import pytest
import respx
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.gcp.watch import PREEMPTED_KEY, UPCOMING_KEY, GcpWatcher
from forewarn.providers.simulator import SimServer
from gcp_support import WatchRun, watching
from support import free_port

RETRY = 0.3
# One retry period plus room for a loaded machine; the tests assert recovery, the benchmark
# measures latency.
RECOVERY = RETRY + 2.0


async def _recovers(run: WatchRun, sim: GcpSimulator, fault_ends: float) -> float:
    """Raise a drain as the fault ends; the seconds from then until the watcher reports it."""
    await asyncio.sleep(max(0.0, fault_ends - time.monotonic()))
    raised = time.monotonic()
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    await run.wait_for(lambda reports: any(r.action == "drain" for r in reports), timeout=10)
    return run.times[-1] - raised


# Long-polls of 1 s end during each fault, and upcoming-maintenance is not read: the
# errors counted are the long-polls' own.
LONG_POLLS_ONLY = {"timeout_sec": 1, "upcoming_interval": 0, "retry_delay": RETRY}


async def _errors(run: WatchRun, kind: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while run.watcher.health.errors_by_kind.get(kind, 0) < count:
        assert time.monotonic() < deadline, run.watcher.health
        await asyncio.sleep(0.02)


async def test_burst_of_503(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, **LONG_POLLS_ONLY) as run:
        await run.until_polling()
        sim.add_fault("status", status=503, duration=2.0)
        ends = time.monotonic() + 2.0
        await _errors(run, "unavailable", 3)
        assert await _recovers(run, sim, ends) < RECOVERY
        # Recovered once each long-poll has answered again (the other one may still be in
        # the wait it began as the fault ended).
        health = run.watcher.health
        await run.until(lambda: health.last_error is None, 5, "recovered")


async def test_long_poll_hanging_past_timeout_sec(server: SimServer, sim: GcpSimulator) -> None:
    # timeout_sec 1 s + margin 0.5 s: the HTTP read timeout is 1.5 s.
    async with watching(server.url, read_timeout_margin=0.5, **LONG_POLLS_ONLY) as run:
        await run.until_polling()
        # The two long-polls open now do not answer at timeout_sec (1 s) but hang for 4 s
        # (the next two answers, however late a loaded machine makes them): both are
        # abandoned at the 1.5 s read timeout.
        sim.add_fault("hang", seconds=4, count=2)
        await _errors(run, "timeout", 2)
        assert await _recovers(run, sim, time.monotonic()) < RECOVERY


async def test_garbage_answers(server: SimServer, sim: GcpSimulator) -> None:
    async with watching(server.url, **LONG_POLLS_ONLY) as run:
        await run.until_polling()
        sim.add_fault("malformed", duration=2.0)
        ends = time.monotonic() + 2.0
        await _errors(run, "parse", 3)
        assert await _recovers(run, sim, ends) < RECOVERY
        assert run.reports[0].action == "drain"


async def test_connection_refused_until_the_server_comes_up() -> None:
    port = free_port()
    sim = GcpSimulator()
    sim.raise_notice("maintenance", {"type": "TERMINATE"})
    async with watching(f"http://127.0.0.1:{port}", retry_delay=RETRY) as run:
        deadline = time.monotonic() + 10
        while run.watcher.health.errors_by_kind.get("transport", 0) < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert run.reports == []
        with SimServer(sim, port=port):
            up = time.monotonic()
            [drain] = await run.count(1, timeout=10)
            assert run.times[0] - up < RECOVERY
    assert drain.action == "drain"


# Transport faults a server cannot easily produce, through respx.

ROOT = "http://metadata.test/computeMetadata/v1"
# On every answer of the metadata server; one without it is not the server's (test_gcp_flavor).
GOOGLE = {"Metadata-Flavor": "Google"}


@respx.mock(assert_all_mocked=True)
async def test_transport_errors_are_counted_and_retried(respx_mock: respx.MockRouter) -> None:
    sequence: list[object] = [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("hung"),
        httpx.RemoteProtocolError("peer closed connection"),
        httpx.Response(503, text="Service Unavailable"),
        httpx.Response(200, text="\x00\xff garbage", headers={"ETag": "g", **GOOGLE}),
    ]

    def maintenance(request: httpx.Request) -> httpx.Response:
        assert request.headers["Metadata-Flavor"] == "Google"
        assert request.url.params["wait_for_change"] == "true"
        assert request.url.params["timeout_sec"] == "15"  # the default
        if sequence:
            step = sequence.pop(0)
            if isinstance(step, Exception):
                raise step
            assert isinstance(step, httpx.Response)
            return step
        return httpx.Response(
            200, text="TERMINATE_ON_HOST_MAINTENANCE", headers={"ETag": "t", **GOOGLE}
        )

    respx_mock.get(f"{ROOT}/instance/maintenance-event").mock(side_effect=maintenance)
    respx_mock.get(f"{ROOT}/instance/preempted").mock(
        return_value=httpx.Response(200, text="FALSE", headers={"ETag": "f", **GOOGLE})
    )
    respx_mock.get(f"{ROOT}/instance/scheduling/").mock(
        return_value=httpx.Response(404, headers=GOOGLE)
    )
    respx_mock.get(f"{ROOT}/instance/machine-type").mock(
        return_value=httpx.Response(404, headers=GOOGLE)
    )
    respx_mock.get(f"{ROOT}/instance/upcoming-maintenance").mock(
        return_value=httpx.Response(404, headers=GOOGLE)
    )
    watcher = GcpWatcher(
        Settings(url="http://metadata.test", retry_delay=0.01, upcoming_interval=5), environ={}
    )
    run = WatchRun(watcher)
    run.task = asyncio.create_task(watcher.watch(run.emit))
    try:
        [drain] = await run.count(1)
    finally:
        run.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run.task
        await watcher.aclose()
    assert drain.action == "drain"
    kinds = watcher.health.errors_by_kind
    assert kinds["transport"] == 2 and kinds["timeout"] == 1
    assert kinds["unavailable"] == 1 and kinds["parse"] == 1


@respx.mock(assert_all_mocked=True)
async def test_a_server_without_etags_is_one_warning_not_a_flood(
    respx_mock: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    # Each answer without an ETag counted a success (logged "polling recovered", which
    # forgets what was logged) and then the error (logged again): two lines a key at every
    # retry_delay, four a second by default, for as long as the server runs.
    keys = {"preempted": "FALSE", "maintenance-event": "NONE"}
    routes = [
        respx_mock.get(f"{ROOT}/instance/{key}").mock(
            return_value=httpx.Response(200, text=value, headers=GOOGLE)
        )
        for key, value in keys.items()
    ]
    for key in ("scheduling/", "machine-type"):
        respx_mock.get(f"{ROOT}/instance/{key}").mock(
            return_value=httpx.Response(200, text="{}", headers=GOOGLE)
        )
    respx_mock.get(f"{ROOT}/instance/upcoming-maintenance").mock(
        return_value=httpx.Response(404, headers=GOOGLE)
    )
    settings = Settings(url="http://metadata.test", retry_delay=0.01, upcoming_interval=0.01)
    watcher = GcpWatcher(settings, environ={})
    run = WatchRun(watcher)
    caplog.set_level("INFO", logger="forewarn.providers")
    run.task = asyncio.create_task(watcher.watch(run.emit))
    try:
        await run.until(lambda: all(route.call_count >= 10 for route in routes), 10, "answers")
    finally:
        run.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run.task
        await watcher.aclose()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("forewarn.providers")]
    assert not [line for line in said if "recovered" in line], said
    assert len([line for line in said if "ETag" in line]) == 1, said
    health = watcher.health
    assert (health.errors, health.last_error) == (0, None) and "no-etag" in health.conditions


async def test_a_key_that_keeps_failing_beside_good_ones_does_not_flap(
    server: SimServer, sim: GcpSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    # upcoming-maintenance answering 500 at each read, the long-polls fine: the log said the
    # error and "polling recovered" at every read. The provider is still ready (it answered).
    sim.add_fault("status", path="/computeMetadata/v1/instance/upcoming-maintenance", status=500)
    caplog.set_level("INFO", logger="forewarn.providers")
    async with watching(server.url, timeout_sec=1, upcoming_interval=0.05) as run:
        await _errors(run, "http-500", 5)
        key = "GET /computeMetadata/v1/instance/preempted"
        answered = sim.requests[key]
        await run.until(lambda: sim.requests[key] >= answered + 2, 10, "long-polls")
    said = [r.getMessage() for r in caplog.records if r.name == "forewarn.providers"]
    assert len([line for line in said if "recovered" in line]) <= 1, said
    assert len([line for line in said if "http-500" in line]) == 1, said
    assert run.watcher.health.last_success is not None


async def test_good_answers_beside_a_failing_key_still_count_as_progress(
    server: SimServer, sim: GcpSimulator
) -> None:
    # upcoming-maintenance answering 500 (a standing fault, read every upcoming_interval,
    # 60 s by default), the long-polls fine: their answers counted as no success while the
    # key failed, hence as no progress either, and with the defaults the next 500 came past
    # the watcher's progress bound (52 s): the agent restarted it as hung every minute,
    # leaving it unwatched through each restart's backoff.
    sim.add_fault("status", path="/computeMetadata/v1/instance/upcoming-maintenance", status=500)
    async with watching(server.url, timeout_sec=1, upcoming_interval=3600) as run:
        await _errors(run, "http-500", 1)
        health = run.watcher.health
        failed_at = health.last_progress
        key = "GET /computeMetadata/v1/instance/preempted"
        answered = sim.requests[key]
        await run.until(lambda: sim.requests[key] >= answered + 2, 10, "long-polls")
        assert health.last_progress > failed_at
        assert health.errors_by_kind == {"http-500": 1}


async def test_a_key_failing_before_the_first_good_answer_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # upcoming-maintenance answered 500 before any long-poll answered (a loaded machine): the
    # first good answer, which makes the provider ready, said "polling recovered" though the
    # key still failed, and its next 500 was warned about again.
    watcher = GcpWatcher(Settings(url="http://metadata.test"), environ={})
    caplog.set_level("INFO", logger="forewarn.providers")
    try:
        watcher._bad(UPCOMING_KEY, "http-500", f"{UPCOMING_KEY}: HTTP 500")
        watcher._good(PREEMPTED_KEY)
        assert watcher.health.ready
        watcher._bad(UPCOMING_KEY, "http-500", f"{UPCOMING_KEY}: HTTP 500")
        watcher._good(PREEMPTED_KEY)
        said = [r.getMessage() for r in caplog.records if r.name == "forewarn.providers"]
        line = f"gcp: http-500: {UPCOMING_KEY}: HTTP 500 (seen once since the agent started)"
        assert said == [line], said
        watcher._good(UPCOMING_KEY)  # the key itself answers: that is a recovery
        said = [r.getMessage() for r in caplog.records if r.name == "forewarn.providers"]
        assert said[-1] == "gcp: polling recovered after http-500", said
    finally:
        await watcher.aclose()


async def test_the_read_timeout_is_above_timeout_sec() -> None:
    watcher = GcpWatcher(Settings(url="http://metadata.test", timeout_sec=60), environ={})
    try:
        timeout = watcher.client.timeout
        assert timeout.read is not None and timeout.read > 60
        assert watcher.client.headers["Metadata-Flavor"] == "Google"
    finally:
        await watcher.aclose()


class _FreshEtags(BaseHTTPRequestHandler):
    """A metadata server that answers every request at once with the same value and a new
    ETag (a proxy or emulator hashing more than the value): each `last_etag` differs, so no
    long-poll ever waits."""

    protocol_version = "HTTP/1.1"
    served: ClassVar[list[float]] = []
    counter: ClassVar[itertools.count[int]] = itertools.count()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        values = {"/computeMetadata/v1/instance/preempted": b"FALSE"}
        body = values.get(path, b"NONE" if path.endswith("maintenance-event") else None)
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path.endswith("preempted"):
            type(self).served.append(time.monotonic())
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("ETag", f"etag-{next(self.counter)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


async def test_a_server_with_a_new_etag_at_every_answer_is_paced_not_hammered() -> None:
    # Each answer came back at once with a new ETag and the same value; the watcher took the
    # new ETag for a change and asked again at once: a tight loop of requests (and a core)
    # for as long as the server did so. An unchanged value answered well before timeout_sec
    # is now paced at retry_delay, as an unchanged ETag was.
    _FreshEtags.served = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FreshEtags)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        async with watching(url, timeout_sec=5, retry_delay=0.2, upcoming_interval=0) as run:
            await run.until(lambda: len(_FreshEtags.served) >= 7, 15, "seven long-polls")
            assert run.reports == []
    finally:
        server.shutdown()
        server.server_close()
    served = _FreshEtags.served[:7]
    # The first three are asked at once (last_etag=0, its ETag, then the one new ETag of the
    # same value, which may be a flip and its undo between two long-polls); each answer from
    # the third on is held retry_delay before the next request.
    gaps = [b - a for a, b in itertools.pairwise(served)]
    assert served[-1] - served[2] >= 4 * 0.2 * 0.9, gaps


async def test_a_new_episode_of_an_error_counts_from_one(
    server: SimServer, sim: GcpSimulator, caplog: pytest.LogCaptureFixture
) -> None:
    # Three 503s, recovery, then one more 503: the second episode's first line said "(seen 4
    # times)", counting every 503 since the agent started, as if the endpoint had failed four
    # times in a row. The metrics keep the total; the line counts since the last recovery.
    caplog.set_level("INFO", logger="forewarn.providers")
    async with watching(server.url, **LONG_POLLS_ONLY) as run:
        await run.until_polling()
        health = run.watcher.health
        sim.add_fault("status", status=503, count=3)
        await _errors(run, "unavailable", 3)
        await run.until(lambda: health.last_error is None, 10, "recovered")
        sim.add_fault("status", status=503, count=1)
        await _errors(run, "unavailable", 4)
        await run.until(lambda: health.last_error is None, 10, "recovered again")
    said = [r.getMessage() for r in caplog.records if r.name == "forewarn.providers"]
    lines = [line for line in said if ": unavailable: " in line]
    assert len(lines) == 2, said
    assert lines[0].endswith("(seen once since the agent started)"), lines
    assert lines[1].endswith("(seen once since polling recovered)"), lines
    assert health.errors_by_kind["unavailable"] == 4
