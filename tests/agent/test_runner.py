"""Supervision: one watcher's failure never stops another."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import ClassVar

from forewarn.agent.config import load_settings
from forewarn.agent.protocol import Report
from forewarn.agent.runner import Agent
from forewarn.providers import Emit, PollHealth
from support import eventually_async


class Crashing:
    name: ClassVar[str] = "crashing"
    runs = 0

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        Crashing.runs += 1
        raise RuntimeError("endpoint exploded")


class Steady:
    name: ClassVar[str] = "steady"

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        n = 0
        while True:
            n += 1
            emit(Report(id=f"steady/{n}", action="drain", reason="manual", provider="steady"))
            await asyncio.sleep(0.05)


async def test_a_crashing_watcher_is_retried_with_backoff_and_others_keep_going(
    tmp_path: Path,
) -> None:
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    reports: list[Report] = []
    agent._emit = reports.append  # type: ignore[method-assign]
    agent.watchers = {"crashing": Crashing(), "steady": Steady()}  # type: ignore[dict-item]
    bad, good = PollHealth("crashing"), PollHealth("steady")
    tasks = [
        asyncio.create_task(agent._supervise("crashing", bad)),
        asyncio.create_task(agent._supervise("steady", good)),
    ]
    # The crashed watcher is rebuilt from its module; here that fails too and counts as well.
    agent._build = lambda name, health: Crashing()  # type: ignore[method-assign,assignment,return-value]
    await asyncio.sleep(1.6)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert len(reports) >= 20, "the steady watcher kept emitting"
    assert 2 <= Crashing.runs <= 4, "retried, with backoff between tries"
    assert bad.errors_by_kind["watcher-failed"] == Crashing.runs
    assert good.errors == 0


class CrashingWithClient:
    """A watcher that holds a resource (an HTTP client, an IMAP session) and then crashes."""

    name: ClassVar[str] = "holding"

    def __init__(self) -> None:
        self.closed = False

    async def detect(self) -> bool:
        return True

    async def watch(self, emit: Emit) -> None:
        raise RuntimeError("endpoint exploded")

    async def aclose(self) -> None:
        self.closed = True


async def test_a_crashed_watcher_is_closed_before_it_is_rebuilt(tmp_path: Path) -> None:
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    built = [CrashingWithClient()]
    agent.watchers = {"holding": built[0]}  # type: ignore[dict-item]

    def build(name: str, health: PollHealth) -> CrashingWithClient:
        built.append(CrashingWithClient())
        return built[-1]

    agent._build = build  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(agent._supervise("holding", PollHealth("holding")))
    try:
        await eventually_async(lambda: len(built) >= 2, what="the watcher rebuilt")
        assert built[0].closed, "the crashed watcher's resources were closed"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
