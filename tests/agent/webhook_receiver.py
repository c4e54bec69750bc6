"""A real HTTP receiver on loopback for the webhook tests: records what arrives, and answers
from a script (status codes, or a hang)."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Answer = int | float | str | tuple[int, str]


@dataclass
class Received:
    at: float  # time.time() when the body was read
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Receiver:
    url: str
    # Answers to give, in order; then 200 for ever. An int is a status, a float a hang of
    # that many seconds (then 200), "endless" a 200 whose body never ends, (status, value) a
    # status with that Retry-After header (a Location header for a 3xx).
    script: list[Answer] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    attempted_at: list[float] = field(default_factory=list)  # time.monotonic() of each
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.01)
        raise TimeoutError(f"{len(self.received)} of {count} deliveries within {timeout}s")


@contextmanager
def receiver(
    script: list[Answer] | None = None, tls: tuple[Path, Path] | None = None
) -> Iterator[Receiver]:
    """`tls`: a certificate and its key (PEM files) to serve https with."""
    state = Receiver(url="", script=list(script or []))
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            with state.lock:
                state.attempts += 1
                state.attempted_at.append(time.monotonic())
                answer = state.script.pop(0) if state.script else 200
            if isinstance(answer, float):
                release.wait(answer)
                answer = 200
            if answer == "endless":
                self.endless_body(raw)
                return
            retry_after = None
            if isinstance(answer, tuple):
                answer, retry_after = answer
            if answer == 200:
                with state.lock:
                    state.received.append(
                        Received(time.time(), self.path, dict(self.headers), json.loads(raw))
                    )
            self.send_response(answer)
            if retry_after is not None:
                redirect = 300 <= answer < 400
                self.send_header("Location" if redirect else "Retry-After", retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def endless_body(self, raw: bytes) -> None:
            with state.lock:
                state.received.append(
                    Received(time.time(), self.path, dict(self.headers), json.loads(raw))
                )
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            try:
                while not release.is_set():
                    self.wfile.write(chunk)
            except OSError:
                pass  # the client hung up: what a client that reads only the status does

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        release.set()
        server.shutdown()
        server.server_close()
