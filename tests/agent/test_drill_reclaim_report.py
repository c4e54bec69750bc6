"""The reclaim drill's verdict on a short-lead cell, without running one: the steps lost must be
what `forewarn plan`'s model predicts from the cell's measured timing (the real cells:
tests/agent/test_drill_reclaim.py); and a cell's reclaim on stand-in jobs: its notice time and
its SIGKILL at the deadline."""

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
import types
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent import drill_reclaim
from forewarn.agent.drill_reclaim import Cell, CellResult, Job, Reclaim
from forewarn.agent.reclaim_procs import JobTree, _stat
from support import eventually, running_agent


def short_cell(resumed_step: int, detection: float | None) -> CellResult:
    return CellResult(
        Cell("cloud", "mid-eval", 0.3, 1.5),
        started_step=91,
        last_step=100,
        resumed_step=resumed_step,
        flush=1.5,
        flush_mean=1.5,
        detection=detection,
        checkpoint_step=91,
        state_match=True,
    )


def test_a_short_lead_cell_passes_when_the_loss_is_the_plans_prediction() -> None:
    cell = short_cell(91, 0.249709)
    assert cell.ok and not cell.lead_is_enough
    outcome = cell.outcome()
    assert outcome.startswith("9 steps lost: lead 0.3s < detection 0.25s + flush 1.50s")
    # The prediction uses the values the printed command gives, so the two agree.
    assert "as `forewarn plan` predicts: 9 steps lost" in outcome
    assert "(detection 0.25 s + flush p95 1.5 s)" in outcome
    assert "`forewarn plan --checkpoint 1.50s --checkpoint-p95 1.50s --detection 0.25s" in outcome


def test_the_report_shows_what_the_drill_had_to_do_in_a_cell() -> None:
    cell = short_cell(91, 0.25)
    cell.notes.append("torchrun did not end its ranks; the drill killed them")
    lines: list[str] = []
    drill_reclaim.report([cell], say=lines.append)
    note = "note: torchrun did not end its ranks; the drill killed them"
    assert lines[-1].strip() == note
    assert lines[-2].startswith("cloud")


def test_a_short_lead_cell_fails_when_the_loss_differs_from_the_prediction() -> None:
    # Resumed from a step the job never reported complete: 5 lost where the model says 9.
    cell = short_cell(95, None)
    assert not cell.ok
    outcome = cell.outcome()
    assert "FAILED: not as `forewarn plan` predicts: 9 steps lost" in outcome
    # No exit save began within the lead: detection counts as the whole lead.
    assert "--detection 0.30s" in outcome


def test_a_resume_past_the_last_reported_step_is_not_counted_as_nothing_lost() -> None:
    """The job's lines said step 90 at most, the next job resumed at 100: the drill did not
    see the job's end, so it cannot say 0 steps were lost."""
    cell = CellResult(
        Cell("cloud", "mid-step", 8.0),
        started_step=80,
        last_step=90,
        resumed_step=100,
        flush=0.2,
        flush_mean=0.2,
        checkpoint_step=100,
        state_match=True,
    )
    assert cell.lost is None
    assert not cell.ok
    assert cell.outcome().startswith("FAILED: resumed from step 100, after the last step")


