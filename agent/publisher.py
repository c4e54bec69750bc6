"""The agent's two sockets: XPUB for events, ROUTER for control (REQ clients see a REP).

XPUB runs with XPUB_VERBOSE so that every subscription reaches the agent, not only the first
per topic: each new subscriber to `notice` triggers a replay of the active notices, and so does
each subscription to `replay/<token>`, whose token the replay's heartbeat lists. An
unsubscription reaches it only when no connected peer holds the topic any more, which is
exactly when the acking client of a `client/<id>` subscription is gone.

Both sockets face anyone who can reach the endpoint, so every input the agent can bound is
bounded (libzmq keeps every distinct subscription a peer holds: see the README's Bounds): ZeroMQ
drops (and disconnects) a peer whose frame is larger than MAX_SUBSCRIPTION_BYTES or
MAX_CONTROL_FRAME_BYTES, and a request over MAX_CONTROL_BYTES gets an error; the control loop
takes a request as exactly one frame after the REQ envelope and answers anything else with an
error or not at all, never dying on it; the subscription loop yields to the event loop, coalesces
the replays of a burst of subscriptions into one, and keeps a bounded table of clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from forewarn.protocol import jsontext
from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.wire import (
    MAX_REQUEST_BYTES,
    TOKEN_FIELD,
    TOPIC_REPLAY_PREFIX,
    allow_ipv6,
    ipc_path,
    replay_token_problem,
    request_too_large,
)

from .controltoken import token_matches
from .limits import MAX_MANUAL
from .protocol import (
    TOPIC_CLIENT_PREFIX,
    TOPIC_HEARTBEAT,
    TOPIC_NOTICE,
    Heartbeat,
    Notice,
    client_id_problem,
)
from .throttle import WarningThrottle

log = logging.getLogger("forewarn.agent")

SOCKET_MODE = 0o660
MAX_CONTROL_BYTES = MAX_REQUEST_BYTES
# ZeroMQ drops a peer whose frame is larger, without a word: a REQ that sent it waits forever.
# Frames between the two limits are read and answered with an error naming MAX_CONTROL_BYTES.
MAX_CONTROL_FRAME_BYTES = 1024 * 1024
# A subscription frame is one byte and a topic: `notice`, `heartbeat` or `client/<id>`.
MAX_SUBSCRIPTION_BYTES = 1024
# Acking clients tracked at most: one past it is refused (not waited for), counted and logged
# at most once per REFUSAL_LOG_INTERVAL.
MAX_CLIENTS = 4096
# How many subscription frames are read before the loop lets other tasks run.
SUBSCRIPTION_BATCH = 64
# Frames of one control message kept: a REQ's envelope, its delimiter and its one request
# frame, with room for the envelopes of a few proxies. ZeroMQ bounds a frame's size but not
# how many one message has; those past this are read and dropped, CONTROL_FRAME_BATCH at a
# time between the agent's other work.
MAX_CONTROL_FRAMES = 64
CONTROL_FRAME_BATCH = 4096
# Messages the events socket queues for one subscriber that does not read (a job stopped by
# SIGSTOP or a scheduler's suspend): at most EVENTS_SEND_HWM, and at most EVENTS_QUEUE_BYTES
# of them. libzmq counts messages, not bytes, so the agent sets the high-water mark from the
# largest message it has sent (`events_send_hwm`), lowering it as that grows and never raising
# it again: each message queued then fits the mark in force when it was sent, so what one
# stopped subscriber makes the agent hold stays within EVENTS_QUEUE_BYTES. At a fixed 1,000,
# heartbeats at the bounds (64 notices of 195-character ids, each acked by 16 clients of 200
# bytes: 247 kB) took a real agent from 48 MB to 267 MB RSS with one stopped subscriber, past
# the 128Mi of the Kubernetes manifests (at 10,000, before, 12 kB heartbeats took it from 47 MB
# to 158 MB). 1,000 typical heartbeats (about 1 kB) are 16 minutes of them and fifteen replays
# of 64 notices. A live reader's own ZeroMQ thread takes what it is sent into its receive
# queue, so only a stopped one comes near; past the mark it loses messages, which the `seq` gap
# and the heartbeats' `active` tell it, and its next subscription to `notice` has the active
# ones replayed.
EVENTS_SEND_HWM = 1_000
EVENTS_QUEUE_BYTES = 32 * 1024 * 1024
# The mark never goes below this, a burst the agent sends at once to a live subscriber: a
# replay (its heartbeat and the active notices: MAX_MANUAL manual ones and the providers'),
# twice over. Only a message over EVENTS_QUEUE_BYTES / EVENTS_SEND_HWM_FLOOR (258 kB, past any
# heartbeat the bounds allow) makes a stopped subscriber hold more than EVENTS_QUEUE_BYTES.
EVENTS_SEND_HWM_FLOOR = 2 * (MAX_MANUAL + 1)
# Replies the control socket queues for one peer: a REQ client waits for each answer before it
# sends again, and a reader's own ZeroMQ thread takes its replies as they come; the room is for
# a client pipelining requests (a proxy, a fuzz in batches of 100) while the agent's ZeroMQ
# thread, starved of CPU, writes them out late: at 16 such a client lost replies.
CONTROL_SEND_HWM = 128
# And at most this many bytes of them, as on events: the mark is lowered from the largest reply
# sent (`control_send_hwm`). At 128, `status` replies of 1.6 MB (64 notes of 2,000 characters
# outside the BMP, 12 bytes each in JSON) took a real agent from 49 MB to 243 MB RSS under one
# DEALER that pipelined `status` without reading.
CONTROL_QUEUE_BYTES = 32 * 1024 * 1024
# A REQ client has one request in flight; the floor is for a few pipelining ones.
CONTROL_SEND_HWM_FLOOR = 16
# Rebinding control: tries, and the pause before each (times the try number) and after.
# Milliseconds the events socket's close waits for what it still queues (a terminate
# published just before a stop): closed without waiting, libzmq drops it unsent.
CLOSE_LINGER_MS = 500
REBIND_ATTEMPTS = 5
REBIND_PAUSE = 0.1
# Requests refused for a missing or wrong token, and acking clients past MAX_CLIENTS, are
# logged at most this often (with a count), so that a peer retrying in a loop cannot flood the
# journal.
REFUSAL_LOG_INTERVAL = 60.0


def events_send_hwm(largest: int) -> int:
    """The events socket's high-water mark once a message of `largest` bytes has been sent:
    as many of it as EVENTS_QUEUE_BYTES holds, within EVENTS_SEND_HWM_FLOOR..EVENTS_SEND_HWM."""
    return max(EVENTS_SEND_HWM_FLOOR, min(EVENTS_SEND_HWM, EVENTS_QUEUE_BYTES // max(largest, 1)))


def control_send_hwm(largest: int) -> int:
    """The control socket's, once a reply of `largest` bytes has been sent: as many of it as
    CONTROL_QUEUE_BYTES holds, within CONTROL_SEND_HWM_FLOOR..CONTROL_SEND_HWM."""
    return max(
        CONTROL_SEND_HWM_FLOOR, min(CONTROL_SEND_HWM, CONTROL_QUEUE_BYTES // max(largest, 1))
    )


class BindError(ForewarnError, RuntimeError):
    """The agent cannot bind an endpoint; the text says which and why."""


class Publisher:
    def __init__(
        self,
        events: str,
        control: str,
        token: str | None = None,
        token_file: Path | None = None,
        on_client_refused: Callable[[], None] | None = None,
    ) -> None:
        """`token`: when given, every control request must carry it (see controltoken).
        `on_client_refused`: called for each acking client refused past MAX_CLIENTS."""
        self.events_endpoint = events
        self.control_endpoint = control
        self.token = token
        self.token_file = token_file
        self.context = zmq.asyncio.Context()
        self.xpub = self.context.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.LINGER, 0)
        # The largest control reply sent and the mark it set (kept for a rebound socket).
        self.largest_reply = 0
        self.control_hwm = CONTROL_SEND_HWM
        self.router = self._control_socket()
        # Not XPUB_VERBOSER, which passes on every unsubscription too: ZeroMQ keeps one
        # subscription per peer and topic, so a peer that subscribed `client/<id>` twice sent
        # two subscriptions but, leaving, one unsubscription, and a count of them kept a ghost
        # client that every notice then waited for.
        self.xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.xpub.setsockopt(zmq.SNDHWM, EVENTS_SEND_HWM)
        # The largest message sent on events (topic and body) and the mark it set.
        self.largest_event = 0
        self.events_hwm = EVENTS_SEND_HWM
        self.xpub.setsockopt(zmq.MAXMSGSIZE, MAX_SUBSCRIPTION_BYTES)
        # The same socket without asyncio, to take what is already queued without a future.
        self._xpub_sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.xpub.underlying)
        self.clients: set[str] = set()  # ids some connected peer subscribes `client/<id>` to
        self._bound: dict[Path, tuple[int, int]] = {}  # ipc path -> (device, inode) we made
        # The events socket file as a string and its (device, inode) once bound: the watchdog
        # checks it each second, so that check is one lstat and a compare, not a parse of the
        # endpoint, a Path and its hash each time (42 calls a check, 2 now).
        events_path = ipc_path(events)
        self._events_path = None if events_path is None else str(events_path)
        self._events_identity: tuple[int, int] | None = None
        self._replay_due = False
        # The `replay/<token>` tokens of the burst being read: its replay's heartbeat lists them.
        self._replay_tokens: list[str] = []
        self.subscriptions_seen = 0
        self.requests_served = 0
        # When the request being answered entered its handler (None between requests): a
        # reply that waits for the disk (a notify's, an ack's) is a busy control, not a dead one.
        self.handling_since: float | None = None
        self.requests_refused = 0
        self._refusals = WarningThrottle(REFUSAL_LOG_INTERVAL)
        self._bad_clients = WarningThrottle(REFUSAL_LOG_INTERVAL)
        self.clients_refused = 0
        self._on_client_refused = on_client_refused
        self._over_cap = WarningThrottle(REFUSAL_LOG_INTERVAL)

    def _control_socket(self) -> zmq.asyncio.Socket:
        router = self.context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, MAX_CONTROL_FRAME_BYTES)
        # A reply to a peer that went away is dropped, not an error.
        router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        # Replies queued for one peer that does not read them are dropped past this, as to a
        # peer gone: libzmq's default, 1,000, let one DEALER pipelining `status` without
        # reading make the agent hold 1,000 replies (179 kB each with 64 long notes: RSS from
        # 44 MB to 215 MB, kept after it left; 66 MB at 128).
        router.setsockopt(zmq.SNDHWM, self.control_hwm)
        # Not ROUTER_HANDOVER: a second peer taking a connected peer's routing id would take
        # the replies in flight to the first with it. Without it, ZeroMQ refuses the second.
        return router

    def bind(self) -> None:
        for endpoint in (self.events_endpoint, self.control_endpoint):
            _refuse_a_live_socket_file(endpoint)
        self._events_identity = self._bind(self.xpub, self.events_endpoint)
        self._bind(self.router, self.control_endpoint)

    def _bind(self, sock: zmq.asyncio.Socket, endpoint: str) -> tuple[int, int] | None:
        """Bind; the socket file's (device, inode), None for an endpoint without a file."""
        # The socket file is made with the process umask's mode (0777 under umask 0) and only
        # then chmod'ed: another uid that connected in between would keep its connection.
        # Nobody but the owner and group may open it from its first instant.
        previous = os.umask(0o777)
        os.umask(previous | 0o007)
        try:
            allow_ipv6(sock, endpoint)
            sock.bind(endpoint)
        except zmq.ZMQError as error:
            raise BindError(f"cannot bind {endpoint}: {_bind_problem(endpoint, error)}") from None
        finally:
            os.umask(previous)
        path = ipc_path(endpoint)
        if path is None:
            return None
        identity = self._bound[path] = _share_socket_file(path, endpoint)
        return identity

    async def rebind_control(self) -> None:
        """Replace the control socket with a new one on the same endpoint: what a control
        socket whose file was removed (a /tmp cleaner) or that stopped answering needs. The
        caller stops `serve_control` first and starts it again after."""
        self.router.close(linger=0)
        path = ipc_path(self.control_endpoint)
        for attempt in range(REBIND_ATTEMPTS):
            # The old socket is closed by ZeroMQ's I/O thread, which frees a TCP port and
            # removes an ipc socket file a moment later: bind after it, and check.
            await asyncio.sleep(REBIND_PAUSE * (attempt + 1))
            self.router = self._control_socket()
            try:
                self._bind(self.router, self.control_endpoint)
            except (BindError, OSError):
                self.router.close(linger=0)
                if attempt == REBIND_ATTEMPTS - 1:
                    raise
                continue
            await asyncio.sleep(REBIND_PAUSE)
            if path is None or self._is_ours(path):
                return
            self.router.close(linger=0)
        raise BindError(f"cannot bind {self.control_endpoint}: its socket file keeps vanishing")

    def events_file_ours(self) -> bool:
        """Whether the events socket file is still the one this agent bound (always true for
        an endpoint without a file). Removed or replaced (a /tmp cleaner), it takes no new
        subscriber, while those connected before go on receiving."""
        if self._events_path is None:
            return True
        try:
            found = os.lstat(self._events_path)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) == self._events_identity

    def control_file_ours(self) -> bool:
        """Whether the control socket file is still the one this agent bound (always true for
        an endpoint without a file): removed, no client arriving now reaches the agent;
        replaced, another process answers them."""
        path = ipc_path(self.control_endpoint)
        return path is None or self._is_ours(path)

    def _is_ours(self, path: Path) -> bool:
        try:
            found = os.lstat(path)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) == self._bound.get(path)

    def publish(self, notice: Notice) -> None:
        self._send(TOPIC_NOTICE, _escape_delete(notice.model_dump_json().encode()))

    def heartbeat(self, beat: Heartbeat) -> None:
        self._send(TOPIC_HEARTBEAT, _escape_delete(beat.model_dump_json().encode()))

    def _send(self, topic: str, payload: bytes) -> None:
        size = len(topic) + len(payload)
        if size > self.largest_event:
            self.largest_event = size
            hwm = events_send_hwm(size)
            if hwm != self.events_hwm:
                # libzmq applies it to every connected subscriber's queue, not only to new ones.
                self.xpub.setsockopt(zmq.SNDHWM, hwm)
                self.events_hwm = hwm
                log.debug(
                    "events: a message of %d bytes: at most %d messages are queued for a "
                    "subscriber that does not read",
                    size,
                    hwm,
                )
        # XPUB never blocks: a subscriber past its high-water mark loses messages, the agent
        # does not stall. The future is already done unless the socket is closing.
        future = self.xpub.send_multipart([topic.encode(), payload], flags=zmq.NOBLOCK)
        asyncio.ensure_future(future).add_done_callback(_log_send_failure)

    async def subscriptions(
        self,
        on_subscribe: Callable[[list[str]], None],
        on_client: Callable[[str, bool], None],
    ) -> None:
        """Read subscription messages forever: call `on_subscribe(tokens)` once per burst of
        new subscriptions that can receive notices or that ask for a replay (`replay/<token>`,
        with the burst's tokens: at most SUBSCRIPTION_BATCH + 1), `on_client(id, joined)` for
        acking clients."""
        while True:
            frame = await self.xpub.recv()
            self._subscription(frame, on_client)
            # Drain what is already queued without waiting, then yield: a peer sending
            # subscriptions as fast as it can never starves control, heartbeats or watchers.
            for _ in range(SUBSCRIPTION_BATCH):
                try:
                    frame = self._xpub_sync.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._subscription(frame, on_client)
            if self.events_hwm != EVENTS_SEND_HWM:
                # A new connection's queue takes the mark the socket had when it was bound
                # (libzmq copies the options then): set again, it reaches every connected
                # subscriber's, this one's too, before it is sent more than a few messages.
                self.xpub.setsockopt(zmq.SNDHWM, self.events_hwm)
            if self._replay_due:
                tokens, self._replay_tokens = self._replay_tokens, []
                self._replay_due = False
                on_subscribe(tokens)
            await asyncio.sleep(0)

    def _subscription(self, frame: bytes, on_client: Callable[[str, bool], None]) -> None:
        self.subscriptions_seen += 1
        if not frame or frame[0] not in (0, 1):
            return  # not a subscription message: a raw XSUB peer can send anything
        subscribed, topic = frame[0] == 1, frame[1:].decode(errors="replace")
        if topic.startswith(TOPIC_CLIENT_PREFIX):
            client = topic[len(TOPIC_CLIENT_PREFIX) :]
            try:
                frame.decode()
            except UnicodeDecodeError:
                # Never tracked, and its unsubscription is not the tracked client it reads as
                # with U+FFFD (`job\xff` as `job\ufffd`): that removed a connected client.
                if subscribed:
                    self._untracked(client, "not UTF-8")
                return
            if subscribed and client not in self.clients:
                # An id no ack can name (empty, too long, several lines) held every notice
                # unflushed for as long as that client stayed connected: its acks were
                # refused, or taken as anonymous, and never completed the set.
                problem = client_id_problem(client)
                if problem is not None:
                    self._untracked(client, problem)
                    return
            if subscribed:
                if client in self.clients:
                    return  # the same socket again, or another with the same id
                if len(self.clients) >= MAX_CLIENTS:
                    self._refuse_client(client)
                    return
                self.clients.add(client)
                on_client(client, True)
            elif client in self.clients:
                self.clients.remove(client)
                on_client(client, False)
        elif topic.startswith(TOPIC_REPLAY_PREFIX):
            token = topic[len(TOPIC_REPLAY_PREFIX) :]
            # Only a token every reader can take: it goes to every subscriber in a heartbeat.
            # One refused asks for nothing (its subscriber waits for an answer that never
            # comes, as from an older agent, and falls back on what it did without one).
            if subscribed and replay_token_problem(token) is None:
                self._replay_due = True
                if token not in self._replay_tokens:
                    self._replay_tokens.append(token)
        elif subscribed and TOPIC_NOTICE.startswith(topic):
            self._replay_due = True

    def _refuse_client(self, client: str) -> None:
        # A line for each, as it was, let one local peer subscribing to new ids in a loop
        # write the journal full at the rate it could send them.
        self.clients_refused += 1
        if self._on_client_refused is not None:
            self._on_client_refused()
        held = self._over_cap.due()
        if held is not None:
            log.warning(
                "%d acking client(s) refused since this was last logged: %d are tracked, the "
                "most there may be (a refused one is not waited for); the last: %r",
                held,
                MAX_CLIENTS,
                client[:60],
            )

    def _untracked(self, client: str, problem: str) -> None:
        held = self._bad_clients.due()
        if held is not None:
            log.warning(
                "%d subscription(s) to %s<id> with an id no ack can name, not counted as "
                "acking clients; the last: %r (%s)",
                held,
                TOPIC_CLIENT_PREFIX,
                client[:60],
                problem,
            )

    async def serve_control(
        self, handle: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
    ) -> None:
        """Answer control requests forever, one at a time, in the REQ envelope they came in."""
        # The same socket without asyncio, to read the rest of a message already received.
        router_sync: zmq.Socket[bytes] = zmq.Socket.shadow(self.router.underlying)
        while True:
            # Awaiting a receive or send that ZeroMQ completes at once never gives the loop
            # to another task: a client pipelining requests (8,000 acks a second), or raw
            # DEALER messages that get no answer, held every heartbeat and escalation for as
            # long as it sent. Yield before each message.
            await asyncio.sleep(0)
            frames, dropped = await self._receive(router_sync)
            split = _envelope(frames)
            if split is None:
                continue  # no REQ envelope (a raw DEALER): there is nobody to answer
            envelope, body = split
            self.handling_since = time.monotonic()
            try:
                reply = await self._answer(body, handle, dropped)
            finally:
                self.handling_since = None
            self.requests_served += 1
            payload = json.dumps(reply).encode()
            if len(payload) > self.largest_reply:
                self.largest_reply = len(payload)
                self.control_hwm = control_send_hwm(len(payload))
            if self.control_hwm != CONTROL_SEND_HWM:
                # Set again before each reply: it reaches every connected peer's queue, one
                # connected since too (libzmq gives a new connection the mark of the bind).
                self.router.setsockopt(zmq.SNDHWM, self.control_hwm)
            try:
                await self.router.send_multipart([*envelope, b"", payload])
            except zmq.ZMQError as error:
                log.debug("control reply not sent: %s", error)

    async def _receive(self, router_sync: zmq.Socket[bytes]) -> tuple[list[bytes], int]:
        """The next control message: its first MAX_CONTROL_FRAMES frames, and how many more
        it had. recv_multipart read two million empty frames in one call, which held the event
        loop for seconds (no heartbeat, no escalation); the rest of a message has arrived with
        its first frame, and is read here with pauses for the other tasks."""
        frames = [await self.router.recv()]
        dropped = 0
        while router_sync.getsockopt(zmq.RCVMORE):
            frame = router_sync.recv(zmq.NOBLOCK)
            if len(frames) < MAX_CONTROL_FRAMES:
                frames.append(frame)
            else:
                dropped += 1
                if dropped % CONTROL_FRAME_BATCH == 0:
                    await asyncio.sleep(0)
        return frames, dropped

    async def _answer(
        self,
        body: list[bytes],
        handle: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        dropped: int = 0,
    ) -> dict[str, Any]:
        if len(body) + dropped != 1:
            return {"ok": False, "error": f"a request is one frame, got {len(body) + dropped}"}
        if len(body[0]) > MAX_CONTROL_BYTES:
            return {"ok": False, "error": request_too_large(len(body[0]))}
        try:
            # Decoded here, not by json.loads: given bytes, it guesses UTF-16 or UTF-32 from
            # the first ones, so a stray 0xff 0xfe was "Expecting value" at char 0.
            text = body[0].decode("utf-8").removeprefix("\ufeff")
        except UnicodeDecodeError as error:
            return {
                "ok": False,
                "error": f"request is not UTF-8: byte 0x{body[0][error.start]:02x} at offset "
                f"{error.start} ({error.reason}); a request is one UTF-8 JSON object",
            }
        try:
            request = jsontext.loads(text)
        except RecursionError:
            return {"ok": False, "error": "request is not JSON: nested too deeply"}
        except (jsontext.DuplicateKeyError, jsontext.LongNumberError) as error:
            # Which of the two counts is the reader's guess: an ack's or a notify's meaning
            # must not depend on the language that sent it.
            return {"ok": False, "error": f"request refused: {error}"}
        except ValueError as error:
            return {"ok": False, "error": f"request is not JSON: {error}"}
        if not isinstance(request, dict):
            return {"ok": False, "error": "request is not JSON: a request is a JSON object"}
        given = request.pop(TOKEN_FIELD, None)
        if self.token is not None and not token_matches(self.token, given):
            return self._refuse("no" if given is None else "a wrong")
        try:
            return await handle(request)
        except Exception as error:  # a bad request must never take the agent down
            log.exception("control request failed")
            return {"ok": False, "error": f"internal error: {type(error).__name__}"}

    def _refuse(self, which: str) -> dict[str, Any]:
        self.requests_refused += 1
        held = self._refusals.due()
        if held is not None:
            log.warning(
                "control on %s refused %d request(s) without the right token; only who can "
                "read %s may send requests",
                self.control_endpoint,
                held,
                self.token_file,
            )
        return {
            "ok": False,
            "error": f"refused: the request has {which} control token; every request on "
            f"{self.control_endpoint} must carry the `{TOKEN_FIELD}` the agent wrote to "
            f"{self.token_file} (readable by the agent's user only)",
        }

    def close(self) -> None:
        self.xpub.close(linger=CLOSE_LINGER_MS)
        self.router.close(linger=0)
        self.context.term()
        for path, identity in self._bound.items():
            # Only the socket file this agent made: never another agent's at the same path.
            with contextlib.suppress(OSError):
                found = os.lstat(path)
                if (found.st_dev, found.st_ino) == identity:
                    path.unlink()
        self._bound.clear()
        self._events_identity = None


