"""CheckpointGuard inside a real training process (the demo loop), with and without an agent."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from forewarn.testing import RunningAgent
from support import AgentProcess, agent_env, eventually, requires

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); the guard and the training jobs are what these tests check.
pytestmark = pytest.mark.usefixtures("forked_agents")


# The demo's exit after a terminate's or SIGTERM's save: CheckpointGuard.exit_code.
EXIT_RECLAIMED = 128 + signal.SIGTERM


class Training:
    """The demo training loop as a subprocess; its JSON lines parsed as they come."""

    def __init__(self, env: dict[str, str], directory: Path, *args: str) -> None:
        # Its stderr goes to a file, which a test can read while it runs (a warning awaited).
        fd, name = tempfile.mkstemp(prefix="demo-stderr-", suffix=".log", dir=directory.parent)
        self.stderr_path = Path(name)
        with os.fdopen(fd, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "forewarn.clients.demo", "--dir", str(directory), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self.events: list[dict[str, Any]] = []

    def stderr(self) -> str:
        """What the job wrote to stderr so far."""
        return self.stderr_path.read_text()

    def until(self, kind: str, timeout: float = 10, **match: Any) -> dict[str, Any]:
        assert self.proc.stdout is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=10)
                raise AssertionError(
                    f"training ended before {kind}; saw {self.events[-5:]}; "
                    f"stderr: {self.stderr()[-2000:]}"
                )
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == kind and all(event.get(k) == v for k, v in match.items()):
                return event
        raise AssertionError(f"no {kind} event; saw {self.events[-5:]}")

    def finish(self, timeout: float = 10) -> tuple[int, str]:
        assert self.proc.stdout is not None
        # Through the reader `until` used: communicate() reads the pipe beneath it, and the
        # part of a line `readline` had buffered was lost ('tep": 177}'). Read to the end
        # (the job's exit closes it), then reaped within `timeout`.
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout)
        self.events += [json.loads(line) for line in out.splitlines() if line.strip()]
        return self.proc.returncode, self.stderr()

    def saves(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "saved"]


def test_sigterm_during_a_step_gives_one_save_then_exit_143(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=20)
        run.proc.send_signal(signal.SIGTERM)
        code, err = run.finish()
        assert code == EXIT_RECLAIMED, err
        saves = run.saves()
        assert len(saves) == 1 and saves[0]["reasons"] == ["signal"] and saves[0]["exit"]
        assert run.events[-1]["event"] == "exit"


def test_a_drain_gives_one_save_per_notice_id_and_training_goes_on(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=10)
        for _ in range(3):  # the same notice, reported again: still one flush
            agent.control({"op": "notify", "action": "drain", "id": "local/one"})
        first = run.until("saved")
        run.until("step", step=first["step"] + 30)
        agent.control({"op": "notify", "action": "drain", "id": "local/two"})
        second = run.until("saved")
        run.until("step", step=second["step"] + 30)
        run.proc.send_signal(signal.SIGTERM)
        code, err = run.finish()
        assert code == EXIT_RECLAIMED, err
        reasons = [s["reasons"] for s in run.saves()]
        assert reasons == [["drain"], ["drain"], ["signal"]]
        assert not first["exit"] and not second["exit"]


def test_a_terminate_notice_flushes_and_exits(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=10)
        agent.control({"op": "notify", "action": "terminate"})
        saved = run.until("saved")
        code, err = run.finish()
        assert code == EXIT_RECLAIMED, err
        assert saved["exit"] and saved["reasons"] == ["terminate"]


def test_acks_reach_the_agent_and_release_the_flag_file(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=10)
        flag = Path(agent.env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
        flag.write_text("")
        saved = run.until("saved")
        assert saved["reasons"] == ["drain"]
        end = time.monotonic() + 5
        while flag.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert not flag.exists(), "the agent removes the flag once every client flushed"
        run.proc.send_signal(signal.SIGTERM)
        assert run.finish()[0] == EXIT_RECLAIMED
        assert [s["reasons"] for s in run.saves()] == [["drain"], ["signal"]]


def test_without_an_agent_periodic_saves_and_sigterm_work_and_one_warning(
    tmp_path: Path, env: dict[str, str]
) -> None:
    run = Training(
        env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01", "--every-steps", "25"
    )
    run.until("saved", step=25)
    run.until("saved", step=50)
    # Past the heartbeat timeout (3 s) the warning is due: awaited, as a loaded machine's
    # guard thread may say it later; then nothing more is said of it.
    eventually(lambda: "no agent" in run.stderr(), 30, "the no-agent warning")
    run.until("saved")  # a periodic save's steps more, in which it is not said again
    run.proc.send_signal(signal.SIGTERM)
    code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    warnings = [line for line in err.splitlines() if "no agent" in line]
    assert len(warnings) == 1, err
    saves = run.saves()
    assert all(s["reasons"] == ["periodic"] for s in saves[:-1])
    # The signal may land on a step that was also due for a periodic save (1 step in 25):
    # the one final save then carries both reasons, the signal's first.
    assert saves[-1]["reasons"] in (["signal"], ["signal", "periodic"]) and saves[-1]["exit"]


def test_without_an_agent_the_flag_file_flushes_and_continues(
    tmp_path: Path, env: dict[str, str]
) -> None:
    run = Training(env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
    run.until("step", step=10)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    flag.write_text("")
    saved = run.until("saved")
    assert saved["reasons"] == ["flag"] and not saved["exit"]
    run.until("step", step=saved["step"] + 20)
    assert not flag.exists()
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish()[0] == EXIT_RECLAIMED


def test_resume_continues_from_the_saved_step(tmp_path: Path, env: dict[str, str]) -> None:
    run = Training(env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
    run.until("step", step=15)
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish()[0] == EXIT_RECLAIMED
    saved = run.saves()[-1]
    again = Training(env, tmp_path / "ckpt", "--steps", str(saved["step"] + 5))
    resumed = again.until("resumed")
    assert resumed["step"] == saved["step"] and resumed["state"] == saved["state"]
    assert again.finish()[0] == 0


# The demo with a SIGTERM that arrives while it restores: sent in `resumed`, before any step.
SIGTERM_DURING_THE_RESTORE = """
import os, signal, sys
from forewarn.clients import demo

