"""The fault vocabulary every simulator shares (served under `/_sim/faults`).

A fault is one misbehaviour of the real endpoint, applied to the requests whose path starts
with `path` (and whose method is `method`, when given), for `count` requests or `duration`
seconds, or until it is withdrawn:

| kind | what the client sees | fields |
| --- | --- | --- |
| `status` | `status` (500), its error page or `body` | `status`, `body`, `content_type` |
| `hang` | nothing for `seconds` (default: until withdrawn), then the normal answer | `seconds` |
| `slow` | the normal answer, its body at `rate` bytes a second (1) | `rate` |
| `reset` | the connection is reset (TCP RST) before any answer | |
| `malformed` | 200 with the normal content type and a body that does not parse | |
| `oversize` | 200 with a body of `size` bytes (50 MB) | `size` |
| `throttle` | 429 (the provider's page) for requests above `rate` a second | `rate` |

`retry_after` (whole seconds) sends that `Retry-After` header with a `status` or `throttle`
answer, in place of the provider page's own.

A provider adds named faults as presets of these (AWS's `hop-limit` is a `hang` of the token
PUT). Standard library only, like the simulators.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from forewarn.protocol.errors import UsageError
from forewarn.protocol.timefmt import duration_or_as_is
from forewarn.protocol.writtenfloat import written_float

FAULT_KINDS = ("status", "hang", "slow", "reset", "malformed", "oversize", "throttle")
DEFAULT_OVERSIZE = 50 * 1024 * 1024
# The longest any fault may hold a request or last: an hour, like the longest real long-poll.
MAX_SECONDS = 3600.0
MAX_SIZE = 1024**3
FIELDS = (
    "kind",
    "path",
    "method",
    "status",
    "body",
    "content_type",
    "seconds",
    "rate",
    "size",
    "count",
    "duration",
    "retry_after",
)
_ids = itertools.count(1)


class FaultError(UsageError):
    """A fault description that cannot be honoured; the message names the field."""


@dataclass
class Fault:
    kind: str
    path: str = "/"
    method: str | None = None
    status: int = 500
    body: str | None = None
    content_type: str | None = None
    seconds: float | None = None
    rate: float = 1.0
    size: int = DEFAULT_OVERSIZE
    count: int | None = None
    duration: float | None = None
    retry_after: int | None = None
    name: str = ""  # the kind it was asked for (a provider's preset name, or `kind`)
    id: str = field(default_factory=lambda: f"fault-{next(_ids)}")
    created: float = field(default_factory=time.monotonic)
    released: threading.Event = field(default_factory=threading.Event)
    answered: int = 0
    _window: deque[float] = field(default_factory=deque)

    def live(self, now: float) -> bool:
        if self.released.is_set():
            return False
        if self.duration is not None and now - self.created >= self.duration:
            return False
        return self.count is None or self.answered < self.count

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        return path.startswith(self.path)

    def take(self, now: float) -> bool:
        """Whether this request is faulted (and counts it). A throttle lets `rate` requests a
        second through; every other kind takes every matching request."""
        if self.kind == "throttle":
            while self._window and now - self._window[0] >= 1.0:
                self._window.popleft()
            if len(self._window) < self.rate:
                self._window.append(now)
                return False
        self.answered += 1
        return True

    def hold_seconds(self, now: float) -> float:
        """How long a `hang` holds a request: `seconds`, else until the fault is withdrawn or
        its `duration` ends (withdrawal always lets held requests go at once)."""
        if self.seconds is not None:
            return self.seconds
        if self.duration is not None:
            return max(0.0, self.created + self.duration - now)
        return MAX_SECONDS

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.name or self.kind, "path": self.path}
        if self.name and self.name != self.kind:
            out["as"] = self.kind
        keys = ("method", "body", "content_type", "seconds", "count", "duration", "retry_after")
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.kind == "status":
            out["status"] = self.status
        if self.kind in ("slow", "throttle"):
            out["rate"] = self.rate
        if self.kind == "oversize":
            out["size"] = self.size
        out["answered"] = self.answered
        return out


def _number(fields: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise FaultError(f"{key}: a number from {low:g} to {high:g}, got {value!r}")
    return float(value)


def _whole(fields: dict[str, Any], key: str, low: int, high: int) -> int | None:
    value = fields.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FaultError(f"{key}: a whole number from {low} to {high}, got {value!r}")
    return value


def _text(fields: dict[str, Any], key: str) -> str | None:
    value = fields.get(key)
    if value is not None and not isinstance(value, str):
        raise FaultError(f"{key}: a string, got {value!r}")
    return value


def make_fault(
    fields: dict[str, Any],
    presets: dict[str, dict[str, Any]],
    throttle_rate: float,
) -> Fault:
    """A validated fault from a control request's fields; `presets` are the provider's named
    faults (each a dict of fields with a base `kind`)."""
    given = fields.get("kind")
    name = given.strip().lower() if isinstance(given, str) else given  # any case, as notices
    if not isinstance(name, str) or (name not in FAULT_KINDS and name not in presets):
        known = ", ".join([*FAULT_KINDS, *presets])
        raise FaultError(f"kind: one of {known}, got {given!r}")
    merged = {**presets.get(name, {}), **{k: v for k, v in fields.items() if k != "kind"}}
    # Seconds may be a duration as text (`"30s"`, `"2m"`), as `"after"` beside them and
    # `--fault hang,seconds=30s` take it: `{"duration": "1m"}` was a 400.
    for key in SECONDS_FIELDS:
        if key in merged:
            merged[key] = duration_or_as_is(merged[key])
    kind = presets[name]["kind"] if name in presets else name
    unknown = sorted(set(merged) - set(FIELDS))
    if unknown:
        raise FaultError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(FIELDS[1:])}")
    path = _text(merged, "path") or "/"
    if not path.startswith("/"):
        raise FaultError(f"path: a path prefix starting with /, got {path!r}")
    method = _text(merged, "method")
    status = _whole(merged, "status", 100, 599)
    rate = _number(merged, "rate", 0.001 if kind == "slow" else 0, 1e9)
    size = _whole(merged, "size", 1, MAX_SIZE)
    return Fault(
        kind=kind,
        name=name,
        path=path,
        method=method.upper() if method else None,
        status=status if status is not None else (429 if kind == "throttle" else 500),
        body=_text(merged, "body"),
        content_type=_text(merged, "content_type"),
        seconds=_number(merged, "seconds", 0, MAX_SECONDS),
        rate=rate if rate is not None else (throttle_rate if kind == "throttle" else 1.0),
        size=size if size is not None else DEFAULT_OVERSIZE,
        count=_whole(merged, "count", 1, 10**9),
        duration=_number(merged, "duration", 0, 30 * 86400),
        retry_after=_whole(merged, "retry_after", 0, int(MAX_SECONDS)),
    )


# The fields of a fault that are seconds (`retry_after` is whole seconds, as the header).
SECONDS_FIELDS = ("seconds", "duration")


def parse_fault_flag(text: str) -> dict[str, Any]:
    """`--fault KIND[,key=value...]` as control-API fields: numbers become numbers, durations
    (`30s`, `2m`) seconds for `seconds`, `duration` and `after`."""
    from forewarn.protocol.timefmt import typed_duration

    kind, *pairs = text.split(",")
    fields: dict[str, Any] = {"kind": kind.strip()}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FaultError(f"{pair!r} is not key=value")
        if key in ("seconds", "duration", "after"):
            try:
                # As every duration flag reads one (`1_000`, `1e3`, `1_0m`).
                fields[key] = typed_duration(value)
            except ValueError as error:
                raise FaultError(f"{key}: {error}") from None
            continue
        fields[key] = _scalar(value)
    return fields


def _scalar(value: str) -> Any:
    # written_float: `lead=1e400` is infinity, and was refused as "got inf".
    for convert in (int, written_float):
        try:
            return convert(value)
        except ValueError:
            pass
    return value


__all__ = [
    "DEFAULT_OVERSIZE",
    "FAULT_KINDS",
    "Fault",
    "FaultError",
    "make_fault",
    "parse_fault_flag",
]
