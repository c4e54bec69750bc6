"""FSDP2 (`torch.distributed.fsdp.fully_shard`) on CPU with gloo, under a real torchrun: its
sharded model and optimizer state, held by a `Stateful` as DCP's recipe does, saved by two
ranks through `save_dcp` and resumed by `load_dcp` on two ranks and on one (DCP reshards):
the whole state (parameters and AdamW's moments) equals what was saved, bit for bit; and a
SIGTERM mid-training (torchrun passes it on to the ranks) drains through the guard's agreed
save with no step lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import eventually, free_port, requires

pytestmark = requires("torch")
WORKER = Path(__file__).with_name("fsdp2_worker.py")


def command(ranks: int, *argv: str) -> tuple[list[str], dict[str, str]]:
    line = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    line += ["--nproc-per-node", str(ranks), "--master-addr", "127.0.0.1"]
    line += ["--master-port", str(free_port()), str(WORKER), *argv]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    env.update(PYTHONWARNINGS="ignore")
    return line, env


def torchrun(ranks: int, *argv: str) -> list[dict[str, Any]]:
    line, env = command(ranks, *argv)
    done = subprocess.run(line, env=env, capture_output=True, text=True, timeout=300)
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


@pytest.mark.timeout(900)
def test_fsdp2_drained_by_a_sigterm_loses_no_step_and_resumes_on_two_and_on_one(
    tmp_path: Path,
) -> None:
    store, full = str(tmp_path / "store"), str(tmp_path / "full.pt")
    line, env = command(2, "train", store, full)
    out = tmp_path / "job.out"
    with out.open("w") as sink:
        job = subprocess.Popen(
            line, env=env, stdout=sink, stderr=subprocess.DEVNULL, start_new_session=True
        )
    try:

        def said() -> list[dict[str, Any]]:
            return [json.loads(x) for x in out.read_text().splitlines() if x.startswith("{")]

        eventually(lambda: sum("step" in x for x in said()) >= 10, 240, "ten steps")
        job.send_signal(signal.SIGTERM)  # as a spot machine's shutdown does to torchrun
        job.wait(timeout=300)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    ends = {x["rank"]: x for x in said() if "saved" in x}
    assert set(ends) == {0, 1}, out.read_text()[-2000:]
    last = {
        rank: max(x["step"] for x in said() if x.get("rank") == rank and "step" in x)
        for rank in ends
    }
    for rank, end in ends.items():
        assert end["saved"] == last[rank], (end, last)  # the save was of the last step taken
    for ranks in (2, 1):
        resumed = torchrun(ranks, "load", store, full)
        assert [x["loaded"] for x in resumed] == [ends[0]["saved"]] * ranks, resumed
        assert resumed[0]["equal"] is True, resumed
