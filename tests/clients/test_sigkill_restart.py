"""The next job on the node after a SIGKILL: a reclaim's kill group takes the training process
and its DataLoader workers mid-run (a periodic save may be mid-write); systemd's Restart= starts
the same job 0.5 s later on the same store, the same agent and the same MASTER_PORT. Nothing of
the first job may refuse it: no leftover process, no stale claim of the store, no port held."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import AgentProcess, eventually, free_port, requires

pytestmark = requires("torch")


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


def _subscribers(url: str) -> float:
    """The agent's count of acking clients, the ones it waits for."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "forewarn_subscribers":
                return sample.value
    raise AssertionError("no forewarn_subscribers in the agent's metrics")


def _in_session(session: int) -> list[int]:
    """Live pids of the session the first job led (its workers included)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == session:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("during", ["training", "evaluation"])
def test_a_job_sigkilled_mid_run_is_restarted_half_a_second_later_on_its_last_complete_save(
    tmp_path: Path, env: dict[str, str], during: str
) -> None:
    """`evaluation`: killed while its evaluation workers are mid-batch (0.2 s a batch)."""
    store = tmp_path / "store"
    job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", RANK="0", WORLD_SIZE="1")
    job_env.update(LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    argv = [sys.executable, "-m", "forewarn.clients.demo_torch", "--dir", str(store)]
    argv += ["--eval-every", "0" if during == "training" else "7", "--eval-batches", "64"]
    argv += ["--step-time", "0.05", "--workers", "2", "--every-steps", "3"]
    argv += ["--flush-delay", "0.1"]  # a save takes a while: the kill may land inside one

    def start(name: str, *more: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        job = subprocess.Popen(
            [*argv, *more],
            env=job_env,
            stdout=out.open("w"),
            stderr=err.open("w"),
            start_new_session=True,
        )
        return job, out, err

    agent_env = dict(env, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with AgentProcess(tmp_path, env=agent_env) as agent:
        url = agent.metrics_url()
        first, first_out, _ = start("first", "--steps", "1000000")
        try:
            eventually(
                lambda: sum(e["event"] == "saved" for e in _events(first_out)) >= 2,
                120,
                "two periodic saves",
            )
            if during == "evaluation":
                eventually(
                    lambda: any(e["event"] == "eval_start" for e in _events(first_out)),
                    120,
                    "an evaluation begun",
                )
            assert _subscribers(url) >= 1  # the first job's guard, waited for
            os.killpg(first.pid, signal.SIGKILL)  # the kill group: main and its workers
            assert first.wait(30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(30)
        eventually(lambda: not _in_session(first.pid), 10, "the first job's workers gone")
        # The agent's view: the killed job left, it is no longer a client to wait for.
        eventually(lambda: _subscribers(url) == 0, 10, "the killed job's client gone")
        time.sleep(0.5)  # the scenario, not a synchronisation: Restart= after 0.5 s
        events = _events(first_out)
        if during == "evaluation":  # the kill landed inside it: it never ended
            assert events[-1]["event"] == "eval_start", events[-3:]
        saving = {e["step"]: e["hash"] for e in events if e["event"] == "saving"}
        last_saved = max(e["step"] for e in events if e["event"] == "saved")
        # The same job, its evaluations left out (each of 64 batches: the test's time limit), and
        # long enough to outlast the drain below.
        steps = str(max(saving) + 120)
        second, second_out, second_err = start("second", "--steps", steps, "--eval-every", "0")
        try:
            eventually(
                lambda: any(e["event"] == "started" for e in _events(second_out)),
                120,
                "the second job started",
            )
            eventually(lambda: _subscribers(url) >= 1, 30, "the new job's guard subscribed")
            # The new job's ack is the one that counts: a drain is flushed by it alone.
            reply = agent.control({"op": "notify", "action": "drain", "reason": "manual"})
            assert reply["ok"], reply
            notice_id = reply["notice"]["id"]
            eventually(
                lambda: f"notice {notice_id} flushed by every client (1)" in agent.output(),
                60,
                "the drain flushed by the new job",
            )
            assert second.wait(180) == 0, second_err.read_text()[-3000:]
        finally:
            if second.poll() is None:
                second.kill()
                second.wait(30)
    (started,) = [e for e in _events(second_out) if e["event"] == "started"]
    # The newest complete generation: at least the last save the first job saw finish, at
    # most one it had begun, with that step's exact state.
    assert last_saved <= started["step"] <= max(saving), (started, events)
    assert started["hash"] == saving[started["step"]], (started, saving)
    assert started["generation"] == f"step-{started['step']:012d}", started
    log = second_err.read_text()
    assert "another process" not in log and "Traceback" not in log, log[-3000:]
    drained = [e for e in _events(second_out) if e["event"] == "saved" and "drain" in e["reasons"]]
    assert len(drained) == 1, _events(second_out)
    assert _events(second_out)[-1]["event"] == "done", _events(second_out)[-3:]
