"""`notify` to subscriber latency through the agent, with 1 and 64 subscribers.

Each notice is raised on the control socket; every subscriber stamps its arrival. Latency is
arrival minus the moment the request was sent. Baseline from the same run: a bare ZeroMQ
PUB→SUB hop on ipc with the same subscriber counts (the floor the agent adds to).
Goal: p99 at most 5 ms.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Callable

import zmq
from common import agent_env, percentile, start_agent, table


def _subscribers(
    context: zmq.Context[zmq.Socket[bytes]], endpoint: str, count: int
) -> list[zmq.Socket[bytes]]:
    socks = []
    for _ in range(count):
        sock = context.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"notice")
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.connect(endpoint)
        socks.append(sock)
    return socks


def _collect(poller: zmq.Poller, expected: int, timeout: float) -> list[tuple[float, bytes]]:
    arrivals = []
    end = time.monotonic() + timeout
    while len(arrivals) < expected and time.monotonic() < end:
        for sock, _ in poller.poll(100):
            while True:
                try:
                    _, payload = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                arrivals.append((time.perf_counter(), payload))
    return arrivals


def through_agent(
    count: int,
    notices: int,
    *,
    until: Callable[[], bool] | None = None,
    until_timeout: float = 120.0,
    pace: float = 0.0,
    **env_extra: str,
) -> list[float]:
    """Latencies in ms; `pace`: seconds between one notice's clear and the next notice; with
    `until`, the agent runs on after the notices until it is true (or `until_timeout`
    passes), e.g. until a webhook receiver has had every delivery."""
    env, work = agent_env(**env_extra)
    proc = start_agent(env, "--provider", "local")
    context = zmq.Context()
    try:
        socks = _subscribers(context, f"ipc://{work}/run/events", count)
        poller = zmq.Poller()
        for sock in socks:
            poller.register(sock, zmq.POLLIN)
        time.sleep(0.5)
        _collect(poller, 10**9, 0.2)  # drop heartbeats/replays (none: only notices subscribed)
        req = context.socket(zmq.REQ)
        req.connect(f"ipc://{work}/run/control")
        latencies: list[float] = []
        for i in range(notices):
            sent = time.perf_counter()
            req.send(
                json.dumps({"op": "notify", "action": "drain", "id": f"local/bench/{i}"}).encode()
            )
            arrivals = _collect(poller, count, 2.0)
            req.recv()
            latencies += [(arrived - sent) * 1000 for arrived, _ in arrivals]
            # Withdraw it so the active set (and each heartbeat) stays small.
            req.send(json.dumps({"op": "clear", "id": f"local/bench/{i}"}).encode())
            req.recv()
            _collect(poller, count, 2.0)
            if pace:
                time.sleep(pace)
        req.close()
        for sock in socks:
            sock.close()
        end = time.monotonic() + until_timeout
        while until is not None and not until() and time.monotonic() < end:
            time.sleep(0.05)
        return latencies
    finally:
        context.term()
        proc.terminate()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def bare_zmq(count: int, notices: int) -> list[float]:
    _, work = agent_env()
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    endpoint = f"ipc://{work}/run/bare"
    pub.bind(endpoint)
    socks = _subscribers(context, endpoint, count)
    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    time.sleep(0.5)
    latencies: list[float] = []
    payload = json.dumps({"v": 1, "id": "x" * 20, "action": "drain"}).encode()
    for _ in range(notices):
        sent = time.perf_counter()
        pub.send_multipart([b"notice", payload])
        latencies += [(arrived - sent) * 1000 for arrived, _ in _collect(poller, count, 2.0)]
    for sock in (*socks, pub):
        sock.close()
    context.term()
    shutil.rmtree(work, ignore_errors=True)
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notices", type=int, default=1000)
    parser.add_argument("--subscribers", type=int, nargs="*", default=[1, 64])
    args = parser.parse_args(argv)
    rows = []
    for count in args.subscribers:
        for label, measure in (
            ("bare PUB/SUB (baseline)", bare_zmq),
            ("forewarn notify", through_agent),
        ):
            values = measure(count, args.notices)
            expected = count * args.notices
            rows.append(
                [
                    label,
                    count,
                    f"{len(values)}/{expected}",
                    f"{percentile(values, 50):.3f}",
                    f"{percentile(values, 99):.3f}",
                    f"{max(values):.3f}",
                ]
            )
    print(table(["path", "subscribers", "received", "p50 ms", "p99 ms", "max ms"], rows))
    print("\ngoal: forewarn notify p99 <= 5 ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
