"""The interface of a part that watches the agent (metrics, telemetry): `Observer`.

Apart from `observers.py` (which fans calls out and builds the configured observers) so that
`metrics.py` and `telemetry.py` can subclass it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .protocol import AckRequest, Notice


@dataclass(frozen=True)
class Deliveries:
    """What a notifier (the webhook, the Kubernetes notifier) did with what it was given:
    read by the metrics server's thread, so built from plain counts, never by iterating a
    queue the event loop changes."""

    delivered: int
    failed: int
    dropped: int
    pending: int  # not delivered yet: waiting, or being delivered (retries included)


class Observer:
    """No-op base: override what you need."""

    def on_start(self, providers: list[str]) -> None:
        """The agent is serving; `providers` are the watchers it runs."""

    def on_notice(self, notice: Notice, *, escalated: bool) -> None:
        """A notice was published (new, changed, escalated or cleared); not called on replays."""

    def on_restored(self, notice: Notice) -> None:
        """A notice restored from the state file at start is active again (sent anew to
        subscribers, but not a new publication: on_notice is not called for it, unless it is a
        drain whose deadline came within the exit margin meanwhile, then sent as an escalation)."""

    def on_restore_done(self, next_seq: Callable[[], int]) -> None:
        """The notices restored from the state file at start were all given to on_restored
        (or sent as escalations and clears): an id given to neither was dropped from the
        state. `next_seq` numbers a notice the observer publishes itself (a clear it owes)."""

    def on_expired(self, notice: Notice) -> None:
        """A notice was retired past its end; `notice` is the clear (also sent to on_notice)."""

    def on_overdue(self, notice: Notice) -> None:
        """`notice` is past its deadline plus the grace and its provider still shows it: kept
        active, not sent again; once, until it is published again (changed or cleared)."""

    def on_liveness(self, parts: dict[str, bool]) -> None:
        """Each second: whether each long-running part of the agent is running."""

    def on_unacked(self, notice: Notice, clients: list[str]) -> None:
        """A terminate's deadline passed while `clients` (sorted), which received it, had not
        acked it; once per notice and deadline."""

    def on_poll(self, provider: str, ok: bool, error_kind: str | None) -> None:
        """A watcher finished one poll of its endpoint."""

    def on_approval(self, provider: str, outcome: str) -> None:
        """A watcher approved an event with its provider (Azure's StartRequests), failed to,
        or decided not to: `outcome` is `sent`, `failed` or `skipped`."""

    def on_ack(self, ack: AckRequest, notice: Notice | None) -> None:
        """A client reported a flush (or a resume); `notice` is the one it names, if active."""

    def on_hold(self, notice_id: str, client: str) -> None:
        """A client that is no subscriber (`forewarn wait --client ID`) now holds the notice:
        it is not flushed until that client acks it. Not called for a hold already held."""

    def on_subscribers(self, count: int) -> None:
        """The number of acking clients changed."""

    def on_client_refused(self) -> None:
        """An acking client was refused: as many as the agent tracks are tracked already."""

    def on_stopping(self) -> None:
        """The agent began to shut down (its parts are being stopped); on_stop follows once
        they have, its state is saved and its watchers are closed."""

    def on_stop(self) -> None:
        """The agent is shutting down."""

    async def settle(self) -> None:
        """Between on_stopping and on_stop: return once what the observer still has to send
        is sent (a notifier's queue), or at once when nothing is. The agent waits for it a
        bounded time (NOTIFIER_GRACE), then calls on_stop whatever it left."""

    def conditions(self) -> dict[str, str]:
        """Standing problems of the observer, by kind, until it resolves them (telemetry it
        cannot write): shown by `forewarn status` beside the agent's own."""
        return {}

    def deliveries(self) -> dict[str, Deliveries]:
        """A notifier's counts by its name (`webhook`, `kubernetes`); none for the others.
        Called from another thread (the metrics server's): reads counts only."""
        return {}

    def watch_conditions(self, source: Callable[[], dict[str, dict[str, str]]]) -> None:
        """Where the agent's standing problems are read: by part (a provider's name, or
        `agent` for its own and its observers'), each kind with why, as `forewarn status`
        shows them. Called once, before `on_start`; `source` may be called from another
        thread (the metrics server's)."""

    def parts(self) -> dict[str, bool]:
        """The observer's own long-running parts (a thread, a task) and whether each runs:
        they count in the agent's liveness (`/healthz`, the systemd watchdog) like its own."""
        return {}


__all__ = ["Deliveries", "Observer"]
