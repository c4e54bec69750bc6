"""A drain's background save that fails (a full disk) is acked `failed` to the agent, and the
ack says why, as a synchronous save's failed ack does: without the note, the agent's log said
`outcome=failed ... durable=none` with no cause (a real
agent subprocess, a real torch job, a real 1 MiB tmpfs that the state does not fit)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import AgentProcess, eventually, requires, run_forewarn, tmpfs_disk

pytestmark = requires("torch")

# A real torch loop whose state (2 MiB of weights) does not fit the store's disk: its
# background save fails with ENOSPC; the job reports the failure the next due() raises and
# leaves.
JOB = """
import sys
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import BackgroundSaveError, CheckpointStore

model = torch.nn.Linear(512, 1024)
guard = CheckpointGuard(store=CheckpointStore(sys.argv[1]), background=True)
step = 0
while step < 100000:
    step += 1
    model(torch.randn(4, 512)).sum().backward()
    if step == 3:
        print("training", flush=True)
    try:
        due = guard.due(step)
    except BackgroundSaveError as error:
        print("failed:", error, flush=True)
        break
    if due:
        guard.save_state(step, {"model": model.state_dict()})
guard.close()
sys.exit(guard.exit_code)
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_disk(tmp_path, "1m") as mount:
        yield mount


def test_a_failed_background_save_acks_the_drain_failed_saying_why(
    tmp_path: Path, small_disk: Path
) -> None:
    with AgentProcess(tmp_path) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", JOB, str(small_disk)],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "training", job.communicate()
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        out, err = job.communicate(timeout=60)
        assert "No space left on device" in out, out + err
        acked = eventually(
            lambda: [
                line
                for line in agent.output().splitlines()
                if f"ack {notice} from" in line and "outcome=failed" in line
            ],
            10,
            "the failed ack",
        )
        assert len(acked) == 1, acked
        assert "No space left on device" in acked[0], acked[0]


def test_a_failed_background_save_of_a_drain_is_in_status_while_the_drain_is_active(
    tmp_path: Path, small_disk: Path
) -> None:
    """`forewarn status` said nothing of it: a drain's failed save was only in the log."""
    with AgentProcess(tmp_path) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", JOB, str(small_disk)],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "training", job.communicate()
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        out, err = job.communicate(timeout=60)
        assert "No space left on device" in out, out + err
        failed = eventually(
            lambda: agent.control({"op": "status"})["save_failed"].get(notice),
            10,
            "the failed save in status",
        )
        ((client, why),) = failed.items()
        assert "No space left on device" in why, why
        shown = run_forewarn("status", env=agent.env)
        assert shown.returncode == 0, shown.stderr
        (line,) = [row for row in shown.stdout.splitlines() if notice in row]
        assert f"not saved by {client} (its save failed: " in line, line
