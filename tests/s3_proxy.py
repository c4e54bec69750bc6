"""A loopback HTTP proxy in front of the moto server, for the S3-compatible services' quirks
moto does not play (a slow commit, a lost answer, no multi-object delete, upload start times).

A test subclasses `S3Proxy` and overrides `answer` (answer a request itself, or hold it),
`forwarded` (change moto's reply, or reset the connection instead of answering) and
`cut_body` (answer a request partway through its body, as a service failing mid-upload)."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

# Headers the proxy writes itself: the length of what it sends, its own Date and Server
# (send_response adds them), and one connection per exchange.
_OWN_HEADERS = ("transfer-encoding", "content-length", "connection", "date", "server")


@dataclass
class Request:
    command: str
    path: str
    headers: dict[str, str]
    body: bytes | None

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.path).query, keep_blank_values=True)


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    data: bytes


XML = [("Content-Type", "application/xml")]


class S3Proxy(ThreadingHTTPServer):
    """Forwards every request to `upstream` unless `answer` answers it; a context manager
    that serves on a thread of its own."""

    daemon_threads = True
    # Whether a request saying `Expect: 100-continue` is answered `100 Continue` before its
    # body is read (False: the body is waited for without it, as by a service or load
    # balancer that ignores the expectation).
    continues = True

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.closing = threading.Event()  # set as the proxy closes: held bodies end then
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def answer(self, request: Request) -> Reply | None:
        """This proxy's own reply to `request`, or None to forward it (it may wait first)."""
        return None

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        """What goes back for moto's `reply`; None resets the connection instead."""
        return reply

    def cut_body(self, request: Request) -> tuple[int, Reply] | None:
        """For `request` (its `body` None: not read yet), None to read it whole, or how many
        of its body's bytes to read before sending the reply given and closing the
        connection (the rest unread)."""
        return None

    def body_sent(self, request: Request, reply: Reply) -> int | None:
        """None to send `reply` whole, or how many of its body's bytes to send before
        holding the rest back until the proxy is closed (a body that stops midway)."""
        return None

    def __enter__(self) -> S3Proxy:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: S3Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def handle_expect_100(self) -> bool:
        if self.server.continues:
            return super().handle_expect_100()
        return True  # reads on for the body, never saying 100 Continue

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        cut = self.server.cut_body(Request(self.command, self.path, dict(self.headers), None))
        if cut is not None:
            read, early = cut
            self.rfile.read(min(read, length))
            self.close_connection = True
            self._reply(early, close=True)
            return
        body = self.rfile.read(length) if length else None
        request = Request(self.command, self.path, dict(self.headers.items()), body)
        reply = self.server.answer(request)
        if reply is None:
            upstream = http.client.HTTPConnection(
                self.server.upstream.hostname, self.server.upstream.port, timeout=60
            )
            headers = {k: v for k, v in request.headers.items() if k.lower() != "connection"}
            upstream.request(self.command, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            moto = Reply(answer.status, answer.getheaders(), answer.read())
            upstream.close()
            reply = self.server.forwarded(request, moto)
            if reply is None:
                # An RST, not a FIN: the client sees its answer lost, as on a broken link.
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                return
        self._reply(reply, sent=self.server.body_sent(request, reply))

    def _reply(self, reply: Reply, *, close: bool = False, sent: int | None = None) -> None:
        head = self.command == "HEAD"  # its Content-Length is the object's, with no body
        try:
            self.send_response(reply.status)
            for key, value in reply.headers:
                if key.lower() not in _OWN_HEADERS or (head and key.lower() == "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(reply.data)))
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            if sent is not None:
                self.wfile.write(reply.data[:sent])
                self.wfile.flush()
                self.server.closing.wait()  # the rest never comes
                self.close_connection = True
                return
            self.wfile.write(reply.data)
        except OSError:
            pass  # the client gave up on this request (its read timeout)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


__all__ = ["XML", "Reply", "Request", "S3Proxy"]
