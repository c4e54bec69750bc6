"""Helpers of the GCP tests: a watcher run in-process against a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from forewarn.agent.protocol import Report
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.watch import GcpWatcher
from support import WatcherRun, running_watcher

# Short periods keep the tests fast; the contract is the same at the defaults.
FAST: dict[str, Any] = {
    "timeout_sec": 5,
    "read_timeout_margin": 2.0,
    "retry_delay": 0.2,
    "upcoming_interval": 0.2,
}


class WatchRun(WatcherRun):
    """The shared watcher harness, plus the GCP tests' own waits."""

    async def wait_for(
        self, predicate: Callable[[list[Report]], bool], timeout: float = 5.0
    ) -> list[Report]:
        await self.until(lambda: predicate(self.reports), timeout)
        return self.reports

    async def settle(self, seconds: float = 0.3) -> None:
        await asyncio.sleep(seconds)

    async def until_polling(self, polls: int = 2, timeout: float = 5.0) -> None:
        """Wait until the watcher has had `polls` good answers (it is past its first reads)."""
        health = self.watcher.health
        await self.until(lambda: health.polls - health.errors >= polls, timeout, "good polls")


@asynccontextmanager
async def watching(
    url: str, state_dir: Path | None = None, **settings: Any
) -> AsyncIterator[WatchRun]:
    """A watcher on `url`; with `state_dir`, one that keeps its notices there as the agent's do."""
    context = None
    if state_dir is not None:
        context = WatcherContext(state_dir, state_dir, PollHealth("gcp"))
    watcher = GcpWatcher(Settings(url=url, **{**FAST, **settings}), context, environ={})
    async with running_watcher(WatchRun(watcher)) as run:
        yield run