def test_closing_a_job_reads_all_of_its_lines_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cell's last step is read right after `close()`: every line the job wrote must have
    been read by then, however far the reader thread lags (a slow parse stands in for a
    loaded machine)."""
    real_loads = json.loads

    def slow_loads(text: str) -> Any:
        time.sleep(0.01)
        return real_loads(text)

    monkeypatch.setattr(json, "loads", slow_loads)  # drill_local.json_objects reads it
    lines = "".join(f'{{"event": "step", "step": {n}}}\n' for n in range(1, 101))
    job = Job.__new__(Job)
    job.log = (tmp_path / "job.log").open("w")
    job.proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stdout.write({lines!r})"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    job.tree = JobTree(job.proc.pid, set())
    job.events = queue.Queue()
    job.seen = []
    job.step = 0
    job._start_reading()
    job.proc.wait(30)  # the job has written all its lines and ended, as a reclaimed one has
    job.close()
    assert job.step == 100


def test_steps_lost_with_no_flush_measured_fail_the_cell() -> None:
    """`--scenario kubernetes --handler plain --seed 1`: the job died in its first periodic
    save, no save completed in the cell (flush unknown), 10 steps were lost with an 8 s lead,
    and the cell passed ("cells failed: 0 of 3", exit 0), blaming a short lead."""
    cell = CellResult(
        Cell("kubernetes", "mid-step", 8.0),
        started_step=0,
        last_step=10,
        resumed_step=0,
        partial=["step-000000000010"],
        checkpoint_step=0,
        state_match=True,
        job_code=1,
    )
    assert cell.flush is None and cell.lost == 10
    assert cell.lead_is_enough
    assert not cell.ok
    outcome = cell.outcome()
    assert outcome.startswith("FAILED: 10 steps lost"), outcome
    assert "no save completed" in outcome and "SIGKILL came before" not in outcome


def test_what_outlives_the_jobs_main_process_is_killed_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process of the job that ignored SIGTERM and outlived torchrun was not killed at the
    deadline: the drill waited on torchrun alone, then gave what was left 10 s more (a rank
    still flushing could finish a save the machine's SIGKILL would have cut)."""
    monkeypatch.setattr(drill_reclaim, "request", lambda *args, **kwargs: {"ok": True})
    child = tmp_path / "child.pid"
    # The job's main process ends on SIGTERM; its child ignores it and would run 60 s.
    script = (
        "import pathlib, signal, subprocess, sys, time\n"
        "kid = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        f"pathlib.Path({str(child)!r}).write_text(str(kid.pid))\n"
        "time.sleep(60)\n"
    )
    job = Job.__new__(Job)
    job.log = (tmp_path / "job.log").open("w")
    job.proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    job.tree = JobTree(job.proc.pid, set())
    job.events = queue.Queue()
    job.seen = []
    job.step = 0
    job._start_reading()
    try:
        pid = int(eventually(lambda: child.exists() and child.read_text(), what="the child"))
        result = CellResult(Cell("kubernetes", "mid-step", 1.0))
        machine = types.SimpleNamespace(control="ipc:///nowhere")
        started = time.monotonic()
        drill_reclaim.Reclaim._reclaim(Reclaim.__new__(Reclaim), machine, job, result.cell, result)
        assert 0.9 <= time.monotonic() - started < 5  # at the deadline, not before
        assert eventually(lambda: _gone(pid), timeout=2, what="the child killed at the deadline")
    finally:
        job.close()
        with contextlib.suppress(ProcessLookupError, ValueError, FileNotFoundError):
            os.kill(int(child.read_text()), signal.SIGKILL)


