"""A watcher that hangs without crashing (a request whose answer never completes) is a dead
part: past its progress bound (from its own settings) the runner restarts it, logs it,
counts it (`watcher-stalled`), and liveness (`status`, `/healthz`) shows it, so the systemd
watchdog stops being pinged."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import ClassVar

import pytest
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.agent.config import load_settings
from forewarn.agent.runner import Agent
from forewarn.providers import Emit, PollHealth
from support import eventually_async


class Hung:
    """A watcher whose one request never answers nor fails (the DigitalOcean IMAP session
    once did, held by a server trickling a line in IDLE): it waits for good, within a bound
    of half a second by its own account."""

    name: ClassVar[str] = "hung"
    built = 0

    def __init__(self) -> None:
        Hung.built += 1

    async def detect(self) -> bool:
        return True

    def progress_bound(self) -> float:
        return 0.5

    async def watch(self, emit: Emit) -> None:
        await asyncio.Event().wait()


class _Publisher:
    """Stands in for the publisher, which liveness asks about the events socket file."""

    def events_file_ours(self) -> bool:
        return True


async def test_a_watcher_hung_in_a_request_is_restarted_and_shown_dead(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    agent.board = NoticeBoard(Sequencer(), 30.0)
    agent.publisher = _Publisher()  # type: ignore[assignment]
    Hung.built = 0
    agent.watchers = {"hung": Hung()}  # type: ignore[dict-item]
    agent._build = lambda name, health: Hung()  # type: ignore[method-assign,assignment,return-value]
    health = PollHealth("hung")
    agent.health["hung"] = health
    task = asyncio.create_task(agent._supervise("hung", health))
    agent.parts["watcher/hung"] = task
    try:
        with caplog.at_level(logging.ERROR):
            await eventually_async(
                lambda: health.errors_by_kind.get("watcher-stalled", 0) >= 1,
                timeout=5,
                what="the hung watcher counted as stalled",
            )
            assert health.last_error == "watcher-stalled"
            assert agent.liveness()["watcher/hung"] is False
            await eventually_async(
                lambda: Hung.built >= 2, timeout=5, what="the watcher built again"
            )
        assert any("hung: no progress" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class LongPolling:
    """A healthy watcher between answers: one request outstanding (a GCP long-poll), its last
    progress just now, its bound far away (45 s at GCP's defaults). Counts how often the
    runner asks for its bound, which it does at each look."""

    name: ClassVar[str] = "long-polling"

    def __init__(self) -> None:
        self.asked = 0

    async def detect(self) -> bool:
        return True

    def progress_bound(self) -> float:
        self.asked += 1
        return 45.0

    async def watch(self, emit: Emit) -> None:
        await asyncio.Event().wait()


async def test_a_healthy_watcher_far_from_its_bound_is_not_looked_at_four_times_a_second(
    tmp_path: Path,
) -> None:
    # Found: the idle GCP agent (two long-polls outstanding, 45 s bound) woke every 0.25 s
    # to look at a bound it could not pass for another 45 s: four loop wakeups a second, the
    # most of any part of an idle GCP agent. The next look is due when the bound can pass.
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    watcher = LongPolling()
    health = PollHealth("long-polling")
    health.success()
    task = asyncio.create_task(agent._watch_with_progress(watcher, health))  # type: ignore[arg-type]
    try:
        await asyncio.sleep(1.3)  # the scenario: a second and more of nothing happening
        assert not task.done()
        assert watcher.asked <= 1, f"looked at the bound {watcher.asked} times in 1.3 s"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_hung_watcher_is_still_restarted_as_its_bound_passes(tmp_path: Path) -> None:
    """The look is timed to the bound, so a stall is caught as soon as before (0.25 s)."""
    settings = load_settings(
        providers=["local"], runtime_dir=tmp_path / "run", state_dir=tmp_path / "state"
    )
    agent = Agent(settings)
    health = PollHealth("hung")
    health.success()
    started = asyncio.get_running_loop().time()
    with pytest.raises(Exception, match="hung: no progress") as raised:
        await agent._watch_with_progress(Hung(), health)  # type: ignore[arg-type]
    took = asyncio.get_running_loop().time() - started
    assert type(raised.value).__name__ == "WatcherStalled"
    assert 0.5 <= took < 0.5 + 0.25 + 0.5, took  # the bound, a check's period, load slack
