"""The one shape every provider's watcher has, and what the agent hands it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from forewarn.protocol.errors import ForewarnError

from .health import PollHealth

if TYPE_CHECKING:
    # The report model is pydantic's: a simulator's parsers (their `ParseError`) and
    # `forewarn simulate` need none of it.
    from forewarn.providers.report import Report

Emit = Callable[["Report"], None]


class ParseError(ForewarnError, ValueError):
    """A provider answered with something its contract does not allow. Parsers raise only this."""


def _nobody_awaited(notice_id: str) -> bool:
    return False


def _not_known(notice_id: str) -> str | None:
    return None


@dataclass
class WatcherContext:
    """What the agent gives a watcher besides its own settings."""

    runtime_dir: Path
    state_dir: Path
    health: PollHealth
    # Whether a client holds `notice_id` that has not acked it, although every client had when
    # it was flushed: one that subscribed since (it received the notice by replay). A
    # FlushAware watcher asks before acting on the flush later on (Azure's approval, tried
    # again until NotBefore, released the VM under a job that had not saved).
    awaiting_flush: Callable[[str], bool] = _nobody_awaited
    # The action `notice_id` went out as last (None when it is not active): a drain the agent
    # re-sends as terminate before its deadline keeps its id, and its watcher reports it as
    # a drain. A FlushAware watcher that acts on a terminate's flush alone (Azure's approval)
    # tells by it that the flush is the exit's save, not the drain's.
    sent_as: Callable[[str], str | None] = _not_known


@runtime_checkable
class Watcher(Protocol):
    """A notice contract. `watch` runs until cancelled, calls `emit` for each new, changed or
    withdrawn notice, and never raises on bad data or transport errors.

    A watcher that remembers what it reported (to send only changes) may also have
    `forget(notice_id)`: the agent calls it when it retires the notice past its deadline plus
    a grace, so a provider still showing the notice raises it again.

    It may also have a boolean `answered`: true once every source of notices it reads has
    answered since it started. The agent restores the provider notices it had before a restart
    and keeps them active until the watcher has answered (then withdraws those it did not
    report again); without `answered`, the watcher's first successful poll counts.

    And a number `stop_listen`: seconds the agent keeps running (watchers, publishing) after
    SIGTERM before it stops, for a notice that comes with the stop itself (a GCP preemption's
    ACPI soft-off); the largest of the watchers' is waited."""

    name: ClassVar[str]

    async def detect(self) -> bool: ...

    async def watch(self, emit: Emit) -> None: ...


@runtime_checkable
class FlushAware(Protocol):
    """Optional: a watcher that acts once every client that received a notice has flushed
    (Azure approves the event early)."""

    def flushed(self, notice_id: str) -> None: ...


@runtime_checkable
class RestoreAware(Protocol):
    """Optional: a watcher that keeps its own memory of what it reported. The agent hands a
    watcher it builds the notices of its provider restored from the state file after a restart
    (as reported, and not reported again yet), so that it does not take an unchanged notice
    for a new one because it forgot it (Azure recomputed a Started event's deadline, and took
    up the document's newer DocumentIncarnation, and the notice went out again as changed).
    Until a watcher of the provider has answered, each one built (after a crash too) also gets
    those the agent retired at start-up (past their end while it was down): one still listed
    is raised again as it was, as within one run. After that, one built again after a crash
    gets every active notice of its provider, and those retired while still reported (until
    reported again or withdrawn), as its predecessor reported them. It need not
    clear those its provider no longer shows: the agent withdraws each notice handed to it
    that it does not report again once it has answered."""

    def restored(self, reports: list[Report]) -> None: ...


@runtime_checkable
class ProgressBounded(Protocol):
    """Optional: a watcher that says how long it may go without progress (an answer or an
    error reported to its health) while it works as it should: its longest wait between
    polls (a poll interval, a long-poll, an IDLE renewal, a backoff) plus its longest
    requests, with room to spare. Past it the watcher is hung (a request that never
    completes, a stream gone silent), and the agent restarts it and shows it dead in
    `/healthz`. None: no bound for now (it waits on purpose, e.g. for a configuration)."""

    def progress_bound(self) -> float | None: ...


def stall_bound(longest_wait: float, longest_request: float) -> float:
    """A progress bound from a watcher's longest wait between polls and its longest request:
    twice their sum (a poll may run late by a wait and a request under load), and never under
    two seconds."""
    return max(2.0, 2 * (longest_wait + longest_request))


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
    "ProgressBounded",
    "RestoreAware",
    "Watcher",
    "WatcherContext",
    "stall_bound",
]
