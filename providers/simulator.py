"""What every provider simulator shares: a threaded HTTP server on loopback, the `/_sim` control
API, scripted notices, and the command-line runner.

A provider simulator subclasses `Simulator` and implements `handle` (the real endpoint's
paths, headers, status codes and payloads) and the three notice hooks. The control API is
the same for all, under a prefix no real service uses:

- `POST /_sim/notices` with `{"kind": ..., <fields>}` raises a notice; answers `{"id": ...}`;
- `PATCH /_sim/notices/<id>` with fields changes one;
- `DELETE /_sim/notices/<id>` withdraws one, or calls off one given `after` not raised yet
  (by the id its 202 gave, `scheduled-N`; raised already, that id withdraws what it raised);
- `POST /_sim/faults` with `{"kind": ..., <fields>}` makes the endpoint misbehave (the shared
  vocabulary of `sim_faults`, plus the provider's named faults); answers `{"id": ...}`;
- `DELETE /_sim/faults/<id>` ends one, `DELETE /_sim/faults` all (held requests go at once,
  also those of a fault used up by its `count`), `GET /_sim/faults` lists those in force and
  those given `after` not started yet (`"pending": true`, with `starts_at` and `starts_in`);
- `GET /_sim/state` shows everything, plus request counts, faults (pending ones too) and the
  notices given `after` not raised yet (`pending_notices`, with `starts_at` and `starts_in`).

Any of the two POSTs takes `"after": S` to act S seconds later. A bad control request is a
400 with `{"error": ...}` naming what was wrong.

Standard library only: a user's test can start one without extra packages.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

from forewarn.protocol.errors import ForewarnError
from forewarn.protocol.timefmt import duration_or_as_is, format_time, utcnow
from forewarn.protocol.writtenfloat import written_float

from .httpframing import FramingError, chunk_size, content_length
from .sim_faults import FAULT_KINDS, Fault, FaultError, make_fault

log = logging.getLogger("forewarn.simulate")

CONTROL_PREFIX = "/_sim"
# Used-up faults kept so that ending them lets their held requests go (see `_spent`).
SPENT_KEPT = 64
# Notices given `after` and raised whose scheduled id still withdraws them.
RAISED_KEPT = 64


class SimError(ForewarnError):
    """A control request the simulator cannot honour; becomes a 4xx JSON answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class SimRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # keys lower-cased
    body: bytes
    client: str

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class SimResponse:
    status: int = 200
    body: bytes | str = b""
    content_type: str = "text/plain"
    headers: dict[str, str] = field(default_factory=dict)
    # A chunked body (Kubernetes watch streams); the connection ends when it is exhausted.
    stream: Iterator[bytes] | None = None
    # With `stream`: its total size, sent as Content-Length instead of chunked encoding.
    length: int | None = None
    # Set by a `slow` fault: the body goes out at this many bytes a second.
    pace: Fault | None = None

    @classmethod
    def json(cls, payload: Any, status: int = 200, **kwargs: Any) -> SimResponse:
        return cls(status, json.dumps(payload), "application/json", **kwargs)


