"""A torchrun elastic restart (`--max-restarts`) after a reclaim's notices, 2 gloo ranks with
DataLoader workers, a real agent reading AWS's simulator on 127.0.0.1: a rebalance
recommendation (a drain), then a spot interruption (a terminate). The ranks save for the
terminate and exit 143; torchrun starts both again in place, under the same agent. While they
start, before their guards are up, a second terminate comes that no client acted on: each
restarted guard learns both from the agent's replay on subscribe, resumes the exit's save and
saves and exits at once for the new one. At the deadline the machine's kill takes what is left.

torch 2.13's torchrun shares its rendezvous TCPStore with the ranks and keeps it across a
restart, with nothing that tells one attempt's keys from the next: the restarted ranks read the
first attempt's gloo addresses and fail in `connectFullMesh` (`Connection refused`). The job
runs as the README says a restarting job must (`drill_reclaim.Job(max_restarts=...)`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from forewarn.agent.drill_reclaim import Job
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.protocol.wire import ENV_CONTROL, ENV_EVENTS, ENV_RUNTIME_DIR
from forewarn.testing import RunningAgent, eventually
from support import requires

pytestmark = requires("torch")

# The restart imports torch again on both ranks (22 s at a load of 10 on two cores): it must
# end inside the lead, and the guard's 30 s exit margin sits inside it too.
LEAD = 55.0
LATE_LEAD = 45.0


@pytest.mark.slow(60)
@pytest.mark.timeout(600)
def test_two_ranks_restarted_by_torchrun_after_a_drain_and_a_terminate_lose_no_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Measured (load 9.7): the drain's save at step 4, the exit's at 6; the restarted ranks
    both logged the late terminate as in force before they started with no
    client having acted on it, resumed step 6 and saved it (for the drain and the late
    terminate) and exited 143; torchrun, out of restarts, exited 1, 20 s after the notice.
    Another run saved the drain alone at the resumed step 12, then the terminate at step 13;
    the restarted ranks now ack the drain their resumed generation answered, and save once."""
    store = tmp_path / "checkpoints"
    log = tmp_path / "job.log"
    with RunningAgent("aws", set_env=False) as agent:
        job_env = dict(env, **{k: agent.env[k] for k in (ENV_RUNTIME_DIR, ENV_EVENTS, ENV_CONTROL)})
        exclude = {pid for pid in (agent.pid, agent.simulator and agent.simulator.proc.pid) if pid}
        job = Job(
            store,
            job_env,
            log,
            handler="guard",
            shutdown_timeout=30,
            exclude=exclude,
            every_steps=None,
            max_restarts=1,
        )
        try:
            job.until("started", timeout=180, step=0)
            job.until("step", timeout=120)
            agent.aws.rebalance()
            drained = job.until("saved", timeout=120)
            assert drained["reasons"] == ["drain"] and not drained["exit"], drained
            eventually(
                lambda: "flushed by every client (2)" in agent.log(), 60, "both ranks' drain acks"
            )
            agent.aws.spot_interruption(in_=LEAD)
            deadline = time.monotonic() + LEAD
            first_exit = job.until("exit", timeout=LEAD)
            # While the restarted ranks start (torchrun has yet to see the exit; then the
            # rendezvous, torch's import): a terminate no client acted on, due sooner.
            late_sent = time.time()
            late = agent.notify("terminate", f"{LATE_LEAD:g}s", reason="manual")
            try:  # all before the deadline
                restarted = job.until("started", timeout=max(1.0, deadline - time.monotonic()))
                second_exit = job.until("exit", timeout=max(1.0, deadline - time.monotonic()))
                code = job.proc.wait(max(1.0, deadline - time.monotonic()))
            except (TimeoutError, subprocess.TimeoutExpired) as failed:
                raise AssertionError(
                    f"{failed}; the job's log:\n{log.read_text()[-3000:]}"
                ) from None
        finally:
            job.kill()  # the deadline: the machine goes, whatever is left dies with it
            job.close()
    events = job.seen
    assert code == 1, log.read_text()[-3000:]  # torchrun's code after a rank's 143
    saves = [(e["step"], e["reasons"], e["exit"]) for e in events if e["event"] == "saved"]
    exit_saves = [e for e in events if e["event"] == "saved" and e["exit"]]
    assert saves[0] == (drained["step"], ["drain"], False), saves
    # Rank 0 says `peer` where rank 1 came to the terminate's exit first (the agreement).
    assert len(exit_saves) == 2, saves
    assert all({"terminate", "peer"} & set(e["reasons"]) for e in exit_saves), saves
    # The restarted ranks owe the drain no save: the generation they resumed from names it as
    # answered (its metadata), so they ack it at the resumed step. They saved for it again,
    # on its own at the step they resumed, before the terminate's exit a step later.
    assert len(saves) == 3, saves
    assert set(exit_saves[1]["reasons"]) <= {"terminate", "peer"}, saves
    first_save, second_save = exit_saves
    # The restart resumes the first attempt's exit save on both ranks: the generation verified
    # (every rank's part, by its checksums), the state identical, no step lost.
    assert restarted["step"] == first_save["step"] == first_exit["step"], events
    assert restarted["hash"] == first_save["hash"], events
    assert restarted["generation"] == f"step-{first_save['step']:012d}", restarted
    # The late terminate was raised before the restarted ranks were up; their guards learnt
    # it from the agent's replay and, nobody having acted on it, saved and exited at once:
    # within the ranks' agreement period (2 steps) of the step they resumed, and at the last
    # step trained.
    assert late_sent < restarted["t"], (late_sent, restarted)
    assert second_exit["step"] == second_save["step"] <= restarted["step"] + 2, events
    trained = [e["step"] for e in events if e["event"] == "step"]
    assert max(trained) <= second_save["step"], events[-8:]
    assert max(g.step for g in CheckpointStore(str(store)).generations()) == second_save["step"]
    text = log.read_text()
    assert "connectFullMesh" not in text, text[-3000:]
    # Each restarted rank's exit line, after their first lines: a first-attempt rank whose
    # exit's save was still being recorded when the late terminate came (load 22) named it
    # too, answered by that save, and a count over the whole log found 3.
    lines = text.splitlines()
    restart = next(i for i, x in enumerate(lines) if "already in force when this job" in x)
    exits_on_late = [x for x in lines[restart:] if "exiting at step" in x and late in x]
    assert len(exits_on_late) == 2, text[-3000:]
