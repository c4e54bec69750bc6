"""The AWS and Azure watchers against their simulators while notices are live: each fault the
simulators offer (status codes, a hang, a slow body, a reset, a malformed body) on every
notice path for several polls. A notice already published must never be cleared by a fault
(the job would train on into the reclaim), and a notice raised during the fault must be
published within about one poll of the fault ending (a poll's wait, its backoff ceiling
included, and one request), not later: the watchers poll at 0.25 s here, so a missed poll
or an unbounded backoff shows. A 429 is bounded by its own backoff instead (AWS asks for
exponential backoff when it throttles; Azure by its Retry-After cap)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.aws.watch import THROTTLE_CEILING
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import BACKOFF_JITTER, BACKOFF_STRETCH, RETRY_AFTER_CAP
from forewarn.providers.simulator import SimServer, Simulator
from support import WatcherRun

INTERVAL = 0.25
TIMEOUT = 0.5
# Scheduling slack on a shared two-core machine; far below a missed poll's worth at the
# backoff ceilings a failing watcher would otherwise reach.
SLACK = 0.6

FAULTS: dict[str, dict[str, Any]] = {
    "500": {"kind": "status", "status": 500},
    "503": {"kind": "status", "status": 503},
    "429": {"kind": "status", "status": 429},
    "hang": {"kind": "hang"},
    "slow": {"kind": "slow", "rate": 5},
    "reset": {"kind": "reset"},
    "malformed": {"kind": "malformed"},
}


class Rig(ABC):
    """One provider: its simulator, where its notices are read, and how a notice is raised."""

    path: str
    poll_wait: float  # the longest wait between a failed poll and the next

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    @abstractmethod
    def raise_live(self) -> set[str]:
        """Raise the provider's notices that stay live through the fault: their kinds."""

    @abstractmethod
    def raise_new(self) -> str:
        """Raise one more notice during the fault: its id or event id."""

    @abstractmethod
    def throttled_wait(self) -> float:
        """The longest a 429 may hold the next poll back (the watcher's own backoff)."""

    @abstractmethod
    def watching(self, url: str) -> Any:
        """The provider's watcher running against `url`, as an async context manager."""


class AwsRig(Rig):
    path = "/latest/meta-data/"
    poll_wait = INTERVAL

    def raise_live(self) -> set[str]:
        for kind, fields in (
            ("spot", {"lead": 600}),
            ("rebalance", {}),
            ("scheduled", {"not_before": "1h", "event_id": "instance-event-live"}),
        ):
            self.sim.raise_notice(kind, fields)
        return {"spot-interruption", "rebalance-recommendation", "scheduled-maintenance"}

    def raise_new(self) -> str:
        self.sim.raise_notice("scheduled", {"not_before": "2h", "event_id": "instance-event-new"})
        return "instance-event-new"

    def throttled_wait(self) -> float:
        return THROTTLE_CEILING * 1.2

    @asynccontextmanager
    async def watching(self, url: str) -> AsyncIterator[WatcherRun]:
        from forewarn.providers.aws.settings import Settings
        from forewarn.providers.aws.watch import AwsWatcher
        from forewarn.providers.base import PollHealth
        from support import running_watcher

        cadence = {
            f"{path}_interval": INTERVAL for path in ("spot", "rebalance", "scheduled", "asg")
        }
        watcher = AwsWatcher(Settings(url=url, timeout=TIMEOUT, **cadence), PollHealth("aws"))
        async with running_watcher(WatcherRun(watcher)) as run:
            yield run


class AzureRig(Rig):
    path = "/metadata/scheduledevents"
    poll_wait = INTERVAL * BACKOFF_STRETCH * (1 + BACKOFF_JITTER)

    def raise_live(self) -> set[str]:
        self.sim.raise_notice("Reboot", {"not_before_seconds": 900})
        self.sim.raise_notice("Preempt", {"not_before_seconds": 600})
        return {"host-maintenance", "eviction"}

    def raise_new(self) -> str:
        return self.sim.raise_notice("Redeploy", {"not_before_seconds": 900})

    def throttled_wait(self) -> float:
        return RETRY_AFTER_CAP + self.poll_wait

    @asynccontextmanager
    async def watching(self, url: str) -> AsyncIterator[WatcherRun]:
        from forewarn.providers.azure.settings import Settings
        from forewarn.providers.azure.watch import AzureWatcher
        from forewarn.providers.base import PollHealth
        from support import running_watcher

        watcher = AzureWatcher(
            Settings(url=url, interval=INTERVAL, request_timeout=TIMEOUT, approve="off"),
            PollHealth("azure"),
        )
        async with running_watcher(WatcherRun(watcher)) as run:
            yield run


RIGS: dict[str, Callable[[], Rig]] = {
    "aws": lambda: AwsRig(ImdsSimulator()),
    # Nothing starts or goes by itself while the test runs; rate limit above the polls.
    "azure": lambda: AzureRig(AzureSimulator(vm_name="gpu-0", removal_after=600, rate_limit=50)),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("provider", sorted(RIGS))
async def test_a_fault_while_notices_are_live_drops_none_and_delays_the_next_one_poll(
    provider: str, fault: str
) -> None:
    rig = RIGS[provider]()
    with SimServer(rig.sim) as server:
        async with rig.watching(server.url) as run:
            reasons = rig.raise_live()
            await run.until(
                lambda: {r.reason for r in run.reports if r.action != "clear"} >= reasons,
                what="the live notices",
            )
            live = {r.id for r in run.reports}
            errors = run.health.errors
            fault_id = rig.sim.add_fault(path=rig.path, **FAULTS[fault])
            started = time.monotonic()
            await run.until(
                lambda: (
                    run.health.errors >= errors + 3 and time.monotonic() - started > 4 * INTERVAL
                ),
                what="failing polls",
            )
            new_id = rig.raise_new()
            # A poll or two more fails after the notice is there to be read.
            await run.until(lambda: run.health.errors >= errors + 5, what="more failing polls")
            assert rig.sim.remove_fault(fault_id)
            healed = time.monotonic()
            start = len(run.reports)

            def published() -> float | None:
                for index in range(start, len(run.reports)):
                    if new_id in run.reports[index].id and run.reports[index].action != "clear":
                        return run.times[index]
                return None

            seen = await run.until(published, timeout=15, what=f"the new notice {new_id}")
            bound = (rig.throttled_wait() if fault == "429" else rig.poll_wait) + TIMEOUT + SLACK
            assert seen - healed <= bound, f"published {seen - healed:.2f} s after the fault ended"
            await run.until(lambda: run.health.last_error is None, what="recovered")
            cleared = [r.id for r in run.reports if r.action == "clear" and r.id in live]
            assert cleared == [], f"{fault} cleared live notices: {run.summary()}"
