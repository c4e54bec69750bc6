"""What every provider simulator shares: a threaded HTTP server on loopback, the `/_sim` control
API, scripted notices, and the command-line runner.

A provider simulator subclasses `Simulator` and implements `handle` (the real endpoint's
paths, headers, status codes and payloads) and the three notice hooks. The control API is
the same for all, under a prefix no real service uses:

- `POST /_sim/notices` with `{"kind": ..., <fields>}` raises a notice; answers `{"id": ...}`;
- `PATCH /_sim/notices/<id>` with fields changes one;
- `DELETE /_sim/notices/<id>` withdraws one;
- `GET /_sim/state` shows everything, plus request counts.

Standard library only: a user's test can start one without extra packages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from forewarn.protocol.errors import ForewarnError

log = logging.getLogger("forewarn.simulate")

CONTROL_PREFIX = "/_sim"


class SimError(ForewarnError):
    """A control request the simulator cannot honour; becomes a 4xx JSON answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SimRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # keys lower-cased
    body: bytes
    client: str

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class SimResponse:
    status: int = 200
    body: bytes | str = b""
    content_type: str = "text/plain"
    headers: dict[str, str] = field(default_factory=dict)
    # A chunked body (Kubernetes watch streams); the connection ends when it is exhausted.
    stream: Iterator[bytes] | None = None

    @classmethod
    def json(cls, payload: Any, status: int = 200, **kwargs: Any) -> SimResponse:
        return cls(status, json.dumps(payload), "application/json", **kwargs)


class Simulator:
    """Base of every provider simulator. Thread-safe through `self.lock`; `self.changed` is
    notified on every state change so long-polls and watch streams can wake up."""

    name = "simulator"

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.requests: Counter[str] = Counter()
        self._timers: list[threading.Timer] = []
        self.started_at = time.time()

    # Provider hooks.

    def handle(self, request: SimRequest) -> SimResponse:
        raise SimError(f"{self.name}: no such path {request.path}", 404)

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        raise SimError(f"{self.name}: unknown notice kind {kind!r}")

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        raise SimError(f"{self.name}: notices cannot be changed", 405)

    def withdraw(self, notice_id: str) -> bool:
        return False

    def state(self) -> dict[str, Any]:
        return {}

    # Shared machinery.

    def notify_change(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def schedule(self, after: float, kind: str, fields: dict[str, Any]) -> None:
        """Raise a notice `after` seconds from now (scripted notices)."""

        def fire() -> None:
            try:
                notice_id = self.raise_notice(kind, dict(fields))
                log.info("%s: scripted %s raised as %s", self.name, kind, notice_id)
            except SimError as error:
                log.error("%s: scripted %s failed: %s", self.name, kind, error)

        timer = threading.Timer(max(0.0, after), fire)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def cancel_scripts(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    def control(self, request: SimRequest) -> SimResponse:
        path = request.path[len(CONTROL_PREFIX) :]
        if path == "/state" and request.method == "GET":
            with self.lock:
                payload = {
                    "provider": self.name,
                    "requests": dict(self.requests),
                    **self.state(),
                }
            return SimResponse.json(payload)
        if path in ("/notices", "/notices/") and request.method == "POST":
            fields = _json_object(request.body)
            kind = fields.pop("kind", None)
            if not isinstance(kind, str):
                raise SimError('the body needs "kind", a string')
            after = fields.pop("after", None)
            if after is not None:
                if not isinstance(after, (int, float)) or after < 0:
                    raise SimError('"after" must be a number of seconds >= 0')
                self.schedule(float(after), kind, fields)
                return SimResponse.json({"scheduled": kind, "after": after}, 202)
            notice_id = self.raise_notice(kind, fields)
            self.notify_change()
            return SimResponse.json({"id": notice_id}, 201)
        if path.startswith("/notices/"):
            notice_id = unquote(path[len("/notices/") :])
            if request.method == "DELETE":
                if not self.withdraw(notice_id):
                    raise SimError(f"no notice {notice_id!r}", 404)
                self.notify_change()
                return SimResponse.json({"withdrawn": notice_id})
            if request.method == "PATCH":
                self.change_notice(notice_id, _json_object(request.body))
                self.notify_change()
                return SimResponse.json({"changed": notice_id})
        raise SimError(f"no control route {request.method} {request.path}", 404)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body or b"{}")
    except ValueError as error:
        raise SimError(f"body is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise SimError("body must be a JSON object")
    return payload


def _make_handler(sim: Simulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, the body waits for the
        # client's delayed ACK (~40 ms), which would dominate every latency measured here.
        disable_nagle_algorithm = True
        server_version = "forewarn-sim"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s: " + format, sim.name, *args)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            request = SimRequest(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                headers={key.lower(): value for key, value in self.headers.items()},
                body=body,
                client=self.client_address[0],
            )
            try:
                if parts.path.startswith(CONTROL_PREFIX + "/"):
                    response = sim.control(request)
                else:
                    with sim.lock:
                        sim.requests[f"{request.method} {request.path}"] += 1
                    response = sim.handle(request)
            except SimError as error:
                response = SimResponse.json({"error": str(error)}, error.status)
            except Exception as error:  # a simulator bug must still answer
                log.exception("%s: handler failed", sim.name)
                response = SimResponse.json({"error": f"simulator error: {error}"}, 500)
            self._send(response)

        def _send(self, response: SimResponse) -> None:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            for key, value in response.headers.items():
                self.send_header(key, value)
            if response.stream is not None:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in response.stream:
                        if chunk:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True
                return
            payload = response.body.encode() if isinstance(response.body, str) else response.body
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(payload)

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _serve

    return Handler


class SimServer:
    """Serves a simulator on loopback in background threads.

    >>> with SimServer(MySimulator()) as server:
    ...     httpx.get(server.url + "/latest/meta-data/")
    """

    def __init__(self, sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        self.httpd = ThreadingHTTPServer((host, port), _make_handler(sim))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.httpd.server_address[0])
        return f"http://{host}:{self.port}"

    def start(self) -> SimServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name=f"sim-{self.sim.name}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.sim.cancel_scripts()
        self.sim.notify_change()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_until_signalled(sim: Simulator, host: str, port: int) -> int:
    """Run a simulator for `forewarn simulate`: print where it listens, stop on SIGINT/SIGTERM."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("simulator bound to %s: it is meant for loopback", host)
    server = SimServer(sim, host, port).start()
    print(f"forewarn simulate {sim.name}: listening on {server.url}", flush=True)
    print(
        f"control API: {server.url}{CONTROL_PREFIX}/state, POST {CONTROL_PREFIX}/notices",
        flush=True,
    )
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    server.stop()
    return 0


__all__ = [
    "CONTROL_PREFIX",
    "SimError",
    "SimRequest",
    "SimResponse",
    "SimServer",
    "Simulator",
    "serve_until_signalled",
]
