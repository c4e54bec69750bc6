"""CPU time of each `forewarn` command's start, up to its first answer: what a shell script
calling `forewarn wait` (or a test starting a simulator) pays before anything happens.

Each figure is the median of user+system CPU over fresh processes, beside a bare interpreter
measured in the same run; no agent runs (each command finds none, in its own runtime
directory), so the figure is the start and the "no agent" answer, not the network. CPU rather
than wall time: the machines these run on are shared, and CPU time moves less with the load.

    python bench/command_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import agent_env, median, table

COMMANDS: tuple[tuple[str, list[str]], ...] = (
    ("forewarn --version", ["--version"]),
    ("forewarn status (no agent)", ["status"]),
    ("forewarn wait --timeout 0.01 (no agent)", ["wait", "--timeout", "0.01"]),
    ("forewarn simulate aws --help", ["simulate", "aws", "--help"]),
    ("forewarn drill aws --help", ["drill", "aws", "--help"]),
)


def cpu_ms(argv: list[str], env: dict[str, str]) -> float:
    """User+system CPU of one process, in milliseconds."""
    proc = subprocess.Popen(
        [sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0  # reaped by wait4: Popen must not wait for it again
    return (usage.ru_utime + usage.ru_stime) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as work:
        return _measure(args.runs, agent_env(Path(work))[0])


def _measure(runs: int, env: dict[str, str]) -> int:
    # Interleaved, so that a change in the load touches every row alike.
    samples: dict[str, list[float]] = {}
    rows_in = [
        ("python -c pass (baseline)", ["-c", "pass"]),
        *((label, ["-m", "forewarn.agent.cli", *words]) for label, words in COMMANDS),
    ]
    # Bytecode written (as a wheel's install compiles it), then one untimed round: the figures
    # are those of installed code, not of the first start after an edit.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for _label, words in rows_in:
        cpu_ms(words, env)
    for _ in range(runs):
        for label, words in rows_in:
            samples.setdefault(label, []).append(cpu_ms(words, env))
    base = median(samples[rows_in[0][0]])
    rows = [
        [label, f"{median(times):.0f}", f"{median(times) - base:.0f}"]
        for label, times in samples.items()
    ]
    print(f"command start-up, median CPU of {runs} runs each")
    print(table(["command", "CPU ms", "over python -c pass"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