def _share_socket_file(path: Path, endpoint: str) -> tuple[int, int]:
    """Give the socket file just bound SOCKET_MODE and its directory's group (members of the
    runtime directory's group may connect; nobody else); its (device, inode).

    Done on the file opened without following links, never on the path again: chmod(path)
    follows a symbolic link, so a member of a group-writable runtime directory who swapped the
    socket for a link between bind and chmod had a root agent chmod any file to 0660. Linux
    has no lchmod, and fchmod on a socket's descriptor changes the socket, not its file; an
    O_PATH descriptor's /proc/self/fd entry names the very inode that was opened."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise BindError(f"cannot bind {endpoint}: {error.strerror or error}") from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISSOCK(found.st_mode):
            raise BindError(
                f"cannot bind {endpoint}: its socket file was replaced by another file right "
                "after bind; whoever can write its directory can do that"
            )
        opened = f"/proc/self/fd/{fd}"
        try:
            os.chmod(opened, SOCKET_MODE)
        except OSError as error:  # no /proc mounted (a bare chroot, a minimal sandbox)
            raise BindError(
                f"cannot bind {endpoint}: cannot set its socket file's mode through "
                f"{opened} ({error.strerror or error}); is /proc mounted?"
            ) from None
        _take_directory_group(path, opened, found.st_gid)
    finally:
        os.close(fd)
    return found.st_dev, found.st_ino


def _take_directory_group(path: Path, opened: str, gid: int) -> None:
    """Give the socket file (`opened`: its /proc/self/fd entry) its directory's group. Linux
    gives a new file the process's own group unless the directory is setgid, so an agent
    started by root in a `root:trainers` 0750 runtime directory made `root:root` sockets that
    no trainer could open."""
    try:
        directory = os.stat(path.parent)
        if directory.st_mode & stat.S_IWOTH:
            return  # /tmp and the like: its group shares nothing (and is rarely ours)
        if gid != directory.st_gid:
            os.chown(opened, -1, directory.st_gid)
    except OSError as error:
        log.warning(
            "socket %s: cannot give it the group of its directory (%s); only this agent's "
            "own group may connect",
            path,
            error.strerror or error,
        )


def _refuse_a_live_socket_file(endpoint: str) -> None:
    """BindError when a process listens on the endpoint's socket file. libzmq unlinks an
    existing file before binding, which would silently take the socket from another agent (one
    with another runtime directory, which its lock does not cover, sharing an endpoint set by
    FOREWARN_EVENTS or FOREWARN_CONTROL) even while it is stopped; a file nothing listens on,
    left by a killed agent, is replaced as before."""
    path = ipc_path(endpoint)
    if path is None:
        return
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise BindError(f"cannot bind {endpoint}: {error.strerror or error}") from None
    kind = _not_a_socket(found.st_mode)
    if kind is not None:
        # libzmq's bind unlinks what is there: a regular file named by mistake was lost
        # without a word, and a directory was "Address already in use".
        raise BindError(
            f"cannot bind {endpoint}: it is a {kind}, not a socket file; the agent "
            "replaces only a socket file nothing listens on (remove it, or name another path)"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return  # stale: nothing listens
        except OSError as error:
            raise BindError(
                f"cannot bind {endpoint}: its socket file exists and cannot be probed "
                f"({error.strerror or error}); remove it if no agent uses it"
            ) from None
    raise BindError(f"cannot bind {endpoint}: another process (an agent?) listens on it")


def _bind_problem(endpoint: str, error: zmq.ZMQError) -> str:
    """Why a bind failed: what is at an ipc endpoint's path when it is no socket file (a
    directory put in the control socket's place while the agent ran made its rebind fail with
    "Address already in use"), else ZeroMQ's error."""
    path = ipc_path(endpoint)
    try:
        kind = None if path is None else _not_a_socket(os.lstat(path).st_mode)
    except OSError:
        kind = None
    if kind is None:
        return str(error)
    return f"it is a {kind}, not a socket file ({error.strerror})"


