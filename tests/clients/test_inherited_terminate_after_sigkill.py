"""A terminate inherited by the next job after a SIGKILLed one (not a clean exit) on the same
node, agent, runtime directory and store: the first job was killed mid-save for it, so no
client acted on it; the next job takes it as its own at once (saves, exits 143), from the
last committed generation, never the half-written one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually, free_port, requires

pytestmark = requires("torch")


def _events(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]


@pytest.mark.timeout(360)  # up to 120 s for each of its three waits under load
def test_a_terminate_the_sigkilled_job_never_acked_is_the_next_jobs_at_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Walked (load 14): the first job SIGKILLed 'saving' for a terminate 150 s away (300 s
    here); the next job logged `no client has acted on it: this job saves and exits now`,
    started at step 0 (the killed save not used), saved at step 1 and exited 143 within 22 s.
    A guard that took it as inherited (acted on) trained on: it failed so, in its timeout."""
    store = tmp_path / "store"
    job_env = dict(env, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", RANK="0", WORLD_SIZE="1")
    job_env.update(LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    argv = [sys.executable, "-m", "forewarn.clients.demo_torch", "--dir", str(store)]
    argv += ["--eval-every", "0", "--step-time", "0.05", "--every-steps", "1000"]
    argv += ["--flush-delay", "4", "--steps", "1000000"]  # a save long enough to be killed in

    def start(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=job_env,
            stdout=(tmp_path / f"{name}.out").open("w"),
            stderr=(tmp_path / f"{name}.err").open("w"),
            start_new_session=True,
        )

    with AgentProcess(tmp_path, env=env) as agent:
        first = start("first")
        try:
            first_out = tmp_path / "first.out"
            eventually(lambda: any(e["event"] == "step" for e in _events(first_out)), 120, "step")
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(300))
            assert agent.control(notice)["ok"]
            eventually(lambda: _events(first_out)[-1]["event"] == "saving", 60, "its save")
            os.killpg(first.pid, signal.SIGKILL)  # mid-save: nothing acked
            assert first.wait(30) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(30)
        second = start("second")
        try:
            code = second.wait(120)
        finally:
            if second.poll() is None:
                os.killpg(second.pid, signal.SIGKILL)
                second.wait(30)
    log = (tmp_path / "second.err").read_text()
    assert code == 143, log[-3000:]
    assert "no client has acted on it: this job saves and exits now" in log, log[-3000:]
    events = _events(tmp_path / "second.out")
    started = next(e for e in events if e["event"] == "started")
    assert started["step"] == 0 and started["generation"] is None, started
    saved = [e for e in events if e["event"] == "saved"]
    assert len(saved) == 1 and saved[0]["reasons"] == ["terminate"], events
