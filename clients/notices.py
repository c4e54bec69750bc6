"""`Notices`: the agent's events, read on a background thread.

The training thread only reads plain attributes (`active`, `latest`, `alive`): no syscall and
no socket call per step. Acks go out on a sender thread of their own, so a control socket that
does not answer never stalls training. It works without a running agent, says so once, and
picks the agent up (with its replay of active notices) whenever it comes.
"""

from __future__ import annotations

import atexit
import contextlib
import grp
import logging
import math
import operator
import os
import pwd
import queue
import re
import socket
import stat
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from forewarn.protocol.ages import status_ages
from forewarn.protocol.fields import CLOCK_AHEAD, TAKES_ACK_ACTION
from forewarn.protocol.seqgap import SeqGaps
from forewarn.protocol.timefmt import time_or_none, utcnow
from forewarn.protocol.wire import (
    ENV_EVENTS,
    TOPIC_CLIENT_PREFIX,
    TOPIC_HEARTBEAT,
    TOPIC_NOTICE,
    TOPIC_REPLAY_PREFIX,
    EndpointError,
    allow_ipv6,
    check_endpoint,
    client_id_problem,
    default_endpoints,
    environment,
    load_client_config,
    new_replay_token,
    request,
)

from .event import Event, check_version, load_json

log = logging.getLogger("forewarn.clients")

POLL_MS = 200
# Acks waiting for a slow or absent control socket; beyond this the oldest are dropped (an ack
# is telemetry and escalation input, never worth unbounded memory in a training process).
ACK_BACKLOG = 64
# An ack no agent answers (one restarting: the ack would be lost, and the restarted agent would
# list a terminate this job saved for as one nobody acted on) is sent again, this often, for
# this long after it was queued; later acks wait behind it, in order.
ACK_RETRY_EVERY = 0.5
ACK_RETRY_SECONDS = 30.0
# How long close() lets queued acks of a notice go out, retries included: long enough for
# systemd to restart a crashed agent (RestartSec=2s and its start); an agent that answers is
# not waited for. An ack of no notice (a periodic or SIGTERM save) gets one try on close.
ACK_CLOSE_SECONDS = 10.0
# How long `notice_ages` waits for the agent's status: asked on the notices thread, rarely
# (a terminate that looks older than the job), from an agent that has just sent a notice.
AGES_TIMEOUT = 1.0
# How an agent (pydantic) names a field of a request it does not know.
_UNKNOWN_FIELD = re.compile(r"(?:^|[\s;:])([a-z_]+): Extra inputs are not permitted")
# A malformed message on the events socket is dropped; at most one warning this often says so
# (with how many more were dropped since), so a broken publisher cannot flood the job's log.
MALFORMED_WARN_SECONDS = 60.0
# The detail of the clear a client makes for a notice the agent's heartbeat no longer lists.
WITHDRAWN = {"withdrawn": "no longer listed by the agent's heartbeat"}
# A restarted agent lists the provider notices of its state file until their watcher has
# answered, so its heartbeats are right from the first. Still, a notice its heartbeats leave
# out is withdrawn only after this long: one published the instant before the agent was
# killed is not in the file yet (the publish does not wait for the fsync), and an agent from
# before that change lists only what its watchers have reported since it started.
RESTART_SETTLE = 5.0
# A notice the agent's heartbeats list but this client never received was dropped on its way:
# past the high-water marks (a job stopped by SIGSTOP or a scheduler's suspend, 1,000
# messages queued: about 16 minutes of heartbeats), a terminate sent then never arrived. Listed
# by two heartbeats in a row (the replay of a new subscriber may follow its first one), it is
# asked for again by subscribing to `notice` once more, which makes the agent replay; at most
# this often.
REPLAY_ASK_EVERY = 10.0
# A client whose endpoints were chosen by default (none given, nor set in FOREWARN_EVENTS,
# FOREWARN_CONTROL or the config file) works out the default place again this often while it
# hears no agent: a job started before the system agent (at boot, or while an upgrade restarts
# it with /run/forewarn removed) found no agent there and took a place of its own for good.
LOOK_AGAIN_EVERY = 1.0


def _events_endpoint(given: str | None, default: str) -> str:
    """The events endpoint, checked: one zmq cannot connect (the scheme left out) ended the
    thread that reads the notices at its first line, and the job trained on without ever
    hearing a terminate. Given here or in `FOREWARN_EVENTS`, it is a ValueError naming it; the
    config file's is one warning and the default place, as for any key of a file the library
    cannot use (that never stops a training job)."""
    try:
        return check_endpoint(given or default, allow_remote=True, what="events")
    except EndpointError as error:
        config = load_client_config()
        if given or environment(ENV_EVENTS) or not config.events:
            raise
        said = f"config file {config.path}: config key events: {error}"
        if said not in _CONFIG_WARNED:
            _CONFIG_WARNED.add(said)
            log.warning("%s; looking for the agent in the default places", said)
        return default_endpoints(config=replace(config, events=None))[0]


_CONFIG_WARNED: set[str] = set()


def _client_id() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"


