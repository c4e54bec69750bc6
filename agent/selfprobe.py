"""The agent asking itself: one `status` request on its own control endpoint, as a client
would send it. A control task that is alive but answers nobody (its socket file removed, a
request handler stuck) looks healthy from inside; only a request from outside the loop
that serves it shows it."""

from __future__ import annotations

import json
import os

import zmq
import zmq.asyncio
from forewarn.protocol.wire import allow_ipv6

PROBE_REQUEST = json.dumps({"op": "status"}).encode()


def _socket_file(endpoint: str) -> str | None:
    """The file an `ipc://` endpoint binds, None for tcp:// and abstract (`ipc://@`) ones."""
    if endpoint.startswith("ipc://") and not endpoint.startswith("ipc://@"):
        return endpoint[len("ipc://") :]
    return None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        stat = os.lstat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


class ControlProbe:
    """Status requests on one REQ socket, kept while answers come.

    A new socket per probe cost the agent about 1 ms of CPU (connect, handshake, accept on
    the control side), a third of its idle budget at one probe every 2 s; a kept one costs a
    quarter of that. What a kept connection cannot see by itself is the one thing a new
    client meets first: the socket file gone or replaced (a /tmp cleaner, a second agent).
    So the file's identity is checked on every probe, and a change is probed on a new
    connection, exactly as a client arriving now would connect. Any unanswered or refused
    request drops the socket: REQ cannot send again before an answer, and a stale connection
    must never vouch for control."""

    def __init__(self, context: zmq.asyncio.Context, endpoint: str) -> None:
        self.context = context
        self.endpoint = endpoint
        self._file = _socket_file(endpoint)
        self._sock: zmq.asyncio.Socket | None = None
        self._identity: tuple[int, int] | None = None
        self.connects = 0  # sockets opened so far, for tests

    async def answers(self, timeout: float, token: str | None = None) -> bool:
        """True when control answers a status request with an ok reply within `timeout`;
        `token`, the control token when the endpoint needs one (a refusal is not an answer)."""
        path = self._file
        if self._sock is not None and path is not None and _identity(path) != self._identity:
            self.close()
        try:
            sock = self._sock or self._connect()
            request = PROBE_REQUEST if token is None else _with_token(token)
            await sock.send(request)
            if not await sock.poll(int(timeout * 1000)):  # POLLIN by default
                self.close()
                return False
            raw = await sock.recv()
        except zmq.ZMQError:
            self.close()
            return False
        if answered_ok(raw):
            return True
        self.close()
        return False

    def _connect(self) -> zmq.asyncio.Socket:
        sock = self.context.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        if self._file is not None:
            # Before connecting: a file replaced after this look is caught by the next probe.
            self._identity = _identity(self._file)
        try:
            allow_ipv6(sock, self.endpoint)
            sock.connect(self.endpoint)
        except zmq.ZMQError:
            sock.close(linger=0)
            raise
        self._sock = sock
        self.connects += 1
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
        self._sock = None
        self._identity = None


def answered_ok(raw: bytes) -> bool:
    """Whether a control reply is an ok answer. Whatever else the socket carries is no
    answer, never an exception: JSON nested past the parser's recursion limit raises
    RecursionError, not ValueError, and would otherwise end the health task."""
    try:
        reply = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(reply, dict) and reply.get("ok") is True


def _with_token(token: str) -> bytes:
    return json.dumps({"op": "status", "token": token}).encode()


__all__ = ["PROBE_REQUEST", "ControlProbe", "answered_ok"]
