"""Recovery rules of single watchers, driven through the fault proxy."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from faultproxy import FaultProxy
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.kubernetes.settings import Settings
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.kubernetes.watch import KubernetesWatcher
from forewarn.providers.simulator import SimServer

NODE = "break-node"


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"{what}: not within {timeout}s"
        await asyncio.sleep(0.01)


async def test_a_kubernetes_stream_that_delivered_and_broke_is_resumed_at_once(
    tmp_path: Path,
) -> None:
    # Before: the retry delay was reset only after a clean end, so a stream breaking every
    # few seconds (a flaky load balancer) was resumed after 0.2, 0.4, ... up to 30 s.
    token = tmp_path / "token"
    token.write_text("t")
    sim = KubernetesSimulator(node=NODE, token="t", max_watch_seconds=60, bookmark_interval=0.1)
    with SimServer(sim) as server:
        proxy = FaultProxy(("127.0.0.1", server.port))
        settings = Settings(url=proxy.url, node_name=NODE, token_file=token, retry_max=30)
        watcher = KubernetesWatcher(
            settings, WatcherContext(tmp_path, tmp_path, PollHealth("kubernetes")), env={}
        )
        task = asyncio.create_task(watcher.watch(lambda report: None))
        gaps = []
        try:
            for _ in range(7):
                marks = watcher.bookmarks
                await _until(lambda m=marks: watcher.bookmarks > m, 10, "an event on the stream")
                opened = watcher.watches
                proxy.set("reset")  # resets the open stream: an unclean break
                proxy.set(None)
                broke = time.monotonic()
                await _until(lambda o=opened: watcher.watches > o, 40, "a resumed watch")
                gaps.append(time.monotonic() - broke)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await watcher.aclose()
            proxy.stop()
        assert max(gaps) < 1.0, gaps
        assert watcher.health.errors_by_kind.get("transport", 0) >= 7
