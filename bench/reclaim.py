"""Reclaims as platforms do them: forewarn's guard beside plain SIGTERM handling, same run.

The realistic drill's job (`forewarn.clients.demo_torch`: torchrun, two gloo ranks, DataLoader
workers, an evaluation pass) is reclaimed once per platform (systemd control-group kill,
Kubernetes, a cloud SIGKILL at the deadline, torchrun's own escalation), each with the notice
arriving in the middle of an evaluation pass, twice:

- `guard`: CheckpointGuard (notices, signals, rank agreement, `due_in_eval`, `worker_init_fn`);
- `plain`: what a training loop gets from a framework by itself: a SIGTERM handler that sets a
  flag checked (and agreed across ranks) after each training step, plain DataLoaders, periodic
  saves every 10 steps; no notices.

    python bench/reclaim.py [--lead SECONDS] [--seed N]

It prints, per platform and handler, the time from notice to durable checkpoint and the steps
lost (last step trained minus the step the next run resumed from).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import table  # noqa: E402
from forewarn.agent.drill_reclaim import PLATFORMS, Cell, Reclaim  # noqa: E402


def run(handler: str, lead: float, seed: int, work: Path) -> dict[str, tuple[str, str, str]]:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    base_env.update(PYTHONUNBUFFERED="1", NO_GCE_CHECK="true")
    drill = Reclaim(work, base_env, handler=handler, seed=seed, say=lambda line: None)
    results = drill.run([Cell(platform, "mid-eval", lead) for platform in PLATFORMS])
    rows = {}
    for result in results:
        durable = result.durable_seconds
        rows[result.cell.platform] = (
            f"{durable:.2f} s" if durable is not None else "never",
            str(result.lost) if result.lost is not None else "?",
            {True: "identical", False: "DIFFERS", None: "-"}[result.state_match],
        )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/reclaim.py")
    parser.add_argument("--lead", type=float, default=8.0, help="notice to SIGKILL, seconds")
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="forewarn-bench-reclaim-"))
    try:
        guard = run("guard", args.lead, args.seed, work / "guard")
        plain = run("plain", args.lead, args.seed, work / "plain")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        [platform, *guard[platform], *plain[platform]]
        for platform in PLATFORMS
        if platform in guard and platform in plain
    ]
    print(
        f"notice mid-evaluation, lead {args.lead:g} s, checkpoints every 10 steps "
        "(torchrun, 2 gloo ranks, 2 DataLoader workers each)"
    )
    print(
        table(
            [
                "platform",
                "guard: notice->durable",
                "guard: steps lost",
                "guard: state",
                "plain: notice->durable",
                "plain: steps lost",
                "plain: state",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
