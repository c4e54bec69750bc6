"""The AWS watcher running in-process against a simulator (the shared harness of support.py).

Not in conftest.py: test modules import it, and `conftest` names a different module for each
directory when several are collected at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from forewarn.providers.aws.settings import Settings
from forewarn.providers.aws.watch import AwsWatcher
from forewarn.providers.base import PollHealth
from support import WatcherRun, running_watcher


@asynccontextmanager
async def watching(
    url: str, transport: httpx.AsyncBaseTransport | None = None, **settings: Any
) -> AsyncIterator[WatcherRun]:
    watcher = AwsWatcher(
        Settings(url=url, **settings),
        PollHealth("aws", repeat_log_seconds=60),
        transport=transport,
    )
    async with running_watcher(WatcherRun(watcher)) as running:
        yield running