def _finite(number: float) -> bool:
    """Whether `number` is a finite float or a whole number one converts to: math.isfinite
    raised OverflowError for a whole number past a float (10**400, which JSON reads), and the
    notices thread logged a heartbeat holding it as a bug, with its traceback."""
    try:
        return math.isfinite(float(number))
    except OverflowError:
        return False


def parse_heartbeat(payload: bytes) -> dict[str, Any]:
    """A heartbeat as a dict whose `active`, and `acked` and `providers` when present, are
    lists of strings: the guard reads them on its ticker thread, which a `None` there would
    end, whose `exit_margin`, when present and not null, is a finite number of seconds, zero
    or more (not a bool), and whose `v` is the integer 1. ValueError naming what is wrong
    otherwise, and nothing else."""
    beat = load_json(payload, "heartbeat")
    if not isinstance(beat, dict):
        raise ValueError("heartbeat is not a JSON object")
    # As for a notice: a heartbeat of another protocol version says nothing this client can
    # read (its `active` may mean something else), so it is dropped, not taken at its word.
    check_version(beat, "heartbeat")
    if "active" not in beat:
        raise ValueError("heartbeat has no 'active'")
    for name in ("active", "acked", "providers", "takes"):
        value = beat.get(name, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ValueError(f"heartbeat field {name!r} is not a list of strings")
    margin = beat.get("exit_margin")
    if margin is not None and not (
        type(margin) in (int, float) and _finite(margin) and margin >= 0
    ):
        raise ValueError("heartbeat field 'exit_margin' is not a number of seconds, zero or more")
    return beat


def fields_refused_as_unknown(error: str, payload: dict[str, Any]) -> set[str]:
    """The fields of `payload` an agent's refusal `error` names as unknown to it (never
    `op`): an agent older than the client refuses an ack whole for a field it lacks."""
    named = set(_UNKNOWN_FIELD.findall(error))
    return {key for key in payload if key in named and key != "op"}


def _closed_to_this_user(events: str) -> str | None:
    """Why this process may not connect to the `ipc://` socket `events`, if that is why no
    agent is heard: the socket is there but not writable for it (an agent run by root, or by
    `forewarn`, whose sockets are 0660 with their directory's group, the job's user outside
    it), or a directory on its way is closed to it. None otherwise (no socket: no agent)."""
    if not events.startswith("ipc://") or events.startswith("ipc://@"):
        return None
    path = events[len("ipc://") :]
    try:
        found = os.stat(path)
    except PermissionError:
        return (
            f"this user (uid {os.geteuid()}) may not reach {path}: a directory on its way is "
            "closed to it; run the job as a user of the agent's group"
        )
    except OSError:
        return None
    if not stat.S_ISSOCK(found.st_mode) or os.access(path, os.W_OK, effective_ids=True):
        return None
    return (
        f"this user (uid {os.geteuid()}, groups {_group_names(os.getgroups() or [os.getegid()])}) "
        f"may not connect to {path} (mode {stat.S_IMODE(found.st_mode):04o}, owner "
        f"{_user_name(found.st_uid)}, group {_group_names([found.st_gid])}): an agent there is "
        f"not heard; run the job as a member of group {_group_names([found.st_gid])}"
    )


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_names(gids: list[int]) -> str:
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))
    return ",".join(names)