class Restoring(demo.CheckpointGuard):
    def resumed(self, step, **kwargs):
        super().resumed(step, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

demo.CheckpointGuard = Restoring
sys.exit(demo.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("mode", [[], ["--background"]])
def test_a_sigterm_during_the_restore_is_answered_at_the_resume_point(
    tmp_path: Path, env: dict[str, str], mode: list[str]
) -> None:
    """The demo, the model of a user's loop, did not call `due(step)` after `resumed(step)`
    as README's loop does: a SIGTERM (or terminate) that came during the restore was answered
    only after one more step, trained inside the lead, and saved as a new generation. It is
    answered at the resume point, which is durable: nothing is written, no step trained."""
    store = tmp_path / "ckpt"
    first = Training(env, store, "--steps", "30", "--step-time", "0", *mode)
    assert first.finish(timeout=60)[0] == 0
    command = [sys.executable, "-c", SIGTERM_DURING_THE_RESTORE, "--dir", str(store), *mode]
    again = subprocess.run(
        [*command, "--steps", "100000", "--step-time", "0.5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [json.loads(line) for line in again.stdout.splitlines() if line.strip()]
    assert again.returncode == EXIT_RECLAIMED, again.stderr
    assert [e["event"] for e in events] == ["resumed", "saved", "exit"], events
    assert events[0]["step"] == 30
    assert events[1]["step"] == 30 and events[1]["exit"] and events[1]["reasons"] == ["signal"]
    assert sorted(p.name for p in store.iterdir() if p.name.startswith("step-"))[-1].endswith("30")


def test_two_sigterms_at_once_still_give_one_save_then_exit_143(tmp_path: Path) -> None:
    """systemd's control-group kill and torchrun's forwarding each send a SIGTERM: the
    second must not kill the process before its save."""
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.05")
        run.until("step", step=5)
        run.proc.send_signal(signal.SIGTERM)
        run.proc.send_signal(signal.SIGTERM)
        code, err = run.finish()
        assert code == EXIT_RECLAIMED, err
        assert [s["reasons"] for s in run.saves()] == [["signal"]]


def test_exit_on_a_notice_logs_one_line_with_notice_provider_step_and_place(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=5)
        notice = agent.control({"op": "notify", "action": "terminate", "id": "local/going"})
        saved = run.until("saved")
        code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    lines = [line for line in err.splitlines() if "exiting at step" in line]
    assert len(lines) == 1, err
    step = saved["step"]
    assert f"exiting at step {step} on terminate {notice['notice']['id']} from local" in lines[0]
    assert f"step-{step:012d}" in lines[0] and str(tmp_path / "ckpt") in lines[0], lines[0]


def test_a_new_job_after_an_acted_on_terminate_trains_normally(tmp_path: Path) -> None:
    """The rule for a job that starts while a terminate is in force: an earlier job acted on
    it (saved and acked: the heartbeat lists it in `acked`), so the new one trains."""
    with AgentProcess(tmp_path) as agent:
        first = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        first.until("step", step=5)
        agent.control({"op": "notify", "action": "terminate", "id": "local/old"})
        assert first.until("saved")["exit"]
        assert first.finish()[0] == EXIT_RECLAIMED
        # The agent has the earlier job's ack before the next job starts.
        with agent.subscriber(("heartbeat",)) as beats:
            eventually(lambda: "local/old" in beats.recv()[1]["acked"], what="the ack")
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        resumed = run.until("resumed")
        run.until("step", step=resumed["step"] + 150)  # 1.5 s and more: it trains
        assert run.saves() == []
        agent.control({"op": "notify", "action": "terminate", "id": "local/new"})
        saved = run.until("saved")
        code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"]
    said = [line for line in err.splitlines() if "already in force" in line]
    assert len(said) == 1 and "local/old" in said[0], err
    assert "an earlier client acted on it" in said[0], said


def test_a_terminate_nobody_acted_on_stops_a_job_that_starts_under_it(tmp_path: Path) -> None:
    """No client saved for it (the heartbeat's `acked` does not list it): it is this job's
    to act on, at once, and the job says so in one line."""
    with AgentProcess(tmp_path) as agent:
        agent.control({"op": "notify", "action": "terminate", "id": "local/unhandled"})
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        saved = run.until("saved")
        code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"]
    assert saved["step"] < 100, saved  # at once, not after a long run
    said = [line for line in err.splitlines() if "already in force" in line]
    # The in-force line needs the heartbeat's acked list before the notice; when the notice
    # comes first (a loaded machine) it is an ordinary terminate, which stops the job too.
    assert len(said) <= 1 and "exiting at step" in err and "local/unhandled" in err, err
    assert all("no client has acted on it" in line for line in said), said


def inherit(agent: AgentProcess, notice: dict[str, Any], folder: Path, margin: int) -> Training:
    """An earlier job saved for `notice`; a training job with `margin` starts after it.

    A job tells a notice in force before it started from its own by its start time, which
    /proc gives to within 10 ms: started a few ms after the notice, it once took the notice
    for its own and exited at step 1. A next job starts later than that."""
    ack = {"op": "ack", "notice_id": notice["id"], "client": "earlier-job"}
    assert agent.control({**ack, "outcome": "saved", "step": 7, "flush_seconds": 0.1})["ok"]
    noticed = parse_time(notice["noticed_at"]).timestamp()
    eventually(lambda: time.time() > noticed + 0.05, what="the notice to be 50 ms old")
    return Training(
        agent.env,
        folder,
        *("--steps", "100000", "--step-time", "0.01", "--exit-margin", str(margin)),
    )


def test_an_inherited_terminate_with_a_deadline_exits_a_margin_before_it(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        due = utcnow() + timedelta(seconds=60)
        deadline = format_time(due)
        reply = agent.control({"op": "notify", "action": "terminate", "deadline": deadline})
        assert reply["ok"], reply
        run = inherit(agent, reply["notice"], tmp_path / "ckpt", 55)
        first = run.until("step", step=1)
        saved = run.until("saved", timeout=20)
        code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"]
    # It trained until the deadline minus the margin (not at once; under load the job may
    # start late, so the exit is measured from the deadline, not from the first step). The
    # margin holds the longest recent step too, and half a second for the ticks.
    assert saved["t"] >= due.timestamp() - 55 - 0.5 - 0.3, (saved, due)
    assert saved["step"] > first["step"], (saved, first)
    said = [line for line in err.splitlines() if "already in force" in line]
    assert len(said) == 1 and "an earlier client acted on it" in said[0], err


def test_an_inherited_terminate_inside_the_agents_margin_exits_at_once(tmp_path: Path) -> None:
    """The agent's exit margin is 120 s (its floor: the operator's time for a flush); a
    terminate 60 s out was acted on by an earlier job, and this job, with the guard's own
    30 s margin, inherits it. It planned its exit 30 s before the deadline, 90 s past the time
    the agent's margin leaves for a flush, and a save slower than 30 s was cut by the kill:
    every step since the resume lost. It goes by the larger margin, the agent's
    (its heartbeat's `exit_margin`), and saves and exits now."""
    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="120")
    with AgentProcess(tmp_path, env=env) as agent:
        due = utcnow() + timedelta(seconds=60)
        reply = agent.control({"op": "notify", "action": "terminate", "deadline": format_time(due)})
        assert reply["ok"], reply
        run = inherit(agent, reply["notice"], tmp_path / "ckpt", 30)
        try:
            saved = run.until("saved", timeout=10)
            code, err = run.finish()
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.communicate()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"], saved
    said = [line for line in err.splitlines() if "already in force" in line]
    assert len(said) == 1 and "an earlier client acted on it" in said[0], err
    # The agent's 120 s, not the job's own 30 s. Plus the job's longest step and two ticks
    # once it has stepped: a job whose agent replays late (a loaded node) stepped before the
    # terminate reached it and said 120.623 s.
    planned = re.search(r"within this job's exit margin \(([0-9.]+)s\)", said[0])
    assert planned is not None and 120 <= float(planned[1]) < 125, said
    # It says what it does: exit now. It said "it does not stop this job at once: this job
    # saves and exits 120s before its deadline (60s away)", a moment already past.
    assert "does not stop this job at once" not in said[0], said
    assert said[0].endswith("this job saves and exits now"), said


def test_an_inherited_spot_terminate_moved_earlier_exits_for_the_new_deadline(
    tmp_path: Path,
) -> None:
    """An earlier job saved for a spot interruption 2 min out; this job inherits it and plans
    its exit 30 s before that. AWS then moves the `time` to 40 s out: the job exits for the
    new deadline (by 10 s after the move), not at the exit planned for the old one."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_SPOT_INTERVAL="0.2")
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            sim.raise_notice("spot", {"lead": 120})
            (notice,) = eventually(lambda: agent.control({"op": "status"})["active"], 10)
            run = inherit(agent, notice, tmp_path / "ckpt", 30)
            try:
                # Inherited: it trains on past the heartbeat timeout (3 s) by which it
                # decided; a save and exit would have ended the run before this step.
                run.until("step", step=400, timeout=30)
                sim.change_notice("spot", {"lead": 40})
                moved_at = time.time()
                saved = run.until("saved", timeout=30)
                code, err = run.finish()
            finally:
                if run.proc.poll() is None:
                    run.proc.kill()
                    run.proc.communicate()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"], saved
    # At the latest the new deadline minus the margin: 10 s after the move, where the old
    # deadline's exit was over a minute away.
    assert saved["t"] <= moved_at + 40 - 30 + 1, (saved, moved_at)
    said = [line for line in err.splitlines() if "already in force" in line]
    assert len(said) == 1 and "an earlier client acted on it" in said[0], err


def test_an_inherited_terminate_sent_as_a_drain_again_no_longer_ends_the_job(
    tmp_path: Path,
) -> None:
    """A scheduled reboot 50 s out is sent as terminate (inside the agent's 60 s margin, twice
    a 30 s flush); faster flushes since bring the margin back to its 30 s floor, which undoes
    no escalation. An earlier job saved for it, and this job inherits it, planning its exit 35 s
    before the deadline (its own margin, the larger now). AWS moves the reboot a day out: the
    same id is a drain again (DESIGN, "a notice's life"). The job flushes for the drain and
    trains on past the exit it had planned for the old deadline, which it took, ending a run
    the machine was not taking away."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_SCHEDULED_INTERVAL="0.2",
            FOREWARN_EXIT_MARGIN="30",
        )
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            flush = {"op": "ack", "client": "other-job", "outcome": "saved"}
            assert agent.control({**flush, "step": 0, "flush_seconds": 30})["ok"]  # margin 60 s
            event_id = sim.raise_notice("scheduled", {"code": "system-reboot", "not_before": 50})
            (notice,) = eventually(lambda: agent.control({"op": "status"})["active"], 10)
            assert notice["action"] == "terminate", notice
            for step in range(1, 21):  # the 30 s flush leaves the window: 30 s again
                assert agent.control({**flush, "step": step, "flush_seconds": 0.1})["ok"]
            planned_exit = parse_time(notice["deadline"]).timestamp() - 35
            run = inherit(agent, notice, tmp_path / "ckpt", 35)
            try:
                # Inherited: it trains on past the heartbeat timeout (3 s) by which it
                # decided; a save and exit would have ended the run before this step. Timed
                # from its start, not counted in steps: 400 steps of 10 ms took 10 s and
                # more on a loaded machine, and the drain then came after the planned exit.
                started = run.until("fresh", timeout=30)["t"]
                while run.until("step", timeout=30)["t"] < started + 4:
                    pass
                sim.change_notice(event_id, {"not_before": 86400})
                drained = run.until("saved", timeout=15)
                assert not drained["exit"] and drained["reasons"] == ["drain"], drained
                while run.events[-1]["t"] < planned_exit + 2:
                    event = run.until("step", timeout=planned_exit + 10 - time.time())
                    assert event["t"] - drained["t"] < 60, "the job trains on"
                saves = [e for e in run.events if e["event"] in ("saved", "exit")]
                assert saves == [drained], saves
            finally:
                run.proc.kill()
                run.proc.communicate()


def test_a_drain_escalated_after_the_job_started_ends_it_at_once(tmp_path: Path) -> None:
    """A drain raised before the job started (a rank torchrun restarted, a second job on the
    node): the job flushed for it and trained on. The agent then sent it as terminate, its
    deadline inside the agent's 60 s margin. The terminate kept the drain's `noticed_at`, so
    the job took it for one in force before it started that a client (itself) had acted on,
    and trained on until its own 30 s margin before the deadline: 30 s past the agent's, the
    time the operator set for a flush to finish."""
    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="60")
    with AgentProcess(tmp_path, env=env) as agent:
        due = utcnow() + timedelta(seconds=66)
        reply = agent.control({"op": "notify", "action": "drain", "deadline": format_time(due)})
        assert reply["ok"] and reply["notice"]["action"] == "drain", reply
        noticed = parse_time(reply["notice"]["noticed_at"]).timestamp()
        eventually(lambda: time.time() > noticed + 0.05, what="the notice to be 50 ms old")
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        try:
            drained = run.until("saved", timeout=10)
            assert not drained["exit"] and drained["reasons"] == ["drain"], drained
            saved = run.until("saved", timeout=40)
            code, err = run.finish()
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.communicate()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"], saved
    # Escalated at the deadline minus 60 s; the job saves within a few seconds of that.
    assert saved["t"] <= due.timestamp() - 60 + 5, (saved["t"], due.timestamp())
    assert "already in force" not in err, err


def test_saves_that_write_nothing_do_not_narrow_the_agents_exit_margin(tmp_path: Path) -> None:
    """A job whose checkpoint takes 20 s saved for a drain: the agent's exit margin became
    40 s. Ranks restarted under the drain (torchrun --max-restarts, 8 ranks a node) each
    answered it at their resume point, writing nothing, and acked a flush of 0 s: 20 of them
    pushed the 20 s flush out of the agent's window, its margin fell back to the floor, and
    the next drain 30 s out was sent as a drain, too late for a 20 s save."""
    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="5")
    with AgentProcess(tmp_path, env=env) as agent:
        endpoints = {"events": agent.events, "control": agent.control_endpoint}
        drain = agent.control({"op": "notify", "action": "drain", "id": "local/first"})
        assert drain["ok"], drain

        def job(resume: bool) -> CheckpointGuard:
            guard = CheckpointGuard(handle_signals=False, flag_file=None, agree=False, **endpoints)
            if resume:
                guard.resumed(7)
            eventually(lambda: guard.due(7), what="the drain")
            return guard

        first = job(resume=False)
        assert first.saved(7, 20.0).notices == ("local/first",)
        first.close()
        for _ in range(20):  # each rank restarted, resumed from step 7 and saved for the drain
            rank = job(resume=True)
            result = rank.save(7, lambda step: pytest.fail("the resume point is written again"))
            assert result.notices == ("local/first",) and result.flush_seconds == 0.0
            rank.close()
        eventually(lambda: agent.output().count("ack local/first") == 21, what="the acks")
        due = format_time(utcnow() + timedelta(seconds=30))
        reply = agent.control({"op": "notify", "action": "drain", "deadline": due})
    assert reply["notice"]["action"] == "terminate", reply


def test_the_exit_code_says_a_terminate_stopped_the_job_and_a_drain_did_not(
    forewarn_agent: RunningAgent,
) -> None:
    """`exit_code` after a save: 0 after a drain's (training goes on), 143 after a
    terminate's, for `sys.exit(guard.exit_code)`. The loop's clean exit 0 after a terminate
    marked a Kubernetes Job complete and torchrun's run successful: it never resumed."""
    guard = CheckpointGuard(handle_signals=False, flag_file=None)
    try:
        forewarn_agent.notify("drain")
        eventually(lambda: guard.due(1), 10, "the drain")
        assert not guard.saved(1).exit
        assert guard.exit_code == 0
        forewarn_agent.notify("terminate", deadline="2m")
        eventually(lambda: guard.due(2) and guard.should_exit, 10, "the terminate")
        assert guard.exit_code == 0, "not taken until the save answers it"
        assert guard.saved(2).exit
        assert guard.exit_code == 143
    finally:
        guard.close()


def test_a_loop_of_its_own_is_given_its_exit_saves_time_by_the_terminates_deadline(
    forewarn_agent: RunningAgent,
) -> None:
    """`exit_save_timeout()` is what a loop that saves by itself passes to `save_dcp(...,
    timeout=)`: none for a drain's save, the time to a terminate's deadline plus the grace
    for an exit's. It was private: the DCP example's loop, two torchrun ranks on an S3
    endpoint that stopped answering at a GCP preemption, was still in its save at the
    SIGKILL 30 s later, where the bound failed the save 8 s before the deadline."""
    from forewarn.clients.checkpoint.background import FINAL_SAVE_GRACE_SECONDS

    guard = CheckpointGuard(handle_signals=False, flag_file=None)
    try:
        assert guard.exit_save_timeout() is None, "nothing pending: a periodic save is unbounded"
        forewarn_agent.notify("drain")
        eventually(lambda: guard.due(1), 10, "the drain")
        assert guard.exit_save_timeout() is None, "a drain's save answers no exit"
        guard.saved(1)
        forewarn_agent.notify("terminate", deadline="40s")
        eventually(lambda: guard.due(2) and guard.should_exit, 10, "the terminate")
        timeout = guard.exit_save_timeout()
        assert timeout is not None
        assert 30 < timeout - FINAL_SAVE_GRACE_SECONDS <= 40, timeout
        guard.saved(2)
    finally:
        guard.close()


@pytest.mark.parametrize("auto", [False, True], ids=["every_steps", "every_auto"])
@pytest.mark.parametrize("seconds", [-0.25, float("nan")], ids=["clock_stepped_back", "nan"])
def test_a_save_timed_as_negative_or_nan_still_exits_and_is_acked(
    forewarn_agent: RunningAgent, auto: bool, seconds: float
) -> None:
    """`saved(step, seconds)` with seconds the loop timed on a wall clock that stepped back (or
    NaN): `every="auto"` raised from `saved` after the save had counted, so the loop left with
    a traceback, no ack and the exit unanswered; otherwise the agent refused the ack (flush
    seconds must be zero or more) and never heard that the job saved for the terminate."""
    options: dict[str, Any] = {"every": "auto", "mtbi_seconds": 3600} if auto else {}
    guard = CheckpointGuard(handle_signals=False, flag_file=None, **options)
    try:
        notice = forewarn_agent.notify("terminate", deadline="2m")
        eventually(lambda: guard.due(1) and guard.should_exit, 10, "the terminate")
        assert guard.saved(1, seconds).exit
        assert guard.exit_code == 143
        ack = forewarn_agent.wait_for_ack(notice)
        assert ack["step"] == 1 and ack["flush_seconds"] >= 0, ack
    finally:
        guard.close()


def test_a_save_numbered_and_timed_with_numpy_scalars_is_acked(
    forewarn_agent: RunningAgent,
) -> None:
    """A step read back from a checkpoint as a numpy integer (or timed into a numpy float):
    the ack could not be encoded as JSON and was dropped on the sender thread, so the agent
    never heard that the job saved for its terminate."""
    numpy = pytest.importorskip("numpy")
    guard = CheckpointGuard(handle_signals=False, flag_file=None)
    try:
        notice = forewarn_agent.notify("terminate", deadline="2m")
        eventually(lambda: guard.due(numpy.int64(7)) and guard.should_exit, 10, "the terminate")
        assert guard.saved(numpy.int64(7), numpy.float32(0.25)).exit
        ack = forewarn_agent.wait_for_ack(notice)
        assert ack["step"] == 7 and ack["flush_seconds"] == 0.25, ack
    finally:
        guard.close()


# The README's loop as it stands: no close() before sys.exit.
README_LOOP = """
import sys, time
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(every_steps=600)
step = 0
guard.resumed(step)
while step < 100_000:
    time.sleep(0.01)
    step += 1
    if step == 5:
        print("training", flush=True)
    if guard.due(step):
        if guard.saved(step, 0.01).exit:
            break
sys.exit(guard.exit_code)
"""


def test_the_readme_loop_acks_its_terminate_before_it_exits(tmp_path: Path) -> None:
    """`sys.exit(guard.exit_code)` right after the terminate's save, with no `close()` (the
    README's loop): the ack was still queued for the sender thread, a daemon the interpreter
    dropped at exit, so the agent never heard the job saved, and the next job on the node
    took the terminate for one nobody had acted on."""
    with AgentProcess(tmp_path) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", README_LOOP],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "training", job.communicate()
        notice = agent.control({"op": "notify", "action": "terminate"})["notice"]["id"]
        _, err = job.communicate(timeout=60)
        assert job.returncode == EXIT_RECLAIMED, err
        eventually(lambda: f"ack {notice} from" in agent.output(), 10, "the terminate's ack")


# A job whose exit save fails: torch state, and a save that raises as a real one does (the
# caller's own write on a full disk; storage that stops answering, given up at the deadline).
FAILING_EXIT_SAVE = """
import errno, sys, time
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore, background
from forewarn.clients.checkpoint.local import LocalBackend
from forewarn.clients.demo import slow_link

directory, mode = sys.argv[1], sys.argv[2]
background.FINAL_SAVE_GRACE_SECONDS = 0.0
hung = slow_link(LocalBackend(directory), 3600.0)  # every write hangs
store = CheckpointStore(backend=hung) if mode != "own-write" else CheckpointStore(directory)
model = torch.nn.Linear(4, 4)
guard = CheckpointGuard(store=store, background=mode == "background")

def full_disk(gen):
    raise OSError(errno.ENOSPC, "No space left on device")

step = 0
with guard:
    while True:
        time.sleep(0.01)
        step += 1
        print(step, flush=True)
        if guard.due(step):
            if mode == "own-write":
                result = guard.save(step, full_disk)
            else:
                result = guard.save_state(step, {"model": model.state_dict()})
            print("claimed a save", result, flush=True)
            if result.exit:
                break
sys.exit(guard.exit_code)
"""


@requires("torch")
@pytest.mark.parametrize("mode", ["own-write", "sync", "background"])
def test_a_failed_exit_save_is_acked_failed_logged_and_exits_1_not_143(
    tmp_path: Path, mode: str
) -> None:
    """A terminate's save that raised (CommitTimeout from storage that stopped answering, a
    full disk) went out of the loop with no ack: the agent, its metrics and `forewarn status`
    never learnt that the job left without its state."""
    with AgentProcess(tmp_path) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", FAILING_EXIT_SAVE, str(tmp_path / "ckpt"), mode],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert job.stdout is not None
        while job.stdout.readline().strip() != "20":
            assert job.poll() is None, job.communicate()
        deadline = format_time(utcnow() + timedelta(seconds=1))
        reply = agent.control({"op": "notify", "action": "terminate", "deadline": deadline})
        out, err = job.communicate(timeout=60)
        notice = reply["notice"]["id"]
        eventually(
            lambda: f"ack {notice} from" in agent.output() and "outcome=failed" in agent.output(),
            10,
            "the failed ack",
        )
    assert job.returncode == 1, err
    assert "claimed a save" not in out
    said = [line for line in err.splitlines() if "was NOT saved" in line]
    assert len(said) == 1, err
    assert f"on terminate {notice} from local" in said[0]
    assert "the last durable checkpoint is none" in said[0]
    cause = "No space left on device" if mode == "own-write" else "CommitTimeout"
    assert cause in said[0], said[0]
    acked = [line for line in agent.output().splitlines() if "outcome=failed" in line]
    assert len(acked) == 1 and cause in acked[0], acked  # the agent's log says why


def test_loop_failed_answers_only_a_save_still_owed(caplog: Any) -> None:
    """`loop_failed` (a loop that raised outside a save) fails what waits on a save, nothing
    else: an answered exit keeps its 143, and with nothing owed no ERROR says a save failed."""
    error = RuntimeError("CUDA error: an illegal memory access was encountered")
    with CheckpointGuard(notices=False, handle_signals=False, flag_file=None) as guard:
        assert guard.loop_failed(3, error) is False
        assert guard.exit_code == 0
        guard.request("signal", exit=True)
        assert guard.due(4)
        assert guard.saved(4, 0.1).exit
        assert guard.loop_failed(5, error) is False, "the exit was answered"
        assert guard.exit_code == 143
    assert "NOT saved" not in caplog.text
    with CheckpointGuard(notices=False, handle_signals=False, flag_file=None) as guard:
        guard.request("signal", exit=True)  # after the loop's last due
        assert guard.loop_failed(6, error) is True
        assert guard.exit_code == 1
    said = [r.getMessage() for r in caplog.records if "NOT saved" in r.getMessage()]
    assert len(said) == 1 and "CUDA error" in said[0], said


def test_an_inherited_terminate_leaves_its_margin_for_the_save_after_a_long_step(
    tmp_path: Path,
) -> None:
    """The margin is time for the save, but the guard only saves at the next `due`: with
    steps of 0.6 s against a 0.3 s margin, the exit planned 0.3 s before the deadline waited
    for the step in progress, and the save began after the margin had started (its end past
    the deadline, where the SIGKILL cuts it). The longest recent step between `due` calls is
    counted into the margin, so the save begins at least `exit_margin` before the deadline."""
    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="0.1")
    with AgentProcess(tmp_path, env=env) as agent:
        # Room for a step or more after the job's start, which took 2.5 s on a loaded node.
        due = utcnow() + timedelta(seconds=5)
        reply = agent.control({"op": "notify", "action": "terminate", "deadline": format_time(due)})
        assert reply["ok"], reply
        notice = reply["notice"]
        ack = {"op": "ack", "notice_id": notice["id"], "client": "earlier-job"}
        assert agent.control({**ack, "outcome": "saved", "step": 7, "flush_seconds": 0.02})["ok"]
        noticed = parse_time(notice["noticed_at"]).timestamp()
        eventually(lambda: time.time() > noticed + 0.05, what="the notice to be 50 ms old")
        run = Training(
            agent.env,
            tmp_path / "ckpt",
            *("--steps", "100000", "--step-time", "0.6", "--exit-margin", "0.3"),
            *("--upload-delay", "0.05"),
        )
        saved = run.until("saved", timeout=10)
        code, err = run.finish()
    assert code == EXIT_RECLAIMED, err
    assert saved["exit"] and saved["reasons"] == ["terminate"]
    began = max(e["t"] for e in run.events if e["event"] in ("step", "resumed", "fresh"))
    # When the save began is the guard's; when it ended is the machine's: a run beside a
    # loaded suite saw a 0.05 s upload end 34 ms past the deadline, begun 0.3 s before it.
    assert began <= due.timestamp() - 0.3, (began - due.timestamp(), run.events[-4:])


