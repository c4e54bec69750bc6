"""A watcher running in-process against a real simulator on loopback, for the Azure tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from forewarn.agent.protocol import Report
from forewarn.providers.azure.settings import Settings
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import AzureWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer

# The mapping the issue asks for, written out here rather than read from the code under test.
EXPECTED_MAPPING = [
    ("Preempt", "terminate", "eviction"),
    ("Terminate", "terminate", "eviction"),
    ("Reboot", "drain", "host-maintenance"),
    ("Redeploy", "drain", "host-maintenance"),
]


@dataclass
class Harness:
    watcher: AzureWatcher
    sim: AzureSimulator
    server: SimServer
    health: PollHealth
    reports: list[Report]

    def ids(self, action: str | None = None) -> list[str]:
        return [r.id for r in self.reports if action is None or r.action == action]

    def polls(self) -> int:
        return self.sim.requests["GET /metadata/scheduledevents"]

    async def more_polls(self, count: int = 3, timeout: float = 10.0) -> None:
        """Wait until the watcher has polled `count` more times."""
        target = self.polls() + count
        await until(lambda: self.polls() >= target, timeout, f"{count} more polls")


async def until(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(
    sim: AzureSimulator | None = None, port: int = 0, **settings: Any
) -> AsyncIterator[Harness]:
    removal_after = float(settings.pop("removal_after", 5.0))
    # Tests poll four times a second to be quick; with an approval POST and a late-arriving
    # poll that brushes IMDS's five a second, so the default simulator allows ten. The real
    # limit has tests of its own.
    sim = sim or AzureSimulator(vm_name="gpu-0", removal_after=removal_after, rate_limit=10)
    settings.setdefault("interval", 0.25)
    with SimServer(sim, port=port) as server:
        watcher = AzureWatcher(Settings(url=server.url, **settings), PollHealth("azure"))
        harness = Harness(watcher, sim, server, watcher.health, [])
        task = asyncio.create_task(watcher.watch(harness.reports.append))
        try:
            yield harness
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await watcher.aclose()