class Notices:
    """Subscribe to the local agent.

    Attributes, safe to read from any thread at any time:
    - `active`: the active notices by id (a new dict on every change, never mutated);
    - `latest`: the last notice received, or None;
    - `alive`: whether a heartbeat arrived within `heartbeat_timeout` seconds;
    - `agent`: the last heartbeat as a dict, or None;
    - `replayed`: whether the agent's replay of the notices in force when this client
      subscribed (or reconnected to a restarted agent) has all been read: its heartbeat
      naming this socket's `replay/<token>` came and every notice it listed followed, or a
      later heartbeat came, or the agent is too old to name the token. A job starting under
      a drain and a terminate read the drain alone first (see `CheckpointGuard`).
    """

    def __init__(
        self,
        events: str | None = None,
        control: str | None = None,
        *,
        client_id: str | None = None,
        heartbeat_timeout: float = 3.0,
        start: bool = True,
    ) -> None:
        if (
            isinstance(heartbeat_timeout, bool)
            or not isinstance(heartbeat_timeout, (int, float))
            or not 0 < heartbeat_timeout < math.inf
        ):
            # 0 or less: the agent was never `alive` (the guard took the flag file its local
            # provider takes too); NaN: a guard without an agent never took it; a string ended
            # the thread that reads the notices.
            raise ValueError(
                f"heartbeat_timeout must be a positive number of seconds, got {heartbeat_timeout!r}"
            )
        default_events, default_control = default_endpoints()
        self.events = _events_endpoint(events, default_events)
        self.control = control or default_control
        # Endpoints given here stay; the default place may change (see LOOK_AGAIN_EVERY).
        self._by_default = events is None and control is None
        problem = None if client_id is None else client_id_problem(client_id)
        if client_id is not None and problem is not None:
            # Taken, a client_id past 200 characters had every ack refused, and one past a
            # KiB a subscription ZeroMQ drops with the connection: the client reconnected in
            # a loop and never heard a notice ("no agent on ...").
            raise ValueError(f"client_id {client_id[:60]!r}: {problem}")
        self.client_id = client_id or _client_id()
        self.heartbeat_timeout = heartbeat_timeout
        self.active: dict[str, Event] = {}
        self.latest: Event | None = None
        self.alive = False
        self.agent: dict[str, Any] | None = None
        self.replayed = False
        # The ids the heartbeat answering this socket's subscription listed, not read since:
        # the agent sends them right after it (see `_note_replay`).
        self._replay_left: set[str] = set()
        # An agent was heard: any message read as v1, a notice too. `agent` (a heartbeat) is
        # not that: a notice sent before the first heartbeat reached this client, its agent
        # gone before the next, left `agent` None and the job's ack of it was dropped.
        self._heard = False
        self._listeners: list[Callable[[Event], None]] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # (payload, timeout per try, monotonic time it was queued)
        self._acks: queue.Queue[tuple[dict[str, Any], float, float] | None] = queue.Queue()
        self._sender: threading.Thread | None = None
        self._acks_dropped = 0
        self._ack_failing = False
        self._older_agent_said = False
        self._close_by = math.inf
        self._malformed_unsaid = 0
        self._malformed_quiet_until = -math.inf
        self._settle_until = -math.inf
        # The `sent_at` of a restarted agent's first heartbeat read here: its heartbeats count
        # once one was sent RESTART_SETTLE after it, on the agent's clock (see _settling).
        self._settle_from: datetime | None = None
        self._unreceived: set[str] = set()  # listed by the last heartbeat, never received
        # This socket's `replay/<token>`: the heartbeat of the agent's answer to its
        # subscription lists it (`replay_for`), and until then what the heartbeats list is
        # that replay still to come, not a loss (see _joining).
        self._replay_token = new_replay_token()
        # The `agent` of the last heartbeat naming the token (that agent has answered this
        # socket's subscriptions), and the agent heard last, with when its first heartbeat
        # was read here.
        self._answered_by: object = None
        self._heard_agent: tuple[object, float] | None = None
        self._replay_wanted = False
        self._replay_asked = -math.inf
        self._replay_said: set[str] = set()
        # The numbers the agent's messages skipped (the rule `forewarn wait`/`watch` share),
        # and the ids of the notices received since the last heartbeat: at a restarted agent's
        # first heartbeat, one gap is the jump to its reserved mark, and its replay (every
        # notice it lists) is what came since.
        self._seqs = SeqGaps()
        self._ids_since_beat: set[str] = set()
        # After a restart: the ids received from the new agent so far, until its second
        # heartbeat checks them against what it lists (its replay may follow its first).
        self._restart_ids: set[str] | None = None
        self._unreplayed: set[str] = set()  # listed then, not replayed: not asked for yet
        self._peers: frozenset[Any] = frozenset()  # see _note_peers
        if start:
            self.start()

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call `listener(event)` on the background thread for each new or changed notice
        (clears included). Keep it quick: set a flag, do not save from it."""
        self._listeners.append(listener)

    def start(self) -> Notices:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="forewarn-notices", daemon=True)
            self._thread.start()
        return self

    def wait(
        self, actions: tuple[str, ...] = ("drain", "terminate"), timeout: float | None = None
    ) -> Event | None:
        """Block until an active notice has one of `actions`; None on timeout (None or
        infinite: no end)."""
        if timeout is not None and math.isnan(timeout):
            raise ValueError("wait(timeout=nan): give seconds, or None to wait without end")
        # An infinite end raised OverflowError in the condition's wait, at once.
        end = None if timeout is None or timeout == math.inf else time.monotonic() + timeout
        with self._changed:
            while True:
                for event in self.active.values():
                    if event.action in actions:
                        return event
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left)

    def ack(
        self,
        notice_id: str | None,
        *,
        step: int | None = None,
        flush_seconds: float | None = None,
        outcome: str = "saved",
        restore_seconds: float | None = None,
        steps_lost: int | None = None,
        stall_seconds: float | None = None,
        durable_seconds: float | None = None,
        choice: str | None = None,
        note: str | None = None,
        timeout: float = 1.0,
        wait: bool = False,
        action: str | None = None,
    ) -> bool:
        """Tell the agent about a flush (or a resume). A background save reports apart what
        training waited (`stall_seconds`) and the time until it was durable
        (`durable_seconds`); a final save that found one in flight says what it did about it
        (`choice`: waited, cancelled, nothing in flight) and why (`note`).

        By default the ack is handed to a sender thread and this returns at once: True when it
        was queued, False when no agent was ever heard from. One that no agent answers (it is
        restarting) is sent again for up to `ACK_RETRY_SECONDS`. With `wait=True` it is sent
        here, once, and True means the agent accepted it (waiting up to `timeout` seconds); no
        answer, a refusal or an endpoint zmq rejects is False and a warning.

        `action` is the action the save was for (`drain`, `terminate`): sent only to an agent
        whose heartbeat lists `ack.action` in `takes`, which then counts a drain's save for no
        terminate the notice became meanwhile; an older agent counts the ack for the notice's
        action when it arrives, as before."""
        if not self.alive and (wait or not self._heard):
            return False
        payload: dict[str, Any] = {"op": "ack", "client": self.client_id, "outcome": outcome}
        if action is not None and self._takes(TAKES_ACK_ACTION):
            payload["action"] = action
        for key, value in (
            ("notice_id", notice_id),
            ("step", step),
            ("flush_seconds", flush_seconds),
            ("restore_seconds", restore_seconds),
            ("steps_lost", steps_lost),
            ("stall_seconds", stall_seconds),
            ("durable_seconds", durable_seconds),
            ("choice", choice),
            ("note", note),
        ):
            if value is not None:
                payload[key] = _ack_figure(key, value)
        if not wait:
            self._queue_ack(payload, timeout)
            return True
        return self._send_ack(payload, timeout) is True

    def _queue_ack(self, payload: dict[str, Any], timeout: float) -> None:
        if self._acks.qsize() >= ACK_BACKLOG:
            with contextlib.suppress(queue.Empty):
                self._acks.get_nowait()
            self._acks_dropped += 1
            if self._acks_dropped == 1:
                log.warning(
                    "forewarn: the agent on %s does not take acks; dropping the oldest",
                    self.control,
                )
        self._acks.put((payload, timeout, time.monotonic()))
        if self._sender is None:
            self._sender = threading.Thread(
                target=self._send_acks, name="forewarn-acks", daemon=True
            )
            self._sender.start()
            _SENDING.add(self)

    def _send_acks(self) -> None:
        while True:
            item = self._acks.get()
            if item is None or (self._stop.is_set() and time.monotonic() > self._close_by):
                return  # closed, and the queued acks had their time
            payload, timeout, queued = item
            try:
                while self._send_ack(payload, timeout) is None:
                    # An ack of no notice is telemetry: on the way out it gets this one try,
                    # not the window kept for a restarting agent. A job whose agent stopped
                    # with it (the node shutting down, a killed drill) lingered 10 s after
                    # its final save.
                    if self._stop.is_set() and "notice_id" not in payload:
                        break
                    if time.monotonic() - queued > ACK_RETRY_SECONDS:
                        log.warning(
                            "forewarn: no agent on %s took the ack of %s within %gs; dropped",
                            self.control,
                            payload.get("notice_id") or "a save for no notice",
                            ACK_RETRY_SECONDS,
                        )
                        break
                    if self._stop.wait(ACK_RETRY_EVERY) and time.monotonic() > self._close_by:
                        return
            except Exception:
                # If this thread ended, every later ack would wait in the queue forever.
                log.exception("forewarn: an ack to %s could not be sent", self.control)

    def _send_ack(self, payload: dict[str, Any], timeout: float) -> bool | None:
        """True: the agent took it; False: refused, or an endpoint zmq rejects; None: no
        agent answered (worth sending again)."""
        import zmq

        try:
            reply = request(self.control, payload, timeout)
        # ZMQError: an endpoint zmq refuses (a typo in `control`, an ipc path too long).
        except (TimeoutError, OSError, ValueError, RecursionError, zmq.ZMQError) as error:
            if not self._ack_failing:  # once per outage, not once per ack
                log.warning("forewarn: ack to %s failed: %s", self.control, error)
            self._ack_failing = True
            return None if isinstance(error, TimeoutError) else False
        if self._ack_failing:
            log.info("forewarn: acks reach the agent on %s again", self.control)
        self._ack_failing = False
        if not reply.get("ok"):
            unknown = fields_refused_as_unknown(str(reply.get("error")), payload)
            if unknown:
                # An agent older than this library (its image upgraded apart from the
                # training image) refused the whole ack for a field it does not know, and the
                # flush seconds that size its exit margin were lost with it.
                if not self._older_agent_said:
                    self._older_agent_said = True
                    log.warning(
                        "forewarn: the agent on %s is older than this client: it does not "
                        "take %s in an ack; sending acks without them",
                        self.control,
                        ", ".join(sorted(unknown)),
                    )
                kept = {key: value for key, value in payload.items() if key not in unknown}
                return self._send_ack(kept, timeout)
            log.warning("forewarn: the agent refused an ack: %s", reply.get("error"))
            return False
        return True

    def _takes(self, field: str) -> bool:
        """Whether the agent heard last lists `field` in its heartbeat's `takes`."""
        beat = self.agent
        takes = beat.get("takes") if isinstance(beat, dict) else None
        return isinstance(takes, list) and field in takes

    def notice_ages(self, timeout: float = AGES_TIMEOUT) -> dict[str, float] | None:
        """How long ago each active notice was noticed, in seconds on the machine's boot
        clock, which no step of the wall clock moves: the status `ages`, which count from the
        agent's raise. One raised again after it expired keeps its first `noticed_at` (the
        status gives when it was raised in `raised`): its age gains the time from that
        `noticed_at` to the raise. None when the agent does not answer within `timeout`, or
        gives no ages (older).

        Asked, not read from the heartbeat: protocol v1's heartbeat is pinned
        (clients/schema/protocol-v1.json), and the question comes up only for a notice that
        looks older than the job."""
        import zmq

        try:
            reply = request(self.control, {"op": "status"}, timeout)
        except (TimeoutError, OSError, ValueError, RecursionError, zmq.ZMQError):
            return None
        return status_ages(reply)

    def close(self, ack_timeout: float = ACK_CLOSE_SECONDS) -> None:
        """Stop the threads; acks of a notice still queued get up to `ack_timeout` seconds to
        go out, retries included (a job that exits right after its final save still tells the
        agent, one restarting too); an ack of no notice gets one try. An agent that answers
        is not waited for."""
        self._close_by = time.monotonic() + ack_timeout
        self._stop.set()
        if self._sender is not None:
            self._acks.put(None)
            self._sender.join(timeout=ack_timeout)
            self._sender = None
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def __enter__(self) -> Notices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The background thread.

    def _run(self) -> None:
        import zmq

        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        # `notice` after the others: subscribing to it makes the agent replay, and by then it
        # knows this client and sends the heartbeat of the replay to it. `replay/<token>`
        # last: the heartbeat naming it answers every subscription before it.
        for wanted in (
            TOPIC_HEARTBEAT,
            TOPIC_CLIENT_PREFIX + self.client_id,
            TOPIC_NOTICE,
            TOPIC_REPLAY_PREFIX + self._replay_token,
        ):
            sock.setsockopt(zmq.SUBSCRIBE, wanted.encode())
        # Reconnect quickly after an agent restart: notices are time-critical.
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        # An agent on tcp://[::1] is reached only with ZMQ_IPV6 set: this thread connected
        # and waited there in silence.
        allow_ipv6(sock, self.events)
        self._note_peers()
        sock.connect(self.events)
        started = time.monotonic()
        last_beat: float | None = None
        warned = False
        look_again = started + LOOK_AGAIN_EVERY
        agent_topics = (TOPIC_HEARTBEAT.encode(), TOPIC_NOTICE.encode())
        try:
            while not self._stop.is_set():
                if sock.poll(POLL_MS):
                    frames = sock.recv_multipart()
                    # Only a message read as v1 is a sign of life (a notice too): one refused
                    # (another "v", malformed) kept `alive` true while no agent this client
                    # can read was there, unlike `forewarn watch` and the C subscriber.
                    if frames[0] in agent_topics and self._message(frames):
                        last_beat = time.monotonic()
                        self._heard = True
                    if self._replay_wanted:
                        self._replay_wanted = False
                        sock.setsockopt(zmq.SUBSCRIBE, TOPIC_NOTICE.encode())
                now = time.monotonic()
                alive = last_beat is not None and now - last_beat < self.heartbeat_timeout
                if alive != self.alive:
                    self.alive = alive
                    if alive:
                        log.info("forewarn: agent found on %s", self.events)
                    elif warned or last_beat is not None:
                        log.warning("forewarn: lost the agent on %s", self.events)
                    with self._changed:
                        self._changed.notify_all()
                if not alive and self._by_default and now >= look_again:
                    look_again = now + LOOK_AGAIN_EVERY
                    previous = self.events
                    if self._look_again():
                        with contextlib.suppress(zmq.ZMQError):
                            sock.disconnect(previous)
                        allow_ipv6(sock, self.events)
                        self._note_peers()
                        sock.connect(self.events)
                        started, warned = now, False
                if not alive and not warned and now - started >= self.heartbeat_timeout:
                    warned = True
                    closed = _closed_to_this_user(self.events) if last_beat is None else None
                    if closed is not None:
                        log.warning(
                            "forewarn: %s; only periodic checkpoints, signals and the flag "
                            "file will trigger saves",
                            closed,
                        )
                    elif last_beat is None:
                        log.warning(
                            "forewarn: no agent on %s; only periodic checkpoints, signals "
                            "and the flag file will trigger saves",
                            self.events,
                        )
        finally:
            sock.close(linger=0)
            _LISTENING.discard(self)
            if not self._stop.is_set():
                # Not closed: an error ended the thread. Stop claiming an agent it cannot hear.
                self.alive = False
                log.error("forewarn: stopped listening to the agent on %s", self.events)

    def _note_peers(self) -> None:
        """Before connecting: the addresses the agent's sockets answer on, which a forked child
        lets go of (`_let_go_of_the_agent`). Worked out here, not in the child: a host name
        resolved there could wait on DNS inside a DataLoader worker's start."""
        self._peers = _agent_peers(self.events) | _agent_peers(self.control)
        _LISTENING.add(self)

    def _look_again(self) -> bool:
        """Work out the default endpoints again; True when they moved (the agent's runtime
        directory appeared, or went away, since they were chosen), and they are taken."""
        try:
            events, control = default_endpoints()
            events = _events_endpoint(None, events)
        except Exception:  # an environment changed under the job: keep what works
            return False
        if (events, control) == (self.events, self.control):
            return False
        log.info("forewarn: no agent on %s; looking for it on %s", self.events, events)
        self.events, self.control = events, control
        return True

    def _message(self, frames: list[bytes]) -> bool:
        """One message from the agent; False when it was refused. Whatever it holds, a
        malformed one is dropped and this thread goes on: if it ended, no notice would reach
        the job again while `alive` stayed true."""
        topic = frames[0].decode()
        try:
            if len(frames) != 2:
                raise ValueError(f"{len(frames)} frames, not 2 (topic, JSON)")
            if topic == TOPIC_HEARTBEAT:
                self._heartbeat(frames[1])
            else:
                self._notice(frames[1])
        except Exception as error:
            self._malformed(topic, error)
            return False
        return True

    def _malformed(self, topic: str, error: Exception) -> None:
        now = time.monotonic()
        if now < self._malformed_quiet_until:
            self._malformed_unsaid += 1
            return
        since = f" ({self._malformed_unsaid} more since the last warning)"
        log.warning(
            "forewarn: dropped a malformed %s message from %s: %s%s",
            topic,
            self.events,
            # A ValueError names what was wrong; anything else is a bug here, with its trace.
            str(error)[:300] if isinstance(error, ValueError) else repr(error)[:300],
            since if self._malformed_unsaid else "",
            exc_info=not isinstance(error, ValueError),
        )
        self._malformed_unsaid = 0
        self._malformed_quiet_until = now + MALFORMED_WARN_SECONDS

    def _heartbeat(self, payload: bytes) -> None:
        beat = parse_heartbeat(payload)
        active = set(beat["active"])
        joining, replayed = self._joining(beat)
        self._note_replay(beat, joining)
        previous, self.agent = self.agent, beat
        if previous is not None and previous.get("agent") != beat.get("agent"):
            # Quicker than heartbeat_timeout, the socket's reconnect hid it: no 'lost the agent'.
            log.warning(
                "forewarn: the agent on %s restarted (was %s, now %s)",
                self.events,
                previous.get("agent"),
                beat.get("agent"),
            )
            # Its first heartbeats went out before its watchers' first answers: taken at
            # their word, they cleared every provider notice, and the guard flushed again
            # for each drain and ended a job that rightly trained under an acted-on terminate.
            self._settle_until = time.monotonic() + RESTART_SETTLE
            self._settle_from = time_or_none(beat.get("sent_at"))
            # Its notices came before this heartbeat, numbered on from its own mark: the jump
            # to it is no gap. Any other is a loss (among its replay, or after it), and a
            # notice its replay left out is checked at its next heartbeat: wiping them, a
            # lost replay of a drain escalated while the client's messages were being
            # dropped left the client with the drain, the gap forgotten, the terminate never
            # asked for.
            if self._seqs.note(beat.get("seq")):
                self._ids_since_beat = set()  # the jump is here: nothing of its came before
            self._seqs.restarted()
            self._restart_ids = set(self._ids_since_beat)
            self._ask_for_gap()
        else:
            # The first heartbeat read too: the messages before it (a join replay) are most
            # likely this agent's, and one lost just before it left no gap anywhere else. If
            # they were an agent's that has gone since, the replay asked for costs little.
            self._seqs.note(beat.get("seq"))
            if self._restart_ids is not None and replayed:
                self._note_unreplayed(active - self._restart_ids)
            self._ask_for_gap()
        self._seqs.heartbeat_read()
        self._ids_since_beat = set()
        seq = beat.get("seq")
        if self._settling(beat):
            return
        unreceived = active - self.active.keys()
        missed = unreceived & self._unreceived
        self._unreceived = set() if joining else unreceived
        if missed and time.monotonic() - self._replay_asked >= REPLAY_ASK_EVERY:
            self._replay_asked = time.monotonic()
            self._replay_wanted = True
            # Once per notice: one that never parses here is asked for again, not said again.
            if missed - self._replay_said:
                log.warning(
                    "forewarn: the agent on %s lists %s, never received here; asking it to "
                    "send the active notices again",
                    self.events,
                    ", ".join(sorted(missed)[:5]),
                )
            self._replay_said = missed
        now = utcnow()
        stale = [event for notice_id, event in self.active.items() if notice_id not in active]
        for event in stale:
            # Withdrawn while this client was not connected (an agent restart): no clear will
            # come for it, so it gets one here. The listeners must see it like any clear: the
            # guard forgets the notice, and flushes again if it comes back.
            # Numbered as the heartbeat that shows it gone, after the notice's own messages:
            # with the notice's `seq`, a listener keeping the highest `seq` of each id kept it.
            after = seq if type(seq) is int and seq > event.seq else event.seq
            self._event(
                replace(
                    event,
                    action="clear",
                    seq=after,
                    noticed_at=now,
                    sent_at=now,
                    detail=dict(WITHDRAWN),
                )
            )

    def _joining(self, beat: dict[str, Any]) -> tuple[bool, bool]:
        """(joining, replayed): whether the agent has yet to answer this socket's
        subscriptions, as its heartbeats say it will (an older agent's have no
        `replay_for`), and whether its replay to them has come (it came after an earlier
        heartbeat naming the token; for an older agent, always taken so). An agent slow to
        read subscriptions (a loaded node) beat for seconds listing a notice in force before
        the job started, and the job's log said it was "never received here" and asked for a
        replay that was only late; restarted, its second heartbeat came before its replay to
        the reconnected socket ("whose replay never arrived here"). Neither past
        REPLAY_ASK_EVERY after the agent's first heartbeat: a lost heartbeat naming the token
        does not keep a notice from being asked for for good."""
        now = time.monotonic()
        agent = beat.get("agent")
        if self._heard_agent is None or self._heard_agent[0] != agent:
            self._heard_agent = (agent, now)
        named = beat.get("replay_for")
        speaks = isinstance(named, list)
        replayed = not speaks or self._answered_by == agent
        if isinstance(named, list) and self._replay_token in named:
            self._answered_by = agent
        waited = now - self._heard_agent[1] >= REPLAY_ASK_EVERY
        return speaks and self._answered_by != agent and not waited, replayed or waited

    def _note_replay(self, beat: dict[str, Any], joining: bool) -> None:
        """At a heartbeat: whether the agent's replay to this socket has been read
        (`replayed`). The heartbeat naming the token comes first and lists what follows; any
        later heartbeat ends the wait (a notice lost on its way is a gap, asked for again)."""
        named = beat.get("replay_for")
        if isinstance(named, list) and self._replay_token in named:
            self._replay_left = set(beat["active"])
        else:
            self._replay_left = set()
        self.replayed = not joining and not self._replay_left

    def _settling(self, beat: dict[str, Any]) -> bool:
        """Whether a restarted agent's heartbeats still leave out what its watchers have not
        answered for: 5 s on this client's clock, and on the agent's (`sent_at`). On this
        client's alone, a job stopped (SIGSTOP, a call holding the GIL) just after it read the
        first heartbeat read the queued ones of the agent's first seconds after its own 5 s,
        and withdrew a notice still in force: the guard saved for its drain again."""
        if time.monotonic() < self._settle_until:
            return True
        if self._settle_from is None:
            return False
        sent = time_or_none(beat.get("sent_at"))
        if sent is not None and (sent - self._settle_from).total_seconds() < RESTART_SETTLE:
            return True
        self._settle_from = None
        return False

    def _note_unreplayed(self, missing: set[str]) -> None:
        """At a restarted agent's second heartbeat: it replayed every notice it listed when
        this client reconnected, so one it lists that did not come since was lost on its way
        (a change of one this client holds, an escalation, hides behind the same id)."""
        self._restart_ids = None
        self._unreplayed = missing

    def _ask_for_gap(self) -> None:
        """At a heartbeat: ask for a replay when messages went missing (at a notice it may be
        a restarted agent's, whose heartbeat then says so)."""
        if self._seqs.gap is None and not self._unreplayed:
            return
        if time.monotonic() - self._replay_asked < REPLAY_ASK_EVERY:
            return
        gap = self._seqs.take()
        if gap is not None:
            first, last = gap
            log.warning(
                "forewarn: %d message(s) from the agent on %s never arrived here (seq %d to "
                "%d); asking it to send the active notices again",
                last - first + 1,
                self.events,
                first,
                last,
            )
        else:
            log.warning(
                "forewarn: the restarted agent on %s lists %s, whose replay never arrived "
                "here; asking it to send the active notices again",
                self.events,
                ", ".join(sorted(self._unreplayed)[:5]),
            )
        self._unreplayed = set()
        self._replay_asked = time.monotonic()
        self._replay_wanted = True

    def _notice(self, payload: bytes) -> None:
        event = Event.from_json(payload)
        if self._seqs.note(event.seq):
            # Those before a jump may be an agent's that has gone since: its replay is what
            # follows the jump to a restarted agent's mark.
            self._ids_since_beat = set()
        self._ids_since_beat.add(event.id)
        if event.id in self._replay_left:
            self._replay_left.discard(event.id)
            # Before the listeners hear it: the guard reads `replayed` from them.
            self.replayed = not self._replay_left
        if self._restart_ids is not None:
            self._restart_ids.add(event.id)
        self._event(event)

    def _event(self, event: Event) -> None:
        known = self.active.get(event.id)
        # Everything the agent re-sends a notice for, not only its action and deadline: a
        # change of reason or of the provider's own detail (AWS's spot action terminate ->
        # stop) was dropped here as a repeat, and `active` kept the old one.
        repeat = known is not None and _as_sent(known) == _as_sent(event)
        if event.action != "clear" and repeat:
            # A replay for a later subscriber, or a repeat: nothing new. One carrying a skew
            # the agent kept since (it sends none for that alone) is kept as true, silently.
            if known is not None and known.detail != event.detail:
                with self._changed:
                    self.active = {**self.active, event.id: event}
            return
        with self._changed:
            active = dict(self.active)
            if event.action == "clear":
                if active.pop(event.id, None) is None:
                    return
            else:
                active[event.id] = event
            self.active = active
            self.latest = event
            self._changed.notify_all()
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                log.exception("forewarn: a notice listener failed")


