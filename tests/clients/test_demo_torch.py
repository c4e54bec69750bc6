"""The realistic drill's job, `forewarn.clients.demo_torch`, as one gloo rank: its `plain`
handler is the benchmark's baseline and must do what PyTorch Lightning does by itself on a
SIGTERM: stop at the next training step or evaluation batch without writing a checkpoint, so
only the periodic saves survive (bench/reclaim.py's plain column lost nothing while this
handler saved on the signal)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from forked_ranks import RankLauncher, RankProcess
from support import free_port, requires

pytestmark = requires("torch")


def start(
    launcher: RankLauncher, env: dict[str, str], store: Path, *args: str, handler: str = "plain"
) -> RankProcess:
    """The job forked from a launcher that imported torch once (tests/forked_ranks.py): its
    own process, gloo group, pipes, signals and exit code, without the ~2 CPU-s of a fresh
    interpreter's torch import. What a fresh job's start does is the reclaim drill's check."""
    rank_env = dict(
        env,
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    return launcher.start(
        "-m forewarn.clients.demo_torch",
        ["--dir", str(store), "--handler", handler, "--workers", "0", "--steps", "100000", *args],
        rank_env,
    )


def read_until(proc: RankProcess, kind: str, step: int = 0) -> list[dict[str, Any]]:
    """The job's events up to its first `kind` at `step` or later; fails once the job has
    trained past `step` without it. Counted in the job's own steps, not in seconds: 60 s
    counted from before the job's start (a fresh interpreter importing torch and joining
    gloo) ran out beside busy loops before its `started` line came. A job that hangs is
    ended by the test's timeout."""
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the job ended before {kind}: {seen[-5:]}")
        seen.append(json.loads(line))
        event = seen[-1]
        if event["event"] == kind and event.get("step", 0) >= step:
            return seen
        if event["event"] == "step" and event["step"] > step:
            raise AssertionError(f"the job passed step {step} without {kind}: {seen[-5:]}")


def finish(proc: RankProcess, code: int = 0) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err[-2000:]
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# The launcher importing torch, when this test is its process's first: over a minute on a
# loaded machine.
@pytest.mark.timeout(300)
def test_plain_exits_on_sigterm_mid_evaluation_without_a_checkpoint(
    tmp_path: Path, env: dict[str, str], rank_launcher: RankLauncher
) -> None:
    store = tmp_path / "ckpt"
    job = start(
        rank_launcher,
        env,
        store,
        *("--every-steps", "3", "--eval-every", "4", "--eval-batches", "100"),
        *("--eval-batch-time", "0.05", "--step-time", "0.01"),
    )
    seen = read_until(job, "eval_start", 4)
    job.send_signal(signal.SIGTERM)
    rest = finish(job)
    # The pass stops at the next batch and the job exits at step 4; nothing is saved after
    # the signal: the last checkpoint is the periodic one at step 3.
    assert [e for e in rest if e["event"] == "saved"] == [], rest
    ended = [e for e in rest if e["event"] == "eval_end"]
    assert ended and ended[0]["interrupted"] and ended[0]["batches"] < 100, rest
    assert [e["step"] for e in rest if e["event"] == "exit"] == [4], rest
    assert [e["step"] for e in seen if e["event"] == "saved"] == [3], seen
    generations = sorted(p.name for p in store.iterdir() if p.name.startswith("step-"))
    assert generations == ["step-000000000003"], generations


@pytest.mark.timeout(300)
def test_guard_exits_143_after_the_save_for_a_sigterm(
    tmp_path: Path, env: dict[str, str], rank_launcher: RankLauncher
) -> None:
    """The drill's job ended with 0 after its reclaim save: torchrun, systemd and a Kubernetes
    Job take that for a finished run, which is never restarted (the README's loop ends with
    `sys.exit(guard.exit_code)`)."""
    store = tmp_path / "ckpt"
    job = start(
        rank_launcher, env, store, "--step-time", "0.01", "--eval-every", "0", handler="guard"
    )
    read_until(job, "step", 3)
    job.send_signal(signal.SIGTERM)
    rest = finish(job, code=143)
    saved = [e for e in rest if e["event"] == "saved"]
    exits = [e for e in rest if e["event"] == "exit"]
    assert saved and saved[-1]["exit"] and exits[-1]["step"] == saved[-1]["step"], rest
