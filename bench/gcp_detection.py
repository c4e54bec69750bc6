"""GCP: how fast a metadata change becomes a notice, and what the long-polls cost at idle.

Detection latency: the simulator's `instance/maintenance-event` flips between NONE and
TERMINATE_ON_HOST_MAINTENANCE (each flip is one notice: a drain or its clear), at random
intervals. Three observers see the same flips in the same run:

- the GCP watcher in this process (long-poll; time of `emit`),
- the real agent (`forewarn agent --provider gcp`; time a ZeroMQ subscriber receives it),
- a 5 s poller (baseline; a flip counts as detected at the first poll after it).

A flip undone before a long-poll's next answer (two flips inside the time an agent takes
to publish one and write its state file, likely under load at 80-250 ms apart) is never
shown to it: the answer has the value it already holds. Such flips are counted as merged,
not as missed; a run fails only if an observer publishes a wrong state (two drains or two
clears in a row, or a final state other than the simulator's). The latencies are those of
the flips published while in force (before the next flip), and "longest behind" is the
longest time an observer's published state differed from the simulator's.

Goal: p99 of the long-poll at most 50 ms.

Idle CPU: three agents side by side for the same window, nothing happening: GCP with the
default long-poll (`timeout_sec` 15), GCP with `timeout_sec` 5 (the request rate of a 5 s
poller), and the local-only agent (the agent's own floor: heartbeats, flag-file checks).
Goal: the default long-poll agent at most 0.2 % of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import subprocess
import threading
import time
from typing import Any

import httpx
from _flips import Published
from common import agent_env, cpu_seconds, percentile, start_agent, table
from forewarn.agent.protocol import Report
from forewarn.providers.gcp.settings import Settings
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.gcp.watch import MAINTENANCE_KEY, TERMINATE, GcpWatcher
from forewarn.providers.simulator import SimServer

BASELINE_INTERVAL = 5.0


class ZmqListener:
    """Receive times of the agent's notices, on a thread."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"notice")
        self.sock.connect(endpoint)
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if self.sock.poll(100):
                _, payload = self.sock.recv_multipart()
                self.received.append((time.monotonic(), json.loads(payload)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


async def _baseline_poller(url: str, polls: list[float], done: asyncio.Event) -> None:
    """A plain GET every 5 s, random phase: the cadence of a non-long-polling watcher."""
    async with httpx.AsyncClient(headers={"Metadata-Flavor": "Google"}, trust_env=False) as client:
        await asyncio.sleep(random.uniform(0, BASELINE_INTERVAL))
        while not done.is_set():
            response = await client.get(f"{url}/computeMetadata/v1/{MAINTENANCE_KEY}")
            response.raise_for_status()
            polls.append(time.monotonic())
            await asyncio.sleep(BASELINE_INTERVAL)


def _latencies(changes: list[float], seen: list[float]) -> list[float]:
    return [(t_seen - t_change) * 1000 for t_change, t_seen in zip(changes, seen, strict=False)]


def _after(changes: list[float], polls: list[float]) -> list[float]:
    """For each change, the first poll at or after it."""
    seen = []
    for change in changes:
        later = [poll for poll in polls if poll >= change]
        if later:
            seen.append(later[0])
    return seen


async def detection(notices: int, gap: tuple[float, float]) -> list[list[Any]]:
    sim = GcpSimulator()
    server = SimServer(sim).start()
    env, work = agent_env(FOREWARN_GCP_URL=server.url, FOREWARN_GCP_UPCOMING_INTERVAL="0")
    agent = start_agent(env, "--provider", "gcp")
    listener = ZmqListener(f"ipc://{env['FOREWARN_RUNTIME_DIR']}/events")
    watcher = GcpWatcher(Settings(url=server.url, upcoming_interval=0), environ={})
    emitted: list[tuple[float, Report]] = []
    task = asyncio.create_task(watcher.watch(lambda r: emitted.append((time.monotonic(), r))))
    polls: list[float] = []
    done = asyncio.Event()
    poller = asyncio.create_task(_baseline_poller(server.url, polls, done))
    changes: list[float] = []
    try:
        # Both long-pollers (the agent's and ours) are waiting on the key before flips start.
        started = time.monotonic()
        while sim.requests[f"GET /computeMetadata/v1/{MAINTENANCE_KEY}"] < 5:
            if time.monotonic() - started > 15:
                raise RuntimeError("the watchers never reached the simulator")
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        for index in range(notices):
            await asyncio.sleep(random.uniform(*gap))
            changes.append(time.monotonic())
            sim.set_value(MAINTENANCE_KEY, TERMINATE if index % 2 == 0 else "NONE")
        # Let the baseline poll once more after the last flip, and the agent deliver.
        await asyncio.sleep(BASELINE_INTERVAL + 0.5)
    finally:
        done.set()
        for pending in (task, poller):
            pending.cancel()
        await asyncio.gather(task, poller, return_exceptions=True)
        await watcher.aclose()
        listener.close()
        agent.terminate()
        agent.wait()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    agent_notices = [(t, n) for t, n in listener.received if n.get("provider") == "gcp"]
    observers = (
        ("long-poll watcher, in process (emit)", [(t, r.action) for t, r in emitted]),
        ("long-poll, real agent (ZeroMQ receipt)", [(t, n["action"]) for t, n in agent_notices]),
    )
    published = [Published(changes, seen) for _, seen in observers]
    wrong = [label for (label, _), made in zip(observers, published, strict=True) if made.wrong]
    if wrong:
        raise RuntimeError(
            f"a wrong state published by {', '.join(wrong)}: watcher {len(emitted)} notices, "
            f"agent {len(agent_notices)}, changes {notices}"
        )
    rows = []
    for (label, _), made in zip(observers, published, strict=True):
        values = made.latencies
        rows.append(
            [
                label,
                f"{len(values)} ({made.merged} merged)",
                f"{percentile(values, 50):.1f}",
                f"{percentile(values, 99):.1f}",
                f"{max(values):.1f}",
                f"{made.longest_behind:.0f}",
            ]
        )
    baseline = _latencies(changes, _after(changes, polls))
    rows.append(
        [
            f"{BASELINE_INTERVAL:g} s poller (baseline)",
            len(baseline),
            f"{percentile(baseline, 50):.1f}",
            f"{percentile(baseline, 99):.1f}",
            f"{max(baseline):.1f}",
            "",
        ]
    )
    long_poll_p50 = percentile(published[1].latencies, 50)
    rows.append(
        [
            "baseline p50 / agent p50",
            "",
            f"{percentile(baseline, 50) / long_poll_p50:.0f}x",
            "",
            "",
            "",
        ]
    )
    return rows


def idle_cpu(seconds: float) -> list[list[Any]]:
    # One simulator per agent, so each agent's metadata requests are counted on their own.
    servers = [SimServer(GcpSimulator()).start() for _ in range(3)]
    setups = [
        ("gcp long-poll, timeout_sec 15 (default)", {}, ("gcp",)),
        (
            "gcp, timeout_sec 5 (a 5 s poller's request rate)",
            {"FOREWARN_GCP_TIMEOUT_SEC": "5"},
            ("gcp",),
        ),
        ("local only (the agent's floor)", {}, ("local",)),
    ]
    agents: list[tuple[str, subprocess.Popen[bytes], Any, SimServer]] = []
    try:
        for (label, extra, providers), server in zip(setups, servers, strict=True):
            env, work = agent_env(None, FOREWARN_GCP_URL=server.url, **extra)
            proc = start_agent(env, *[a for p in providers for a in ("--provider", p)])
            agents.append((label, proc, work, server))
        time.sleep(2.0)  # past start-up and the first reads
        before = {proc.pid: cpu_seconds(proc.pid) for _, proc, _, _ in agents}
        asked = {id(server): sum(server.sim.requests.values()) for server in servers}
        time.sleep(seconds)
        rows = []
        for label, proc, _, server in agents:
            used = cpu_seconds(proc.pid) - before[proc.pid]
            requests = sum(server.sim.requests.values()) - asked[id(server)]
            rows.append([label, f"{used:.2f}", f"{used / seconds * 100:.3f}", requests])
        return rows
    finally:
        for _, proc, work, _ in agents:
            proc.terminate()
            proc.wait()
            shutil.rmtree(work, ignore_errors=True)
        for server in servers:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--notices", type=int, default=200, help="flips to time (default 200)")
    parser.add_argument("--min-gap", type=float, default=0.08, help="seconds between flips, min")
    parser.add_argument("--max-gap", type=float, default=0.25, help="seconds between flips, max")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="idle CPU window")
    args = parser.parse_args(argv)

    rows = asyncio.run(detection(args.notices, (args.min_gap, args.max_gap)))
    print(f"Detection latency, {args.notices} notices (maintenance-event flips), ms:\n")
    print(table(["observer", "published", "p50", "p99", "max", "longest behind"], rows))
    print("(merged: a flip undone before the observer's next answer; longest behind: ms)")
    print("\ngoal: long-poll p99 <= 50 ms")

    cpu_rows = idle_cpu(args.idle_seconds)
    print(f"\nAgent CPU while idle, {args.idle_seconds:g} s side by side:\n")
    print(table(["agent", "CPU s", "% of one core", "metadata requests"], cpu_rows))
    print("(CPU is each thread's run time in /proc/PID/task/*/schedstat, in ns)")
    print("goal: default long-poll agent <= 0.2 % of one core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