# The most the agent takes of each timed figure of an ack (its AckRequest). A figure past it
# made the agent refuse the whole ack: a save of over an hour left its notice unacked, and the
# exit margin it sizes never learnt the job's saves are slow. Such a figure goes as this most:
# the margin is then the widest the agent gives.
ACK_MAXIMA = {
    "flush_seconds": 3600.0,
    "stall_seconds": 3600.0,
    "durable_seconds": 86400.0,
    "restore_seconds": 86400.0,
}


# The most the agent takes of an ack's note (its MAX_ACK_NOTE_LENGTH), and what a note may
# not hold there (no character below U+0020, nor U+007F), a run of it at a time.
ACK_NOTE_CHARS = 500
_NOTE_CONTROL_RUN = re.compile(r"[\x00-\x1f\x7f]+")


def _ack_figure(key: str, value: Any) -> Any:
    """`value` as the ack sends it for `key`: plain (`_plain`), and a time no more than the
    agent takes; a note made one line (each run of line breaks or other control characters a
    space) of at most the agent's length: the agent refused the whole ack for a note of
    several lines, and a failed save's (a storage error with its response body) was lost, the
    job then named as gone before its ack."""
    if key == "note" and isinstance(value, str):
        return _NOTE_CONTROL_RUN.sub(" ", value).strip()[:ACK_NOTE_CHARS]
    plain = _plain(value)
    most = ACK_MAXIMA.get(key)
    if most is not None and isinstance(plain, (int, float)) and plain > most:
        return most
    return plain


