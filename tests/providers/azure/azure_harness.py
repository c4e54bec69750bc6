"""A watcher running in-process against a real simulator on loopback, for the Azure tests."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from forewarn.providers.azure.settings import Settings
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import AzureWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from support import AgentProcess, WatcherRun, running_watcher

# The mapping the issue asks for, written out here rather than read from the code under test.
EXPECTED_MAPPING = [
    ("Preempt", "terminate", "eviction"),
    ("Terminate", "terminate", "eviction"),
    ("Reboot", "drain", "host-maintenance"),
    ("Redeploy", "drain", "host-maintenance"),
]


class Harness(WatcherRun):
    """The shared watcher harness with the simulator and its server beside it."""

    def __init__(self, watcher: AzureWatcher, sim: AzureSimulator, server: SimServer) -> None:
        super().__init__(watcher)
        self.sim = sim
        self.server = server

    def ids(self, action: str | None = None) -> list[str]:
        return [r.id for r in self.reports if action is None or r.action == action]

    def polls(self) -> int:
        return self.sim.requests["GET /metadata/scheduledevents"]

    async def more_polls(self, count: int = 3, timeout: float = 10.0) -> None:
        """Wait until the watcher has polled `count` more times."""
        target = self.polls() + count
        await self.until(lambda: self.polls() >= target, timeout, f"{count} more polls")


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
        async with running_watcher(Harness(watcher, sim, server)) as harness:
            yield harness


def approvals_metric(agent: AgentProcess) -> dict[str, float]:
    """forewarn_approvals_total of provider azure by outcome, scraped from the agent."""
    from prometheus_client.parser import text_string_to_metric_families

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(agent.metrics_url(30) + "/metrics", timeout=5) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "forewarn_approvals_total":
                assert sample.labels["provider"] == "azure", sample
                counts[sample.labels["outcome"]] = sample.value
    return counts
