"""A provider for the tests whose watcher takes long to build: its constructor blocks the
thread (as importing a provider's watch module and its SDK does on a loaded machine at boot),
and its detection says no."""

from __future__ import annotations

import time
from typing import ClassVar

from forewarn.providers import ProviderSettings, ProviderSpec, WatcherContext
from forewarn.providers.base import Emit

# Longer than any provider's detection budget (AWS 1 s, the runner's 1.5 s).
BUILD_SECONDS = 2.0


class Settings(ProviderSettings):
    pass


class SlowBuildWatcher:
    name: ClassVar[str] = "slowbuild"

    def __init__(self, settings: Settings, context: WatcherContext) -> None:
        time.sleep(BUILD_SECONDS)
        self.health = context.health

    async def detect(self) -> bool:
        return False

    async def watch(self, emit: Emit) -> None:
        raise AssertionError("never picked")


SPEC = ProviderSpec(
    name="slowbuild",
    summary="a watcher whose construction blocks for two seconds",
    settings_class=lambda: Settings,
    watcher=SlowBuildWatcher,
)