def test_the_drills_own_children_from_before_the_job_are_not_the_jobs(tmp_path: Path) -> None:
    """The job's tree counted every child of the drill's process as an orphan of the job: in a
    test process, the session's moto and Dovecot servers were SIGKILLed with a stand-in job,
    and the tests after it on that worker were refused a connection."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    top = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        tree = JobTree(top.pid, set())
        assert bystander.pid not in tree.live()
        tree.kill_all()
        assert top.wait(timeout=10) == -signal.SIGKILL
        assert bystander.poll() is None, "a child of the drill from before the job was killed"
    finally:
        for proc in (top, bystander):
            proc.kill()
            proc.wait()


def _gone(pid: int) -> bool:
    state = _stat(pid)
    return state is None or state[0] == "Z"


def test_a_terminate_the_loaded_agent_answers_late_still_reclaims_on_time(
    tmp_path: Path,
) -> None:
    """An agent that answered the terminate after 2.5 s (a loaded machine) failed the cell:
    "no agent answered ... within 2s", although the notice was published; and the notice time
    and the SIGKILL were counted from the answer, not from the notice."""
    control = f"ipc://{tmp_path}/control"
    rep = zmq.Context.instance().socket(zmq.REP)
    rep.bind(control)

    def slow_agent() -> None:
        if rep.poll(30_000):
            rep.recv()
            time.sleep(2.5)  # the scenario: the loaded agent's late answer, past the old 2 s
            rep.send_json({"ok": True})

    answering = threading.Thread(target=slow_agent, daemon=True)
    answering.start()
    job = Job.__new__(Job)
    job.log = (tmp_path / "job.log").open("w")
    job.proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    job.tree = JobTree(job.proc.pid, set())
    job.events = queue.Queue()
    job.seen = []
    job.step = 0
    job._start_reading()
    try:
        result = CellResult(Cell("cloud", "mid-step", 4.0))
        machine = types.SimpleNamespace(control=control)
        sent = time.time()
        drill_reclaim.Reclaim._reclaim(Reclaim.__new__(Reclaim), machine, job, result.cell, result)
        assert result.notice_at is not None and result.notice_at - sent < 0.5
        # SIGKILL at the notice's deadline, not 2.5 s after it.
        assert job.proc.returncode == -signal.SIGKILL and time.time() - sent < 5.5
    finally:
        job.close()
        answering.join(5)
        rep.close()


def test_a_cell_whose_loss_is_not_known_is_not_summed_as_nothing_lost(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A cell whose job never started (or whose resume failed) has no resumed step: the
    closing line said 'steps lost where the lead was at least twice the flush: 0'."""
    ran = CellResult(
        Cell("systemd", "mid-step", 8.0),
        started_step=20,
        last_step=30,
        resumed_step=30,
        flush=0.2,
        flush_mean=0.2,
        checkpoint_step=30,
        state_match=True,
    )
    broken = CellResult(Cell("cloud", "mid-step", 8.0), error="the job exited before 'started'")
    assert broken.lost is None and broken.lead_is_enough

    class Ran:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def run(self, cells: Any) -> list[CellResult]:
            return [ran, broken]

    monkeypatch.setattr(drill_reclaim, "Reclaim", Ran)
    monkeypatch.setattr(drill_reclaim, "_torch_installed", lambda: True)
    args = types.SimpleNamespace(scenario="ci", lead=8.0, seed=1, handler="guard")
    assert drill_reclaim.run_reclaim_drill(args, tmp_path, {}) == 1  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == (
        "steps lost where the lead covered detection and the flush: at least 0; not known in "
        "cloud/mid-step (the outcome says why)"
    )
    assert out[-1] == "cells failed: 1 of 2"
    assert drill_reclaim.summary([ran])[0].endswith("flush: 0")


def _stand_in_job(tmp_path: Path) -> Job:
    """A job of one process that sleeps until the drill's SIGKILL."""
    job = Job.__new__(Job)
    job.log = (tmp_path / "job.log").open("w")
    job.proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    job.tree = JobTree(job.proc.pid, set())
    job.events = queue.Queue()
    job.seen = []
    job.step = 0
    job._start_reading()
    return job


def test_a_cells_terminate_has_its_lead_on_the_boot_clock(tmp_path: Path) -> None:
    """The drill sent the terminate's deadline as a time (now + lead): a step of the wall
    clock during the cell moved it away from the SIGKILL, which the drill times on the
    monotonic clock. Sent as a duration (`deadline_in`), the agent keeps it on the boot clock
    (its state's `deadline_clock`), as `forewarn notify --deadline 8s` does."""
    with running_agent(tmp_path) as agent:
        job = _stand_in_job(tmp_path)
        try:
            result = CellResult(Cell("cloud", "mid-step", 1.0))
            machine = types.SimpleNamespace(control=agent.control_endpoint)
            drill_reclaim.Reclaim._reclaim(
                Reclaim.__new__(Reclaim), machine, job, result.cell, result
            )
        finally:
            job.close()
        [terminate] = agent.control({"op": "status"})["active"]
        assert (terminate["action"], terminate["reason"]) == ("terminate", "drill")
        saved = json.loads((tmp_path / "state" / "state.json").read_text())
        assert list(saved["deadline_clock"]) == [terminate["id"]]


