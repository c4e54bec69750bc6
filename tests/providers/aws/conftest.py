"""A real IMDS simulator on loopback and a watcher running in-process against it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx
import pytest
from forewarn.agent.protocol import Report
from forewarn.providers.aws.settings import Settings
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.aws.watch import AwsWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer


@pytest.fixture
def sim() -> ImdsSimulator:
    return ImdsSimulator()


@pytest.fixture
def server(sim: ImdsSimulator) -> Iterator[SimServer]:
    with SimServer(sim) as running:
        yield running


class Running:
    """A watcher's `watch` as a task; every report it emits, with when it came."""

    def __init__(self, watcher: AwsWatcher) -> None:
        self.watcher = watcher
        self.health = watcher.health
        self.reports: list[Report] = []
        self.times: list[float] = []

    def emit(self, report: Report) -> None:
        self.reports.append(report)
        self.times.append(time.monotonic())

    async def until(self, check: Callable[[], Any], timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            await asyncio.sleep(0.02)
        raise AssertionError(f"condition not met within {timeout}s; reports: {self.reports}")

    async def report(self, timeout: float = 10.0, **match: Any) -> tuple[Report, float]:
        """The first report (from now on) whose fields equal `match`, and when it came."""
        start = len(self.reports)

        def found() -> tuple[Report, float] | None:
            for index in range(start, len(self.reports)):
                report = self.reports[index]
                if all(getattr(report, key) == value for key, value in match.items()):
                    return report, self.times[index]
            return None

        result: tuple[Report, float] = await self.until(found, timeout)
        return result


@asynccontextmanager
async def watching(
    url: str, transport: httpx.AsyncBaseTransport | None = None, **settings: Any
) -> AsyncIterator[Running]:
    watcher = AwsWatcher(
        Settings(url=url, **settings),
        PollHealth("aws", repeat_log_seconds=60),
        transport=transport,
    )
    running = Running(watcher)
    task = asyncio.create_task(watcher.watch(running.emit))
    try:
        yield running
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await watcher.aclose()
        assert task.cancelled(), "watch() ended on its own"
