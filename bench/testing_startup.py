"""Start-up to ready of forewarn.testing's agent (what the `forewarn_agent` fixture costs a
test): from `RunningAgent.start()` to its first heartbeat, and to the end of the teardown.

Medians over `--runs` agents, beside a bare `python -c pass` (a fresh interpreter, the floor of
any subprocess), the imports the agent's runtime path cannot do without (pydantic with
pydantic-settings, pyzmq, asyncio) and a provider-backed agent (`--provider`), all measured
in the same run. Each agent row starts one untimed agent first, with bytecode writing on, so
that the figures are those of installed code (a wheel's install compiles it), not of the
first start after an edit. Goal: the local agent ready in at most 1 s on the 2-core machine.

    python bench/testing_startup.py [--runs 10] [--provider aws]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from common import median, table
from forewarn.testing import RunningAgent

RUNTIME_IMPORTS = "import asyncio, pydantic, pydantic_settings, zmq"


def bare_python(runs: int, code: str = "pass") -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - started)
    return times


def agent(provider: str, runs: int) -> tuple[list[float], list[float]]:
    RunningAgent(provider, set_env=False).start().stop()  # warm-up: writes the bytecode
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
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        print("(PYTHONDONTWRITEBYTECODE was set: unset for this run, see the docstring)")
    rows = [["python -c pass (baseline)", f"{median(bare_python(args.runs)) * 1000:.0f}", "-"]]
    runtime = median(bare_python(args.runs, RUNTIME_IMPORTS))
    rows.append([f"python -c '{RUNTIME_IMPORTS}'", f"{runtime * 1000:.0f}", "-"])
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
    local_ms = float(rows[2][1])
    print(f"goal: local agent ready in <= 1000 ms: {'met' if local_ms <= 1000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
