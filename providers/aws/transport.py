"""An httpx transport for IMDS: HTTP/1.1 over one kept-alive asyncio stream.

The AWS watcher polls four or more times a second for as long as the machine runs, so the
cost of one request is the agent's idle CPU. httpcore's pool (with anyio and h11 under it)
spends about 1.5 ms of CPU per request here; a plain stream spends about a quarter of that,
which is what keeps the watcher under half a percent of a core. IMDS needs little of HTTP:
plain http, small Content-Length bodies, no redirects, one request at a time. Chunked and
close-delimited bodies are read too, so any server that speaks HTTP/1.1 works.

Errors are httpx's own (ConnectError, ConnectTimeout, ReadTimeout, ReadError,
RemoteProtocolError), so the client above cannot tell this transport from httpx's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import httpx
from forewarn.protocol.errors import ForewarnError

from ..fetch import AnswerTooLarge, within
from ..httpframing import chunk_size, content_length

MAX_BODY = 1 << 20  # IMDS answers are a few hundred bytes; a megabyte is not IMDS
MAX_HEADERS = 100
# All of an answer's header lines together. Each line is read up to the stream's limit (the
# body's megabyte), and 100 of them held 100 MiB before the body; IMDS sends a few hundred
# bytes of headers.
MAX_HEADER_BYTES = 64 * 1024


class _Stale(ForewarnError):
    """A reused connection closed before answering: the server dropped it while idle."""


class ImdsTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._peer: tuple[str, int] | None = None
        self._lock = asyncio.Lock()
        self.connections = 0  # opened so far, for tests and benchmarks

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        status, headers, body = await self.exchange(request)
        return httpx.Response(
            status,
            headers=headers,
            content=body,
            extensions={"http_version": b"HTTP/1.1"},
            request=request,
        )

    async def exchange(
        self, request: httpx.Request
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Send `request` and return the raw answer (status, headers, body), with the same
        httpx errors as `handle_async_request`; for callers that need no httpx.Response."""
        if request.url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"the IMDS transport speaks plain http only, not {request.url.scheme!r}",
                request=request,
            )
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        peer = (request.url.host, request.url.port or 80)
        payload = _encode(request, await request.aread())
        async with self._lock:
            for attempt in (1, 2):
                reused = self._writer is not None and self._peer == peer
                if not reused:
                    self._close()
                    await self._connect(request, peer, timeouts.get("connect"))
                try:
                    status, headers, body, keep = await self._exchange(
                        request, payload, timeouts.get("read"), reused
                    )
                except _Stale:
                    self._close()
                    if attempt == 2:
                        raise httpx.RemoteProtocolError(
                            "server closed the connection without answering", request=request
                        ) from None
                    continue
                except BaseException:
                    self._close()  # the connection's state is unknown: never reuse it
                    raise
                if not keep:
                    self._close()
                return status, headers, body
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connect(self, request: httpx.Request, peer: tuple[str, int], timeout: Any) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(*peer, limit=MAX_BODY), timeout
            )
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(
                f"connect to {peer[0]}:{peer[1]} timed out", request=request
            ) from None
        except OSError as error:
            raise httpx.ConnectError(str(error) or type(error).__name__, request=request) from None
        self._peer = peer
        self.connections += 1

    async def _exchange(
        self, request: httpx.Request, payload: bytes, timeout: Any, reused: bool
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
        assert self._reader is not None and self._writer is not None
        try:
            self._writer.write(payload)
            return await within(_read_response(self._reader, request.method, reused), timeout)
        except asyncio.TimeoutError:
            raise httpx.ReadTimeout("timed out waiting for the answer", request=request) from None
        except asyncio.IncompleteReadError as error:
            raise httpx.RemoteProtocolError(
                f"peer closed the connection mid-answer ({len(error.partial)} bytes of "
                f"{error.expected})",
                request=request,
            ) from None
        except (asyncio.LimitOverrunError, ValueError) as error:
            raise httpx.RemoteProtocolError(str(error), request=request) from None
        except OSError as error:
            if reused and isinstance(error, (ConnectionResetError, BrokenPipeError)):
                raise _Stale() from None
            raise httpx.ReadError(str(error) or type(error).__name__, request=request) from None

    def _close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None
        self._peer = None

    async def aclose(self) -> None:
        self._close()


def _encode(request: httpx.Request, body: bytes) -> bytes:
    target = request.url.raw_path
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    names = set()
    for name, value in request.headers.raw:
        names.add(name.lower())
        lines.append(name + b": " + value)
    if (body or request.method in ("PUT", "POST", "PATCH")) and b"content-length" not in names:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def _read_response(
    reader: asyncio.StreamReader, method: str, reused: bool
) -> tuple[int, list[tuple[bytes, bytes]], bytes, bool]:
    while True:
        line = await reader.readline()
        if not line:
            if reused:
                raise _Stale()
            raise asyncio.IncompleteReadError(b"", None)
        parts = line.rstrip(b"\r\n").split(b" ", 2)
        # Three ASCII digits (RFC 9112): 23 were taken as a status no client knows, and 5,000
        # refused with Python's advice to raise its limit on the digits it converts.
        status_ok = len(parts) >= 2 and re.fullmatch(rb"[0-9]{3}", parts[1]) is not None
        if not status_ok or not parts[0].startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.1 status line: {line[:60]!r}")
        status = int(parts[1])
        headers = await _read_headers(reader)
        if status >= 200 or status == 101:
            break  # 1xx interim answers (100 Continue) are skipped
    fields = {name.lower(): value for name, value in headers}
    keep = fields.get(b"connection", b"").lower() != b"close" and parts[0] != b"HTTP/1.0"
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return status, headers, b"", keep
    if fields.get(b"transfer-encoding", b"").lower().endswith(b"chunked"):
        return status, headers, await _read_chunked(reader), keep
    length = fields.get(b"content-length")
    if length is not None:
        size = content_length(length)  # a ValueError: a protocol error
        if size > MAX_BODY:
            raise _too_large(f"answer of {size} bytes")
        return status, headers, await reader.readexactly(size), keep
    body = await reader.read(MAX_BODY + 1)  # delimited by the end of the connection
    while len(body) <= MAX_BODY and (more := await reader.read(MAX_BODY + 1 - len(body))):
        body += more
    if len(body) > MAX_BODY:
        raise _too_large("answer")
    return status, headers, body, False


def _too_large(what: str) -> AnswerTooLarge:
    """A whole answer past MAX_BODY: said as such. As a ValueError it was logged as
    `broken-response: the answer broke off: bad Content-Length: b'5000000'`, where nothing
    broke off."""
    return AnswerTooLarge(f"{what} larger than 1 MiB (IMDS answers with a few hundred bytes)")


async def _read_headers(reader: asyncio.StreamReader) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    size = 0
    while True:
        line = await reader.readline()
        if not line:
            raise asyncio.IncompleteReadError(b"", None)
        if line in (b"\r\n", b"\n"):
            return headers
        size += len(line)
        if size > MAX_HEADER_BYTES:
            raise AnswerTooLarge(
                f"headers larger than {MAX_HEADER_BYTES // 1024} KiB (IMDS sends a few hundred "
                "bytes of them)"
            )
        name, sep, value = line.partition(b":")
        if not sep or not name.strip() or len(headers) >= MAX_HEADERS:
            raise ValueError(f"bad header line: {line[:60]!r}")
        headers.append((name.strip(), value.strip()))


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readline()
        if not size_line:
            raise asyncio.IncompleteReadError(bytes(body), None)
        size = chunk_size(size_line)  # a ValueError: a protocol error
        if size == 0:
            await _read_headers(reader)  # trailers, usually none
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise _too_large("chunked answer")
        body += await reader.readexactly(size)
        await reader.readexactly(2)


__all__ = ["ImdsTransport"]
