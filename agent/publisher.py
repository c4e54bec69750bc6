"""The agent's two sockets: XPUB for events, REP for control.

XPUB runs with XPUB_VERBOSER so that every subscription and unsubscription reaches the agent,
not only the first per topic: each new subscriber to `notice` triggers a replay of the active
notices, and `client/<id>` subscriptions tell which acking clients are listening.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio
from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.wire import ipc_path

from .protocol import TOPIC_CLIENT_PREFIX, TOPIC_HEARTBEAT, TOPIC_NOTICE, Heartbeat, Notice

log = logging.getLogger("forewarn.agent")

SOCKET_MODE = 0o660


class BindError(ForewarnError, RuntimeError):
    """The agent cannot bind an endpoint; the text says which and why."""


class Publisher:
    def __init__(self, events: str, control: str) -> None:
        self.events_endpoint = events
        self.control_endpoint = control
        self.context = zmq.asyncio.Context()
        self.xpub = self.context.socket(zmq.XPUB)
        self.rep = self.context.socket(zmq.REP)
        for sock in (self.xpub, self.rep):
            sock.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.xpub.setsockopt(zmq.SNDHWM, 10_000)
        self.clients: Counter[str] = Counter()  # client id -> open subscriptions

    def bind(self) -> None:
        for sock, endpoint in (
            (self.xpub, self.events_endpoint),
            (self.rep, self.control_endpoint),
        ):
            try:
                sock.bind(endpoint)
            except zmq.ZMQError as error:
                raise BindError(f"cannot bind {endpoint}: {error}") from None
            path = ipc_path(endpoint)
            if path is not None:
                # Members of the runtime directory's group may connect; nobody else.
                os.chmod(path, SOCKET_MODE)

    def publish(self, notice: Notice) -> None:
        self._send(TOPIC_NOTICE, notice.model_dump_json().encode())

    def heartbeat(self, beat: Heartbeat) -> None:
        self._send(TOPIC_HEARTBEAT, beat.model_dump_json().encode())

    def _send(self, topic: str, payload: bytes) -> None:
        # XPUB never blocks: a subscriber past its high-water mark loses messages, the agent
        # does not stall. The future is already done unless the socket is closing.
        future = self.xpub.send_multipart([topic.encode(), payload], flags=zmq.NOBLOCK)
        asyncio.ensure_future(future).add_done_callback(_log_send_failure)

    async def subscriptions(
        self,
        on_subscribe: Callable[[str], None],
        on_client: Callable[[str, bool], None],
    ) -> None:
        """Read subscription messages forever: call `on_subscribe(topic)` for each new
        subscription that can receive notices, `on_client(id, joined)` for acking clients."""
        while True:
            frame = await self.xpub.recv()
            if not frame:
                continue
            subscribed, topic = frame[0] == 1, frame[1:].decode(errors="replace")
            if topic.startswith(TOPIC_CLIENT_PREFIX):
                client = topic[len(TOPIC_CLIENT_PREFIX) :]
                if subscribed:
                    self.clients[client] += 1
                    if self.clients[client] == 1:
                        on_client(client, True)
                elif self.clients[client] > 0:
                    self.clients[client] -= 1
                    if self.clients[client] == 0:
                        del self.clients[client]
                        on_client(client, False)
            elif subscribed and TOPIC_NOTICE.startswith(topic):
                on_subscribe(topic)

    async def serve_control(
        self, handle: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    ) -> None:
        """Answer control requests forever, one at a time (REP is strictly alternating)."""
        while True:
            raw = await self.rep.recv()
            try:
                request = json.loads(raw)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
            except ValueError as error:
                reply: dict[str, Any] = {"ok": False, "error": f"request is not JSON: {error}"}
            else:
                try:
                    reply = await handle(request)
                except Exception as error:  # a bad request must never take the agent down
                    log.exception("control request failed")
                    reply = {"ok": False, "error": f"internal error: {error}"}
            await self.rep.send(json.dumps(reply).encode())

    def close(self) -> None:
        for sock in (self.xpub, self.rep):
            sock.close(linger=0)
        self.context.term()
        for endpoint in (self.events_endpoint, self.control_endpoint):
            path = ipc_path(endpoint)
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def _log_send_failure(future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None and not isinstance(error, zmq.Again):
        log.warning("publish failed: %s", error)


__all__ = ["SOCKET_MODE", "BindError", "Publisher"]
