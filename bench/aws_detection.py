"""AWS notice detection: simulator → agent → subscriber latency, IMDS load and agent CPU.

Every lane is a real agent subprocess with the AWS watcher, its own IMDS simulator on
loopback and a raw ZeroMQ subscriber. A lane raises a rebalance recommendation, waits for
the drain to arrive, withdraws it, waits for the clear, and so on; each raise and each
withdrawal is one notice, timed from the change in the simulator to its arrival. A random
pause of up to one poll period before each change keeps the changes out of step with the
polls, so the figures are not flattered by phase.

- default cadence (0.5 s) in two lanes, 200 notices in all by default;
- baselines from the same run: the same agent polling every 2 s (as aws-node-termination-
  handler does) and every 5 s (as AWS suggests), for as long as the default lanes run;
- after the lanes, on its own, an idle agent with the AWS watcher at the default cadence
  for 60 s: IMDS requests per second, and its CPU beside an agent with the local watcher
  only, measured over the same window. The goal is calm-time CPU, so it is measured while
  nothing else the bench starts is busy (beside the lanes, contention for the two cores
  inflated it by about half).

- interruption notices (ITN) beside them, in two lanes: at today's calm cadence, and after a
  rebalance recommendation, when spot/instance-action is polled every 100 ms (with the
  IMDS request rate of each lane).

Goals: p99 at most 0.6 s at the default cadence; ITN p99 at most 0.15 s after a rebalance;
agent CPU at most 0.5 % of one core (calm).
All lanes run at once on a shared machine; contention shows up in the tails.
"""

from __future__ import annotations

import argparse
import random
import shutil
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import zmq
from common import agent_env, cpu_seconds, median, percentile, start_agent, table
from forewarn.protocol.timefmt import format_time
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Lane:
    label: str
    interval: float
    notices: int | None  # None: until `stop` is set
    latencies: list[float] = field(default_factory=list)
    missed: int = 0
    error: str | None = None
    # "rebalance": raise and withdraw rebalance recommendations (drain, clear);
    # "itn": spot interruption notices with a new time each (terminate), calm cadence;
    # "itn-heightened": the same after a rebalance recommendation (spot every 100 ms).
    mode: str = "rebalance"
    requests_per_second: float = float("nan")  # IMDS GETs while the lane ran


def _env(url: str, interval: float) -> dict[str, str]:
    env, _ = agent_env()
    env.update(
        FOREWARN_AWS_URL=url,
        FOREWARN_AWS_SPOT_INTERVAL=str(interval),
        FOREWARN_AWS_REBALANCE_INTERVAL=str(interval),
    )
    return env


def _quiet(server: SimServer) -> SimServer:
    """No traceback on stderr when an agent drops its kept-alive connection at exit."""
    server.httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
    return server


def _wait(sock: zmq.Socket[bytes], action: str, timeout: float) -> float | None:
    """Arrival time of the next notice with `action`, or None on timeout."""
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        if not sock.poll(int(left * 1000)):
            return None
        topic, payload = sock.recv_multipart()
        arrived = time.monotonic()
        if topic == b"notice" and f'"action":"{action}"'.encode() in payload:
            return arrived
    return None


def run_lane(lane: Lane, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    sim = ImdsSimulator()
    server = _quiet(SimServer(sim)).start()
    env = _env(server.url, lane.interval)
    agent = start_agent(env, "--provider", "aws")
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"notice")
    sock.setsockopt(zmq.SUBSCRIBE, b"heartbeat")
    sock.connect(f"ipc://{env['FOREWARN_RUNTIME_DIR']}/events")
    timeout = 3 * lane.interval + 3.0
    try:
        # The first heartbeat says the subscription reached the agent.
        if not sock.poll(30_000):
            raise RuntimeError("no heartbeat from the agent within 30 s")
        sock.recv_multipart()
        if lane.mode == "itn-heightened":
            sim.raise_notice("rebalance", {"noticeTime": format_time(T0)})
            if _wait(sock, "drain", timeout) is None:
                raise RuntimeError("the rebalance recommendation never arrived")
        count = 0
        with sim.lock:
            gets_before = sum(n for key, n in sim.requests.items() if key.startswith("GET "))
        lane_started = time.monotonic()
        while not stop.is_set() and (lane.notices is None or count < lane.notices):
            time.sleep(rng.uniform(0, lane.interval))
            if lane.mode != "rebalance":
                # A new interruption time each round: the notice changes, so it is re-sent.
                notice_time = format_time(T0 + timedelta(minutes=count + 1))
                sim.raise_notice("spot", {"time": notice_time})
                action = "terminate"
            elif count % 2 == 0:
                # A fresh noticeTime each time, so each drain is a new notice.
                notice_time = format_time(T0 + timedelta(minutes=count))
                sim.raise_notice("rebalance", {"noticeTime": notice_time})
                action = "drain"
            else:
                sim.withdraw("rebalance")
                action = "clear"
            changed = time.monotonic()
            arrived = _wait(sock, action, timeout)
            if arrived is None:
                lane.missed += 1
            else:
                lane.latencies.append(arrived - changed)
            count += 1
        with sim.lock:
            gets = sum(n for key, n in sim.requests.items() if key.startswith("GET "))
        lane.requests_per_second = (gets - gets_before) / (time.monotonic() - lane_started)
    except Exception as error:  # reported in the table, not a traceback from a thread
        lane.error = f"{type(error).__name__}: {error}"
    finally:
        sock.close()
        agent.terminate()
        agent.wait()
        server.stop()
        shutil.rmtree(env["FOREWARN_STATE_DIR"].rsplit("/", 1)[0], ignore_errors=True)


