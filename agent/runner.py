"""The agent: binds the sockets, runs and supervises the watchers, publishes what the board
decides, answers control requests, and shuts down cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import importlib
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.fields import TAKES_ACK_ACTION
from forewarn.protocol.timefmt import format_time, utcnow
from forewarn.protocol.wire import TOKEN_FILE, ReplyError, ipc_path, needs_token, request
from forewarn.providers import (
    Closable,
    FlushAware,
    PollHealth,
    ProgressBounded,
    RestoreAware,
    Watcher,
    WatcherContext,
)
from forewarn.providers.backoff import Backoff
from forewarn.providers.boot import BOOT_TIME_SLACK, machine_started
from forewarn.providers.health import WATCHER_FAILED, WATCHER_STALLED
from forewarn.providers.persist import drop_room, hold_room, remove_leftovers
from forewarn.providers.ticks import sleep_to_tick
from pydantic import ValidationError

from .board import EXPIRED_KEY, NoticeBoard, Sequencer
from .config import ConfigError, Settings
from .controltoken import remove_token, write_token
from .holders import Holder, pid_namespace
from .limits import ACKED_BY_LISTED, MAX_MANUAL, NO_ACTIVE_MANUAL, deadline_problem, id_problem
from .observers import Observers, build_observers
from .protocol import (
    CONTROL_REQUEST,
    AckReply,
    AckRequest,
    AgentInfo,
    ClearReply,
    ClearRequest,
    ErrorReply,
    Heartbeat,
    HoldReply,
    HoldRequest,
    Notice,
    NotifierStatus,
    NotifyReply,
    NotifyRequest,
    ProviderHealth,
    Report,
    StatusReply,
)
from .publisher import BindError, Publisher
from .requesterrors import request_problems
from .requestfields import UnknownFields
from .reserve import MIN_RESERVE_BYTES, RESERVE_FILE, SpaceReserve
from .rundir import AgentDirs
from .selfprobe import ControlProbe
from .state import (
    SEQ_FILE,
    STATE_FILE,
    AgentState,
    another_boot,
    boot_id,
    encode_state,
    load_seq_mark,
    load_state,
    save_seq_mark,
    saved_manual_ids,
    saved_this_boot,
)
from .statewriter import StateWriter
from .throttle import LineBudget

log = logging.getLogger("forewarn.agent")

try:
    from importlib.metadata import version as _dist_version

    VERSION = _dist_version("forewarn")
except Exception:  # running from a source tree that is not installed
    VERSION = "0.0.0"

DETECT_TIMEOUT = 1.5
# What httpx loads at its first request on an asyncio loop (its transport's async backend).
HTTP_BACKEND_MODULES = ("httpcore._backends.anyio", "anyio._backends._asyncio")
# What `status` names while the runtime directory's copy of the `seq` mark is unwritten.
SEQ_COPY_UNSAVED = "runtime-seq"
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
STOP_GRACE = 0.5
# The longest a stop waits for the notifiers (webhook, Kubernetes Events) to deliver what
# they hold: a reclaimed machine stops its agent just after the terminate is published, and
# its POST under way was cut. Below the 5 s a stop is given by the tests, docker stop's 10 s,
# the shipped unit's TimeoutStopSec (15 s) and Kubernetes' default 30 s grace.
NOTIFIER_GRACE = 2.0
# The longest the agent waits for a watcher to close (its HTTP client, its IMAP session): one
# blocked for good (in a thread, on a peer that stopped reading) kept the agent from stopping
# on SIGTERM, and a crashed watcher from being restarted. Past it, it is left behind.
CLOSE_TIMEOUT = 2.0
# A part of the agent that crashes more than this often within the window takes it down.
CRASH_LIMIT = 5
CRASH_WINDOW = 60.0
# The control self-probe: how long one answer may take, how many unanswered probes in a row
# mean control is dead, and how many rebinds may fail to cure it before the agent exits.
PROBE_TIMEOUT = 1.0
PROBE_FAILURES = 3
# A probe left unanswered while control was in the middle of answering another request (a
# notify or an ack waiting for its state to reach a slow disk) is no miss, unless that request
# has been in its handler this long: control is busy, not dead, and a rebind dropped the reply.
PROBE_BUSY_LIMIT = 30.0
PROBE_REBINDS = 2
# The longest the escalation loop sleeps while something is due: deadlines are wall-clock
# times but the sleep runs on the monotonic clock, so a wall-clock step (NTP, a resume, a live
# migration) is only noticed at the next look.
CLOCK_RECHECK = 1.0
# How many recent acks are remembered to recognise one sent again: a client whose ack went
# unanswered (its reply waited for a slow disk past the client's timeout, or control was
# rebound) sends the very same ack again, and it must count once.
ACKS_REMEMBERED = 256
# Ack lines logged: at most ACK_LOG_BURST at once and ACK_LOG_RATE a second after that. A
# client pipelining acks (8,000 a second) had one INFO line each, past journald's default rate
# limit (10,000 lines in 30 s a service), which then drops other lines too. The first ack of
# each action of each active notice, and the ack that completes one, are logged whatever the
# budget; the others past it are counted in one line a second.
ACK_LOG_BURST = 100
ACK_LOG_RATE = 10.0
# (notice id, action) pairs whose first ack was logged, remembered: a few per active notice.
FIRST_ACKS_REMEMBERED = 1024
# The request fields this agent takes that older agents did not (the heartbeat's `takes`).
TAKES = (TAKES_ACK_ACTION,)
# How many notices that ended lately `status` names (`ended`): enough for every loop's save.
ENDED_REMEMBERED = 64
# After a restart (an agent used the state directory before), how long no notice counts as
# flushed by every client: the acking clients come back as their sockets reconnect (Notices
# backs off up to 1 s, a ZeroMQ socket left at its defaults retries every 0.1 s), and an ack
# that came first (a client's retry, or the first client back acking a notice just raised)
# completed notices those still reconnecting had not flushed.
CLIENTS_RECONNECT_SECONDS = 3.0
# The runner looks whether a watcher went past its progress bound when it can have: at its
# last progress plus its bound, at least PROGRESS_CHECK after the last look (a stall is
# caught within that of the bound passing), and at most PROGRESS_RECHECK after it (a bound
# that shrank since, or one that was none, is taken up within that). A look every
# PROGRESS_CHECK whatever the bound was four wake-ups a second of an idle GCP agent, whose
# two long-polls answer every 15 s within a bound of 45 s.
PROGRESS_CHECK = 0.25
PROGRESS_RECHECK = 5.0


# The most descriptors the agent asks for when its hard limit is unlimited.
FD_LIMIT_CAP = 1 << 20


def raise_fd_limit() -> tuple[int, int]:
    """Lift the soft limit on open files to the hard one; (before, after). Every connection
    to the events or control socket holds a descriptor, and when an accept on an ipc socket
    finds none left libzmq aborts the whole process (EMFILE is missing from its list of
    errors to retry on): 1,100 connections by a member of the socket's group, or any local
    user on tcp://, killed an agent under the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FD_LIMIT_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (OSError, ValueError) as error:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, wanted, error)
            return soft, soft
        return soft, wanted
    return soft, soft