def test_a_cells_terminate_reaches_an_agent_older_than_deadline_in(tmp_path: Path) -> None:
    """An agent that refuses `deadline_in` (older than the field) gets the terminate again
    with its deadline as a time alone, as `forewarn notify` sends it."""
    control = f"ipc://{tmp_path}/control"
    rep = zmq.Context.instance().socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    rep.bind(control)
    asked: list[dict[str, Any]] = []

    def older_agent() -> None:
        for _ in range(2):
            if not rep.poll(30_000):
                return
            asked.append(rep.recv_json())  # type: ignore[arg-type]
            refused = {"ok": False, "error": "deadline_in: not a field of a notify request"}
            rep.send_json(refused if "deadline_in" in asked[-1] else {"ok": True})

    answering = threading.Thread(target=older_agent, daemon=True)
    answering.start()
    job = _stand_in_job(tmp_path)
    try:
        result = CellResult(Cell("cloud", "mid-step", 1.0))
        machine = types.SimpleNamespace(control=control)
        drill_reclaim.Reclaim._reclaim(Reclaim.__new__(Reclaim), machine, job, result.cell, result)
    finally:
        job.close()
        answering.join(5)
        rep.close()
    first, second = asked
    assert first["deadline_in"] == 1.0 and "deadline_in" not in second
    assert {**second, "deadline_in": 1.0} == first


def test_a_torchrun_that_outlives_its_ranks_until_the_kill_is_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd cells ended "job exit code -9" with no word on why: every rank had saved and
    exited, and torchrun itself was still in its own exit (its final garbage collection) at
    the SIGKILL. A stand-in torchrun with no ranks left that does not end on SIGTERM."""
    monkeypatch.setattr(drill_reclaim, "request", lambda *args, **kwargs: {"ok": True})
    job = Job.__new__(Job)
    job.log = (tmp_path / "job.log").open("w")
    job.proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            'print(\'{"event": "ready"}\', flush=True); time.sleep(60)',
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    job.tree = JobTree(job.proc.pid, set())
    job.events = queue.Queue()
    job.seen = []
    job.step = 0
    job._start_reading()
    try:
        job.until("ready")  # its SIGTERM handler is in place
        result = CellResult(Cell("systemd", "mid-step", 1.0))
        machine = types.SimpleNamespace(control="ipc:///nowhere")
        drill_reclaim.Reclaim._reclaim(Reclaim.__new__(Reclaim), machine, job, result.cell, result)
        assert job.proc.returncode == -signal.SIGKILL
    finally:
        job.close()
    assert result.notes == [
        "torchrun outlived its ranks, which had all exited, until the SIGKILL: its own exit "
        "took longer than the rest of the lead"
    ]


def test_a_job_whose_process_ended_unreaped_is_not_alive(tmp_path: Path) -> None:
    """`Job.alive()` asked the job's process group with a signal 0, which a zombie leader
    answers: torchrun had exited 3 s after GCP's SIGTERM, unreaped, and a loop on `alive()`
    alone saw the job alive until the 30 s grace ran out (found walking a GCP preemption)."""
    job = Job.__new__(Job)
    job.proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    job.tree = JobTree(job.proc.pid, set())
    eventually(lambda: _stat(job.proc.pid) in (None, ("Z", os.getpid())), 30, "it ended")
    assert not job.alive()
    assert job.proc.returncode == 0


def test_the_lead_is_enough_by_the_plans_rule_not_twice_the_flush() -> None:
    """A 4 s lead, a 1.5 s flush begun 3 s after the notice: twice the flush (3 s) fits the
    lead, so 9 steps lost read 'FAILED ... although the lead was enough', while the
    `forewarn plan` command the drill prints says the notice (3 + 1.5 s) is not usable and
    predicts those 9 steps. One rule, the plan's, decides both."""
    cell = CellResult(
        Cell("cloud", "mid-eval", 4.0, 1.5),
        started_step=91,
        last_step=100,
        resumed_step=91,
        flush=1.5,
        flush_mean=1.5,
        detection=3.0,
        checkpoint_step=91,
        state_match=True,
    )
    assert not cell.lead_is_enough
    assert cell.ok, cell.outcome()
    assert "as `forewarn plan` predicts: 9 steps lost" in cell.outcome()
    # And the other way: a 2.5 s lead covers 0.25 s of detection and a 1.5 s flush, though
    # not twice the flush; a lost step there is a failure, not excused by a short lead.
    covered = short_cell(91, 0.25)
    covered = CellResult(**{**covered.__dict__, "cell": Cell("cloud", "mid-eval", 2.5, 1.5)})
    assert covered.lead_is_enough
    assert not covered.ok
    assert covered.outcome().startswith("FAILED: 9 steps lost although the lead")
