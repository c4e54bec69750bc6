"""A fault source for the watcher fault matrix: a TCP proxy on 127.0.0.1 in front of a
provider's simulator (or any server) that can be told to misbehave.

It works below HTTP, so the same faults apply to every provider, and to IMAP too:

- `http-500`, `html-404`: an HTTP error answer instead of the real one;
- `reset`: the connection is reset (RST) as soon as it is accepted;
- `refused`: nothing listens on the port (connection refused) until healed;
- `big-body`: a 200 whose body is 50 MB, delimited by the connection's end;
- `bad-json`: a 200 whose JSON body is cut off;
- `bad-dates`: the provider's own answer shape with dates that do not parse (from the
  adapter's `bad_dates(path)`; paths it has nothing for are passed through);
- `hang`: the request is read and never answered;
- `slow-body`: a 200 whose body arrives at one byte a second;
- `outage`: `refused`, held for longer.

Setting a fault resets every connection open through the proxy (a kept-alive connection
would otherwise never see it); healing resets every connection the fault holds, and new
connections are passed through to the upstream again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

FAULTS = (
    "http-500",
    "html-404",
    "reset",
    "refused",
    "big-body",
    "bad-json",
    "bad-dates",
    "hang",
    "slow-body",
    "outage",
)
BIG_BODY = 50 * 1024 * 1024


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _answer(status: str, body: bytes, content_type: str, close: bool = True) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n"
    )
    return head.encode() + body


class FaultProxy:
    def __init__(
        self,
        upstream: tuple[str, int],
        bad_dates: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.upstream = upstream
        self.bad_dates = bad_dates or (lambda path: None)
        self.fault: str | None = None
        self.met = 0  # connections served with a fault, ended (a test waits on it)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()  # every client connection, to reset
        self._healed = threading.Event()
        self._healed.set()
        self._stopped = False
        self.port = 0
        self._listener: socket.socket | None = None
        self._placeholder: socket.socket | None = None  # holds the port while refused
        self._listen()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def _bound(port: int) -> socket.socket:
        # SO_REUSEPORT lets the proxy hand the port between its listener and a socket that
        # is bound but not listening (connections to it are refused) without ever letting
        # it go: a port closed for `refused` was taken by another test's server or by a
        # connect's ephemeral port, and the heal failed with EADDRINUSE.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        return sock

    def _listen(self) -> None:
        listener = self._bound(self.port)
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        if self._placeholder is not None:
            self._placeholder.close()
            self._placeholder = None
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _refuse(self) -> None:
        if self._listener is None:
            return
        self._placeholder = self._bound(self.port)
        # close() alone leaves a listener another thread is blocked in accept() on
        # listening (the kernel's file stays open until accept returns): shutdown wakes it.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._listener = None

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: refused until healed, or stopped
            with self._lock:
                fault = self.fault
                self._open.add(conn)
            threading.Thread(target=self._serve, args=(conn, fault), daemon=True).start()

    def set(self, fault: str | None) -> None:
        """Start `fault` (one of FAULTS), or heal with None."""
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            previous, self.fault = self.fault, fault
            held, self._open = self._open, set()
        if fault is None:
            self._healed.set()
        else:
            self._healed.clear()
        for conn in held:
            _reset(conn)
        if fault in ("refused", "outage"):
            self._refuse()
        if fault not in ("refused", "outage") and previous in ("refused", "outage"):
            self._listen()

    def stop(self) -> None:
        self._stopped = True
        self.set(None)
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        self._healed.set()

    # Serving one connection.

    def _serve(self, conn: socket.socket, fault: str | None) -> None:
        try:
            if fault is None:
                self._pass(conn, b"")
            elif fault == "reset":
                _reset(conn)
            else:
                self._misbehave(conn, fault)
        except (OSError, ValueError):  # reset by set(), or the peer gave up
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
                if fault is not None:
                    self.met += 1
            with contextlib.suppress(OSError):
                conn.close()

    def _request_head(self, conn: socket.socket) -> bytes:
        """The request's head; empty when the client waits for the server to speak (IMAP)."""
        conn.settimeout(0.5)
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            pass
        conn.settimeout(None)
        return head

    def _misbehave(self, conn: socket.socket, fault: str) -> None:
        head = self._request_head(conn)
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        path = line.split(" ")[1] if line.count(" ") >= 2 else ""
        if fault == "http-500":
            conn.sendall(_answer("500 Internal Server Error", b"internal error\n", "text/plain"))
        elif fault == "html-404":
            page = b"<html><head><title>404 Not Found</title></head><body>Not Found</body></html>"
            conn.sendall(_answer("404 Not Found", page, "text/html"))
        elif fault == "bad-json":
            conn.sendall(_answer("200 OK", b'{"Events": [{"EventId": "cut', "application/json"))
        elif fault == "bad-dates":
            body = self.bad_dates(path)
            if body is None:
                self._forward_once(conn, head)
            else:
                conn.sendall(_answer("200 OK", body, "application/json"))
        elif fault == "big-body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
            chunk = b"x" * 65536
            sent = 0
            while sent < BIG_BODY and not self._healed.is_set():
                conn.sendall(chunk)
                sent += len(chunk)
        elif fault == "slow-body":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n"
            )
            while not self._healed.wait(1.0):
                conn.sendall(b" ")
        elif fault == "hang":
            self._healed.wait()

    def _forward_once(self, conn: socket.socket, head: bytes) -> None:
        """One request to the upstream, then the connection ends: the next request comes on
        a new connection and meets the fault again."""
        first, _, rest = head.partition(b"\r\n")
        upstream = socket.create_connection(self.upstream, timeout=5)
        try:
            upstream.sendall(first + b"\r\nConnection: close\r\n" + rest)
            while data := upstream.recv(65536):
                conn.sendall(data)
        finally:
            upstream.close()

    def _pass(self, conn: socket.socket, already: bytes) -> None:
        upstream = socket.create_connection(self.upstream, timeout=5)
        upstream.settimeout(None)
        try:
            if already:
                upstream.sendall(already)
            pair = {conn: upstream, upstream: conn}
            while True:
                readable, _, _ = select.select(list(pair), [], [], 1.0)
                if self._stopped:
                    return
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    pair[sock].sendall(data)
        finally:
            with contextlib.suppress(OSError):
                upstream.close()


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.02)


__all__ = ["BIG_BODY", "FAULTS", "FaultProxy", "wait_for"]
