"""Reclaims as platforms do them: forewarn's guard beside a framework's own SIGTERM handling.

The realistic drill's job (`forewarn.clients.demo_torch`: torchrun, two gloo ranks, DataLoader
workers, an evaluation pass every 20 steps, a checkpoint every `--every-steps` steps) is
reclaimed once per platform (systemd control-group kill, Kubernetes, a cloud SIGKILL at the
deadline, torchrun's own escalation, and torchrun restarting the ranks: `--max-restarts 1`,
SIGKILL at the deadline to the ranks the notice found, torchrun spared), each with the notice
arriving in the middle of an evaluation pass that does not directly follow a checkpoint, twice
in the same run:

- `guard`: CheckpointGuard (notices, signals, rank agreement, `due_in_eval`, `worker_init_fn`);
- `plain`: what PyTorch Lightning 2.x does by itself: a SIGTERM handler that sets a flag,
  checked after each training step and each evaluation batch, and on it an exit without a
  checkpoint (`SIGTERMException`); plain DataLoaders; no notices. Only the periodic
  checkpoints survive, as with transformers' `Trainer`, which handles no SIGTERM at all.

    python bench/reclaim.py [--lead SECONDS] [--every-steps N] [--seed N]

It prints, per platform and handler, the time from notice to durable checkpoint, the steps
lost (last step trained minus the step the next run resumed from: for the restarted job, the
last step before the restart minus the step the restarted ranks resumed from) and whether the
resumed state is bit-for-bit the saved one; for the restarted job, also the time from the
notice to the restarted ranks' resume.
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
from forewarn.agent.drill_reclaim import PLATFORMS, RESTARTED, Cell, Reclaim  # noqa: E402

# The table's name for each platform's cell.
LABELS = {RESTARTED: "torchrun, restarted"}


def run(
    handler: str, lead: float, every_steps: int, seed: int, work: Path, platforms: list[str]
) -> dict[str, tuple[str, str, str, str]]:
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("FOREWARN_")}
    base_env.update(PYTHONUNBUFFERED="1", NO_GCE_CHECK="true")
    drill = Reclaim(
        work,
        base_env,
        handler=handler,
        seed=seed,
        say=lambda line: None,
        every_steps=every_steps,
        skip_saved_evals=True,
    )
    results = drill.run([Cell(platform, "mid-eval", lead) for platform in platforms])
    rows = {}
    for result in results:
        durable = result.durable_seconds
        resumed = result.resumed_seconds
        rows[result.cell.platform] = (
            f"{durable:.2f} s" if durable is not None else "never",
            str(result.lost) if result.lost is not None else f"? ({result.error})",
            {True: "identical", False: "DIFFERS", None: "-"}[result.state_match],
            # Only a restarted job resumes within its cell; the others on the next machine.
            f"{resumed:.2f} s" if resumed is not None else "-",
        )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/reclaim.py")
    parser.add_argument("--lead", type=float, default=8.0, help="notice to SIGKILL, seconds")
    parser.add_argument(
        "--every-steps", type=int, default=25, help="steps between periodic checkpoints"
    )
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--platform",
        action="append",
        choices=PLATFORMS,
        help="only this platform (repeatable; default all five)",
    )
    args = parser.parse_args(argv)
    if args.every_steps < 1:
        parser.error(f"--every-steps must be at least 1 (got {args.every_steps})")
    platforms = args.platform or list(PLATFORMS)
    work = Path(tempfile.mkdtemp(prefix="forewarn-bench-reclaim-"))
    try:
        guard = run("guard", args.lead, args.every_steps, args.seed, work / "guard", platforms)
        plain = run("plain", args.lead, args.every_steps, args.seed, work / "plain", platforms)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        [LABELS.get(platform, platform), *guard[platform], *plain[platform]]
        for platform in platforms
        if platform in guard and platform in plain
    ]
    print(
        f"notice mid-evaluation, lead {args.lead:g} s, checkpoints every {args.every_steps} "
        "steps, evaluation every 20 (torchrun, 2 gloo ranks, 2 DataLoader workers each)"
    )
    print(
        table(
            [
                "platform",
                "guard: notice->durable",
                "guard: steps lost",
                "guard: state",
                "guard: notice->resumed",
                "plain: notice->durable",
                "plain: steps lost",
                "plain: state",
                "plain: notice->resumed",
            ],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
