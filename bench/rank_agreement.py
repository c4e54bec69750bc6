"""What rank agreement costs per step: two gloo ranks on CPU, CheckpointGuard.due every step.

Baseline in the same run: the same loop with the guard's agreement off (the per-rank check
alone). Reported as microseconds per step and as a share of a 100 ms step, for several
`agree_every` values. Goal: the default keeps the cost under 1 % of a typical step.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from common import table

RANK = r"""
import json, os, sys, time
import torch
import torch.distributed as dist
from forewarn.clients import CheckpointGuard
from forewarn.clients.agreement import RankAgreement

dist.init_process_group("gloo")
steps = int(os.environ["STEPS"])
results = {}
for every in [0] + [int(x) for x in os.environ["EVERY"].split(",")]:
    agree = False if every == 0 else RankAgreement(every, dist, torch)
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=None, agree=agree)
    dist.barrier()
    started = time.perf_counter()
    for step in range(1, steps + 1):
        guard.due(step)
    dist.barrier()
    results[every] = (time.perf_counter() - started) / steps * 1e6
    guard.close()
if dist.get_rank() == 0:
    print(json.dumps(results))
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--every", default="1,4,8,32")
    parser.add_argument("--step-ms", type=float, default=100.0, help="a typical step, for the %")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: pip install torch==2.13.0")
        return 1
    port = free_port()
    runtime = tempfile.mkdtemp(prefix="forewarn-bench-")
    procs = []
    for rank in range(2):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            STEPS=str(args.steps),
            EVERY=args.every,
            FOREWARN_RUNTIME_DIR=runtime,
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RANK], env=env, stdout=subprocess.PIPE, text=True
            )
        )
    out, _ = procs[0].communicate(timeout=600)
    for proc in procs[1:]:
        proc.wait(timeout=60)
    results = {int(k): v for k, v in json.loads(out).items()}
    base = results[0]
    from forewarn.clients.agreement import DEFAULT_AGREE_EVERY

    rows = [["agreement off (baseline)", f"{base:.2f}", "0.00", "0.000 %"]]
    for every, micros in sorted(results.items()):
        if every == 0:
            continue
        added = micros - base
        mark = " (default)" if every == DEFAULT_AGREE_EVERY else ""
        rows.append(
            [
                f"agree_every={every}{mark}",
                f"{micros:.2f}",
                f"{added:.2f}",
                f"{added / (args.step_ms * 1000) * 100:.3f} %",
            ]
        )
    print(
        table(
            [
                "guard.due per step, 2 gloo ranks",
                "µs/step",
                "added µs/step",
                f"of a {args.step_ms:g} ms step",
            ],
            rows,
        )
    )
    print("\ngoal: the default costs < 1 % of a typical step")
    time.sleep(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