def _not_a_socket(mode: int) -> str | None:
    """What a file of `mode` is, when it is neither a socket nor a symbolic link (a link is
    replaced, never followed, by the bind: its target stays)."""
    if stat.S_ISSOCK(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return "device file"


def _envelope(frames: list[bytes]) -> tuple[list[bytes], list[bytes]] | None:
    """(routing envelope, body) of a ROUTER message: the envelope runs up to the first empty
    frame, which a REQ socket always sends. None when there is none."""
    for index in range(1, len(frames)):
        if frames[index] == b"":
            return frames[:index], frames[index + 1 :]
    return None


def _escape_delete(payload: bytes) -> bytes:
    """`payload` (JSON) with each U+007F escaped, as every other control character already is.
    JSON need not escape it, but a reader that takes a raw control character for a broken
    message (the C subscriber) dropped a notice whose detail held one, and its every replay.
    The byte occurs in JSON text only inside a string, and in UTF-8 only as that character."""
    return payload.replace(b"\x7f", b"\\u007f")


def _log_send_failure(future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None and not isinstance(error, zmq.Again):
        log.warning("publish failed: %s", error)


__all__ = [
    "CONTROL_QUEUE_BYTES",
    "CONTROL_SEND_HWM",
    "CONTROL_SEND_HWM_FLOOR",
    "EVENTS_QUEUE_BYTES",
    "EVENTS_SEND_HWM",
    "EVENTS_SEND_HWM_FLOOR",
    "MAX_CONTROL_BYTES",
    "MAX_CONTROL_FRAME_BYTES",
    "MAX_SUBSCRIPTION_BYTES",
    "REFUSAL_LOG_INTERVAL",
    "SOCKET_MODE",
    "BindError",
    "Publisher",
    "control_send_hwm",
    "events_send_hwm",
]
