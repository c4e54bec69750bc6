"""The fault proxy's own promises: a refused port stays the proxy's until it heals."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from faultproxy import FaultProxy


@pytest.fixture
def upstream() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"upstream\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    yield server
    server.close()


@pytest.mark.parametrize("fault", ["refused", "outage"])
def test_a_refused_port_is_not_free_for_anyone_else_and_heals_on_the_same_port(
    fault: str, upstream: socket.socket
) -> None:
    # Closing the listener for `refused` let another test's server (or a connect's
    # ephemeral port) take the port, and the heal failed with EADDRINUSE (check 44d).
    proxy = FaultProxy(upstream.getsockname())
    try:
        port = proxy.port
        proxy.set(fault)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2)
        for reuse in (False, True):
            other = socket.socket()
            if reuse:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError, match="Address already in use"):
                other.bind(("127.0.0.1", port))
            other.close()
        proxy.set(None)
        assert proxy.port == port
        with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
            conn.settimeout(5)
            assert conn.recv(64) == b"upstream\n"
    finally:
        proxy.stop()
