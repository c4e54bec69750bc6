"""What metrics and health cost: the observer hooks per call, scrape latency, and the agent's
idle footprint with the metrics server on (scraped every 5 s) next to one with it off.

Baselines from the same run: the no-op `Observer` for the hooks, the agent without metrics
for the footprint (both agents run side by side over the same window, so load from
elsewhere hits both alike).
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import threading
import time
import timeit
import urllib.request
from datetime import datetime, timedelta, timezone

from common import agent_env, cpu_seconds, median, peak_rss_mb, percentile, start_agent, table
from forewarn.agent.metrics import MetricsObserver
from forewarn.agent.observers import Observer
from forewarn.agent.protocol import AckRequest, Notice


def hook_costs(number: int) -> list[list[str]]:
    now = datetime.now(timezone.utc)
    notice = Notice(
        id="aws/x/1",
        seq=1,
        action="drain",
        reason="rebalance-recommendation",
        provider="aws",
        deadline=now + timedelta(minutes=2),
        noticed_at=now,
        sent_at=now,
        detail={"notice_time": "2026-11-30T03:00:00Z"},
    )
    ack = AckRequest(op="ack", notice_id="aws/x/1", flush_seconds=1.5)
    rows = []
    for label, observer in (("no-op Observer (baseline)", Observer()), ("MetricsObserver", None)):
        target = observer if observer is not None else MetricsObserver()
        target.on_start(["aws"])
        calls = {
            "on_poll": lambda t=target: t.on_poll("aws", True, None),
            "on_notice": lambda t=target: t.on_notice(notice, escalated=False),
            "on_ack": lambda t=target: t.on_ack(ack, notice),
        }
        row = [label]
        for call in calls.values():
            best = min(timeit.repeat(call, number=number, repeat=5)) / number
            row.append(f"{best * 1e6:.2f}")
        rows.append(row)
    return rows


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fetch(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=5) as response:
        response.read()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="footprint window")
    parser.add_argument("--scrapes", type=int, default=300, help="requests per endpoint")
    parser.add_argument("--number", type=int, default=20000, help="hook calls per timing")
    args = parser.parse_args(argv)

    print("observer hook cost, microseconds per call (best of 5)")
    print(table(["observer", "on_poll", "on_notice", "on_ack"], hook_costs(args.number)))

    port = free_port()
    plain_env, plain_work = agent_env()
    metrics_env, metrics_work = agent_env(FOREWARN_METRICS_ADDRESS=f"127.0.0.1:{port}")
    plain = start_agent(plain_env, "--provider", "local")
    metered = start_agent(metrics_env, "--provider", "local")
    base = f"http://127.0.0.1:{port}"
    try:
        rows = []
        for path in ("/healthz", "/readyz", "/metrics"):
            times = [fetch(base + path) for _ in range(args.scrapes)]
            rows.append([path, f"{median(times) * 1e3:.2f}", f"{percentile(times, 99) * 1e3:.2f}"])
        print(f"\nscrape latency over loopback, {args.scrapes} requests each")
        print(table(["endpoint", "median ms", "p99 ms"], rows))
        body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        series = len([line for line in body.splitlines() if re.match(r"^[a-z]", line)])
        print(f"/metrics: {len(body)} bytes, {series} series")

        stop = threading.Event()

        def scraper() -> None:
            while not stop.wait(5.0):
                fetch(base + "/metrics")

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        time.sleep(1.0)
        start = {pid: cpu_seconds(pid) for pid in (plain.pid, metered.pid)}
        time.sleep(args.seconds)
        stop.set()
        rows = []
        for label, pid in (
            ("agent, metrics off (baseline)", plain.pid),
            ("agent, metrics on, scraped every 5 s", metered.pid),
        ):
            cpu = (cpu_seconds(pid) - start[pid]) / args.seconds * 100
            rows.append([label, f"{cpu:.3f}", f"{peak_rss_mb(pid):.1f}"])
        print(f"\nidle footprint over {args.seconds:g} s (provider local)")
        print(table(["process", "CPU % of one core", "peak RSS MB"], rows))
    finally:
        for proc in (plain, metered):
            proc.terminate()
            proc.wait()
        shutil.rmtree(plain_work, ignore_errors=True)
        shutil.rmtree(metrics_work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
