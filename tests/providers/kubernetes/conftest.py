"""Fixtures for the Kubernetes provider: a node API simulator on loopback, a token file, and
the watcher running in the test's event loop with a list as `emit`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.kubernetes.settings import Settings
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.kubernetes.watch import KubernetesWatcher
from forewarn.providers.simulator import SimServer
from k8s_support import NODE, TOKEN, Cluster, Running
from support import running_watcher


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30, bookmark_interval=30)
    with SimServer(sim) as server:
        handle = Cluster(sim, server, token_file)
        yield handle
        handle.http.close()


@pytest.fixture
async def start_watcher(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Any]]:
    async def start(env: dict[str, str] | None = None, **fields: Any) -> Running:
        fields.setdefault("retry_max", 0.3)
        settings = Settings(**fields)
        health = PollHealth("kubernetes")
        context = WatcherContext(tmp_path, tmp_path, health)
        watcher = KubernetesWatcher(settings, context, env=env or {})
        running = await stack.enter_async_context(running_watcher(Running(watcher)))
        return running

    async with contextlib.AsyncExitStack() as stack:
        yield start


@pytest.fixture
def watch_sim(tmp_path: Path, start_watcher: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """`await watch_sim(sim)`: `sim` (a simulator made by the test, one that misbehaves, or
    with its own timings) served on loopback until the test ends, and a watcher on its node
    with the simulator's token."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)

    with contextlib.ExitStack() as stack:

        async def start(sim: KubernetesSimulator) -> Running:
            server = stack.enter_context(SimServer(sim))
            running: Running = await start_watcher(
                url=server.url, node_name=NODE, token_file=token_file
            )
            return running

        yield start


@pytest.fixture
async def watching(cluster: Cluster, start_watcher: Callable[..., Any]) -> Running:
    """A watcher on the simulator's node, after its first list and watch."""
    running: Running = await start_watcher(
        url=cluster.url, node_name=NODE, token_file=cluster.token_file
    )
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    return running
