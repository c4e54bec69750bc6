"""The clears a restart owes a notifier (a notice it told of, finished before the stop, whose
clear no file says went out), held until the notice's provider has answered twice since the
start, or OWED_HOLD has passed, and dropped when its id is reported again.

Sent at once, a clear was wrong for a provider notice delivered just before a SIGKILL, before
the state took it: the files cannot tell it from one cleared, and its watcher reports it again
at its first answer, so the receiver read drain, clear, drain, a reclaim called off that was
not. Not kept across a stop: the notifier's file still names each, and the next start owes it
again (never one too few).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..protocol import Notice

# The first answer's reports are in by the end of the second.
OWED_POLLS = 2
# At most this long: a provider that never answers does not hold a clear for good.
OWED_HOLD = 60.0


class OwedClears:
    """The owed clears of one notifier; `send` makes each one's clear when it is due."""

    def __init__(self, send: Callable[[Notice], None]) -> None:
        self._send = send
        self._owed: dict[str, Notice] = {}
        self._polls: dict[str, int] = {}  # each provider's good answers since the start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.hold = OWED_HOLD

    def add(self, notice: Notice) -> None:
        self._owed[notice.id] = notice

    def reported(self, notice_id: str) -> bool:
        """The id was published again: its owed clear is dropped. True if one was owed."""
        return self._owed.pop(notice_id, None) is not None

    def start(self, watched: set[str]) -> None:
        """Send at once those of providers no watcher runs for; the rest within `hold`."""
        self._loop = asyncio.get_running_loop()
        self._send_where(lambda notice: notice.provider not in watched)
        if self._owed:
            self._timer = self._loop.call_later(self.hold, self._send_where)

    def answered(self, provider: str) -> None:
        """A good answer of `provider`'s watcher, from any thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._answered, provider)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _answered(self, provider: str) -> None:
        if not any(notice.provider == provider for notice in self._owed.values()):
            return
        self._polls[provider] = self._polls.get(provider, 0) + 1
        if self._polls[provider] >= OWED_POLLS:
            self._send_where(lambda notice: notice.provider == provider)

    def _send_where(self, which: Callable[[Notice], bool] = lambda notice: True) -> None:
        due = [notice for notice in self._owed.values() if which(notice)]
        for notice in due:
            del self._owed[notice.id]
        for notice in due:
            self._send(notice)


__all__ = ["OWED_HOLD", "OWED_POLLS", "OwedClears"]