class Simulator:
    """Base of every provider simulator. Thread-safe through `self.lock`; `self.changed` is
    notified on every state change so long-polls and watch streams can wake up.

    A provider declares `notice_kinds` (what `POST /_sim/notices` accepts), `fault_presets`
    (its named faults, each a preset of the shared fault kinds) and `throttle_rate` (the
    requests a second its `throttle` fault lets through by default), and overrides `handle`,
    `raise_notice`, `withdraw`, `state` and, where its error pages differ, `error_page`."""

    name = "simulator"
    server_header: ClassVar[str] = "forewarn-sim"
    notice_kinds: ClassVar[tuple[str, ...]] = ()
    fault_presets: ClassVar[dict[str, dict[str, Any]]] = {}
    throttle_rate: ClassVar[float] = 5.0

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.requests: Counter[str] = Counter()
        self._timers: list[threading.Timer] = []
        self._faults: dict[str, Fault] = {}
        # Faults given with `after`, not started yet: listed as pending (a `--fault` one's id
        # shows nowhere else), and ending one (or all) cancels its timer.
        self._pending: dict[str, _Pending] = {}
        # Notices given `after`, not raised yet, by the id their 202 gave: listed in the state,
        # and `DELETE /_sim/notices/<id>` calls one off (else it fired into the next test).
        self._scheduled: dict[str, _Scheduled] = {}
        self._scheduled_count = 0
        # Those raised since, by that id → the id raised under (the newest RAISED_KEPT): a
        # test's cleanup that DELETEs the id its 202 gave after the notice went up withdraws
        # it (else a 404, and the notice read by the next case).
        self._raised_from: dict[str, str] = {}
        # Faults used up or past their duration, dropped from the list but maybe still
        # holding requests (a `hang` or `slow` for `count` requests): ending them, by id or
        # all, must still let those go. The newest SPENT_KEPT are kept.
        self._spent: dict[str, Fault] = {}
        self.started_at = time.time()
        # Seconds the `Date` of every answer is ahead of this machine's clock (negative:
        # behind): a provider's clock against which this machine's is off, as on a node with
        # no NTP, without stepping the machine's clock (`forewarn simulate --date-ahead`).
        self.date_ahead = 0.0

    def now(self) -> datetime:
        """The provider's clock: this machine's moved by `date_ahead`. The times a notice
        carries (a spot interruption's `time`, Azure's `NotBefore`, a maintenance window) are
        written on it, as `Date` is: written on this machine's, they were `date_ahead` off
        the `Date` beside them, and an agent that read them through `Date` got a two-minute
        spot deadline two hours in the past under `--date-ahead 2h`."""
        return utcnow() + timedelta(seconds=self.date_ahead)

    # Provider hooks.

    def handle(self, request: SimRequest) -> SimResponse:
        raise SimError(f"{self.name}: no such path {request.path}", 404)

    def admit(self, request: SimRequest) -> SimResponse | None:
        """The endpoint's own refusal of `request` as it arrives, before any fault holds it
        (None: admitted). A rate limit counts requests here, as they come: counted when
        answered, the requests a `hang` held were counted all at once as it ended, and the
        client's next request got a 429 it had not earned."""
        return None

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        raise SimError(f"{self.name}: unknown notice kind {kind!r}")

    def check_notice(self, kind: str, fields: dict[str, Any]) -> None:
        """SimError for `fields` that `raise_notice(kind, fields)` would refuse, raising
        nothing: a notice for later is checked when it is asked for, not when it fires."""

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        raise SimError(f"{self.name}: notices cannot be changed", 405)

    def withdraw(self, notice_id: str) -> bool:
        return False

    def state(self) -> dict[str, Any]:
        return {}

    def resumed(self) -> None:
        """The server started (again, after a stop, which cancels every timer): arm again the
        timers of the simulated machine's own course, such as an event's end."""

    def error_page(self, status: int) -> SimResponse:
        """The real endpoint's answer for an error status (a `status` or `throttle` fault)."""
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        return SimResponse(status, f"{status} {phrase}\n".replace(" \n", "\n"), "text/plain")

    # Shared machinery.

    def notice_kind(self, kind: str) -> str:
        """`kind` as `notice_kinds` spells it, matched in any case: the kind was checked in
        any case and then passed on as given, which only Azure's simulator took (`SPOT` was
        'unknown' on AWS after passing the check). SimError for a kind not declared."""
        for known in self.notice_kinds:
            if known.lower() == kind.strip().lower():
                return known
        if not self.notice_kinds:
            return kind  # the provider's own refusal explains why there are none
        raise SimError(
            f"{self.name}: unknown notice kind {kind!r}; use "
            f"{', '.join(self.notice_kinds)} (faults: POST {CONTROL_PREFIX}/faults)"
        )

    def notify_change(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def later(self, after: float, action: Callable[[], None]) -> threading.Timer:
        """Run `action` `after` seconds from now on a timer the server cancels on stop."""
        timer = threading.Timer(max(0.0, after), action)
        timer.daemon = True
        with self.lock:
            self._timers.append(timer)
            timer.start()
        return timer

    def schedule(self, after: float, kind: str, fields: dict[str, Any]) -> str:
        """Raise a notice `after` seconds from now (scripted notices); SimError for an
        `after` out of range. The id it is listed by until raised (`scheduled-N`)."""
        after = check_after(after)
        self.check_notice(kind, dict(fields))
        with self.lock:
            self._scheduled_count += 1
            pending_id = f"scheduled-{self._scheduled_count}"

        def fire() -> None:
            # Off the pending list, raised and its raised id recorded in one hold of the lock:
            # a DELETE by the scheduled id between the first and the last (check 37a, load 12)
            # found it neither pending nor raised, a 404.
            with self.lock:
                if self._scheduled.pop(pending_id, None) is None:
                    return  # called off as its timer fired
                try:
                    notice_id = self.raise_notice(kind, dict(fields))
                except SimError as error:
                    log.error("%s: scripted %s failed: %s", self.name, kind, error)
                    return
                self._raised_from[pending_id] = notice_id
                while len(self._raised_from) > RAISED_KEPT:
                    del self._raised_from[next(iter(self._raised_from))]
            self.notify_change()
            log.info("%s: scripted %s raised as %s", self.name, kind, notice_id)

        with self.lock:
            starts_at = format_time(utcnow() + timedelta(seconds=after))
            timer = self.later(after, fire)
            self._scheduled[pending_id] = _Scheduled(
                kind, dict(fields), timer, time.monotonic() + after, starts_at
            )
        return pending_id

    def call_off(self, pending_id: str) -> bool:
        """Cancel the notice given `after` listed as `pending_id`; False if there is none."""
        with self.lock:
            scheduled = self._scheduled.pop(pending_id, None)
        if scheduled is None:
            return False
        scheduled.timer.cancel()
        return True

    def raised_from(self, pending_id: str) -> str | None:
        """The id the notice given `after` as `pending_id` was raised under, taken off the
        list (a DELETE withdraws it once); None if it was not raised, or is forgotten."""
        with self.lock:
            return self._raised_from.pop(pending_id, None)

    def pending_notices(self) -> list[dict[str, Any]]:
        """The notices given `after` not raised yet, soonest first."""
        now = time.monotonic()
        with self.lock:
            items = sorted(self._scheduled.items(), key=lambda item: item[1].starts)
            return [scheduled.describe(pending_id, now) for pending_id, scheduled in items]

    def cancel_scripts(self) -> None:
        with self.lock:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
            # Their timers are gone: listed as pending, they would never start.
            self._pending.clear()
            self._scheduled.clear()
            for fault in [*self._faults.values(), *self._spent.values()]:
                fault.released.set()
            self.notify_change()

    # Faults.

    def check_fault(self, fields: dict[str, Any]) -> Fault:
        """A fault from control-API fields, validated (SimError naming the field)."""
        try:
            return make_fault(fields, self.fault_presets, self.throttle_rate)
        except FaultError as error:
            raise SimError(f"{self.name}: fault: {error}") from None

    def add_fault(self, kind: str, *, after: float | None = None, **fields: Any) -> str:
        """Make the endpoint misbehave (see `sim_faults`), `after` seconds from now when
        given; returns the fault's id. SimError for a bad field, before anything starts."""
        fault = self.check_fault({"kind": kind, **fields})
        if after is not None:
            self._install_later(check_after(after), fault)
        else:
            self._install(fault)
        return fault.id

    def remove_fault(self, fault_id: str) -> bool:
        with self.changed:
            pending = self._pending.pop(fault_id, None)
            if pending is not None:
                pending.timer.cancel()
                return True
            fault = self._faults.pop(fault_id, None) or self._spent.pop(fault_id, None)
            if fault is None:
                return False
            fault.released.set()
            self.changed.notify_all()
            return True

    def clear_faults(self) -> int:
        """End every fault (the count of those in force or pending); requests still held
        by used-up ones go too."""
        with self.lock:
            ids = [*self._pending, *self._faults]
            spent = list(self._spent)
        for fault_id in spent:
            self.remove_fault(fault_id)
        return sum(self.remove_fault(fault_id) for fault_id in ids)

    def faults(self) -> list[dict[str, Any]]:
        """Those in force, then those given `after` that have not started (`pending`, with
        `starts_at` and `starts_in` seconds)."""
        now = time.monotonic()
        with self.lock:
            live = [f for f in self._faults.values() if f.live(now)]
            listed = [{**f.describe(), "pending": False} for f in live]
            pending = [p.describe(now) for p in self._pending.values()]
        return listed + pending

    def take_fault(self, request: SimRequest, kinds: tuple[str, ...] = FAULT_KINDS) -> Fault | None:
        """The fault this request meets, if any (counted against its `count`). Spent and
        expired faults are dropped here."""
        now = time.monotonic()
        with self.lock:
            for fault_id, fault in list(self._faults.items()):
                if not fault.live(now):
                    del self._faults[fault_id]
                    self._keep_spent(fault)
                    continue
                if (
                    fault.kind in kinds
                    and fault.matches(request.method, request.path)
                    and fault.take(now)
                ):
                    return fault
        return None

    def _keep_spent(self, fault: Fault) -> None:
        if fault.kind not in ("hang", "slow") or fault.released.is_set():
            return  # nothing it can still hold
        self._spent[fault.id] = fault
        while len(self._spent) > SPENT_KEPT:
            del self._spent[next(iter(self._spent))]

    def after_wait(self, request: SimRequest, answer: Callable[[], SimResponse]) -> SimResponse:
        """The answer of a long-poll that ends while a fault is in force, as the real server's
        would be: the fault met now (a reset is left to new requests), else `answer()`."""
        fault = self.take_fault(request, tuple(k for k in FAULT_KINDS if k != "reset"))
        return answer() if fault is None else self.shape(fault, answer)

    def shape(self, fault: Fault, answer: Callable[[], SimResponse]) -> SimResponse:
        """What a request meeting `fault` gets, `answer` giving the normal answer (not
        called for `status` and `throttle`; `reset` is the server's to do)."""
        if fault.kind in ("status", "throttle"):
            return self.faulted(fault)
        if fault.kind == "hang":
            fault.released.wait(fault.hold_seconds(time.monotonic()))
        response = answer()
        if fault.kind == "malformed":
            return _malformed(response)
        if fault.kind == "oversize":
            return _oversize(response, fault.size)
        if fault.kind == "slow":
            response.pace = fault
        return response

    def faulted(self, fault: Fault) -> SimResponse:
        """The answer of a `status` or `throttle` fault."""
        page = self.error_page(fault.status)
        if fault.body is not None:
            page = SimResponse(
                fault.status, fault.body, fault.content_type or page.content_type, page.headers
            )
        elif fault.content_type is not None:
            page.content_type = fault.content_type
        if fault.retry_after is not None:
            page.headers = {**page.headers, "Retry-After": str(fault.retry_after)}
        return page

    # The control API.

    def control(self, request: SimRequest) -> SimResponse:
        path = request.path[len(CONTROL_PREFIX) :]
        if path == "/state" and request.method == "GET":
            with self.lock:
                payload = {
                    "provider": self.name,
                    "requests": dict(self.requests),
                    **self.state(),
                    "faults": self.faults(),
                    "pending_notices": self.pending_notices(),
                }
            return SimResponse.json(payload)
        if path.rstrip("/") == "/notices" and request.method == "POST":
            fields = _json_object(request.body)
            kind = fields.pop("kind", None)
            if not isinstance(kind, str):
                raise SimError(
                    f'the body needs "kind", one of {", ".join(self.notice_kinds) or "(none)"}'
                )
            kind = self.notice_kind(kind)
            after = _after(fields)
            if after is not None:
                pending_id = self.schedule(after, kind, fields)
                return SimResponse.json({"scheduled": kind, "after": after, "id": pending_id}, 202)
            notice_id = self.raise_notice(kind, fields)
            self.notify_change()
            return SimResponse.json({"id": notice_id}, 201)
        if path.startswith("/notices/"):
            notice_id = unquote(path[len("/notices/") :])
            if request.method == "DELETE":
                if self.call_off(notice_id):
                    return SimResponse.json({"withdrawn": notice_id, "pending": True})
                raised_as = self.raised_from(notice_id)
                if raised_as is not None:
                    if not self.withdraw(raised_as):
                        raise SimError(
                            f"no notice {raised_as!r} (what {notice_id!r} raised): "
                            "withdrawn already",
                            404,
                        )
                    self.notify_change()
                    return SimResponse.json({"withdrawn": raised_as, "scheduled": notice_id})
                if not self.withdraw(notice_id):
                    raise SimError(f"no notice {notice_id!r}", 404)
                self.notify_change()
                return SimResponse.json({"withdrawn": notice_id})
            if request.method == "PATCH":
                self.change_notice(notice_id, _json_object(request.body))
                self.notify_change()
                return SimResponse.json({"changed": notice_id})
        if path.rstrip("/") == "/faults":
            if request.method == "GET":
                return SimResponse.json({"faults": self.faults()})
            if request.method == "DELETE":
                return SimResponse.json({"removed": self.clear_faults()})
            if request.method == "POST":
                fields = _json_object(request.body)
                after = _after(fields)
                fault = self.check_fault(fields)  # a bad fault is a 400 now, not in a timer
                if after is not None:
                    self._install_later(after, fault)
                    return SimResponse.json({"id": fault.id, "after": after}, 202)
                self._install(fault)
                return SimResponse.json({"id": fault.id}, 201)
        if path.startswith("/faults/") and request.method == "DELETE":
            fault_id = unquote(path[len("/faults/") :])
            if not self.remove_fault(fault_id):
                raise SimError(f"no fault {fault_id!r}", 404)
            return SimResponse.json({"removed": fault_id})
        raise SimError(f"no control route {request.method} {request.path}", 404)

    def _install(self, fault: Fault, *, pending: bool = False) -> None:
        with self.changed:
            if pending and self._pending.pop(fault.id, None) is None:
                return  # ended before it started (the timer fired as it was cancelled)
            fault.created = time.monotonic()
            self._faults[fault.id] = fault
            self.changed.notify_all()

    def _install_later(self, after: float, fault: Fault) -> None:
        with self.lock:
            starts = time.monotonic() + after
            starts_at = format_time(utcnow() + timedelta(seconds=after))
            timer = self.later(after, lambda: self._install(fault, pending=True))
            self._pending[fault.id] = _Pending(fault, timer, starts, starts_at)


@dataclass(frozen=True)
class _Pending:
    """A fault given `after`: its timer, and when it starts (monotonic, and for people)."""

    fault: Fault
    timer: threading.Timer
    starts: float
    starts_at: str

    def describe(self, now: float) -> dict[str, Any]:
        starts_in = round(max(0.0, self.starts - now), 3)
        return {
            **self.fault.describe(),
            "pending": True,
            "starts_at": self.starts_at,
            "starts_in": starts_in,
        }


@dataclass(frozen=True)
class _Scheduled:
    """A notice given `after`: what it raises, its timer, and when (monotonic, for people)."""

    kind: str
    fields: dict[str, Any]
    timer: threading.Timer
    starts: float
    starts_at: str

    def describe(self, pending_id: str, now: float) -> dict[str, Any]:
        return {
            "id": pending_id,
            "kind": self.kind,
            "fields": self.fields,
            "starts_at": self.starts_at,
            "starts_in": round(max(0.0, self.starts - now), 3),
        }


# The largest request body read: control bodies are a few hundred bytes.
MAX_BODY = 1024 * 1024

# The furthest a notice's time may be from now, in seconds (ten years): beyond what
# datetime and timers can hold, a number was a 500 or a dead timer thread.
MAX_LEAD = 10 * 365 * 86400.0

# The longest delay before a scheduled notice or fault: as long as a fault may last.
MAX_AFTER = 30 * 86400.0


def written_seconds(seconds: float) -> str:
    """`seconds` as a user writes it (`30d`, `3650d`, `90s`), never in e-notation: the
    bounds of a refusal read "up to 30d", not "2.592e+06"."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def seconds_field(value: Any, key: str, most: float) -> float:
    """A notice field of seconds, from 0 to `most`, given as a duration (`90s`, `15m`, `2h`)
    or a number; SimError naming the key, the value as written and the accepted forms. The
    message was "expected a number of seconds from 0 to 3.1536e+08" for `lead=xyz`, and
    "got 2678400.0" for `after=31d`: neither said that durations are accepted."""
    seconds = as_seconds(value)
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not 0 <= seconds <= most
    ):
        raise SimError(
            f"{key}: expected a duration (90s, 15m, 2h, 1d) or a number of seconds, "
            f"from 0 up to {written_seconds(most)}; got {value!r}"
        )
    return float(seconds)


def refuse_unknown_fields(kind: str, fields: Mapping[str, Any], known: Sequence[str]) -> None:
    """SimError naming the fields a notice of `kind` does not have: a typo (`typ`, `acton`)
    must not quietly become the default of the field meant."""
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise SimError(
            f"{kind} has no field {', '.join(map(repr, unknown))}; "
            f"its fields: {', '.join(known) or '(none)'}"
        )


def yes_or_no(value: Any, name: str) -> bool:
    """A true/false notice field: a JSON boolean (`--notice` reads `true` and `false` as
    one); SimError for anything else, as the text "false" would be taken for true."""
    if not isinstance(value, bool):
        raise SimError(f"{name}: expected true or false, got {value!r}")
    return value


def as_seconds(value: Any) -> Any:
    """A notice field of seconds as a number: text that is a duration (`2m`, `90s`: from
    `--notice spot,lead=2m` or a JSON body) is its seconds; anything else is returned as is,
    for the field's own check to refuse. `--notice spot,lead=2m` was 'lead: expected a number
    of seconds', while `after=2m` beside it was two minutes."""
    return duration_or_as_is(value)


def check_after(after: Any) -> float:
    """`after` as seconds, or SimError: a number from 0 to MAX_AFTER. A larger one (or
    Infinity) reached threading.Timer, whose thread died with OverflowError: the 202 came
    back and the notice was never raised."""
    return seconds_field(after, "after", MAX_AFTER)


def _after(fields: dict[str, Any]) -> float | None:
    after = fields.pop("after", None)
    return None if after is None else check_after(after)


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        # written_float: `{"lead": 1e400}` is infinity, and was refused as "got inf".
        payload = json.loads(body or b"{}", parse_float=written_float)
    # RecursionError: JSON nested past json's recursion was a 500 and a traceback.
    except (ValueError, RecursionError) as error:
        raise SimError(f"body is not JSON: {error}") from None
    if not isinstance(payload, dict):
        raise SimError("body must be a JSON object")
    return payload


def _reset(connection: socket.socket) -> None:
    """Close with a TCP RST (linger 0), as a crashed or firewalled server does."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()


def _malformed(response: SimResponse) -> SimResponse:
    """A 200 whose body does not parse as what the contract promises: half the real body,
    a NUL and an unterminated tag."""
    body = response.body.encode() if isinstance(response.body, str) else response.body
    junk = b"<html>\x00" + body[: len(body) // 2] + b'{"forewarn-sim": malformed'
    return SimResponse(200, junk, response.content_type, dict(response.headers))


def _oversize(response: SimResponse, size: int) -> SimResponse:
    """A 200 of `size` bytes: the real body, then filler, sent with its Content-Length."""
    body = response.body.encode() if isinstance(response.body, str) else response.body
    head = body[:size]

    def chunks() -> Iterator[bytes]:
        yield head
        left = size - len(head)
        block = b"x" * 65536
        while left > 0:
            yield block[: min(left, len(block))]
            left -= len(block)

    return SimResponse(
        200, content_type=response.content_type, stream=chunks(), length=size, headers={}
    )


def _write_paced(wfile: IO[bytes] | io.BufferedIOBase, payload: bytes, fault: Fault) -> None:
    """Write at `fault.rate` bytes a second; the rest at once when the fault is withdrawn or
    its `duration` ends (as a `hang` lets its requests go: the body trickled on for hours)."""
    step = max(1, int(fault.rate / 10))
    interval = step / fault.rate
    for offset in range(0, len(payload), step):
        wfile.write(payload[offset : offset + step])
        wfile.flush()
        wait = interval
        if fault.duration is not None:
            wait = min(wait, max(0.0, fault.created + fault.duration - time.monotonic()))
        if fault.released.wait(wait) or wait < interval:
            wfile.write(payload[offset + step :])
            return


def _make_handler(sim: Simulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, the body waits for the
        # client's delayed ACK (~40 ms), which would dominate every latency measured here.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s: " + format, sim.name, *args)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            try:
                body = self._body()
            except SimError as error:
                # Where the next request starts is unknown: answer, then hang up.
                self.close_connection = True
                self._send(SimResponse.json({"error": str(error)}, error.status))
                return
            request = SimRequest(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                headers={key.lower(): value for key, value in self.headers.items()},
                body=body,
                client=self.client_address[0],
            )
            try:
                if parts.path.startswith(CONTROL_PREFIX + "/") or parts.path == CONTROL_PREFIX:
                    response = sim.control(request)
                else:
                    with sim.lock:
                        sim.requests[f"{request.method} {request.path}"] += 1
                    answer = self._endpoint(request)
                    if answer is None:
                        return
                    response = answer
            except SimError as error:
                response = SimResponse.json({"error": str(error)}, error.status)
            except Exception as error:  # a simulator bug must still answer
                log.exception("%s: handler failed", sim.name)
                response = SimResponse.json({"error": f"simulator error: {error}"}, 500)
            self._send(response)

        def _body(self) -> bytes:
            """The request's body, by Content-Length or chunked; SimError for a length that
            is not one (it escaped as ValueError and the client got no answer) or above
            MAX_BODY (read whole into memory)."""
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                return self._chunked()
            text = self.headers.get("Content-Length")
            if text is None:
                return b""
            try:
                length = content_length(text)
            except FramingError as error:
                raise SimError(f"Content-Length: not a number of bytes: {error}") from None
            if length > MAX_BODY:
                raise SimError(f"a body of {length} bytes; at most {MAX_BODY} are read", 413)
            return self.rfile.read(length)

        def _chunked(self) -> bytes:
            """A chunked body (what clients that stream one send): it was ignored, and its
            chunks were then parsed as the next request."""
            body = b""
            while True:
                try:
                    size = chunk_size(self.rfile.readline(1024))
                except FramingError as error:
                    raise SimError(f"chunked body: {error}") from None
                if len(body) + size > MAX_BODY:
                    raise SimError(f"a body of over {MAX_BODY} bytes", 413)
                if size == 0:
                    break
                body += self.rfile.read(size)
                self.rfile.readline(1024)  # the CRLF after the chunk
            while self.rfile.readline(1024).strip():  # trailers, up to the blank line
                pass
            return body

        def _endpoint(self, request: SimRequest) -> SimResponse | None:
            """The provider's answer, through whatever fault is in force (None: no answer)."""
            refusal = sim.admit(request)
            if refusal is not None:
                return refusal
            fault = sim.take_fault(request)
            if fault is None:
                return sim.handle(request)
            if fault.kind == "reset":
                self.close_connection = True
                self.rfile.close()
                _reset(self.connection)
                return None
            return sim.shape(fault, lambda: sim.handle(request))

        def _send(self, response: SimResponse) -> None:
            self.log_request(response.status)
            self.send_response_only(response.status)
            headers = dict(response.headers)
            # Exactly one Server header: the provider's own, else the simulator's name.
            self.send_header("Server", headers.pop("Server", sim.server_header))
            self.send_header("Date", self.date_time_string(time.time() + sim.date_ahead))
            self.send_header("Content-Type", response.content_type)
            for key, value in headers.items():
                self.send_header(key, value)
            if response.stream is not None:
                self._send_stream(response)
                return
            payload = response.body.encode() if isinstance(response.body, str) else response.body
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    if response.pace is not None:
                        _write_paced(self.wfile, payload, response.pace)
                    else:
                        self.wfile.write(payload)

        def _send_stream(self, response: SimResponse) -> None:
            assert response.stream is not None
            if response.length is not None:
                self.send_header("Content-Length", str(response.length))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in response.stream:
                    if not chunk or self.command == "HEAD":
                        continue
                    if response.length is None:
                        chunk = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                    if response.pace is not None:
                        _write_paced(self.wfile, chunk, response.pace)
                    else:
                        self.wfile.write(chunk)
                    self.wfile.flush()
                if response.length is None:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True

        do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _serve

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a timeout, a reset) is ordinary here, not a traceback.
        log.debug("%s: connection from %s ended abruptly", self, client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class SimServer:
    """Serves a simulator on loopback in background threads.

    >>> with SimServer(MySimulator()) as server:
    ...     httpx.get(server.url + "/latest/meta-data/")
    """

    def __init__(self, sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sim = sim
        server_class = _Server6 if ":" in host else _Server
        self.httpd = server_class((host, port), _make_handler(sim))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = str(self.httpd.server_address[0])
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def start(self) -> SimServer:
        self.sim.resumed()
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            daemon=True,
            name=f"sim-{self.sim.name}",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.sim.cancel_scripts()
        self.sim.notify_change()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "CONTROL_PREFIX",
    "SimError",
    "SimRequest",
    "SimResponse",
    "SimServer",
    "Simulator",
    "as_seconds",
]
