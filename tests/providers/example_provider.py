"""A provider defined in the tests, to prove that adding one is a spec plus one registry
line: the command line, the configuration, the generated docs and the agent pick it up."""

from __future__ import annotations

import argparse
import asyncio
from typing import ClassVar

from forewarn.providers import EndpointSettings, ProviderSpec, WatcherContext
from forewarn.providers.base import Emit
from forewarn.providers.report import Report
from pydantic import Field


class Settings(EndpointSettings):
    url_schemes = ("http",)

    interval: float = Field(default=0.2, gt=0, description="Seconds between polls.")
    announce: bool = Field(default=False, description="Raise one drill drain at start.")


class ExampleWatcher:
    name: ClassVar[str] = "example"

    def __init__(self, settings: Settings, context: WatcherContext) -> None:
        self.settings = settings
        self.health = context.health

    async def detect(self) -> bool:
        return False

    async def watch(self, emit: Emit) -> None:
        if self.settings.announce:
            emit(Report(id="example/drill/1", action="drain", reason="drill", provider="example"))
        while True:
            self.health.success()
            await asyncio.sleep(self.settings.interval)


class _Drill:
    """A drill face: `forewarn drill example`."""

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--yes", action="store_true", help="act")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        settings = args.load_settings(None)
        print(f"example drill against {settings.url} (yes={args.yes})")
        return 0


SPEC = ProviderSpec(
    name="example",
    summary="a provider that lives in the tests",
    settings_class=lambda: Settings,
    watcher=ExampleWatcher,
    drill=lambda: _Drill(),
)