@dataclass
class Idle:
    seconds: float
    cpu_aws: float = float("nan")
    cpu_local: float = float("nan")
    requests: Counter[str] = field(default_factory=Counter)
    error: str | None = None


def run_idle(idle: Idle) -> None:
    sim = ImdsSimulator()
    server = _quiet(SimServer(sim)).start()
    aws_env = _env(server.url, 0.5)
    local_env, _ = agent_env()
    agents = []
    try:
        agents = [
            start_agent(aws_env, "--provider", "aws"),
            start_agent(local_env, "--provider", "local"),
        ]
        time.sleep(2.0)  # past start-up and the first token
        before_cpu = [cpu_seconds(agent.pid) for agent in agents]
        with sim.lock:
            before = Counter(sim.requests)
        time.sleep(idle.seconds)
        after_cpu = [cpu_seconds(agent.pid) for agent in agents]
        with sim.lock:
            idle.requests = Counter(sim.requests) - before
        idle.cpu_aws, idle.cpu_local = (
            (after - start) / idle.seconds * 100
            for after, start in zip(after_cpu, before_cpu, strict=True)
        )
    except Exception as error:
        idle.error = f"{type(error).__name__}: {error}"
    finally:
        for agent in agents:
            agent.terminate()
            agent.wait()
        server.stop()
        for env in (aws_env, local_env):
            shutil.rmtree(env["FOREWARN_STATE_DIR"].rsplit("/", 1)[0], ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notices", type=int, default=200, help="at the default cadence")
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--itn-notices", type=int, default=100, help="per interruption-notice lane")
    args = parser.parse_args(argv)

    half = args.notices // 2
    default_lanes = [
        Lane("default 0.5 s (lane 1)", 0.5, half),
        Lane("default 0.5 s (lane 2)", 0.5, args.notices - half),
    ]
    baselines = [
        Lane("fixed 2 s poller (baseline)", 2.0, None),
        Lane("fixed 5 s poller (baseline)", 5.0, None),
    ]
    itn_lanes = [
        Lane("ITN, calm 0.5 s (today)", 0.5, args.itn_notices, mode="itn"),
        Lane("ITN after a rebalance (0.1 s)", 0.5, args.itn_notices, mode="itn-heightened"),
    ]
    idle = Idle(args.cpu_seconds)
    stop = threading.Event()
    threads = [
        threading.Thread(target=run_lane, args=(lane, stop, args.seed + i), daemon=True)
        for i, lane in enumerate(default_lanes + itn_lanes + baselines)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    leading = len(default_lanes) + len(itn_lanes)
    for thread in threads[:leading]:
        thread.join()
    stop.set()  # the baselines end with the default and ITN lanes
    for thread in threads[leading:]:
        thread.join()
    elapsed = time.monotonic() - started
    run_idle(idle)

    merged = Lane("default 0.5 s (all)", 0.5, args.notices)
    for lane in default_lanes:
        merged.latencies += lane.latencies
        merged.missed += lane.missed
    merged.requests_per_second = sum(lane.requests_per_second for lane in default_lanes) / len(
        default_lanes
    )
    rows = []
    for lane in [merged, *itn_lanes, *baselines]:
        values = lane.latencies
        rows.append(
            [
                lane.label,
                len(values),
                lane.missed,
                f"{median(values):.3f}" if values else "-",
                f"{percentile(values, 99):.3f}" if values else "-",
                f"{max(values):.3f}" if values else "-",
                f"{lane.requests_per_second:.1f}",
            ]
        )
    print("Detection latency, simulator change → subscriber (seconds)\n")
    print(table(["poller", "notices", "missed", "p50", "p99", "max", "IMDS GETs/s"], rows))
    if merged.latencies and baselines[0].latencies and baselines[1].latencies:
        p99 = percentile(merged.latencies, 99)
        print(
            f"\np99 ratio: 2 s poller / default = "
            f"{percentile(baselines[0].latencies, 99) / p99:.1f}x, "
            f"5 s poller / default = {percentile(baselines[1].latencies, 99) / p99:.1f}x; "
            f"goal: default p99 <= 0.6 s ({'met' if p99 <= 0.6 else 'NOT met'})"
        )

    calm, heightened = itn_lanes
    if heightened.latencies:
        p99 = percentile(heightened.latencies, 99)
        print(
            f"\nITN after a rebalance: p99 {p99:.3f}s (goal <= 0.15 s: "
            f"{'met' if p99 <= 0.15 else 'NOT met'}); IMDS GETs per second while heightened "
            f"{heightened.requests_per_second:.1f} (calm lane {calm.requests_per_second:.1f})"
        )

    print(f"\nIdle agent with the AWS watcher over {idle.seconds:g}s (default cadence)\n")
    total = sum(idle.requests.values())
    request_rows = [
        [path, count, f"{count / idle.seconds:.2f}"]
        for path, count in sorted(idle.requests.items())
    ]
    request_rows.append(["all", total, f"{total / idle.seconds:.2f}"])
    print(table(["IMDS request", "count", "per second"], request_rows))
    print()
    print(
        table(
            ["agent", "CPU % of one core"],
            [
                ["local watcher only (baseline)", f"{idle.cpu_local:.3f}"],
                ["aws watcher, default cadence", f"{idle.cpu_aws:.3f}"],
            ],
        )
    )
    verdict = "met" if idle.cpu_aws <= 0.5 else "NOT met"
    print(f"\ngoal: agent with the AWS watcher <= 0.5 % of one core ({verdict})")
    errors = [lane.error for lane in [*default_lanes, *itn_lanes, *baselines] if lane.error] + (
        [idle.error] if idle.error else []
    )
    for error in errors:
        print(f"error: {error}")
    print(f"\n(all lanes at once, {elapsed:.0f}s; then the idle agents on their own)")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
