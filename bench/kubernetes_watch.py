"""Kubernetes: node change to watcher report, watching vs polling, and the cost of a 410.

The watcher (list + watch, `providers/kubernetes/watch.py`) runs in-process against the node
API simulator over real HTTP on loopback. Each sample cordons (or uncordons) the node and
times until the watcher emits the drain (or clear). Baseline from the same run: a poller that
GETs the node every second and diffs it with the same parser, the simplest alternative. Also
measured: the delay a forced compaction (410 Gone, relist, new watch) adds to a change, the
requests each approach makes per idle minute, and the parser's cost per Node object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import median, percentile, table
from forewarn.agent.protocol import Report
from forewarn.providers.base import PollHealth, WatcherContext
from forewarn.providers.kubernetes.nodes import changes, node_reports
from forewarn.providers.kubernetes.settings import DEFAULT_DRAIN_TAINTS, Settings
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.kubernetes.watch import KubernetesWatcher
from forewarn.providers.simulator import SimServer

NODE = "bench-node"
TAINTS = frozenset(DEFAULT_DRAIN_TAINTS)


class Arrivals:
    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.want: tuple[str, str] | None = None
        self.at = 0.0

    def emit(self, report: Report) -> None:
        if self.want == (report.action, report.id):
            self.at = time.perf_counter()
            self.event.set()


async def toggles(
    sim: KubernetesSimulator, arrivals: Arrivals, samples: int, jitter: float = 0.05
) -> list[float]:
    """Alternate cordon and uncordon at random moments; time each until it is reported."""
    latencies = []
    cordon_id = f"kubernetes/{NODE}/cordon"
    for index in range(samples):
        # Random phase, so a poller's interval is sampled fairly.
        await asyncio.sleep(random.uniform(0.01, jitter))
        arrivals.event.clear()
        if index % 2 == 0:
            arrivals.want = ("drain", cordon_id)
            started = time.perf_counter()
            sim.raise_notice("cordon", {})
        else:
            arrivals.want = ("clear", cordon_id)
            started = time.perf_counter()
            sim.withdraw("cordon")
        await asyncio.wait_for(arrivals.event.wait(), 10)
        latencies.append((arrivals.at - started) * 1000)
    return latencies


async def watching(samples: int, compaction: bool) -> tuple[list[float], dict[str, int]]:
    sim = KubernetesSimulator(node=NODE, max_watch_seconds=300, bookmark_interval=60)
    with SimServer(sim) as server, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(url=server.url, node_name=NODE, token_file=Path(tmp) / "absent")
        context = WatcherContext(Path(tmp), Path(tmp), PollHealth("kubernetes"))
        watcher = KubernetesWatcher(settings, context, env={})
        arrivals = Arrivals()
        task = asyncio.create_task(watcher.watch(arrivals.emit))
        while watcher.watches < 1:
            await asyncio.sleep(0.01)
        if not compaction:
            latencies = await toggles(sim, arrivals, samples)
        else:
            latencies = []
            cordon_id = f"kubernetes/{NODE}/cordon"
            for _ in range(samples):
                # The watch expires (410 in-stream) and the node changes at the same moment:
                # the change is only seen through the relist.
                arrivals.event.clear()
                arrivals.want = ("drain", cordon_id)
                with sim.lock:
                    started = time.perf_counter()
                    sim.raise_notice("compact", {"expire_watches": True})
                    sim.raise_notice("cordon", {})
                await asyncio.wait_for(arrivals.event.wait(), 10)
                latencies.append((arrivals.at - started) * 1000)
                arrivals.event.clear()
                arrivals.want = ("clear", cordon_id)
                sim.withdraw("cordon")
                await asyncio.wait_for(arrivals.event.wait(), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await watcher.aclose()
        return latencies, dict(sim.counts)


async def polling(samples: int, interval: float) -> list[float]:
    sim = KubernetesSimulator(node=NODE)
    with SimServer(sim) as server:
        arrivals = Arrivals()

        async def poll() -> None:
            active: dict[str, Report] = {}
            async with httpx.AsyncClient(base_url=server.url, trust_env=False) as client:
                while True:
                    node = (await client.get(f"/api/v1/nodes/{NODE}")).json()
                    current = node_reports(node, NODE, TAINTS)
                    for report in changes(active, current):
                        arrivals.emit(report)
                    active = {report.id: report for report in current}
                    await asyncio.sleep(interval)

        task = asyncio.create_task(poll())
        await asyncio.sleep(0.2)
        latencies = await toggles(sim, arrivals, samples, jitter=interval)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return latencies


def parser_cost(rounds: int) -> tuple[float, float]:
    node = {
        "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "1"},
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
            ],
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "message": "ok"}] * 5},
    }
    line = json.dumps({"type": "MODIFIED", "object": node})
    started = time.perf_counter()
    for _ in range(rounds):
        json.loads(line)
    decode = (time.perf_counter() - started) / rounds * 1e6
    started = time.perf_counter()
    for _ in range(rounds):
        node_reports(json.loads(line)["object"], NODE, TAINTS)
    parse = (time.perf_counter() - started) / rounds * 1e6
    return decode, parse


def stats(name: str, values: list[float]) -> list[Any]:
    return [name, len(values), f"{median(values):.2f}", f"{percentile(values, 99):.2f}"]


async def run(samples: int, poll_samples: int) -> None:
    watch_ms, counts = await watching(samples, compaction=False)
    gone_ms, gone_counts = await watching(max(5, samples // 5), compaction=True)
    poll_ms = await polling(poll_samples, 1.0)
    rows = [
        stats("watch (list + watch, this watcher)", watch_ms),
        stats("watch across a 410 (relist + rewatch)", gone_ms),
        stats("baseline: GET the node every 1 s", poll_ms),
    ]
    print("node change -> report (ms)")
    print(table(["approach", "samples", "median", "p99"], rows))
    ratio = median(poll_ms) / median(watch_ms)
    print(f"\nwatch is {ratio:.0f}x faster than 1 s polling at the median")
    print(
        f"\nrequests per idle minute: watch {60 / 300:.1f} (one per timeoutSeconds=300) "
        f"vs polling 60; this run: watch {counts['lists']} list + {counts['watches']} watch, "
        f"410 run {gone_counts['lists']} lists + {gone_counts['watches']} watches"
    )
    decode, parse = parser_cost(20000)
    print()
    print(
        table(
            ["per watch line", "µs"],
            [
                ["baseline: json.loads only", f"{decode:.1f}"],
                ["json.loads + node_reports", f"{parse:.1f}"],
            ],
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/kubernetes_watch.py", description=__doc__)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--poll-samples", type=int, default=20)
    args = parser.parse_args(argv)
    asyncio.run(run(args.samples, args.poll_samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