def _plain(value: Any) -> Any:
    """A number as JSON takes it: a step read back from a checkpoint as a numpy or torch
    integer (or a flush timed into a numpy float) could not be encoded, and the ack was
    dropped on the sender thread."""
    if isinstance(value, (str, bool, int, float)):
        return value
    # A float array scalar (numpy's, a torch tensor) has an __index__ that raises TypeError.
    with contextlib.suppress(TypeError):
        return operator.index(value)
    with contextlib.suppress(TypeError, ValueError):
        return float(value)
    return value  # not a number: the sender says it could not send it


# Notices whose sender thread may hold acks. A daemon: the interpreter dropped it at exit, and
# a job that left with `sys.exit(guard.exit_code)` right after its terminate's save (the
# README's loop, no close()) lost the ack; the agent never heard the job had saved.
_SENDING: weakref.WeakSet[Notices] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for notices in list(_SENDING):
        notices.close()


# Notices whose thread is connected (or connecting) to the agent.
_LISTENING: weakref.WeakSet[Notices] = weakref.WeakSet()


def _agent_peers(endpoint: str) -> frozenset[Any]:
    """The peer addresses (as `getpeername` gives them) of a connection to `endpoint`: the
    path of an ipc socket (its inode too: the agent may have bound it spelt otherwise; the
    abstract name of `ipc://@name`), each address of a tcp host with its port."""
    scheme, _, where = endpoint.partition("://")
    if scheme == "ipc":
        if where.startswith("@"):
            return frozenset({b"\0" + where[1:].encode()})
        peers: set[Any] = {where, os.path.abspath(where)}
        with contextlib.suppress(OSError):
            info = os.stat(where)
            peers.add((info.st_dev, info.st_ino))
        return frozenset(peers)
    if scheme != "tcp":
        return frozenset()
    host, _, port = where.rpartition(":")
    host = host.split(";")[-1].strip("[]")  # `tcp://source;host:port`, `[::1]`
    try:
        found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError, UnicodeError):
        return frozenset()
    return frozenset((address[4][0], address[4][1]) for address in found)


