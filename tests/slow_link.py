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

import select
import socket
import threading
import time
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


class SlowLink:
    """A TCP proxy to `upstream` (an http://host:port URL) carrying each connection's
    client-to-server bytes at `rate` bytes per second (None: as fast as they come), changeable
    while it runs; `url` is its own address. `carried` counts the client bytes it forwarded."""

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
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, server], [], [], 0.2)
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
                        server.sendall(data)
                    else:
                        client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            server.close()


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
