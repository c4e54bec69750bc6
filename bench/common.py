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


# Seven agents start at once in some benchmarks, on a machine others share: an agent that
# needs 20 s to import and bind under that load has still started.
START_TIMEOUT = 90.0


def start_agent(
    env: dict[str, str], *args: str, timeout: float = START_TIMEOUT
) -> subprocess.Popen[bytes]:
    """An agent subprocess that answers `status`; its output goes to `agent.log` in its
    runtime directory, whose end is in the error when it exits or never answers."""
    log_path = Path(env["FOREWARN_RUNTIME_DIR"]).parent / "agent.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "forewarn.agent.cli", "agent", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    control = f"ipc://{env['FOREWARN_RUNTIME_DIR']}/control"
    from forewarn.protocol.wire import request

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"agent exited with {proc.returncode}: {_tail(log_path)}")
        try:
            if request(control, {"op": "status"}, timeout=1.0).get("ok"):
                return proc
        except TimeoutError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"agent did not answer within {timeout:g}s: {_tail(log_path)}")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's threads, to the nanosecond: the sum of their
    `/proc/PID/task/TID/schedstat` run times (the scheduler's own count). `/proc/PID/stat`
    counts in ticks (10 ms): an idle agent uses 15 of them in a minute, so one tick either way
    moved a 30 s reading of 0.2 % by a sixth (0.200 % was 6 ticks, 0.233 % 7, 0.300 % 9).
    A thread that ends between two readings takes its time with it: the benchmarks read
    processes whose threads live as long as they do (the loop, ZeroMQ's, the executor's).
    Without schedstat (a kernel built without it), the ticks."""
    try:
        return (
            sum(
                int((task / "schedstat").read_text().split()[0])
                for task in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        return cpu_ticks_seconds(pid)


def cpu_ticks_seconds(pid: int) -> float:
    """CPU time of a process (every thread it had) from `/proc/PID/stat`, in ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