class Agent:
    def __init__(self, settings: Settings, dirs: AgentDirs | None = None) -> None:
        """`dirs`: the directories, already held (`run_agent` takes them before the metrics
        server binds); without them, `run` takes them."""
        self.settings = settings
        # SIGTERM or SIGINT that came before `run` put the loop's handlers in (`run_agent`
        # notes them): each is a stop as soon as `run` is going.
        self.stops_asked: list[int] = []
        self.runtime_dir = settings.resolved_runtime_dir()
        self.state_dir = settings.resolved_state_dir()
        self.dirs = dirs if dirs is not None else AgentDirs(self.runtime_dir, self.state_dir)
        self.state_path = self.state_dir / STATE_FILE
        self.reserve = SpaceReserve(self.state_dir / RESERVE_FILE)
        self.state_writer = StateWriter(self.state_path, self._state_written, self.reserve)
        self.seq_path = self.state_dir / SEQ_FILE
        # A copy of the mark in the runtime directory (a tmpfs such as /run, which a checkpoint
        # filling the state disk does not fill): a quick restart after the state directory's
        # mark could not be written (a full disk, its reserve spent) numbered from the older
        # mark again, and sent the `seq` numbers its predecessor had sent. Gone at a reboot,
        # which leaves the state directory's mark, and the clock, to number from.
        self.seq_copy_path: Path | None = (
            None
            if self.runtime_dir.resolve() == self.state_dir.resolve()
            else self.runtime_dir / SEQ_FILE
        )
        self.parts: dict[str, asyncio.Task[None]] = {}
        # Whether control answered the agent's last self-probes (see `_probe_control`).
        self.control_answers = True
        self.control_rebinds = 0
        self.control_token: str | None = None
        self._exit_code = 0
        self.events, self.control = settings.bind_endpoints()
        self.agent_id = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
        self.boot_id = boot_id()
        # Where the boot id cannot be read (some containers), the boot time tells the boots.
        self.booted = machine_started()
        self._saved_booted: datetime | None = None  # the boot time the last state saved
        # The processes behind holds (`wait --pid`), by (notice id, client): let go once gone.
        self._holders: dict[tuple[str, str], Holder] = {}
        self._pid_namespace = pid_namespace()
        self.started_at = utcnow()
        self.observers = Observers(build_observers(settings))
        self.watchers: dict[str, Watcher] = {}
        self.health: dict[str, PollHealth] = {}
        self.providers: list[str] = []
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        # The agent's own files ("state", "seq") whose last write failed, with why: retried
        # each beat, and shown by `status` until written.
        self._unsaved: dict[str, str] = {}
        # Fields of control requests ignored (a client newer than the agent), each logged once.
        self._unknown_fields = UnknownFields()
        self._recent_acks: dict[str, None] = {}  # acks as received, oldest first
        self._ack_lines = LineBudget(ACK_LOG_RATE, ACK_LOG_BURST)
        # (notice id, action) of the active notices whose first ack was logged, oldest first.
        self._first_acks_logged: dict[tuple[str, str], None] = {}
        # The notices that ended lately (cleared, withdrawn, retired), oldest first: a shell
        # job's ack of one that ended while it saved is no mistyped id (`forewarn ack`).
        self._ended: dict[str, None] = {}
        self._escalated_at_restore: set[str] = set()
        # The restored provider notices, by provider, for each watcher built before one of its
        # provider has answered (`_restore`).
        self._restored_at_start: dict[str, list[Report]] = {}
        # Its provider's good answers when each watcher was built by supervision: a watcher
        # without `answered` has answered once its provider has had one since.
        self._successes_at_build: dict[str, int] = {}
        self._events_ours = True
        # The watchers restarted because they went past their progress bound, with when
        # (time.monotonic()): each is a dead part until its health shows progress again.
        self._stalled: dict[str, float] = {}
        self.observers.watch_conditions(self._standing_conditions)

    # Setting up.

    def _check_no_other_agent(self) -> None:
        path = ipc_path(self.control)
        if path is not None and not path.exists():
            return
        try:
            reply = request(self.control, {"op": "status"}, timeout=0.3)
        except (TimeoutError, OSError):
            return
        except ReplyError:
            reply = None
        # Whatever answers is refused alike: another program's socket on the port answered
        # with JSON of its own shape, and the start ended in an AttributeError ("please
        # report it").
        info = reply.get("agent") if reply is not None else None
        other = info.get("agent") if isinstance(info, dict) else None
        if isinstance(other, str) and other.isprintable():
            who = f"another agent ({other[:100]})"
        elif reply is not None and reply.get("ok") is False:
            who = "another agent (it refused this one's status request)"
        else:
            who = "another program (not a forewarn agent)"
        raise ConfigError(
            f"{who} already answers on {self.control}: stop it, or give this agent its own "
            "--control"
        )

    async def _choose_providers(self) -> list[str]:
        wanted = self.settings.providers
        if "auto" not in wanted:
            return list(wanted)
        chosen = ["local"] + [name for name in wanted if name not in ("auto", "local")]
        # A provider whose notices this boot's last agent saved is this machine's, whatever a
        # probe says now: dropped on a probe that timed out (a slow metadata service at the
        # restart), its restored terminate was cleared as no longer watched, and the provider
        # went unwatched for the agent's whole life.
        for name in sorted(self.board.restored_from()):
            if name not in chosen and name in self.settings.registry.detectable():
                log.info("auto: %s picked: notices from it were restored from the state", name)
                chosen.append(name)
        candidates = [name for name in self.settings.registry.detectable() if name not in chosen]

        # Every watcher is built before any probe's clock starts: a build imports the
        # provider's watch module and SDK, which blocks the loop (seconds on a loaded machine
        # at boot), and inside the probes it spent the others' budgets (AWS went unpicked
        # on an endpoint answering in milliseconds).
        built: dict[str, tuple[Watcher, PollHealth]] = {}
        for name in candidates:
            health = PollHealth(name)
            try:
                built[name] = (self._build(name, health), health)
            except Exception as error:
                log.info("auto: %s not picked: %s", name, str(error) or type(error).__name__)

        # Likewise the HTTP stack's async backend, which httpx loads at its first request:
        # some 30 ms of CPU, over a second of a loaded machine's, taken inside the first
        # probe's request, blocked the loop every probe runs on and spent all their budgets.
        _load_http_backend()

        async def probe(name: str) -> bool:
            if name not in built:
                return False
            watcher, health = built[name]
            try:
                found = await asyncio.wait_for(watcher.detect(), DETECT_TIMEOUT)
            except Exception as error:
                log.info("auto: %s not picked: %s", name, str(error) or type(error).__name__)
                found = False
            else:
                if not found:
                    why = health.not_detected or "its detection probe said no"
                    log.info("auto: %s not picked: %s", name, why)
            await self._close(watcher)
            return bool(found)

        found = await asyncio.gather(*(probe(name) for name in candidates))
        chosen += [name for name, ok in zip(candidates, found, strict=True) if ok]
        log.info("auto-detected providers: %s", ", ".join(chosen))
        return chosen

    def _sent_as(self, notice_id: str) -> str | None:
        """The action `notice_id` went out as last, None when it is not active."""
        notice = self.board.get(notice_id)
        return None if notice is None else notice.action

    def _clock_vouched(self, provider: str) -> bool:
        """Whether `provider`'s watcher has read its service's clock (`PollHealth.dated`)."""
        health = self.health.get(provider)
        return health is not None and health.dated

    def _clock_skews(self) -> dict[str, float]:
        """The skew of this machine's clock each watcher holds now (`PollHealth.ahead`)."""
        return {
            name: health.ahead for name, health in self.health.items() if health.ahead is not None
        }

    def _build(self, name: str, health: PollHealth) -> Watcher:
        spec = self.settings.registry[name]
        context = WatcherContext(
            self.runtime_dir,
            self.state_dir,
            health,
            awaiting_flush=lambda notice_id: bool(self.board.unacked_clients(notice_id)),
            sent_as=self._sent_as,
        )
        return spec.watcher(self.settings.provider_settings(name), context)

    @staticmethod
    async def _close(watcher: Watcher) -> None:
        """Close a watcher that holds resources, waiting CLOSE_TIMEOUT at most."""
        if not isinstance(watcher, Closable):
            return
        closing = asyncio.ensure_future(watcher.aclose())
        await asyncio.wait([closing], timeout=CLOSE_TIMEOUT)
        if not closing.done():
            closing.cancel()
            log.warning(
                "%s: its watcher did not close within %gs; left behind", watcher.name, CLOSE_TIMEOUT
            )
        elif not closing.cancelled():
            closing.exception()  # retrieved: a close that failed is no concern of the agent's

    # Running.

    async def run(self) -> int:
        # The loop's threads (a watcher's blocking IMAP calls, a close) are not waited for when
        # it closes: one blocked for good kept the process from ending after a clean stop.
        asyncio.get_running_loop().set_default_executor(_UnwaitedExecutor())
        before, after = raise_fd_limit()
        if after != before:
            log.debug("open-file limit raised from %d to %d", before, after)
        if self.dirs.lock is None:
            self.dirs.hold()
        self._check_no_other_agent()
        # Held now, by this agent alone: a temporary file there is a write killed mid-way. The
        # runtime directory has its writes too (the `seq` copy, GCP's pending notices).
        places = [self.state_dir]
        if self.runtime_dir.resolve() != self.state_dir.resolve():
            places.append(self.runtime_dir)
        for place in places:
            leftovers = remove_leftovers(place)
            if leftovers:
                log.info(
                    "removed %d temporary file(s) of writes cut short in %s: %s",
                    len(leftovers),
                    place,
                    ", ".join(sorted(leftovers)),
                )
        # Before the first `seq` mark: the watchers' files and the mark need the reserve on a
        # full disk as the state does.
        hold_room(self.state_dir, self.state_writer.make_room)
        unreserved = self.reserve.take()
        kept = self.reserve.allocated()
        if unreserved is not None and kept > 0:
            # Less than the whole (a block given to the state lock's pid on a full disk): what
            # is held is given up all the same, and the rest taken once the disk has room.
            log.warning(
                "cannot reserve %d bytes for the state in %s (%s): %d held",
                MIN_RESERVE_BYTES,
                self.reserve.path,
                unreserved.strerror or unreserved,
                kept,
            )
        elif unreserved is not None:
            log.warning(
                "cannot reserve %d bytes for the state in %s (%s): on a full disk there, the "
                "state is not saved",
                MIN_RESERVE_BYTES,
                self.reserve.path,
                unreserved.strerror or unreserved,
            )
        state = load_state(self.state_path)
        last_seq = max(
            state.seq,
            load_seq_mark(self.seq_path),
            load_seq_mark(self.seq_copy_path) if self.seq_copy_path is not None else 0,
        )
        self.sequencer = Sequencer(last_seq, reserve=self._reserve_seq)
        self.board = NoticeBoard(
            self.sequencer,
            self.settings.exit_margin,
            grace=self.settings.notice_grace,
            manual_lifetime=self.settings.manual_lifetime,
            clock_vouched=self._clock_vouched,
            clock_skews=self._clock_skews,
        )
        self.board.flushes.extend(state.flushes)
        provider = state.provider
        if provider and another_boot(state, self.boot_id, self.booted):
            # The machine restarted (a stopped and started VM keeps its disk): its provider
            # notices ended with that boot, and a terminate among them would stop the job
            # resumed here before the watcher could say so. What still stands is reported anew.
            log.info(
                "%d provider notice(s) in %s are from before a reboot; not restored",
                len(provider),
                self.state_path,
            )
            provider = []
        elif provider and state.boot_id is None and state.booted is None:
            # Saved by an agent that kept no boot id (upgraded, then the VM stopped and
            # started): restored, the spot terminate of the boot before stopped the job resumed
            # here. When the machine started tells instead, as for GCP's saved notices: a clock
            # stepped forward since drops one of this boot, which its watcher reports anew.
            # Not for a file whose boot time says this boot (`another_boot`): its notices are
            # this boot's, and one noticed before NTP's first sync stepped the clock forward
            # read as older than the machine and was dropped.
            booted = self.booted
            earlier = {n.id for n in provider if booted is not None and n.noticed_at < booted}
            if earlier:
                log.info(
                    "%d provider notice(s) in %s were noticed before this machine started; "
                    "not restored",
                    len(earlier),
                    self.state_path,
                )
                provider = [n for n in provider if n.id not in earlier]
        self.board.restore(
            state.manual,
            state.acked,
            provider,
            state.escalated,
            state.windows,
            state.acked_by,
            state.expected_by,
            state.raised,
            held_by=state.held_by,
            # The boot clock's readings hold in the boot they were taken in only: told by the
            # boot time where no boot id can be read (a container), whose clock steps are
            # what the readings are for.
            raised_clock=state.raised_clock
            if saved_this_boot(state, self.boot_id, self.booted)
            else None,
            deadline_clock=state.deadline_clock
            if saved_this_boot(state, self.boot_id, self.booted)
            else None,
            reported_clock=state.reported_clock
            if saved_this_boot(state, self.boot_id, self.booted)
            else None,
            deadline_kind=state.deadline_kind,
            received_by=state.received_by,
            overdue=state.overdue,
            gone=state.gone,
            acked_for=state.acked_for,
            save_failed=state.save_failed,
            # A manual notice of the boot before whose deadline passed before this one began
            # is retired at once (a terminate kept the grace stopped the job started after).
            booted=self.booted if another_boot(state, self.boot_id, self.booted) else None,
        )
        if state.boot_id is not None and state.boot_id == self.boot_id:
            # Pids of the same boot only: after a reboot they name other processes, if any.
            held_now = self.board.held_by()
            for notice_id, holders in state.held_pids.items():
                for client, holder in holders.items():
                    if client in held_now.get(notice_id, ()) and holder.watchable(
                        self._pid_namespace
                    ):
                        self._holders[(notice_id, client)] = holder
        # Taken before the start-up retirement below: a notice past its end while the agent was
        # down leaves the board before any watcher is built, and a watcher without it took its
        # event, still listed, for a new one (an Azure Started event got a new deadline).
        self._restored_at_start = {
            name: self.board.restored_reports(name) for name in self.board.restored_from()
        }
        # Drains whose deadline came within the exit margin while the agent was down: they go
        # out as terminate now, an escalation to count, log and record like any other (as a
        # plain restore, `forewarn plan` and the metrics missed the interruption).
        self._escalated_at_restore = set(self.board.escalated_ids()) - set(state.escalated)

        # Anyone on this machine can reach a tcp:// or abstract control endpoint: there a
        # request must carry a token that only who can read the runtime directory can get.
        if needs_token(self.control):
            try:
                self.control_token = write_token(self.runtime_dir)
            except OSError as error:
                raise ConfigError(
                    f"cannot write the control token in {self.runtime_dir}: {error.strerror}"
                ) from None
        self.publisher = Publisher(
            self.events,
            self.control,
            self.control_token,
            self.runtime_dir / TOKEN_FILE,
            on_client_refused=self.observers.on_client_refused,
        )
        try:
            self.publisher.bind()
        except BindError as error:
            self.publisher.close()
            raise ConfigError(str(error)) from None
        if self.board.entries or last_seq > 0:
            # The clients of the agent before this one come back as their sockets reconnect
            # (ZeroMQ backs off: up to a second for Notices). Not only those of notices restored
            # here: a notice raised in the first seconds after a restart with none to restore was
            # flushed by the first client back, and its provider acted (an Azure approval, the
            # flag file removed) while clients still reconnecting had not received it.
            self.board.hold_flushes(CLIENTS_RECONNECT_SECONDS)

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        if self.stops_asked:
            log.info("a stop was asked for while starting")
            self._stop.set()

        self.providers = await self._choose_providers()
        parts: dict[str, Callable[[], Awaitable[None]]] = {
            "subscriptions": lambda: self.publisher.subscriptions(self._replay, self._client),
            "control": lambda: self.publisher.serve_control(self._handle),
            "heartbeats": self._heartbeats,
            "escalations": self._escalations,
        }
        if self.settings.control_probe_interval > 0:
            parts["control-probe"] = self._probe_control
        tasks = [
            asyncio.create_task(self._keep_running(name, part), name=name)
            for name, part in parts.items()
        ]
        self.parts = {task.get_name(): task for task in tasks}
        for name in self.providers:
            health = PollHealth(name)
            health.listeners.append(self.observers.on_poll)
            health.approval_listeners.append(self.observers.on_approval)
            self.health[name] = health
            task = asyncio.create_task(self._supervise(name, health), name=f"watcher/{name}")
            tasks.append(task)
            self.parts[task.get_name()] = task
        for task in tasks:
            task.add_done_callback(self._part_ended)
        self.observers.on_start(self.providers)
        log.info(
            "agent %s serving events on %s, control on %s; providers: %s; state in %s",
            self.agent_id,
            self.events,
            self.control,
            ", ".join(self.providers),
            self.state_dir,
        )
        # Notices restored from the state file go out again for anyone listening. Those
        # that ended while the agent was down are retired first (a clear, logged and counted):
        # neither this nor a replay to an early subscriber may send one as active again. The
        # clears and escalations go out after the others, which were numbered at restore:
        # sent first, they put a `seq` before smaller ones.
        escalated, expired = self.board.due()
        sent = {notice.id for notice in [*escalated, *expired]}
        for notice in self.board.active():
            if notice.id in sent:
                continue
            # First, so that the observers do not measure its lead time a second time.
            self.observers.on_restored(notice)
            if notice.id in self._escalated_at_restore:
                self._send(notice, escalated=True)
                continue
            self.publisher.publish(notice)
            log.info(
                "notice %s restored from %s",
                notice.id,
                self.state_path,
                extra=notice_fields(notice, "restored"),
            )
        self._send_due(escalated, expired)
        self.observers.on_restore_done(self.sequencer.next)
        if self._escalated_at_restore:
            self._save()  # the escalated ids, as after any escalation
        _sd_notify("READY=1")
        watchdog = asyncio.create_task(self._watchdog(), name="watchdog")
        watchdog.add_done_callback(self._part_ended)

        await self._stop.wait()
        await self._listen_before_stopping()
        log.info("stopping")
        _sd_notify("STOPPING=1")
        self.observers.on_stopping()
        # The parts as they are now: control may have been restarted since.
        running = [*self.parts.values(), watchdog]
        for task in running:
            task.cancel()
        await asyncio.wait(running, timeout=STOP_GRACE)
        # Side by side: each waits CLOSE_TIMEOUT at most, and the stop no more than that;
        # the notifiers meanwhile get NOTIFIER_GRACE to deliver what they hold.
        await asyncio.gather(
            self._settle_observers(),
            *(self._close(watcher) for watcher in self.watchers.values()),
        )
        await self.state_writer.settled()
        self._save_now()
        self._say_unsaved_at_stop()
        self.state_writer.close()
        self.observers.on_stop()
        self.publisher.close()
        if self.control_token is not None:
            remove_token(self.runtime_dir, self.control_token)
        self._release_lock()
        log.info("stopped")
        return self._exit_code

    async def _listen_before_stopping(self) -> None:
        """Keep watching and publishing for the largest `stop_listen` of the watchers before
        the stop: on a GCP preemption the shutdown's SIGTERM comes as `preempted` turns TRUE,
        and an agent that stopped at once never published a terminate seen within some 20 ms
        of its SIGTERM, nor one after it."""
        listen = max(
            (_stop_listen(watcher) for watcher in self.watchers.values()),
            default=0.0,
        )
        if listen <= 0:
            return
        log.info("stopping in %gs: watching for a notice that comes with the stop", listen)
        await asyncio.sleep(listen)

    async def _keep_running(self, name: str, part: Callable[[], Awaitable[None]]) -> None:
        """Run one of the agent's own loops forever: a crash is logged and the loop restarted
        at once; crashing again and again takes the process down (exit 1), so that systemd or
        Kubernetes restart a whole agent rather than keep one with a dead part."""
        crashes: list[float] = []
        loop = asyncio.get_running_loop()
        while True:
            try:
                await part()
                problem = "returned"
            except asyncio.CancelledError:
                raise
            except Exception as error:
                problem = f"{type(error).__name__}: {error}"
            now = loop.time()
            crashes = [moment for moment in crashes if now - moment < CRASH_WINDOW] + [now]
            if len(crashes) > CRASH_LIMIT:
                log.critical(
                    "%s failed %d times within %gs (%s); stopping the agent",
                    name,
                    len(crashes),
                    CRASH_WINDOW,
                    problem,
                )
                self._exit_code = 1
                self._stop.set()
                return
            log.error("%s failed (%s); restarting it", name, problem)
            self.observers.on_poll("agent", False, f"{name}-failed")
            await asyncio.sleep(min(1.0, 0.05 * 2 ** len(crashes)))

    def _part_ended(self, task: asyncio.Task[None]) -> None:
        """A part's task ends only when cancelled or when its supervisor stopped the agent.
        Any other end is a failure of the supervision itself (its restart logic raised): the
        task was kept in `parts`, so nothing ever logged it, and the agent ran on without the
        part. It is logged and takes the agent down (exit 1) for systemd or Kubernetes."""
        if task.cancelled() or self._stop.is_set():
            return
        error = task.exception()
        log.critical(
            "%s died outside its supervision (%s); stopping the agent",
            task.get_name(),
            f"{type(error).__name__}: {error}" if error is not None else "it returned",
            exc_info=error,
        )
        self._exit_code = 1
        self._stop.set()

    async def _settle_observers(self) -> None:
        with contextlib.suppress(asyncio.TimeoutError):  # on_stop names what is left
            await asyncio.wait_for(self.observers.settle(), NOTIFIER_GRACE)

    def liveness(self) -> dict[str, bool]:
        """Each long-running part, the observers' too: whether its task is running; control,
        also whether it answered the agent's own requests."""
        parts = {name: not task.done() for name, task in self.parts.items()}
        for provider, since in list(self._stalled.items()):
            health = self.health.get(provider)
            if health is not None and health.last_progress > since:
                del self._stalled[provider]  # its new watcher answered (or failed) since
            elif f"watcher/{provider}" in parts:
                parts[f"watcher/{provider}"] = False
        if "control" in parts:
            parts["control"] = parts["control"] and self.control_answers
        if parts:
            parts["events"] = self._events_file_ours()
        # The metrics server's thread, the webhook's and Kubernetes notifier's tasks: one that
        # died left the agent pinging the watchdog with /healthz, webhook or Events gone.
        return {**parts, **self.observers.parts()}

    def _events_file_ours(self) -> bool:
        """Whether new clients can still subscribe. With its socket file removed (a /tmp
        cleaner) every job started since saw no agent while /healthz said alive: now it is a
        dead part, so /healthz says 503 and the systemd watchdog restarts the agent."""
        ours = self.publisher.events_file_ours()
        if not ours and self._events_ours:
            log.error(
                "the events socket file of %s is gone or replaced: no new client can subscribe; "
                "restart the agent",
                self.events,
            )
        self._events_ours = ours
        return ours

    async def _probe_control(self) -> None:
        """Ask control for a status as a client would, every `control_probe_interval`: a
        live task that answers nobody is a dead part. After PROBE_FAILURES misses in a row it
        is reported dead (`/healthz`, no watchdog pings) and rebound; when PROBE_REBINDS
        rebinds do not bring it back, the agent exits 1 for systemd or Kubernetes to restart."""
        interval = self.settings.control_probe_interval
        probe = ControlProbe(self.publisher.context, self.control)
        try:
            await self._probe_control_with(probe, interval)
        finally:
            probe.close()

    async def _probe_control_with(self, probe: ControlProbe, interval: float) -> None:
        misses = 0
        while True:
            # One probe at each multiple of the interval (providers.ticks), as the setting says:
            # three misses in a row are noticed in 6 s at the default (9 s when each probe slept
            # the whole interval after its own 1 s timeout).
            await sleep_to_tick(interval)
            timeout = min(PROBE_TIMEOUT, max(interval, 0.2))
            # The file first: another process that unlinked it and bound its own there got
            # the probe's requests, and one answering `ok` kept control "healthy" for as long
            # as it ran, every notify and ack going to it; a file merely removed took three
            # unanswered probes to notice (9 s at the default interval).
            ours = self.publisher.control_file_ours()
            if ours and await probe.answers(timeout, self.control_token):
                if not self.control_answers:
                    log.warning("control on %s answers again", self.control)
                    self.control_answers = True
                    self.observers.on_liveness(self.liveness())
                misses, self.control_rebinds = 0, 0
                continue
            if ours:
                since = self.publisher.handling_since
                if since is not None and time.monotonic() - since < PROBE_BUSY_LIMIT:
                    continue
                misses += 1
                if misses < PROBE_FAILURES:
                    continue
                why = f"did not answer {PROBE_FAILURES} requests in a row"
            else:
                why = (
                    "has its socket file gone or replaced by another process's (no client "
                    "arriving now reaches this agent)"
                )
            misses = 0
            self.control_answers = False
            # At once, not at the next watchdog tick: a rebind can cure control within that
            # second, and /healthz would never have shown it dead.
            self.observers.on_liveness(self.liveness())
            self.observers.on_poll("agent", False, "control-unanswered")
            if self.control_rebinds >= PROBE_REBINDS:
                log.critical(
                    "control on %s still does not answer after %d rebinds; stopping the agent",
                    self.control,
                    self.control_rebinds,
                )
                self._exit_code = 1
                self._stop.set()
                await asyncio.Event().wait()  # until the stop cancels it
            self.control_rebinds += 1
            log.error("control on %s %s; rebinding it", self.control, why)
            await self._restart_control()

    async def _restart_control(self) -> None:
        task = self.parts.get("control")
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_GRACE)
        try:
            await self.publisher.rebind_control()
        except (BindError, OSError) as error:
            log.critical("cannot rebind control: %s; stopping the agent", error)
            self._exit_code = 1
            self._stop.set()
            return
        self.parts["control"] = asyncio.create_task(
            self._keep_running("control", lambda: self.publisher.serve_control(self._handle)),
            name="control",
        )
        self.parts["control"].add_done_callback(self._part_ended)

    async def _supervise(self, name: str, health: PollHealth) -> None:
        """Run one watcher forever: a crash or a bad configuration is counted, logged and
        retried with backoff and jitter, and never touches the other watchers."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(BACKOFF_BASE, BACKOFF_CAP, jitter=0.5)
        while True:
            started = loop.time()
            crash: BaseException | None = None
            try:
                watcher = self.watchers.get(name)
                if watcher is None:
                    self._successes_at_build[name] = health.successes
                    watcher = self._restore(self._build(name, health))
                self.watchers[name] = watcher
                await self._watch_with_progress(watcher, health)
                problem, kind = "watch() returned", WATCHER_FAILED
            except asyncio.CancelledError:
                raise
            except Exception as error:
                problem, kind = f"{type(error).__name__}: {error}", WATCHER_FAILED
                crash = error  # its traceback goes on the line: a crash is a bug to locate
                if isinstance(error, WatcherStalled):
                    crash = None  # no bug: logged above as what it is
                    kind = WATCHER_STALLED
                    self._stalled[name] = time.monotonic()
                    log.error("%s; restarting it", error)
                    # At once, not at the next watchdog tick, as for control.
                    self.observers.on_liveness(self.liveness())
                # A watcher that crashed still holds its HTTP client or IMAP session: a
                # watcher that fails for weeks would otherwise leak one per restart.
                if self._answered(name):
                    # What it answered superseded them: the restored notices it did not
                    # report again are withdrawn, the retired ones are events no longer seen.
                    self._restored_at_start.pop(name, None)
                # What its provider withdraws until the next watcher answers, that one never
                # sees leave: held as after a restart, and withdrawn unless reported again.
                self.board.await_reports(name, "its watcher crashed")
                crashed = self.watchers.pop(name, None)
                if crashed is not None:
                    await self._close(crashed)
            if loop.time() - started > 60:
                backoff.reset()
            delay = backoff.next()
            health.error(kind, f"{problem}; restarting in {delay:.1f}s", exc_info=crash)
            await asyncio.sleep(delay)

    async def _watch_with_progress(self, watcher: Watcher, health: PollHealth) -> None:
        """Run `watcher.watch` until it ends; WatcherStalled when it goes past its progress
        bound without an answer or an error: hung without crashing (a request whose answer
        never completes, a stream gone silent), it showed healthy with an old last poll while
        no notice could be heard."""
        task = asyncio.ensure_future(watcher.watch(self._emit))
        started = time.monotonic()
        try:
            if not isinstance(watcher, ProgressBounded):
                # No bound to check (the local flag file's watcher): no wake-up four times a
                # second for nothing (the idle agent's CPU went from 0.20 % to 0.25 %).
                await task
                return
            wait = PROGRESS_CHECK
            while not task.done():
                await asyncio.wait([task], timeout=wait)
                bound = watcher.progress_bound() if isinstance(watcher, ProgressBounded) else None
                silent = time.monotonic() - max(started, health.last_progress)
                if not task.done() and bound is not None and silent > bound:
                    raise WatcherStalled(
                        f"{watcher.name}: no progress (no answer and no error) for {silent:.1f}s, "
                        f"past its bound of {bound:g}s"
                    )
                left = PROGRESS_RECHECK if bound is None else bound - silent
                wait = min(max(left, PROGRESS_CHECK), PROGRESS_RECHECK)
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=STOP_GRACE)

    def _restore(self, watcher: Watcher) -> Watcher:
        """Hand a new watcher that remembers what it reported (`RestoreAware`) the notices
        of its provider restored after a restart: it must not take them for new ones. Until a
        watcher of the provider has answered, each one built gets them all, those retired at
        start-up too (a first watcher that crashed before its first poll took the retired ones
        with it); after that, one built again after a crash gets every active notice of its
        provider (its predecessor's reports: without them an Azure Started event got a new
        deadline and went out again as changed). Those the board holds since the crash
        (`await_reports`) are withdrawn, as restored ones are, unless it reports them again."""
        at_start = self._restored_at_start.get(watcher.name)
        if isinstance(watcher, RestoreAware):
            reports = self.board.provider_reports(watcher.name) if at_start is None else at_start
            try:
                if reports:
                    watcher.restored(reports)
            except Exception:  # its memory only: the board still dedups what it reports
                log.exception("%s: restored() failed", watcher.name)
            # Those retired while no watcher of the provider ran (at start-up, or since a
            # crash): told as a running watcher is (`_forget`), or an Azure event retired
            # while Started came back, raised again at every grace while listed.
            for report in reports:
                if report.id in self.board.retired and report.id not in self.board.entries:
                    self._forget_id(watcher, report.id)
        if isinstance(watcher, FlushAware):
            # The flushes it would have been told of had it run then: before a restart (a
            # flushed notice is not flushed again) or while a crashed watcher was rebuilt.
            # Without them an Azure approval that had not gone out was never sent.
            for notice_id in self.board.flushed_ids(watcher.name):
                try:
                    watcher.flushed(notice_id)
                except Exception:
                    log.exception("%s: flushed(%s) failed", watcher.name, notice_id)
        return watcher

    def _emit(self, report: Report) -> None:
        problem = id_problem(report.id, report.provider)
        if problem is not None:
            log.error("%s reported a notice with a bad id: %s; dropped", report.provider, problem)
            return
        before = self.board.get(report.id)
        was_escalated = self.board.escalated(report.id)
        notice = self.board.report(report)
        for overdue in self.board.take_overdue():
            self._say_still_shown(overdue)
        if notice is None:
            return
        if notice.action == "clear":
            # Saved before it goes out: after a crash between the two, the restarted agent must
            # not list as active a notice clients were told is gone (they would act on it anew).
            self._save_now()
            self._send(notice, escalated=False)
            return
        if _asks_less(before, notice):
            # As a clear: a terminate back to a drain, or a deadline moved later, restored as
            # it was went out again before the watcher's first answer (a job told to go on
            # exited for it). Nothing waits on it as on a new notice or an escalation.
            self._save_now()
        escalated = self.board.escalated(notice.id)
        self._send(
            notice,
            escalated=escalated,
            fresh=before is None,
            back=self._back_words(before, was_escalated, notice),
            # A terminate out already as an escalation, changed (its deadline moved earlier):
            # the same escalation, sent again.
            resent=escalated and was_escalated and _was_terminate(before),
        )
        # Raised again after its expiry, with every client's ack in (the last one came in
        # between): its provider is told now, as at the ack that completes a notice.
        for notice_id in self.board.take_flushed():
            self._flushed(notice_id)
        # After the publish (clients wait on the clock): a restarted agent lists it from its
        # first heartbeat on, however long its watcher then takes to answer.
        self._save()

    def _say_still_shown(self, notice: Notice) -> None:
        """`notice` is past its deadline plus the grace and its provider still shows it: the
        machine was not taken yet (AWS can be late; a failed termination leaves the notice
        there). It stays the one active notice, nothing sent; said once, as the operator's
        cue to look at the machine."""
        deadline = format_time(notice.deadline) if notice.deadline else "none"
        log.warning(
            "notice %s is overdue: its deadline %s plus the grace of %gs passed and %s still "
            "shows it; kept active, not sent again (the machine was not taken yet)",
            notice.id,
            deadline,
            self.settings.notice_grace,
            notice.provider,
            extra=notice_fields(notice, "overdue"),
        )
        self.observers.on_overdue(notice)

    def _back_words(self, before: Notice | None, escalated: bool, notice: Notice) -> str | None:
        """Why `notice` goes out as a drain where `before` (the same id, `escalated` then)
        went out as terminate, for its text-log line; None when it is no such change."""
        if before is None or before.action != "terminate" or notice.action != "drain":
            return None
        if escalated:
            return f"its deadline is outside the exit margin, {self.board.exit_margin:g}s"
        return f"{notice.provider} reports a drain now"

    def _send(
        self,
        notice: Notice,
        *,
        escalated: bool,
        fresh: bool = False,
        back: str | None = None,
        resent: bool = False,
    ) -> None:
        """Publish `notice`, log it and tell the observers. `escalated`: a drain sent as
        terminate (its log line says so); `resent`: one out as that terminate already, sent
        again (its deadline moved), which the observers count as a publication, not as
        another escalation (`forewarn_escalations_total` counted each re-send: one drain sent
        as terminate once, then moved by two steps of the clock, counted 3)."""
        if fresh and notice.action != "clear":
            # Its own step: when the watcher (or `notify`) noticed it, before it was published.
            log.info(
                "notice %s seen at %s",
                notice.id,
                format_time(notice.noticed_at),
                extra={
                    **notice_fields(notice, "seen"),
                    "noticed_at": format_time(notice.noticed_at),
                },
            )
        self.publisher.publish(notice)
        self._ended.pop(notice.id, None)
        if notice.action == "clear":
            self._ended[notice.id] = None
            while len(self._ended) > ENDED_REMEMBERED:
                del self._ended[next(iter(self._ended))]
        step = "escalated" if escalated else "cleared" if notice.action == "clear" else "published"
        # An escalation read as any terminate in the text log: the drain it was, and why, said.
        why = (
            f" (escalated from drain: its deadline is within the exit margin, "
            f"{self.board.exit_margin:g}s)"
            if escalated
            else ""
        )
        if back is not None:
            # A terminate withdrawn read as any drain: clients told to exit now go on.
            why = f" (back to drain from terminate: {back})"
        log.info(
            "notice %s %s %s (%s) deadline=%s seq=%d%s",
            notice.action,
            notice.id,
            notice.reason,
            notice.provider,
            format_time(notice.deadline) if notice.deadline else "none",
            notice.seq,
            why,
            extra=notice_fields(notice, step),
        )
        self.observers.on_notice(notice, escalated=escalated and not resent)
        self._wake.set()

    def _replay(self, tokens: list[str]) -> None:
        # A heartbeat first, so a new client knows at once that the agent is alive, and (by
        # its token) that what this heartbeat lists is what follows, each the next `seq`.
        self._beat(replay_for=tokens)
        now = utcnow()
        for notice in self.board.active():
            self.publisher.publish(
                notice.model_copy(update={"seq": self.sequencer.next(), "sent_at": now})
            )

    def _client(self, client: str, joined: bool) -> None:
        if joined:
            if self.board.client_joined(client):
                self._save()  # a restart names it if it never acks (`received_by`)
        else:
            done = self.board.client_left(client)
            for notice_id in done:
                self._flushed(notice_id, left=client)
            if done or self.board.received_by() or self.board.gone_to_save():
                # Flushed by the clients left: a restart must not undo it; or one fewer
                # client that received a notice to name at its deadline, or one more that
                # left before its ack.
                self._save()
        self.observers.on_subscribers(len(self.board.clients))

    def _flushed(self, notice_id: str, left: str | None = None) -> None:
        """`notice_id` is flushed by every client; `left` is the client whose leaving made it
        so (its last unacked one, killed or ended), named: "every client (1)" alone read as if
        every job had saved."""
        notice = self.board.get(notice_id)
        if notice is None:
            return
        # The clients that acked it, not those subscribed: a shell job's hold is no
        # subscriber, and a client that left unacked is no flush.
        acked_by = self.board.acked_by(notice_id).get(notice_id, ())
        acked = len(acked_by)
        fields = {**notice_fields(notice, "acked"), "clients": acked}
        failed = self.board.save_failed(notice_id, left) if left is not None else None
        if left is not None and left not in acked_by and failed is not None:
            # It tried: "left without its ack" read as if it never had, and hid the cause.
            log.info(
                "notice %s flushed by every client left (%d acked; %s left after its save "
                "failed%s)",
                notice_id,
                acked,
                left,
                f" ({failed})" if failed else "",
                extra={**fields, "left_unacked": left, "save_failed": failed},
            )
        elif left is not None and left not in acked_by:
            log.info(
                "notice %s flushed by every client left (%d acked; %s left without its ack)",
                notice_id,
                acked,
                left,
                extra={**fields, "left_unacked": left},
            )
        else:
            log.info("notice %s flushed by every client (%d)", notice_id, acked, extra=fields)
        watcher = self.watchers.get(notice.provider)
        if isinstance(watcher, FlushAware):
            try:
                watcher.flushed(notice_id)
            except Exception:
                log.exception("%s: flushed(%s) failed", notice.provider, notice_id)

    def _forget(self, notice: Notice) -> None:
        """Tell the watcher an expired notice was retired: one that keeps its own memory of
        what it reported (`forget`) reports it again if the provider still does."""
        self._forget_id(self.watchers.get(notice.provider), notice.id)

    @staticmethod
    def _forget_id(watcher: Watcher | None, notice_id: str) -> None:
        hook = getattr(watcher, "forget", None)
        if watcher is not None and hook is not None:
            try:
                hook(notice_id)
            except Exception:
                log.exception("%s: forget(%s) failed", watcher.name, notice_id)

    def _beat(self, replay_for: list[str] | None = None) -> None:
        self.publisher.heartbeat(
            Heartbeat(
                seq=self.sequencer.next(),
                agent=self.agent_id,
                version=VERSION,
                providers=self.providers,
                active=[notice.id for notice in self.board.active()],
                sent_at=utcnow(),
                acked=self.board.saved(),
                exit_margin=self.board.exit_margin,
                acked_by=self._acked_by(),
                replay_for=replay_for or [],
                takes=list(TAKES),
            )
        )

    def _acked_by(self) -> dict[str, list[str]]:
        """The named clients that acked each active notice, for heartbeats and `status`."""
        active = {notice.id for notice in self.board.active()}
        # Kept sorted as acks come (`listed`): not every kept id copied and sorted each time.
        return {
            notice_id: clients
            for notice_id, clients in self.board.listed().items()
            if notice_id in active
        }

    def _settle_restored(self) -> None:
        """Withdraw the provider notices restored after a restart (or held while a crashed
        watcher was built again) that their watcher, now that it has answered, did not report
        again. Until then they stay active: a first answer can
        take long (an IMAP login and search, a Kubernetes list, a slow IMDS), and clients that
        took the agent's silence meanwhile for a withdrawal flushed again for every drain."""
        cleared = []
        for provider in sorted(self.board.restored_from()):
            if provider in self.providers and not self._answered(provider):
                continue
            why = (
                None
                if provider in self.providers
                else f"{provider} is no longer watched by this agent"
            )
            cleared += self.board.withdraw_restored(provider, why)
        if cleared:
            self._save_now()
        for notice in cleared:
            self._send(notice, escalated=False)

    def _release_flushes(self) -> None:
        """The notices flushed by every client while the restart's hold lasted."""
        done = self.board.release_flushes()
        for notice_id in done:
            self._flushed(notice_id)
        if done:
            self._save()

    def _answered(self, provider: str) -> bool:
        watcher = self.watchers.get(provider)
        answered = getattr(watcher, "answered", None)
        if isinstance(answered, bool):
            return answered
        # Not `health.ready`: the provider's health outlives a crash, and the predecessor's
        # answer made a watcher just built answered before it looked, so the notices held at
        # the crash were withdrawn at the next beat though nothing had withdrawn them.
        health = self.health.get(provider)
        return (
            watcher is not None
            and health is not None
            and health.successes > self._successes_at_build.get(provider, 0)
        )

    async def _heartbeats(self) -> None:
        while True:
            self._settle_restored()
            self._release_flushes()
            self._let_go_of_gone_holders()
            self._say_overdue()
            self._say_acks_not_logged()
            self._beat()
            self._retry_unsaved()
            self.state_writer.take_back_reserve()
            self._save_after_a_clock_step()
            await sleep_to_tick(self.settings.heartbeat_interval)  # see providers.ticks

    def _say_overdue(self) -> None:
        """Log (and count) each terminate whose deadline has just passed without the ack of
        every client that received it: which job never answered is an operator's first
        question after a lost step. At each heartbeat, so within one of the deadline. Saved
        when said: a restarted agent does not say (nor count) it again."""
        said = self.board.overdue()
        if said:
            self._save()
        for overdue in said:
            listed = overdue.clients[:ACKED_BY_LISTED]
            more = len(overdue.clients) - len(listed)
            named = ", ".join(_unacked_named(c, overdue.gone, overdue.failed) for c in listed)
            named += f" and {more} more" if more else ""
            if overdue.receivers_unknown:
                # Restored from an older agent's state file, which kept no receivers: said,
                # not passed in silence as when no client received it.
                named = f"{named} and perhaps others" if named else "any client it can name"
                named += (
                    " (those that received it before the agent restarted are not known: "
                    "its state file is an older agent's)"
                )
            log.warning(
                "notice %s: its deadline %s passed without an ack from %s",
                overdue.notice.id,
                format_time(overdue.deadline),
                named,
                extra={
                    **notice_fields(overdue.notice, "unacked"),
                    "unacked": overdue.clients,
                    "gone": overdue.gone,
                    "save_failed": overdue.failed,
                },
            )
            self.observers.on_unacked(overdue.notice, overdue.clients)

    def _send_due(
        self, escalated: list[Notice] | None = None, expired: list[Notice] | None = None
    ) -> None:
        """Retire the notices past their end and escalate the drains now inside the margin
        (`board.due()`, unless given)."""
        if escalated is None or expired is None:
            escalated, expired = self.board.due()
        for notice in self.board.take_confirming():
            # Past its end: a watcher that keeps what it reported reports it again at its next
            # poll if the provider still shows it, which keeps it active, overdue (`_emit`).
            # One that reports every poll anyway needs no asking.
            self._forget(notice)
        for notice in expired:
            # Before the clear is saved or sent: a watcher that keeps what was retired (Azure's
            # boot record) has it on disk before a client can see the clear. Told after it, an
            # agent SIGKILLed between the two raised the event anew at its restart.
            self._forget(notice)
        if expired:
            self._save_now()  # before the clears go out, as for any clear
        for notice in expired:
            log.warning(
                "notice %s expired: %s",
                notice.id,
                notice.detail.get(EXPIRED_KEY),
                extra=notice_fields(notice, "expired"),
            )
            self.observers.on_expired(notice)
            self._send(notice, escalated=False)
        moved = self.board.take_moved()
        for notice in moved:
            # A deadline given as a duration, moved by a step of the wall clock: the same
            # notice (a drain or a terminate), its deadline where the boot clock puts it. An
            # escalated drain's is still one (before, sent with `escalated=False`, its text-log
            # line read as a plain terminate), sent again: not a second escalation to count.
            was = self.board.escalated(notice.id)
            self._send(notice, escalated=was, resent=was)
        for notice in escalated:
            self._send(notice, escalated=True)
        if escalated or moved:
            self._save()  # after: a terminate waits for no disk

    async def _escalations(self) -> None:
        while True:
            self._send_due()
            upcoming = self.board.next_due()
            timeout = None
            if upcoming is not None:
                timeout = max(0.0, (upcoming - utcnow()).total_seconds()) + 0.001
                timeout = min(timeout, CLOCK_RECHECK)  # a wall-clock step is seen in time
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()

    async def _watchdog(self) -> None:
        """Report liveness each second (metrics' /healthz) and, under systemd's watchdog, ping
        it only while every part runs: a dead part is a restart, not a silent agent."""
        interval = _sd_watchdog_interval()
        period = min(1.0, interval) if interval is not None else 1.0
        while True:
            parts = self.liveness()
            self.observers.on_liveness(parts)
            if interval is not None and all(parts.values()):
                _sd_notify("WATCHDOG=1")
            await sleep_to_tick(period)

    # Control.

    async def _handle(self, raw: dict[str, Any]) -> dict[str, Any]:
        try:
            req = CONTROL_REQUEST.validate_python(self._unknown_fields.strip(raw))
        except ValidationError as error:
            problems = request_problems(error, raw)
            return ErrorReply(error=f"bad request: {problems}").model_dump(mode="json")
        if isinstance(req, NotifyRequest):
            reply: Any = self._notify(req)
            await self.state_writer.settled()
            unsaved = self._unsaved.get("state")
            if isinstance(reply, NotifyReply) and unsaved is not None:
                # Its write failed (a full disk, a read-only mount): the requester must not take
                # the notice for one that outlives a restart of the agent.
                reply = reply.model_copy(update={"unsaved": unsaved})
        elif isinstance(req, ClearRequest):
            reply = self._clear(req)
            unsaved = self._unsaved.get("state")
            if isinstance(reply, ClearReply) and reply.cleared and unsaved is not None:
                # Said, as for a notify: a restart before the state can be written (a full
                # disk with the reserve spent) restored the cleared notice, and sent it again
                # (a terminate an operator withdrew stopped the jobs started since). Only
                # those the file on disk holds: one never saved either stays gone.
                on_disk = saved_manual_ids(self.state_path)
                saved_before = (
                    None if on_disk is None else [i for i in reply.cleared if i in on_disk]
                )
                reply = reply.model_copy(update={"unsaved": unsaved, "saved_before": saved_before})
        elif isinstance(req, AckRequest):
            reply = self._ack(req)
            await self.state_writer.settled()
        elif isinstance(req, HoldRequest):
            reply = self._hold(req)
            await self.state_writer.settled()
        else:
            reply = self._status()
        return json_ready(reply)

    def _standing_conditions(self) -> dict[str, dict[str, str]]:
        """Each part's standing problems, as `status` shows them (read by the metrics
        server's thread: copies only)."""
        found = {name: dict(health.conditions) for name, health in list(self.health.items())}
        found["agent"] = {**self.observers.conditions(), **self._unsaved}
        return found

    def _status(self) -> StatusReply:
        info = AgentInfo(
            agent=self.agent_id,
            version=VERSION,
            pid=os.getpid(),
            providers=self.providers,
            events=self.events,
            control=self.control,
            started_at=self.started_at,
            seq=self.sequencer.value,
            subscribers=len(self.board.clients),
            conditions={**self.observers.conditions(), **self._unsaved},
            takes=list(TAKES),
        )
        unacked = {
            notice_id: clients[:ACKED_BY_LISTED]
            for notice_id, clients in self.board.unacked_past_deadline().items()
        }
        return StatusReply(
            agent=info,
            active=self.board.active(),
            health=[provider_health(name, self.health[name]) for name in self.health],
            notifiers={
                name: NotifierStatus(**dataclasses.asdict(counts))
                for name, counts in self.observers.deliveries().items()
            },
            parts=self.liveness(),
            acked_by=self._acked_by(),
            held_for=self._held_for(),
            ended=list(self._ended),
            raised=self.board.raised(),
            ages=self.board.ages(),
            unacked_past_deadline=unacked,
            past_deadline_receivers_unknown=self.board.receivers_unknown_past_deadline(),
            gone_before_ack=self._gone_before_ack(unacked),
            save_failed=self._save_failed(unacked),
            overdue=self.board.overdue_since(),
        )

    def _save_failed(self, unacked: dict[str, list[str]]) -> dict[str, dict[str, str]]:
        """The clients of `unacked` (as listed) whose save failed, with their notes, and of
        each active notice not past its deadline (a drain, one without a deadline) those whose
        save failed (the first ACKED_BY_LISTED): a drain's failed save was only in the log,
        and `status` showed the drain as if the job had saved or was still saving."""
        found = {}
        for notice_id, failed in self.board.failed_to_save().items():
            listed = unacked.get(notice_id, sorted(failed)[:ACKED_BY_LISTED])
            named = {client: note for client, note in failed.items() if client in listed}
            if named:
                found[notice_id] = named
        return found

    def _gone_before_ack(self, unacked: dict[str, list[str]]) -> dict[str, list[str]]:
        """The clients of `unacked` (as listed) that left before their ack, and of each
        active notice not past its deadline (a drain, one without a deadline) those that left
        before their ack (the first ACKED_BY_LISTED): `status` said nothing of a job gone
        before its save for a drain, which only the log's "flushed by every client left"
        line named."""
        found = {}
        for notice_id, gone in self.board.gone_before_ack().items():
            if notice_id in unacked:
                listed = [client for client in gone if client in unacked[notice_id]]
            else:
                listed = gone[:ACKED_BY_LISTED]
            if listed:
                found[notice_id] = listed
        return found

    def _held_for(self) -> dict[str, dict[str, int | None]]:
        """The clients each active notice waits for by a hold, not acked yet, with the
        process watched for each (None: held until its ack or the notice's end)."""
        active = {notice.id for notice in self.board.active()}
        acked = self.board.acked_by()
        found: dict[str, dict[str, int | None]] = {}
        for notice_id, clients in self.board.held_by().items():
            waiting = [c for c in clients if c not in acked.get(notice_id, set())]
            if notice_id not in active or not waiting:
                continue
            found[notice_id] = {
                client: holder.pid if (holder := self._holders.get((notice_id, client))) else None
                for client in waiting[:ACKED_BY_LISTED]
            }
        return found

    def _notify(self, req: NotifyRequest) -> NotifyReply | ErrorReply:
        deadline, deadline_clock = req.deadline, None
        if req.deadline_in is not None:
            # A duration counts from now on the boot clock: a step of the wall clock after
            # it moved the terminate by the step (`NoticeBoard._follow_steps`).
            deadline = utcnow() + timedelta(seconds=req.deadline_in)
            deadline_clock = self.board.clock() + req.deadline_in
        elif deadline is not None:
            problem = deadline_problem(deadline, utcnow())
            if problem is not None:
                return ErrorReply(error=f"deadline: {problem}")
        notice_id = req.id or f"local/manual/{uuid.uuid4().hex[:8]}"
        problem = id_problem(notice_id, "local")
        if problem is not None:
            return ErrorReply(error=f"id: {problem}")
        existing = self.board.get(notice_id)
        was_escalated = self.board.escalated(notice_id)
        if existing is not None and existing.provider != "local":
            return ErrorReply(error=f"id {notice_id!r} belongs to a {existing.provider} notice")
        if existing is not None and notice_id not in {n.id for n in self.board.manual()}:
            # A flag file's drain: taken as manual, its terminate went back to a drain with
            # the notify's deadline, which `notify clear` then refused as not manual.
            return ErrorReply(
                error=f"id {notice_id!r} belongs to the flag file's notice, which the file "
                "raises and withdraws: write the file again (a deadline on its first line), "
                "or raise a notice of another id"
            )
        if existing is None and len(self.board.manual()) >= MAX_MANUAL:
            return ErrorReply(
                error=f"{MAX_MANUAL} manual notices are active already; clear some first "
                "(forewarn notify clear)"
            )
        detail = {"note": req.note} if req.note else {}
        report = Report(
            id=notice_id,
            action=req.action,
            reason=req.reason,
            provider="local",
            deadline=deadline,
            detail=detail,
        )
        notice = self.board.report(report, manual=True, deadline_clock=deadline_clock)
        if notice is not None:
            # Publish first: subscribers are waiting on the clock. The requester's reply comes
            # after the state is on disk (`_handle` waits for the writer), so an accepted notify
            # survives a crash (unless the write failed and its retry has not succeeded yet).
            escalated = self.board.escalated(notice_id)
            if _asks_less(existing, notice):
                # On disk first, as for a provider's notice (`_emit`): no watcher corrects a
                # manual one after a restart, and one restored as it was stayed until its end.
                self._save_now()
            self._send(
                notice,
                escalated=escalated,
                fresh=existing is None,
                back=self._back_words(existing, was_escalated, notice),
                resent=escalated and was_escalated and _was_terminate(existing),
            )
            self._save()
        current = self.board.get(notice_id)
        assert current is not None
        return NotifyReply(notice=current)

    def _clear(self, req: ClearRequest) -> ClearReply | ErrorReply:
        manual = [notice.id for notice in self.board.manual()]
        if req.id is not None and req.id not in manual:
            return ErrorReply(error=f"{NO_ACTIVE_MANUAL} {req.id!r}")
        ids = [req.id] if req.id is not None else manual
        cleared = [notice for notice in map(self.board.clear, ids) if notice is not None]
        if cleared:
            # Saved before the clears go out: after a crash between the two, the next start
            # must not send as active a notice clients were told is gone. A clear lost the
            # other way round still reaches clients: the new agent's heartbeat omits its id.
            self._save_now()
        for notice in cleared:
            self._send(notice, escalated=False)
        return ClearReply(cleared=[notice.id for notice in cleared])

    def _ack_line_due(self, req: AckRequest, notice: Notice | None, completed: bool) -> bool:
        """Whether an ack's line is logged: always the first ack of each action of an active
        notice and the one that completes a notice; the others within the budget."""
        if completed:
            return True
        if notice is not None:
            key = (notice.id, req.action or notice.action)
            if key not in self._first_acks_logged:
                self._first_acks_logged[key] = None
                while len(self._first_acks_logged) > FIRST_ACKS_REMEMBERED:
                    del self._first_acks_logged[next(iter(self._first_acks_logged))]
                return True
        return self._ack_lines.take()

    def _say_acks_not_logged(self) -> None:
        held, seconds = self._ack_lines.held()
        if held:
            log.info(
                "%d ack line(s) not logged in the last %.1fs: acks came faster than %g a "
                "second (each still counts, in the metrics and telemetry too)",
                held,
                seconds,
                ACK_LOG_RATE,
            )

    def _ack(self, req: AckRequest) -> AckReply:
        if req.client is not None:
            # The same client, notice, step and figures again is that ack sent again, not a
            # second flush: counted twice, it was two flushes in the metrics and telemetry,
            # and took two places of the exit margin's window. The same ack of a notice
            # sent since as another action (a drain escalated to terminate) is that action's:
            # a shell loop's `forewarn ack ID --client loop` for the terminate, word for word
            # its ack of the drain, was dropped, and the loop named past the deadline.
            sent = self.board.get(req.notice_id) if req.notice_id else None
            key = (sent.action if sent is not None else "") + req.model_dump_json()
            if key in self._recent_acks:
                log.debug("ack %s from %s again; counted once", req.notice_id, req.client)
                return AckReply()
            self._recent_acks[key] = None
            while len(self._recent_acks) > ACKS_REMEMBERED:
                del self._recent_acks[next(iter(self._recent_acks))]
        notice = self.board.get(req.notice_id) if req.notice_id else None
        completed = False  # this ack made its notice flushed by every client
        if _for_another_action(req, notice):
            # A save for the drain, acked after the agent sent the notice as terminate (the
            # shell loop's save ran across the escalation): no terminate's ack. Counted for
            # it, the notice was released (the flag file removed, Azure's early approval) and
            # listed acted on while the job went on to save again for the terminate.
            assert notice is not None and req.action is not None
            log.info(
                "ack %s from %s was for the %s; it is a %s now: not counted for it",
                req.notice_id,
                req.client or "?",
                req.action,
                notice.action,
            )
            if req.outcome == "saved":
                margin = self.board.exit_margin
                self.board.record_ack(None, req.client, req.flush_seconds)  # its flush counts
                if self.board.exit_margin != margin:
                    self._save()
                self._wake.set()
        elif req.outcome == "saved":
            first = req.notice_id is not None and req.notice_id not in self.board.saved()
            # Acks are only added (`record_ack`): a count tells a new one without copying them.
            before = self.board.acks_kept(req.notice_id) if req.notice_id else 0
            margin = self.board.exit_margin
            completed = self.board.record_ack(req.notice_id, req.client, req.flush_seconds)
            acked_anew = bool(req.notice_id) and self.board.acks_kept(req.notice_id or "") != before
            if (first and notice is not None) or acked_anew or self.board.exit_margin != margin:
                # A restarted agent still knows this notice was acted on, a provider's too
                # (a job started after the restart must not take it for one nobody acted on),
                # and by which clients (they need not ack it again), and escalates with the
                # margin its clients' flushes set.
                self._save()
            self._wake.set()  # a slower flush widens the exit margin
        elif req.outcome == "failed" and self.board.record_failure(
            req.notice_id, req.client, req.note
        ):
            self._save()  # a restarted agent names it as one whose save failed, and why
        background = ""
        if req.stall_seconds is not None or req.durable_seconds is not None:
            background = f" stall={_secs(req.stall_seconds)} durable={_secs(req.durable_seconds)}"
        if req.choice is not None:
            background += f" final save: {req.choice} ({req.note or ''})"
        elif req.outcome == "failed" and req.note:
            # Why the job left without its state (a client's exit save that raised).
            background += f" ({req.note})"
        text: str
        args: list[object]
        if req.outcome == "resumed" and (
            req.step == 0
            and req.notice_id is None
            and req.restore_seconds is None
            and req.steps_lost is None
        ):
            # `guard.resumed(0)`, the README's loop at a first start: it was logged `resume
            # after (no notice) ... steps_lost=unknown`, a job stopped unwarned that lost steps.
            text, args = (
                "start of %s at step 0: nothing to resume (a fresh run, or one that saved "
                "nothing before it stopped)",
                [req.client or "?"],
            )
        elif req.outcome == "resumed":
            # What an operator reads a resume for: it has no flush. The guard names no notice
            # (the job may have restarted on a new machine): "after (no notice)" read as a
            # job stopped without one.
            after = f" after {req.notice_id}" if req.notice_id else ""
            text, args = (
                "resume of %s at step %s%s: restore=%s steps_lost=%s",
                [
                    req.client or "?",
                    req.step,
                    after,
                    _secs(req.restore_seconds),
                    # Not reported: "none" would read as none lost.
                    "unknown" if req.steps_lost is None else req.steps_lost,
                ],
            )
        else:
            text, args = (
                "ack %s from %s: step=%s flush=%s outcome=%s%s",
                [
                    # Not "(periodic)": a SIGTERM's or a flag file's save acks no notice too.
                    req.notice_id or "(no notice)",
                    req.client or "?",
                    req.step,
                    _secs(req.flush_seconds),
                    req.outcome,
                    background,
                ],
            )
        # A save that raised left the job's state unsaved: a problem to see at WARNING, as an
        # unacked terminate is, not a step of the notice's life like a saved ack. A flood of
        # acks is logged within a budget (ACK_LOG_BURST, ACK_LOG_RATE), the others counted.
        if self._ack_line_due(req, notice, completed):
            log.log(
                logging.WARNING if req.outcome == "failed" else logging.INFO,
                text,
                *args,
                extra={
                    "lifecycle": "ack",
                    "notice_id": req.notice_id,
                    "client": req.client,
                    "step": req.step,
                    "flush_seconds": req.flush_seconds,
                    "outcome": req.outcome,
                    "stall_seconds": req.stall_seconds,
                    "durable_seconds": req.durable_seconds,
                    "choice": req.choice,
                    "restore_seconds": req.restore_seconds,
                    "steps_lost": req.steps_lost,
                },
            )
        if completed:
            # After the ack's own line: the log reads as it happened.
            assert req.notice_id is not None
            self._flushed(req.notice_id)
        self.observers.on_ack(req, notice)
        return AckReply()

    def _hold(self, req: HoldRequest) -> HoldReply:
        held = self.board.hold(req.notice_id, req.client)
        watched = False
        if held:
            log.info("notice %s held for client %s until it acks", req.notice_id, req.client)
            self.observers.on_hold(req.notice_id, req.client)
        # Held for that client already, not acked: a replacement loop's `wait` (the last one
        # killed while it saved, the agent not looking yet). Its process speaks for the
        # client from now on; the dead one's, let go a moment later, released the notice
        # while the new loop saved.
        again = not held and req.client in self.board.held_by().get(req.notice_id, ())
        if again and self.board.has_acked(req.notice_id, req.client):
            again = False
        if held or again:
            if req.pid is None:
                self._holders.pop((req.notice_id, req.client), None)
            else:
                holder = Holder(req.pid, req.pid_start, req.pid_namespace, req.pgid)
                watched = holder.watchable(self._pid_namespace)
                if watched:
                    self._holders[(req.notice_id, req.client)] = holder
                else:
                    self._holders.pop((req.notice_id, req.client), None)
                    log.info(
                        "hold of client %s on %s: process %d is in another pid namespace than "
                        "the agent's; held until its ack or the notice's end",
                        req.client,
                        req.notice_id,
                        req.pid,
                    )
        if held or again:
            self._save()  # a restarted agent still waits for that client's ack, and watches
        return HoldReply(held=held, watched=watched)

    def _let_go_of_gone_holders(self) -> None:
        """Each heartbeat: the holds whose process is gone before its ack count no more."""
        if not self._holders:
            return
        held = self.board.held_by()
        done = []
        went = False
        for key, holder in list(self._holders.items()):
            notice_id, client = key
            if client not in held.get(notice_id, ()) or self.board.has_acked(notice_id, client):
                del self._holders[key]  # acked, flushed or retired: nothing held any more
                continue
            if not holder.gone():
                continue
            del self._holders[key]
            failed = self.board.save_failed(notice_id, client)
            if failed is not None:
                log.warning(
                    "hold of client %s on %s let go: its process %d ended after its save failed%s",
                    client,
                    notice_id,
                    holder.pid,
                    f" ({failed})" if failed else "",
                )
            else:
                log.warning(
                    "hold of client %s on %s let go: its process %d is gone before its ack",
                    client,
                    notice_id,
                    holder.pid,
                )
            went = True
            if self.board.let_go(notice_id, client):
                done.append(notice_id)
        for notice_id in done:
            self._flushed(notice_id)
        if went:
            self._save()  # flushed now, or a client gone before its ack to name after a restart

    def _release_lock(self) -> None:
        drop_room(self.state_dir)
        self.dirs.release()

    def _reserve_seq(self, mark: int) -> None:
        """Persist a high-water mark of `seq` before any number up to it is used: a restart,
        even after SIGKILL, starts above it. The runtime directory's copy first: it holds
        while the state directory's disk is full."""
        copy = self.seq_copy_path
        if copy is not None:
            self._persist(SEQ_COPY_UNSAVED, copy, lambda: save_seq_mark(copy, mark))
        self._persist("seq", self.seq_path, lambda: save_seq_mark(self.seq_path, mark))

    def _save(self) -> None:
        """Have the state written by the writer thread: for saves after what they record went
        out, which nothing waits on (a control reply waits in `_handle`)."""
        self.state_writer.save(self._state_bytes())

    def _save_now(self) -> None:
        """Write the state before returning: for a clear, which must be on disk before it is
        published (after a crash between the two, the restarted agent would list as active a
        notice clients were told is gone)."""
        self.state_writer.write_now(self._state_bytes())

    def _state_bytes(self) -> bytes:
        return encode_state(
            AgentState(
                self.sequencer.value,
                self.board.manual(),
                self.board.saves_to_keep(),
                self.board.provider_notices(),
                list(self.board.flushes),
                self.board.escalated_ids(),
                self.boot_id,
                self.board.windows(),
                self.board.acked_to_save(),
                {
                    notice_id: sorted(clients)
                    for notice_id, clients in self.board.expected_by().items()
                },
                self.board.raised(),
                self.board.held_by(),
                self._held_pids(),
                self.board.raised_clocks(),
                # Read now, not the start's: a clock stepped since the start (NTP's first
                # sync) moved the boot time the next start reads, and that start took this
                # boot's file for another boot's, its provider notices not restored.
                self._booted_saved(),
                self.board.deadline_clocks(),
                self.board.reported_clocks(),
                self.board.deadline_kinds(),
                {
                    notice_id: sorted(clients)
                    for notice_id, clients in self.board.received_by().items()
                },
                self.board.overdue_told(),
                {
                    notice_id: sorted(clients)
                    for notice_id, clients in self.board.gone_to_save().items()
                },
                self.board.acked_for(),
                save_failed=self.board.failed_to_save(),
            )
        )

    def _booted_saved(self) -> datetime | None:
        self._saved_booted = machine_started()
        return self._saved_booted

    def _save_after_a_clock_step(self) -> None:
        """Where no boot id can be read, save again once the boot time moved by more than
        half the slack since the last save: the clock was stepped (NTP's first sync) while
        nothing changed, and a restart then took this boot's file for another boot's."""
        if self.boot_id is not None or self._saved_booted is None:
            return
        booted = machine_started()
        if booted is None:
            return
        if abs((booted - self._saved_booted).total_seconds()) > BOOT_TIME_SLACK / 2:
            self._save()

    def _held_pids(self) -> dict[str, dict[str, Holder]]:
        """The watched processes of the holds, by notice id and client, for the state file."""
        held: dict[str, dict[str, Holder]] = {}
        for (notice_id, client), holder in self._holders.items():
            held.setdefault(notice_id, {})[client] = holder
        return held

    def _persist(self, what: str, path: Path, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as error:
            self._written(what, path, error)
            return
        self._written(what, path, None)

    def _state_written(self, error: OSError | None) -> None:
        self._written("state", self.state_path, error)

    def _written(self, what: str, path: Path, error: OSError | None) -> None:
        """The outcome of writing one of the agent's own files. A failure (a full disk, a
        read-only state directory) never stops a notice: it is logged once, counted as a
        `state` error of `agent` in the metrics, and the write is tried again at every
        heartbeat until it succeeds, so what was accepted meanwhile still reaches the disk."""
        if error is not None:
            self.observers.on_poll("agent", False, "state")
            if what not in self._unsaved:
                log.error("cannot save %s to %s: %s; retrying", what, path, error)
            self._unsaved[what] = f"cannot write {path} ({type(error).__name__}: {error})"
            return
        if self._unsaved.pop(what, None) is not None:
            log.warning("saved %s to %s again", what, path)

    def _say_unsaved_at_stop(self) -> None:
        """After the stop's last save: when it failed too, say what the next start will lack.
        The failure was logged once when it began (a full disk, hours before), and a stop
        said only "stopped": the next start served none of the manual notices raised since,
        which nothing raises again, and nobody was told where they look."""
        unsaved = self._unsaved.get("state")
        if unsaved is None:
            return
        manual = sorted(notice.id for notice in self.board.manual())
        lacks = (
            f"may lack the manual notices active now ({', '.join(manual)}): raise them again "
            "with `forewarn notify` once it runs"
            if manual
            else "lacks what changed since (acks, escalations)"
        )
        log.error(
            "stopping with the state unsaved: %s; the next start restores only what was last "
            "saved there, which %s",
            unsaved,
            lacks,
        )

    def _retry_unsaved(self) -> None:
        if "seq" in self._unsaved or SEQ_COPY_UNSAVED in self._unsaved:
            self._reserve_seq(self.sequencer.reserved)
        if "state" in self._unsaved:
            self._save()


# What each action asks of a client: a clear nothing, a drain a save, a terminate a save and
# an exit.
_ASKS = {"clear": 0, "drain": 1, "terminate": 2}


def _was_terminate(before: Notice | None) -> bool:
    """Whether `before`, a notice as it was published last, went out as terminate."""
    return before is not None and before.action == "terminate"


def _asks_less(before: Notice | None, after: Notice) -> bool:
    """Whether `after`, sent in place of `before` (the same id), asks less of clients: a
    lesser action, or the same one with its deadline later (or gone). Such a notice is saved
    before it goes out, a clear's rule: a crash between its publish and a save after it left
    the state that asks more on disk, and the restarted agent sent that again (a terminate
    to jobs told to go on; a drain whose old deadline came within the exit margin meanwhile,
    as terminate). One that asks more goes out first: clients wait on the clock, and a crash
    before its save leaves less on disk, which its provider (or the clients that heard it)
    still has."""
    if before is None:
        return False
    if _ASKS[after.action] != _ASKS[before.action]:
        return _ASKS[after.action] < _ASKS[before.action]
    if before.deadline is None:
        return False
    return after.deadline is None or after.deadline > before.deadline


def _stop_listen(watcher: Watcher) -> float:
    """A watcher's `stop_listen` (see `Watcher`); 0 for one without a number there."""
    listen = getattr(watcher, "stop_listen", 0.0)
    if isinstance(listen, bool) or not isinstance(listen, (int, float)):
        return 0.0
    return float(listen)


class _UnwaitedExecutor(concurrent.futures.ThreadPoolExecutor):
    """The event loop's default executor, whose shutdown waits CLOSE_TIMEOUT at most for its
    threads: a thread blocked in a read or a close (`asyncio.to_thread`) held the end of
    `asyncio.run` after a stop for as long as it blocked. The command line ends the process
    with os._exit then, which does not wait for them either. Not waiting at all cut short
    the thread that stops what it started: a Kubernetes exec plugin's thread, cancelled
    between starting the plugin and handing it to the call's owner, never killed the
    plugin's process group, which outlived the agent."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=cancel_futures)
        if not wait:
            return
        deadline = time.monotonic() + CLOSE_TIMEOUT
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))


class WatcherStalled(ForewarnError, RuntimeError):
    """A watcher went past its progress bound: restarted as if it had crashed."""


def _for_another_action(req: AckRequest, notice: Notice | None) -> bool:
    """Whether `req` acks a save for a drain of `notice`, which the agent sends as terminate
    now: a drain's save (flush and go on) is no terminate's (the exit's). A terminate's save
    answers the drain it became again, as an ack without `action` counts for either."""
    return notice is not None and req.action == "drain" and notice.action == "terminate"


def _secs(value: float | None) -> str:
    """A figure of an ack for its log line, to the millisecond (a client times its flush with
    `perf_counter`: `flush=1.1420532060001278s`); a failed flush has none."""
    return "none" if value is None else f"{round(value, 3)}s"


def _load_http_backend() -> None:
    """Load what httpx would load at its first request, when a built watcher speaks HTTP."""
    if "httpx" not in sys.modules:
        return  # no watcher on httpx: nothing to load (a local agent never imports it)
    for name in HTTP_BACKEND_MODULES:
        # httpx's internals, named by its version: one another version lacks is loaded, if
        # at all, at the first request as before.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def provider_health(name: str, health: PollHealth) -> ProviderHealth:
    """A watcher's health for the status reply."""
    state: Literal["healthy", "degraded", "waiting"] = "waiting"
    if health.last_error is not None:
        state = "degraded"
    elif health.last_success is not None:
        state = "healthy"
    last = None
    if health.last_success is not None:
        last = datetime.fromtimestamp(health.last_success, timezone.utc)
    return ProviderHealth(
        name=name,
        state=state,
        last_success=last,
        last_error=health.last_error,
        last_error_message=health.last_message if health.last_error is not None else None,
        polls=health.polls,
        errors=health.errors,
        conditions=dict(health.conditions),
    )


def notice_fields(notice: Notice, lifecycle: str) -> dict[str, Any]:
    """A notice's fields for a structured log line (`--log-format json` writes them as
    JSON fields); `lifecycle` is the step: seen, published, restored,
    acked, escalated, expired, overdue, cleared."""
    return {
        "lifecycle": lifecycle,
        "notice_id": notice.id,
        "action": notice.action,
        "reason": notice.reason,
        "provider": notice.provider,
        # As the wire, `status --json` and `ts` give it: isoformat's `...55.699277+00:00`
        # matched no deadline an operator copied from `status`.
        "deadline": format_time(notice.deadline) if notice.deadline else None,
        "seq": notice.seq,
    }


def json_ready(reply: Any) -> dict[str, Any]:
    result: dict[str, Any] = reply.model_dump(mode="json")
    return result


def _sd_notify(state: str) -> None:
    try:
        sdnotify = importlib.import_module("forewarn.agent.sdnotify")
    except ImportError:
        return
    sdnotify.notify(state)


def _sd_watchdog_interval() -> float | None:
    try:
        sdnotify = importlib.import_module("forewarn.agent.sdnotify")
    except ImportError:
        return None
    interval: float | None = sdnotify.watchdog_interval()
    return interval


def run_agent(settings: Settings, *, exit_process: bool = False) -> int:
    """Run the agent until SIGTERM or SIGINT; its exit code.

    With `exit_process` (the command line), a clean stop ends the process at once once the
    state is saved and the sockets are closed: tearing down the interpreter's heap takes
    longer than the whole shutdown (up to a second on a busy machine), and a supervisor
    waiting for the stop should not wait for that.
    """
    # The metrics server answers /healthz from the agent's construction on, before `run`
    # puts the loop's signal handlers in: a supervisor's SIGTERM in between used to kill the
    # agent (exit -15). Until then a stop is noted, and `run` acts on it.
    asked: list[int] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for stop in (signal.SIGTERM, signal.SIGINT):
            previous[stop] = signal.signal(stop, lambda number, _frame: asked.append(number))
    try:
        # Held before the agent binds anything (the metrics server binds in `Agent`): a second
        # agent on the same directories and metrics_address said "cannot listen (Address
        # already in use)", not that another agent, with its pid, holds the directories.
        dirs = AgentDirs(settings.resolved_runtime_dir(), settings.resolved_state_dir()).hold()
        try:
            agent = Agent(settings, dirs)
        except BaseException:
            dirs.release()
            raise
        agent.stops_asked = asked
        code = asyncio.run(agent.run())
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
    if exit_process:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


__all__ = ["VERSION", "Agent", "run_agent"]


def _unacked_named(client: str, gone: list[str], failed: dict[str, str]) -> str:
    """`client` as a deadline's warning names it: one whose save failed says so, and why
    (it tried: "gone before its ack" hid the cause), one that left before its ack says so."""
    if client in failed:
        note = failed[client]
        return f"{client} (its save failed: {note})" if note else f"{client} (its save failed)"
    return f"{client} (gone before its ack)" if client in gone else client
