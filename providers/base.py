"""The one shape every provider's watcher has, and what the agent hands it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

from forewarn.providers.report import Report

Emit = Callable[[Report], None]

log = logging.getLogger("forewarn.providers")


class ParseError(ValueError):
    """A provider answered with something its contract does not allow. Parsers raise only this."""


@dataclass
class PollHealth:
    """Success and error bookkeeping for one watcher: feeds metrics and readiness, and keeps
    logs to one line per distinct error so a flapping endpoint cannot flood them."""

    provider: str
    repeat_log_seconds: float = 60.0
    polls: int = 0
    errors: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    last_success: float | None = None  # time.time() of the last good answer
    last_error: str | None = None
    _logged: dict[str, float] = field(default_factory=dict, repr=False)
    listeners: list[Callable[[str, bool, str | None], None]] = field(
        default_factory=list, repr=False
    )

    def success(self) -> None:
        self.polls += 1
        self.last_success = time.time()
        if self.last_error is not None:
            log.info("%s: polling recovered after %s", self.provider, self.last_error)
            self.last_error = None
            self._logged.clear()
        for listener in self.listeners:
            listener(self.provider, True, None)

    def error(self, kind: str, message: str) -> None:
        """Count an error; log it the first time, and again only after `repeat_log_seconds`."""
        self.polls += 1
        self.errors += 1
        self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + 1
        self.last_error = kind
        now = time.monotonic()
        last = self._logged.get(kind)
        if last is None or now - last >= self.repeat_log_seconds:
            self._logged[kind] = now
            count = self.errors_by_kind[kind]
            log.warning("%s: %s: %s (seen %d times)", self.provider, kind, message, count)
        for listener in self.listeners:
            listener(self.provider, False, kind)

    @property
    def ready(self) -> bool:
        return self.last_success is not None


@dataclass
class WatcherContext:
    """What the agent gives a watcher besides its own settings."""

    runtime_dir: Path
    state_dir: Path
    health: PollHealth


@runtime_checkable
class Watcher(Protocol):
    """A notice contract. `watch` runs until cancelled, calls `emit` for each new, changed or
    withdrawn notice, and never raises on bad data or transport errors."""

    name: ClassVar[str]

    async def detect(self) -> bool: ...

    async def watch(self, emit: Emit) -> None: ...


@runtime_checkable
class FlushAware(Protocol):
    """Optional: a watcher that acts once every client that received a notice has flushed
    (Azure approves the event early)."""

    def flushed(self, notice_id: str) -> None: ...


@runtime_checkable
class Closable(Protocol):
    """Optional: a watcher holding resources (an HTTP client) to release at shutdown."""

    async def aclose(self) -> None: ...


__all__ = [
    "Closable",
    "Emit",
    "FlushAware",
    "ParseError",
    "PollHealth",
    "Watcher",
    "WatcherContext",
]
