"""Helpers of the GCP tests: a watcher run in-process against a real server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from forewarn.agent.protocol import Report
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.watch import GcpWatcher

# Short periods keep the tests fast; the contract is the same at the defaults.
FAST: dict[str, Any] = {
    "timeout_sec": 5,
    "read_timeout_margin": 2.0,
    "retry_delay": 0.2,
    "upcoming_interval": 0.2,
}


class WatchRun:
    """A watcher running in the test's event loop, its reports collected in a list."""

    def __init__(self, watcher: GcpWatcher) -> None:
        self.watcher = watcher
        self.reports: list[Report] = []
        self.times: list[float] = []
        self.task: asyncio.Task[None] | None = None

    def emit(self, report: Report) -> None:
        self.reports.append(report)
        self.times.append(time.monotonic())

    async def wait_for(
        self, predicate: Callable[[list[Report]], bool], timeout: float = 5.0
    ) -> list[Report]:
        deadline = time.monotonic() + timeout
        while not predicate(self.reports):
            if self.task is not None and self.task.done():
                self.task.result()  # a watcher that died says why
                raise AssertionError("watch() returned")
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s: {self.reports}")
            await asyncio.sleep(0.01)
        return self.reports

    async def count(self, n: int, timeout: float = 5.0) -> list[Report]:
        return await self.wait_for(lambda reports: len(reports) >= n, timeout)

    async def settle(self, seconds: float = 0.3) -> None:
        await asyncio.sleep(seconds)

    async def until_polling(self, polls: int = 2, timeout: float = 5.0) -> None:
        """Wait until the watcher has had `polls` good answers (it is past its first reads)."""
        deadline = time.monotonic() + timeout
        while self.watcher.health.polls - self.watcher.health.errors < polls:
            if time.monotonic() > deadline:
                raise AssertionError(f"watcher not polling: {self.watcher.health}")
            await asyncio.sleep(0.01)


@asynccontextmanager
async def watching(
    url: str, state_dir: Path | None = None, **settings: Any
) -> AsyncIterator[WatchRun]:
    """A watcher on `url`; with `state_dir`, one that keeps its notices there as the agent's do."""
    context = None
    if state_dir is not None:
        context = WatcherContext(state_dir, state_dir, PollHealth("gcp"))
    watcher = GcpWatcher(Settings(url=url, **{**FAST, **settings}), context, environ={})
    run = WatchRun(watcher)
    run.task = asyncio.create_task(watcher.watch(run.emit))
    try:
        yield run
    finally:
        run.task.cancel()
        with suppress(asyncio.CancelledError):
            await run.task
        await watcher.aclose()
