"""A slow link to a loopback server: a TCP proxy on 127.0.0.1 that carries the client's bytes
towards the server at a set rate (an upload over a thin uplink), and the server's answers at
once; and small client send buffers, so the bytes wait on the link and not in the kernel.

Loopback's 64 KiB segments let Linux grow a connection's send buffer to megabytes at once (it
sizes it from the congestion window, counted in segments): a client there hands a 5 MiB part
to the kernel in a moment and then waits seconds for the drain, which a NIC's 1.5 KiB segments
never allow. `small_send_buffers` puts the client's sockets back to about what a real link
gives (a real link's silence after the last byte of a request is bounded by the client's read
timeout anyway)."""

from __future__ import annotations

import re
import select
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import pytest

# What the proxy reads from a client at a time: the step of its pacing.
_CHUNK = 16 << 10
# The proxy's own receive buffer per connection: small, so the pace is the link's.
_RECEIVE_BUFFER = 16 << 10
# The client's send buffer under `small_send_buffers` (Linux doubles what it is asked).
SEND_BUFFER = 64 << 10
# Client bytes since a connection's last answer past which it carries a body (a part's, a
# file's): more than a small request (a claim, a manifest, a listing) sends.
_BODY = 64 << 10
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)")


class SlowLink:
    """A TCP proxy to `upstream` (an http://host:port URL) carrying each connection's
    client-to-server bytes at `rate` bytes per second (None: as fast as they come), changeable
    while it runs; `url` is its own address. `carried` counts the client bytes it forwarded.
    `hold()` stops the connections open at that moment until `release()`."""

    def __init__(self, upstream: str, rate: float | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = rate
        self.carried = 0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        # Set before listen(): accepted connections inherit it (and it caps their window).
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = threading.Event()
        # Connections whose client bytes wait (a lossy link's retransmission backoff, a
        # stalled path): `hold()` adds the ones open then, `release()` lets them go on.
        self._pipes: dict[socket.socket, int] = {}  # open connections: client bytes carried
        self._held: set[socket.socket] = set()
        # Told True when a connection starts carrying a body at the set rate, False once none
        # does (each carried its body's last byte, or was answered): a test's bounds can
        # follow the link's motion, and not the server's answers after it.
        self.on_bodies: Callable[[bool], None] | None = None
        self._since_answer: dict[socket.socket, int] = {}
        self._in_body: set[socket.socket] = set()
        # Each connection's request under way: its head until read whole, then how many bytes
        # of its body (its Content-Length) are still to carry.
        self._head: dict[socket.socket, bytes] = {}
        self._body_left: dict[socket.socket, int] = {}

    def __enter__(self) -> SlowLink:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closed.set()
        self._listener.close()

    def hold(self) -> None:
        """Stop carrying the client bytes of the connections open now (new ones flow)."""
        with self._lock:
            self._held = set(self._pipes)

    def busy(self, at_least: int) -> int:
        """How many open connections have carried `at_least` client bytes (a part's body on
        its way, not a small request's)."""
        with self._lock:
            return sum(1 for carried in self._pipes.values() if carried >= at_least)

    def release(self) -> None:
        """Carry the held connections' bytes again."""
        with self._lock:
            self._held = set()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with self._lock:
            self._pipes[client] = 0
        try:
            while not self._closed.is_set():
                held = client in self._held
                watched = [server] if held else [client, server]
                ready, _, _ = select.select(watched, [], [], 0.05 if held else 0.2)
                for sock in ready:
                    data = sock.recv(_CHUNK if sock is client else 1 << 20)
                    if not data:
                        return
                    if sock is client:
                        rate = self.rate
                        if rate:
                            time.sleep(len(data) / rate)
                        with self._lock:
                            self.carried += len(data)
                            self._pipes[client] += len(data)
                        self._carried_towards(client, data, rate)
                        server.sendall(data)
                    else:
                        self._answered(client)
                        client.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._pipes.pop(client, None)
            self._answered(client)
            with self._lock:
                self._since_answer.pop(client, None)
                self._head.pop(client, None)
                self._body_left.pop(client, None)
            client.close()
            server.close()

    def _carried_towards(self, client: socket.socket, data: bytes, rate: float | None) -> None:
        with self._lock:
            since = self._since_answer[client] = self._since_answer.get(client, 0) + len(data)
            starts = rate is not None and since >= _BODY and client not in self._in_body
            if starts:
                self._in_body.add(client)
            first = starts and len(self._in_body) == 1
            # Its body's last byte carried, the server's answer is no motion of the link's:
            # a loaded server answering a part late read as a stall of the link.
            ends = self._body_carried(client, data) and client in self._in_body
            if ends:
                self._in_body.discard(client)
            last = ends and not self._in_body
            tell = self.on_bodies
        if first and tell is not None:
            tell(True)
        if last and tell is not None:
            tell(False)

    def _body_carried(self, client: socket.socket, data: bytes) -> bool:
        """Count `data` against the connection's request under way (the lock held): whether
        it carried the last byte of a body. A request without a Content-Length (chunked) is
        left to its answer."""
        left = self._body_left.get(client, 0)
        if left > 0:
            self._body_left[client] = max(left - len(data), 0)
            return left <= len(data)
        head = self._head.get(client, b"") + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            self._head[client] = head
            return False
        self._head[client] = b""
        match = _CONTENT_LENGTH.search(head[:end])
        length = int(match.group(1)) if match else 0
        self._body_left[client] = max(length - (len(head) - end - 4), 0)
        return False

    def _answered(self, client: socket.socket) -> None:
        with self._lock:
            self._since_answer[client] = 0
            ends = client in self._in_body
            self._in_body.discard(client)
            last = ends and not self._in_body
            tell = self.on_bodies
        if last and tell is not None:
            tell(False)


def small_send_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every connection urllib3 (so botocore) opens in this process a send buffer of
    SEND_BUFFER bytes (see the module's text), for the rest of the test."""
    from urllib3.util import connection

    create = connection.create_connection

    def with_small_buffer(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        options = list(kwargs.pop("socket_options", None) or [])
        options.append((socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER))
        return create(address, *args, socket_options=options, **kwargs)

    monkeypatch.setattr(connection, "create_connection", with_small_buffer)


__all__ = ["SEND_BUFFER", "SlowLink", "small_send_buffers"]
