"""Start-up to ready of forewarn.testing's agent (what the `forewarn_agent` fixture costs a
test): from `RunningAgent.start()` to its first heartbeat, and to the end of the teardown.

Medians over `--runs` agents, beside a bare `python -c pass` (a fresh interpreter, the floor of
any subprocess) and a provider-backed agent (`--provider`), all measured in the same run.
Goal: the local agent ready in at most 1 s on the 2-core machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from common import median, table
from forewarn.testing import RunningAgent


def bare_python(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return times


def agent(provider: str, runs: int) -> tuple[list[float], list[float]]:
    ready, teardown = [], []
    for _ in range(runs):
        handle = RunningAgent(provider, set_env=False)
        started = time.perf_counter()
        handle.start()
        ready.append(time.perf_counter() - started)
        started = time.perf_counter()
        handle.stop()
        teardown.append(time.perf_counter() - started)
    return ready, teardown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--provider", default="aws", help="the provider-backed row (default aws)")
    args = parser.parse_args(argv)
    rows = [["python -c pass (baseline)", f"{median(bare_python(args.runs)) * 1000:.0f}", "-"]]
    for provider in ("local", args.provider):
        ready, teardown = agent(provider, args.runs)
        rows.append(
            [
                f"agent ready, provider {provider}",
                f"{median(ready) * 1000:.0f}",
                f"{median(teardown) * 1000:.0f}",
            ]
        )
    print(f"forewarn.testing start-up, median of {args.runs} runs each")
    print(table(["what", "start to ready (ms)", "teardown (ms)"], rows))
    local_ms = float(rows[1][1])
    print(f"goal: local agent ready in <= 1000 ms: {'met' if local_ms <= 1000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
