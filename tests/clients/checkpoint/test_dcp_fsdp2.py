"""FSDP2 (`torch.distributed.fsdp.fully_shard`) on CPU with gloo, under a real torchrun: its
sharded model and optimizer state, held by a `Stateful` as DCP's recipe does, saved by two
ranks through `save_dcp` and resumed by `load_dcp` on two ranks and on one (DCP reshards):
the whole state (parameters and AdamW's moments) equals what was saved, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import free_port, requires

pytestmark = requires("torch")
WORKER = Path(__file__).with_name("fsdp2_worker.py")


def torchrun(ranks: int, *argv: str) -> list[dict[str, Any]]:
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    command += ["--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1"]
    command += ["--master-port", str(free_port()), str(WORKER), *argv]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    env.update(PYTHONWARNINGS="ignore")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == ranks, done.stdout
    return sorted(lines, key=lambda line: line["rank"])


@pytest.mark.timeout(900)
def test_fsdp2_state_saved_by_two_ranks_resumes_on_two_and_on_one(tmp_path: Path) -> None:
    store, full = str(tmp_path / "store"), str(tmp_path / "full.pt")
    assert [line["saved"] for line in torchrun(2, "save", store, "3", full)] == [3, 3]
    for ranks in (2, 1):
        said = torchrun(ranks, "load", store, full)
        assert [line["loaded"] for line in said] == [3] * ranks, said  # no step lost
        assert said[0]["equal"] is True, said
