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
