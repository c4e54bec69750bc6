"""Small helpers shared by the benchmarks: tables, percentiles, a safe agent environment."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def agent_env(base: Path | None = None, **extra: str) -> tuple[dict[str, str], Path]:
    """An environment with its own runtime and state directories; no metadata address reachable."""
    work = base or Path(tempfile.mkdtemp(prefix="forewarn-bench-"))
    (work / "run").mkdir(parents=True, exist_ok=True)
    (work / "state").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    env.update(
        FOREWARN_RUNTIME_DIR=str(work / "run"),
        FOREWARN_STATE_DIR=str(work / "state"),
        GCE_METADATA_HOST="127.0.0.1:9",
        GCE_METADATA_IP="127.0.0.1:9",
        NO_GCE_CHECK="true",
    )
    env.update(extra)
    return env, work


def start_agent(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "forewarn.agent.cli", "agent", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    control = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/control"
    from forewarn.protocol.wire import request

    end = time.monotonic() + 15
    while time.monotonic() < end:
        try:
            if request(control, {"op": "status"}, timeout=0.5).get("ok"):
                return proc
        except TimeoutError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("agent did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
