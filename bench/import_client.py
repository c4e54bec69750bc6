"""What `import forewarn.clients` adds to a training process: time and memory.

Each figure is the median over fresh interpreters, beside a bare interpreter measured in the
same run (and `import zmq` alone, the one library the client needs). Goal: at most 150 ms.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from common import median, table

PROBE = (
    "import resource, time, json\n"
    "t = time.perf_counter()\n"
    "{stmt}\n"
    "elapsed = time.perf_counter() - t\n"
    "print(json.dumps([elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))\n"
)


def sample(stmt: str, runs: int) -> tuple[float, float]:
    times, rss = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE.format(stmt=stmt)],
            capture_output=True,
            text=True,
            check=True,
        )
        elapsed, maxrss = json.loads(out.stdout)
        times.append(elapsed * 1000)
        rss.append(maxrss / 1024)
    return median(times), median(rss)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args(argv)
    base_ms, base_mb = sample("pass", args.runs)
    rows = [["bare interpreter (baseline)", f"{base_ms:.1f}", "0.0", f"{base_mb:.1f}", "0.0"]]
    for label, stmt in (
        ("import zmq", "import zmq"),
        ("import forewarn.clients", "import forewarn.clients"),
    ):
        ms, mb = sample(stmt, args.runs)
        rows.append([label, f"{ms:.1f}", f"{ms - base_ms:.1f}", f"{mb:.1f}", f"{mb - base_mb:.1f}"])
    print(table(["import", "median ms", "added ms", "peak RSS MB", "added MB"], rows))
    print("\ngoal: import forewarn.clients adds <= 150 ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
