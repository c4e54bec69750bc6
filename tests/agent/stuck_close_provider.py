"""A provider for the tests whose watcher cannot be closed: its `aclose` blocks in a thread
(as closing an IMAP session or a TLS connection to a peer that stopped reading can), and,
with `crash`, its `watch` fails after each first poll."""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

from forewarn.providers import ProviderSettings, ProviderSpec, WatcherContext
from forewarn.providers.base import Emit
from pydantic import Field

# Longer than any test waits: a close that blocks this long never ends for the test.
BLOCKED_SECONDS = 3600.0


class Settings(ProviderSettings):
    crash: bool = Field(default=False, description="Fail after each first poll.")


class StuckCloseWatcher:
    name: ClassVar[str] = "stuck"

    def __init__(self, settings: Settings, context: WatcherContext) -> None:
        self.settings = settings
        self.health = context.health

    async def detect(self) -> bool:
        return False

    async def watch(self, emit: Emit) -> None:
        while True:
            self.health.success()
            if self.settings.crash:
                raise RuntimeError("the stuck watcher failed")
            await asyncio.sleep(0.1)

    async def aclose(self) -> None:
        await asyncio.to_thread(time.sleep, BLOCKED_SECONDS)


SPEC = ProviderSpec(
    name="stuck",
    summary="a watcher whose close never ends",
    settings_class=lambda: Settings,
    watcher=StuckCloseWatcher,
)