def test_a_terminate_raised_after_the_start_acts_at_once_though_the_clock_stepped_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job started while the wall clock ran an hour ahead, and NTP stepped it back since:
    a terminate raised after the start then has a `noticed_at` before the start the guard
    read. Taken for one in force before the job, and another job on the node acted on it
    first (the heartbeat lists it in `acked`), it was inherited: without a deadline it asked
    nothing, and the job trained on, unsaved, into the kill. The agent's `ages` (status, on
    the boot clock) tell it was raised after the start: it acts at once."""
    from forewarn.clients import guard as guard_module

    with AgentProcess(tmp_path) as agent:
        reply = agent.control({"op": "notify", "action": "terminate", "id": "local/fresh"})
        assert reply["ok"], reply
        ack = {"op": "ack", "notice_id": "local/fresh", "client": "the-other-job"}
        assert agent.control({**ack, "outcome": "saved", "step": 7, "flush_seconds": 0.1})["ok"]
        with agent.subscriber(("heartbeat",)) as beats:
            eventually(lambda: "local/fresh" in beats.recv()[1]["acked"], what="the ack")
        # Read at the start, while the clock was an hour ahead.
        monkeypatch.setattr(guard_module, "process_started", lambda: time.time() + 3600)
        guard = CheckpointGuard(
            handle_signals=False,
            flag_file=None,
            events=agent.events,
            control=agent.control_endpoint,
        )
        try:
            eventually(lambda: guard.due(1), timeout=5, what="the terminate's save")
            assert guard.saved(1).exit
        finally:
            guard.close()
