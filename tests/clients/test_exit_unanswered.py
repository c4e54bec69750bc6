"""A loop that does not reach `due` while a reclaim waits (an evaluation pass longer than the
notice's lead, without `due_in_eval`): the guard cannot save for it. A drain, escalated by the
agent to terminate, found the job in such a pass; the platform's SIGKILL at the deadline lost
every step since the last save, and the job's log said nothing of it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

JOB = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from forewarn.clients import CheckpointGuard

STEP_SECONDS = float(sys.argv[1])
guard = CheckpointGuard(every_steps=10)
for step in range(1, 1000):
    time.sleep(STEP_SECONDS)
    if guard.due(step) and guard.saved(step, 0.01).exit:
        break
    print("step", step, flush=True)
    if step == 15:
        print("evaluation", flush=True)
    if step == 15 and STEP_SECONDS < 1:
        time.sleep(120)  # an evaluation pass that never calls guard.due_in_eval
sys.exit(guard.exit_code)
"""
LEAD = 8.0


def test_a_loop_away_from_due_past_the_escalation_is_said_before_the_kill(
    tmp_path: Path, env: dict[str, str]
) -> None:
    with AgentProcess(tmp_path, env=env, args=("--exit-margin", "3s")) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", JOB, "0.02"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "job.err").open("w"),
            text=True,
        )
        try:
            assert job.stdout is not None
            eventually(lambda: job.stdout.readline().strip() == "evaluation", 60, "the pass")
            notice: dict[str, Any] = {"op": "notify", "action": "drain", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            sent = time.monotonic()
            notice_id = agent.control(notice)["notice"]["id"]
            log = tmp_path / "job.err"
            warned = eventually(
                lambda: [line for line in log.read_text().splitlines() if "asked this" in line],
                LEAD + 5,
                "the guard's warning",
            )
            said_at = time.monotonic() - sent
        finally:
            job.send_signal(signal.SIGKILL)  # the platform's, at the deadline
            job.wait(30)
    line = warned[0]
    assert said_at < LEAD, said_at
    assert f"forewarn: terminate {notice_id} from local (reclaim) asked this job" in line
    assert "the loop has not called due() or due_in_eval() for" in line
    assert "(last at step 15;" in line
    assert "the steps after step 10, the last saved, are lost" in line
    assert "the terminate's deadline is in" in line
    assert "guard.due_in_eval(step)" in line


def test_a_loop_of_long_steps_is_not_called_late(tmp_path: Path, env: dict[str, str]) -> None:
    """Steps of 2.5 s: a terminate mid-step waits up to one for its save, and that is no
    loop away from `due`."""
    with AgentProcess(tmp_path, env=env) as agent:
        proc = subprocess.Popen(
            [sys.executable, "-c", JOB, "2.5"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        eventually(lambda: proc.stdout.readline().strip() == "step 3", 60, "three steps")
        notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
        notice.update(seconds_fields(60))
        assert agent.control(notice)["ok"]
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "on terminate local/manual/" in err and "exiting at step" in err
    assert "asked this job" not in err, err


FIRST_STEP_JOB = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(every_steps=600)
step = 1200  # the resume point
guard.resumed(step)
if guard.due(step) and guard.save(step, lambda step: 0.01).exit:
    sys.exit(guard.exit_code)
while step < 1500:
    if step == 1200:
        print("first step", flush=True)
        time.sleep(5)  # the first step: a compile, the data loader's warm-up
    else:
        time.sleep(0.02)
    step += 1
    if guard.due(step) and guard.saved(step, 0.01).exit:
        break
sys.exit(guard.exit_code)
"""


def test_a_terminate_during_the_first_step_is_not_called_late(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The README's loop calls `due` once right after `resumed`, before its first step: a
    terminate during that step (a compile of 5 s) is answered when the step ends, as the README
    says. The guard said the loop had been away from `due` for 2 s, that its steps took up to
    0.00 s and that the steps after the resume point were lost, pointing at `due_in_eval`."""
    with AgentProcess(tmp_path, env=env) as agent:
        proc = subprocess.Popen(
            [sys.executable, "-c", FIRST_STEP_JOB],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        eventually(lambda: proc.stdout.readline().strip() == "first step", 60, "the first step")
        notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
        notice.update(seconds_fields(120))
        assert agent.control(notice)["ok"]
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "exiting at step 1201 on terminate local/manual/" in err, err
    assert "asked this job" not in err, err


FRESH_RUN_JOB = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(every_steps=600)
start = step = int(sys.argv[1])  # the README's `step = resume()`: 0 on a first start
guard.resumed(step)
while step < start + 1000:
    time.sleep(0.02)
    step += 1
    if guard.due(step) and guard.saved(step, 0.01).exit:
        break
    if step == start + 15:
        print("evaluation", flush=True)
        time.sleep(120)  # an evaluation pass that never calls guard.due_in_eval
sys.exit(guard.exit_code)
"""


def _warning_at_sigterm(tmp_path: Path, env: dict[str, str], resumed_at: int) -> str:
    """The job resumed at `resumed_at`, SIGTERMed (systemd's stop) in its evaluation pass:
    the guard's line about the loop away from `due`. No agent runs."""
    log = tmp_path / "job.err"
    job = subprocess.Popen(
        [sys.executable, "-c", FRESH_RUN_JOB, str(resumed_at)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    try:
        assert job.stdout is not None
        eventually(lambda: job.stdout.readline().strip() == "evaluation", 60, "the pass")
        job.send_signal(signal.SIGTERM)
        warned = eventually(
            lambda: [line for line in log.read_text().splitlines() if "asked this" in line],
            20,
            "the guard's warning",
        )
    finally:
        job.send_signal(signal.SIGKILL)  # the platform's, at the end of its stop timeout
        job.wait(30)
    return str(warned[0])


def test_a_first_start_that_saved_nothing_is_not_said_to_have_saved(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A first start (`guard.resumed(0)`) that has saved nothing: the guard said "the steps
    after step 0, the last saved, are lost", naming a checkpoint that was never written."""
    line = _warning_at_sigterm(tmp_path, env, 0)
    assert "forewarn: SIGTERM asked this job to save and exit" in line, line
    assert "the last saved" not in line, line
    assert "the steps after step 0, where this run resumed (it has saved nothing since)" in line


def test_a_resumed_run_that_saved_nothing_names_its_resume_point(
    tmp_path: Path, env: dict[str, str]
) -> None:
    line = _warning_at_sigterm(tmp_path, env, 1200)
    assert "(last at step 1215;" in line, line
    assert "the steps after step 1200, where this run resumed (it has saved nothing since)" in line


ONCE_JOB = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(every_steps=600)
step = 1200  # the resume point
guard.resumed(step)
if guard.due(step) and guard.save(step, lambda step: 0.01).exit:
    sys.exit(guard.exit_code)
print("training", flush=True)
while step < 100000:
    time.sleep(0.02)  # a step; the loop never calls guard.due again
    step += 1
sys.exit(guard.exit_code)
"""


def test_a_loop_that_calls_due_only_before_it_is_said_before_the_kill(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A loop that calls `due` once, right after `resumed` (the README's first check), and
    never in the loop: to the guard it is a first step that never ends, and the first step is
    answered when it ends, so a terminate waited unsaid until the platform's SIGKILL at the
    deadline (8 s), every step since the resume lost with nothing in the job's log."""
    with AgentProcess(tmp_path, env=env) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", ONCE_JOB],
            env=env,
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "job.err").open("w"),
            text=True,
        )
        try:
            assert job.stdout is not None
            eventually(lambda: job.stdout.readline().strip() == "training", 60, "training")
            notice: dict[str, Any] = {"op": "notify", "action": "terminate", "reason": "reclaim"}
            notice.update(seconds_fields(LEAD))
            sent = time.monotonic()
            notice_id = agent.control(notice)["notice"]["id"]
            log = tmp_path / "job.err"
            warned = eventually(
                lambda: [line for line in log.read_text().splitlines() if "asked this" in line],
                LEAD + 5,
                "the guard's warning",
            )
            said_at = time.monotonic() - sent
        finally:
            job.send_signal(signal.SIGKILL)  # the platform's, at the deadline
            job.wait(30)
    line = warned[0]
    assert said_at < LEAD, said_at
    assert f"forewarn: terminate {notice_id} from local (reclaim) asked this job" in line
    assert "the loop has not called due() or due_in_eval() since its first call" in line
    assert "(at step 1200," in line
    assert "the steps after step 1200, where this run resumed" in line
    assert "the terminate's deadline is in" in line
