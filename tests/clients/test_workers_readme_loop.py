"""The README's loop with DataLoader workers given no `worker_init_fn` (most users give none),
under a SIGTERM to the job's whole process group, as systemd's control-group kill, Slurm and
Kubernetes send it: the guard keeps the workers it forks alive until the exit's save, and no
step is lost."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from forked_ranks import RankLauncher, RankProcess
from support import LazyModule, eventually, requires
from test_workers import running_in_group

pytestmark = requires("torch")
torch = LazyModule("torch")

SCRIPT = Path(__file__).with_name("readme_loader_loop.py")
SIGTERM_AT_STEP = 12  # mid-epoch, past one restart of non-persistent workers


def run_until_group_sigterm(
    launcher: RankLauncher, tmp_path: Path, *args: str
) -> tuple[RankProcess, int, str]:
    """Start the job in a process group of its own, send the group SIGTERM after step
    SIGTERM_AT_STEP, and wait for its end: the job, the last step it completed, its stderr.
    The job is forked from a launcher that imported torch once (tests/forked_ranks.py): its
    own process, session, pipes and exit code, without a fresh interpreter's ~2 CPU-s of
    torch import; its spawn and forkserver workers start fresh all the same."""
    proc = launcher.start(
        SCRIPT,
        [str(tmp_path / "checkpoint.pt"), *args],
        dict(os.environ, OMP_NUM_THREADS="1", FOREWARN_RUNTIME_DIR=str(tmp_path / "run")),
        session=True,
    )
    last = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("step "):
                last = int(line.split()[1])
                if last == SIGTERM_AT_STEP:
                    os.killpg(proc.pid, signal.SIGTERM)
                    break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for line in out.splitlines():
        if line.startswith("step "):
            last = int(line.split()[1])
    return proc, last, err


def resumes_from(tmp_path: Path) -> int:
    checkpoint = tmp_path / "checkpoint.pt"
    return int(torch.load(checkpoint)["step"]) if checkpoint.exists() else 0


@pytest.mark.slow(10)
@pytest.mark.parametrize(
    ("workers", "start_method"),
    [
        ("persistent", "fork"),
        ("restarted", "fork"),
        ("persistent", "spawn"),
        ("restarted", "forkserver"),
        ("persistent", "default:forkserver"),
    ],
)
def test_a_group_sigterm_loses_no_step_with_workers_given_no_init(
    tmp_path: Path, workers: str, start_method: str, rank_launcher: RankLauncher
) -> None:
    """Fork workers are copies of the job (the default on Linux up to Python 3.13); spawn and
    forkserver workers are started from a pickled copy (forkserver is Python 3.14's default),
    and a forkserver worker dies with its fork server, which the group's SIGTERM reaches too.
    `default:forkserver`: Python 3.14's default start method, the DataLoader given no context;
    its workers are `multiprocessing.Process`, not `ForkServerProcess`, and were started
    unprotected: the loop raised `exited unexpectedly` and lost every step."""
    proc, last, err = run_until_group_sigterm(rank_launcher, tmp_path, workers, start_method)
    assert "killed by signal" not in err and "exited unexpectedly" not in err, err[-3000:]
    assert proc.returncode == 143, err[-3000:]
    assert resumes_from(tmp_path) == last, "steps were lost"
    eventually(
        lambda: not running_in_group(proc.pid), timeout=15, what="the workers to end with the job"
    )


def test_workers_outlive_a_foreign_sigterm_only_while_a_guard_handles_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a guard that saves on SIGTERM (none made, closed, or made with
    handle_signals=False) a worker the job gave no init ends on the job-wide SIGTERM, as it did
    without forewarn: the main process ends on it too, and nothing is to be saved."""
    from forewarn.clients import CheckpointGuard, workers

    monkeypatch.setenv("FOREWARN_RUNTIME_DIR", str(tmp_path))
    assert workers._guard_handles_sigterm_here.map[0] == 0
    deaf = CheckpointGuard(notices=False, handle_signals=False)
    assert workers._guard_handles_sigterm_here.map[0] == 0
    guard = CheckpointGuard(notices=False)
    assert workers._guard_handles_sigterm_here.map[0] == 1
    guard.close()
    guard.close()  # closed twice still counts once
    deaf.close()
    assert workers._guard_handles_sigterm_here.map[0] == 0