def _let_go_of_the_agent() -> None:
    """In a forked child (a DataLoader's fork worker, a forked rank): close the inherited
    descriptors of the parent's connections to the agent. Held open, they kept a client the
    parent closed on the agent's books for as long as the child lived: the agent waited for
    its acks, and no notice it got then ever counted as flushed by every client. Only the
    descriptors are closed: the parent's connections stay up, and nothing here touches the
    parent's ZeroMQ context, whose threads the child does not have."""
    _SENDING.clear()  # the child has none of their threads
    peers: set[Any] = set()
    for notices in list(_LISTENING):
        peers |= notices._peers
    _LISTENING.clear()
    if not peers:
        return
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):  # not Linux: nothing to go by
        return
    for fd in descriptors:
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(os.fstat(fd).st_mode) and _peer_of(fd) in peers:
                os.close(fd)


def _peer_of(fd: int) -> Any:
    """The peer of socket `fd` in the form `_agent_peers` gives, or None."""
    sock = socket.socket(fileno=fd)
    try:
        peer = sock.getpeername()
        if sock.family == socket.AF_UNIX:
            if isinstance(peer, str) and peer:
                with contextlib.suppress(OSError):
                    info = os.stat(peer)
                    return (info.st_dev, info.st_ino)
            return peer or None
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            return (peer[0], peer[1])
        return None
    finally:
        sock.detach()  # the descriptor is not this object's to close


os.register_at_fork(after_in_child=_let_go_of_the_agent)


def _as_sent(event: Event) -> tuple[Any, ...]:
    """What the agent sends a notice again for; a replay differs only in `seq` and `sent_at`
    (a restarted agent's in `noticed_at`), and in the detail's CLOCK_AHEAD, which the agent
    keeps for replays and sends to no one when only it changes: after NTP's step, a client
    joining made every other client's listeners hear each drain again."""
    detail = {key: value for key, value in event.detail.items() if key != CLOCK_AHEAD}
    return (event.action, event.reason, event.deadline, detail)


__all__ = ["Notices"]
