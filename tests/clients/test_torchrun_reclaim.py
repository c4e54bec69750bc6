"""A real reclaim of a real torchrun job (2 gloo ranks, 2 DataLoader workers each, an evaluation
pass running) on a node with a real agent: the terminate notice, systemd's control-group
SIGTERM to every process, and the SIGKILL of whatever is left at the deadline. Then the next
job on the same node, under the same agent, which still lists the terminate."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually, free_port, requires

pytestmark = requires("torch")

JOB = Path(__file__).with_name("torchrun_cyclic_heap.py")
OWN_SAVE_JOB = Path(__file__).with_name("torchrun_own_save.py")
LEAD = 8.0  # the drill's default: notice to SIGKILL


def job_processes(mark: str) -> list[int]:
    """The live (not zombie) processes whose environment holds `mark`: torchrun, its ranks
    and their DataLoader workers, wherever they were re-parented."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            if mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


class Torchrun:
    """`torchrun --nproc-per-node 2` of the job in a session of its own; rank 0's JSON lines
    read on a thread."""

    def __init__(self, env: dict[str, str], store: Path, log: Path, *args: str) -> None:
        self.mark = f"FOREWARN_TEST_JOB={uuid.uuid4().hex}"
        key, _, value = self.mark.partition("=")
        job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", **{key: value})
        self.log = log.open("w")
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        argv += ["--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        argv += ["--master-port", str(free_port()), "--shutdown-timeout", "30", str(JOB)]
        argv += ["--dir", str(store), "--step-time", "0.05", "--eval-every", "10"]
        argv += ["--eval-batches", "24", "--eval-batch-time", "0.2", *args]
        self.proc = subprocess.Popen(
            argv,
            env=job_env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                self.seen.append(event)
                self.lines.put(event)

    def until(self, kind: str, timeout: float = 120.0, **match: Any) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                event = self.lines.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, f"the job exited before {kind!r}: {self.seen}"
                continue
            if event["event"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event
        raise AssertionError(f"no {kind!r} within {timeout:g}s: {self.seen[-5:]}")

    def processes(self) -> list[int]:
        return job_processes(self.mark)

    def kill_all(self) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.kill_all()
        self.proc.wait(30)
        self._reader.join(30)
        self.log.close()


@pytest.mark.slow(70)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("platform", ["systemd", "cloud"])
def test_a_reclaim_mid_evaluation_under_torchrun_ends_in_time_loses_nothing_and_resumes(
    tmp_path: Path, env: dict[str, str], platform: str
) -> None:
    """systemd: KillMode=control-group's SIGTERM to every process with the notice; cloud (AWS,
    GCP): no SIGTERM at all, the ranks exit on the terminate and torchrun follows them."""
    store = tmp_path / "checkpoints"
    # A finalizer in a reference cycle that takes longer than the lead: Python's final
    # collection at the ranks' exit, the seconds that kept torchrun alive until the SIGKILL.
    job_env = dict(env, CYCLE_FINALIZER_SECONDS="60")
    with AgentProcess(tmp_path, env=env) as agent:
        job = Torchrun(job_env, store, tmp_path / "job-1.log", "--steps", "100000")
        try:
            job.until("started", step=0)
            evaluation = job.until("eval_start")
            assert job.processes(), "no process of the job found by its mark"
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            sent = time.monotonic()
            assert agent.control(notice)["ok"]
            if platform == "systemd":  # SIGTERM to every process of the unit at once
                for pid in job.processes():
                    os.kill(pid, signal.SIGTERM)
            while job.proc.poll() is None and time.monotonic() < sent + LEAD:
                time.sleep(0.02)
            code_at_deadline = job.proc.poll()
            # What outlives torchrun (a DataLoader worker, a rank) is an orphan the machine's
            # SIGKILL would cut: none may be left at the deadline.
            while job.processes() and time.monotonic() < sent + LEAD:
                time.sleep(0.02)
            left_at_deadline = job.processes()
            job.kill_all()  # the machine goes: SIGKILL to whatever is left
            eventually(lambda: not job.processes(), 10, "no process of the job left")
        finally:
            job.close()
        log = (tmp_path / "job-1.log").read_text()
        # torchrun ended by itself within the lead, as its SIGTERM or a rank's 143 makes it:
        # exit 1, not the SIGKILL's -9.
        assert code_at_deadline == 1, (code_at_deadline, log[-3000:])
        assert left_at_deadline == [], left_at_deadline
        step = evaluation["step"]
        exit_saves = [e for e in job.seen if e["event"] == "saved" and e["exit"]]
        assert [e["step"] for e in exit_saves] == [step], job.seen[-10:]
        assert max(e["step"] for e in job.seen if e["event"] == "step") == step
        assert any(e["event"] == "eval_end" and e["interrupted"] for e in job.seen)
        # Each rank saved once for the terminate, and the store committed that one generation
        # with both ranks' parts.
        assert log.count(f"forewarn: exiting at step {step} on terminate") == 2, log[-3000:]
        generations = CheckpointStore(str(store)).generations()
        assert [g.step for g in generations] == [step]
        assert generations[0].world_size == 2 and len(generations[0].files) >= 2

        # The next job on the same node: the agent still lists the terminate (its deadline
        # past, within the notice's grace). It resumes from the saved step and trains to its
        # end, not stopped again by the terminate the first job acted on. It starts once the
        # deadline has passed, as on a real node (the machine was taken then): one started
        # earlier, inside the job's exit margin, rightly saves and exits at once (seen: the
        # first job ended 2 s after the notice, the next one exited at its 4th step).
        while time.monotonic() < sent + LEAD:
            time.sleep(0.05)  # the scenario: the rest of the lead, until the machine's kill
        next_job = Torchrun(env, store, tmp_path / "job-2.log", "--steps", str(step + 12))
        try:
            started = next_job.until("started")
            assert started["step"] == step and started["hash"] == exit_saves[0]["hash"]
            done = next_job.until("done")
            assert done["step"] == step + 12
            assert next_job.proc.wait(60) == 0, (tmp_path / "job-2.log").read_text()[-3000:]
        finally:
            next_job.close()
        assert not any(e["event"] == "exit" for e in next_job.seen), next_job.seen


@pytest.mark.slow(40)
@pytest.mark.timeout(300)
def test_a_terminate_during_a_periodic_save_under_torchrun_exits_at_that_save(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A terminate that came while the ranks made a slow periodic save was left to the next
    agreement: the ranks trained on past the step just saved and saved again for the exit
    (a second whole flush in the lead). Agreed right after that save, it is answered there."""
    store = tmp_path / "checkpoints"
    with AgentProcess(tmp_path, env=env) as agent:
        job = Torchrun(
            env,
            store,
            tmp_path / "job.log",
            "--steps",
            "100000",
            "--every-steps",
            "10",
            "--flush-delay",
            "3",
            "--eval-every",
            "100000",
        )
        try:
            job.until("saving", step=10)
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(60.0))
            assert agent.control(notice)["ok"]
            saved = job.until("saved", step=10)
            job.until("exit", timeout=60)
            assert job.proc.wait(60) == 1  # torchrun's code after a rank's 143
        finally:
            job.close()
    log = (tmp_path / "job.log").read_text()
    assert saved["exit"] and "terminate" in saved["reasons"], job.seen[-5:]
    assert max(e["step"] for e in job.seen if e["event"] == "step") == 10, job.seen[-5:]
    assert [e["step"] for e in job.seen if e["event"] == "saving"] == [10], job.seen[-5:]
    assert log.count("forewarn: exiting at step 10 on terminate") == 2, log[-3000:]
    assert [g.step for g in CheckpointStore(str(store)).generations()] == [10]


def _kill_job(proc: subprocess.Popen[bytes], mark: str) -> None:
    """SIGKILL torchrun and its ranks, as the platform does. The ranks run in sessions of
    their own, out of torchrun's group: killing the group alone left rank 1's 1,000 s save
    and rank 0's all-reduce running after the test (seen: both alive minutes later). `mark`
    is in the job's environment."""
    for pid in [proc.pid, *job_processes(mark)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(30)


@pytest.mark.slow(40)
@pytest.mark.timeout(300)
def test_no_rank_leaves_before_every_rank_made_its_exit_save(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Ranks that save by themselves, rank 1 slower: torchrun stops the other ranks as soon as
    one exits (SIGTERM, then SIGKILL 30 s later, whatever the lead), so the fast rank, gone at
    the end of its own save, had torchrun SIGKILL the slow one mid-save. Found: a terminate
    with 3 minutes' lead, rank 0's save 16 s and rank 1's 48 s: rank 1 was SIGKILLed at 46 s
    (exit -9, its part never written). Every rank now leaves once every rank's save ended."""
    out = tmp_path / "ranks.jsonl"
    mark = f"job-{uuid.uuid4().hex}"
    with AgentProcess(tmp_path, env=env) as agent, out.open("w") as lines:
        job_env = dict(
            env,
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            SLOW_RANK_SAVE_SECONDS="4",
            FOREWARN_TEST_JOB=mark,
        )
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        argv += ["--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        argv += ["--master-port", str(free_port()), str(OWN_SAVE_JOB), "--dir", str(tmp_path)]
        proc = subprocess.Popen(
            argv, env=job_env, stdout=lines, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:

            def seen() -> list[dict[str, Any]]:
                text = out.read_text()
                return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

            eventually(
                lambda: any(e["event"] == "step" and e["step"] >= 3 for e in seen()),
                timeout=120,
                what="the ranks' third step",
            )
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(120.0))
            assert agent.control(notice)["ok"]
            assert proc.wait(90) == 1  # torchrun's code after a rank's 143
        finally:
            _kill_job(proc, mark)
    events = seen()
    log = out.read_text()
    saved = {e["rank"]: e for e in events if e["event"] == "saved"}
    exits = {e["rank"]: e for e in events if e["event"] == "exit"}
    assert set(saved) == {0, 1} and set(exits) == {0, 1}, log[-3000:]
    assert exits[0]["t"] >= saved[1]["t"], "rank 0 left while rank 1 still saved"
    assert log.count(f"forewarn: exiting at step {saved[1]['step']} on terminate") == 2, log[-3000:]


@pytest.mark.slow(35)
@pytest.mark.timeout(300)
def test_a_rank_waiting_for_a_hung_ranks_save_says_its_own_part_is_saved(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Ranks that save by themselves, rank 1's save never returning (a write into a hung
    mount): rank 0, its own part saved, waits in the exit's last all-reduce for rank 1 until
    the platform's kill (nothing bounds it but the deadline and gloo's 30 min). Found: both
    ranks logged the same line 5 s before the deadline (`the exit's save of step 22 ... has
    not ended ... it waits on its storage (a hung mount, a write that does not return) or,
    with several ranks, on another rank's part`), so the log did not say which rank hung. The
    waiting rank now says its part is saved and it waits for the others'; the hung one says
    its own save has not ended."""
    lead = 12.0
    out = tmp_path / "ranks.jsonl"
    mark = f"job-{uuid.uuid4().hex}"
    with AgentProcess(tmp_path, env=env) as agent, out.open("w") as lines:
        job_env = dict(
            env,
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            SLOW_RANK_SAVE_SECONDS="1000",
            FOREWARN_TEST_JOB=mark,
        )
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
        argv += ["--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
        argv += ["--master-port", str(free_port()), str(OWN_SAVE_JOB), "--dir", str(tmp_path)]
        proc = subprocess.Popen(
            argv, env=job_env, stdout=lines, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:

            def seen() -> list[dict[str, Any]]:
                text = out.read_text()
                return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

            def said() -> list[str]:
                return [line for line in out.read_text().splitlines() if "exit's save" in line]

            eventually(
                lambda: any(e["event"] == "step" and e["step"] >= 3 for e in seen()),
                timeout=120,
                what="the ranks' third step",
            )
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(lead))
            sent = time.monotonic()
            assert agent.control(notice)["ok"]
            eventually(lambda: len(said()) >= 2, lead, "both ranks said where their save is")
            told = time.monotonic() - sent
            assert proc.poll() is None, "rank 1's save was to hang"
        finally:
            _kill_job(proc, mark)  # the platform's kill at the deadline
    assert told < lead, (told, out.read_text()[-3000:])
    saving = {e["rank"]: e["step"] for e in seen() if e["event"] == "saved"}
    assert set(saving) == {0}, saving  # rank 1's save never returned
    step = saving[0]
    waiting = [line for line in said() if "rank 0 of 2" in line]
    hung = [line for line in said() if "has not ended" in line]
    assert len(waiting) == 1 and len(hung) == 1, said()
    assert f"the exit's save of step {step} (on terminate " in waiting[0], waiting[0]
    assert "before the terminate's deadline: this rank's part (rank 0 of 2) is saved" in waiting[0]
    assert "it waits for the other ranks' parts" in waiting[0], waiting[0]
    assert f"the exit's save of step {step} " in hung[0], hung[0]
