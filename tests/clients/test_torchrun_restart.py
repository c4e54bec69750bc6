"""A torchrun elastic restart (`--max-restarts`) after a terminate: torchrun starts the rank
again in place on the same node, under the same agent, which still lists the terminate it
acked. Two gloo ranks cannot re-mesh on a restart with torch 2.13 (README: `Gloo
connectFullMesh failed`, forewarn or not), so this runs one rank (world size 1 re-meshes),
with its DataLoader workers: what the guard of a restarted rank does is the same."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually, free_port, requires

pytestmark = requires("torch")

# Long enough that a restarted rank (torch imported again, at a load of 10 on two cores the
# restart took 22 s) may still start inside the lead, past the guard's 30 s exit margin or not.
LEAD = 45.0


def test_a_rank_restarted_by_torchrun_after_a_terminate_resumes_its_save_and_exits_again(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The first attempt saves for the terminate and exits 143; torchrun restarts it; the
    restarted rank resumes from that save (the same state, no step lost), takes the
    terminate an earlier client acted on as in force with its deadline inside the guard's
    exit margin, saves and exits 143 again before the deadline; torchrun, out of restarts,
    exits 1. Measured with a 40 s lead (load 12): the first save at step 23, the restart
    began 22 s later and saved at step 24 (its first step: the agent's replay came after the
    check at its resume point)."""
    store = tmp_path / "store"
    job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    argv += ["--nproc-per-node", "1", "--max-restarts", "1", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(free_port()), "-m", "forewarn.clients.demo_torch"]
    argv += ["--dir", str(store), "--steps", "1000000", "--step-time", "0.05"]
    argv += ["--eval-every", "0"]
    with AgentProcess(tmp_path, env=env) as agent:
        out = tmp_path / "job.out"
        err = tmp_path / "job.err"
        job = subprocess.Popen(
            argv,
            env=job_env,
            stdout=out.open("w"),
            stderr=err.open("w"),
            start_new_session=True,
        )
        try:

            def lines() -> list[dict[str, Any]]:
                text = out.read_text()
                return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

            eventually(lambda: any(e["event"] == "step" for e in lines()), 120, "a first step")
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            sent = time.time()
            assert agent.control(notice)["ok"]
            code = job.wait(LEAD + 60)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait(30)
    events = lines()
    starts = [e for e in events if e["event"] == "started"]
    saves = [e for e in events if e["event"] == "saved"]
    exits = [e for e in events if e["event"] == "exit"]
    assert code == 1, err.read_text()[-3000:]
    assert len(starts) == 2 and len(exits) == 2 and len(saves) == 2, events
    first, restarted = starts
    assert first["step"] == 0 and first["generation"] is None
    # The restart resumes the first attempt's exit save: nothing lost, the state identical.
    assert restarted["step"] == saves[0]["step"] == exits[0]["step"], events
    assert restarted["hash"] == saves[0]["hash"], events
    assert restarted["generation"] == f"step-{saves[0]['step']:012d}"
    for saved in saves:
        assert saved["exit"] and saved["reasons"] == ["terminate"], saved
        assert saved["t"] < sent + LEAD, (saved, sent)
    # Each attempt stopped at the step it saved: no step trained past the exit's save.
    assert [e["step"] for e in exits] == [e["step"] for e in saves], events
    log = err.read_text()
    assert log.count("exiting at step") == 2, log[-3000:]
    assert "an earlier client acted on it" in log, log[-3000:]
