"""An answer without `Metadata-Flavor: Google` is not the metadata server's (a proxy, a
captive portal, another service on the address): its value is refused, never read as a
notice or as the end of one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import httpx
from forewarn.providers.gcp.watch import (
    FLAVOR_HEADER,
    MAINTENANCE_KEY,
    PREEMPTED_KEY,
    UPCOMING_KEY,
    not_the_server,
)
from gcp_support import watching
from hypothesis import given
from hypothesis import strategies as st


class _Proxied(BaseHTTPRequestHandler):
    """A metadata server whose first answer of each key is its own (with the header and an
    ETag), and whose later answers come from something else: `later` as the value (an empty
    one a 404), without `Metadata-Flavor`, a new ETag each time."""

    protocol_version = "HTTP/1.1"
    first: ClassVar[dict[str, bytes]] = {}
    later: ClassVar[dict[str, bytes]] = {}
    answered: ClassVar[dict[str, int]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        key = self.path.split("?", 1)[0].removeprefix("/computeMetadata/v1/")
        if key not in self.first:
            self.send_response(404)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        count = self.answered.get(key, 0)
        self.answered[key] = count + 1
        own = count == 0
        body = self.first[key] if own else self.later[key]
        self.send_response(200 if own or body else 404)
        if own:
            self.send_header("Metadata-Flavor", "Google")
        self.send_header("ETag", f"etag-{count}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def _serving(first: dict[str, bytes], later: dict[str, bytes]) -> Iterator[str]:
    _Proxied.first, _Proxied.later, _Proxied.answered = first, later, {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxied)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


async def test_an_answer_without_the_flavor_header_does_not_end_a_maintenance_stop() -> None:
    # TERMINATE_ON_HOST_MAINTENANCE from the metadata server, then `NONE` from something
    # that is not it: the drain was cleared, and the job trained on into the stop.
    first = {MAINTENANCE_KEY: b"TERMINATE_ON_HOST_MAINTENANCE", PREEMPTED_KEY: b"FALSE"}
    later = {MAINTENANCE_KEY: b"NONE", PREEMPTED_KEY: b"FALSE"}
    with _serving(first, later) as url:
        async with watching(url, upcoming_interval=0, maintenance_notice=600) as run:
            health = run.watcher.health
            await run.until(
                lambda: health.errors_by_kind.get("not-metadata-server", 0) >= 3,
                10,
                "three answers refused",
            )
            assert [r.action for r in run.reports] == ["drain"], run.reports
            assert "Metadata-Flavor" in (health.last_message or ""), health.last_message


async def test_an_answer_without_the_flavor_header_is_no_preemption() -> None:
    # `TRUE` from something that is not the metadata server: a terminate for a VM that was
    # never preempted, and every job on it saved and exited.
    first = {MAINTENANCE_KEY: b"NONE", PREEMPTED_KEY: b"FALSE"}
    later = {MAINTENANCE_KEY: b"NONE", PREEMPTED_KEY: b"TRUE"}
    with _serving(first, later) as url:
        async with watching(url, upcoming_interval=0) as run:
            health = run.watcher.health
            await run.until(
                lambda: health.errors_by_kind.get("not-metadata-server", 0) >= 3,
                10,
                "three answers refused",
            )
            assert run.reports == []
            assert not run.watcher.preempted_seen


async def test_a_404_without_the_flavor_header_does_not_clear_a_window() -> None:
    # A window from the metadata server, then a 404 from something that is not it: read as
    # "nothing scheduled", the window was cleared.
    window = b'{"window_start_time": "2099-01-01T00:00:00Z", "type": "SCHEDULED"}'
    first = {MAINTENANCE_KEY: b"NONE", PREEMPTED_KEY: b"FALSE", UPCOMING_KEY: window}
    later = {MAINTENANCE_KEY: b"NONE", PREEMPTED_KEY: b"FALSE", UPCOMING_KEY: b""}
    with _serving(first, later) as url:
        async with watching(url, upcoming_interval=0.1, maintenance_notice=600) as run:
            await run.until(lambda: _Proxied.answered.get(UPCOMING_KEY, 0) >= 4, 10, "4 reads")
            assert [r.action for r in run.reports] == ["drain"], run.reports


@given(
    flavor=st.one_of(st.none(), st.text(max_size=60)),
    server=st.one_of(st.none(), st.text(max_size=80)),
)
def test_only_the_flavor_google_is_the_metadata_server(
    flavor: str | None, server: str | None
) -> None:
    headers = {}
    if flavor is not None:
        headers[FLAVOR_HEADER] = flavor
    if server is not None:
        headers["Server"] = server
    try:
        response = httpx.Response(200, headers=headers)
    except (UnicodeEncodeError, ValueError):
        return  # not a header httpx can carry
    said = not_the_server(UPCOMING_KEY, response)
    if response.headers.get(FLAVOR_HEADER) == "Google":
        assert said is None
    else:
        assert said is not None and said.startswith(UPCOMING_KEY) and "Metadata-Flavor" in said
