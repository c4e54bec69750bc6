"""The field's reclaim, end to end with real processes only: a provider's own notice from its
simulator on 127.0.0.1, read by a real agent, reaching a torchrun job (2 gloo ranks, 2
DataLoader workers each) in the middle of an evaluation pass that does not follow a
checkpoint; the platform's kill when that provider makes it; then the next job on the same
store and the same agent, which still lists the notice.

- Azure `Preempt`: the agent approves the event once every rank acked its exit save, and
  Azure evicts the VM at once on that approval (no SIGTERM): the kill comes at the approval.
- GCP preemption: the ACPI soft-off (a SIGTERM to the job's process group) with the notice,
  the hard stop (SIGKILL) 30 s later; the next job starts once the machine was taken.

The drill's job and process tree (`forewarn.agent.drill_reclaim.Job`) are reused."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from forewarn.agent.drill_reclaim import Job
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.protocol.wire import ENV_CONTROL, ENV_EVENTS, ENV_RUNTIME_DIR
from forewarn.testing import RunningAgent, eventually
from support import requires

pytestmark = requires("torch")

GCP_GRACE = 30.0  # GCP's preemption: the hard stop 30 s after the notice
EVERY_STEPS = 25  # periodic saves at 25, 50: the evaluation at step 20 follows none


def _job(agent: RunningAgent, env: dict[str, str], store: Path, log: Path, steps: int) -> Job:
    job_env = dict(
        env, **{key: agent.env[key] for key in (ENV_RUNTIME_DIR, ENV_EVENTS, ENV_CONTROL)}
    )
    exclude = {
        pid
        for pid in (
            agent.pid,
            agent.simulator and agent.simulator.proc and agent.simulator.proc.pid,
        )
        if pid
    }
    return Job(
        store,
        job_env,
        log,
        handler="guard",
        shutdown_timeout=30,
        exclude=exclude,
        steps=steps,
        every_steps=EVERY_STEPS,
    )


@pytest.mark.slow(75)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("provider", ["azure", "gcp"])
def test_a_provider_reclaim_mid_evaluation_loses_no_step_and_the_next_job_trains_on(
    tmp_path: Path, env: dict[str, str], provider: str
) -> None:
    store = tmp_path / "checkpoints"
    with RunningAgent(provider, set_env=False) as agent:
        job = _job(agent, env, store, tmp_path / "job-1.log", 1_000_000)
        try:
            job.until("started", timeout=180, step=0)
            evaluation = job.until("eval_start", timeout=120, step=20)
            sent = time.monotonic()
            if provider == "azure":
                event_id = agent.azure.event("Preempt", in_="30s")
                # The eviction starts when the agent approves: the machine goes then.
                eventually(
                    lambda: agent.azure.state()["approvals"], 60, "the agent approved the event"
                )
                approved = agent.azure.state()["approvals"]
                assert [a["EventId"] for a in approved] == [event_id], approved
            else:
                agent.gcp.preempt()
                os.killpg(job.proc.pid, signal.SIGTERM)  # the ACPI soft-off's shutdown
                while job.alive() and time.monotonic() < sent + GCP_GRACE:
                    time.sleep(0.05)
                assert not job.alive(), _left(job, tmp_path / "job-1.log")
                assert job.proc.returncode == 1  # torchrun's code after a rank's 143
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.proc.pid, signal.SIGKILL)
            job.kill()  # the machine goes: whatever is left dies with it
        finally:
            job.close()
        step = evaluation["step"]
        assert max(e["step"] for e in job.seen if e["event"] == "step") == step, job.seen[-8:]
        exit_saves = [e for e in job.seen if e["event"] == "saved" and e["exit"]]
        assert [e["step"] for e in exit_saves] == [step], job.seen[-8:]
        assert any(e["event"] == "eval_end" and e["interrupted"] for e in job.seen)
        assert [g.step for g in CheckpointStore(str(store)).generations()] == [step]

        if provider == "gcp":  # the next job starts once the machine was taken
            while time.monotonic() < sent + GCP_GRACE:
                time.sleep(0.1)  # the scenario: the rest of GCP's 30 s grace
        next_job = _job(agent, env, store, tmp_path / "job-2.log", step + 10)
        try:
            started = next_job.until("started", timeout=180)
            assert started["step"] == step and started["hash"] == exit_saves[0]["hash"]
            assert next_job.until("done", timeout=120)["step"] == step + 10
            assert next_job.proc.wait(60) == 0
        finally:
            next_job.close()
        assert not any(e["event"] == "exit" for e in next_job.seen), next_job.seen[-8:]
    for name in ("job-1.log", "job-2.log"):
        assert _tracebacks((tmp_path / name).read_text()) == "", name


def _tracebacks(log: str) -> str:
    """The tracebacks in a job's log but torchrun's own: its report of the SIGTERM it was sent
    (`SignalException`) and of a rank's exit 143 (`ChildFailedError`, its exit 1)."""
    found = []
    for block in log.split("Traceback (most recent call last):")[1:]:
        if "SignalException" not in block and "ChildFailedError" not in block:
            found.append(block)
    return "\n".join(found)


def _left(job: Job, log: Path) -> str:
    """What outlived the grace: each process of the job left, its last lines and its log."""
    lines = [f"the job outlived GCP's 30 s preemption grace; torchrun {job.proc.poll()}"]
    for pid in job.tree.live():
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            lines.append(f"{pid} {state} {cmd[:160]}")
    lines += [str(e) for e in job.seen[-6:]]
    return "\n".join(lines) + "\n" + log.read_text()[-3000:]
