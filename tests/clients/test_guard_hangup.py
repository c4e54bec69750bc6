"""A job whose terminal hangs up (its ssh session closes) gets SIGHUP: the guard saves and
exits 129, as for SIGTERM; a job started with SIGHUP ignored (`nohup`) trains on."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

from job_session import start_in_session
from support import as_in_a_terminal, eventually, sighup_as_in_a_terminal

SCRIPT = Path(__file__).with_name("hangup_job.py")


def records(path: Path) -> list[dict[str, int]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines()]
    except FileNotFoundError:
        return []


def steps(path: Path) -> int:
    return max((r.get("step", 0) for r in records(path)), default=0)


def test_a_job_whose_terminal_hangs_up_saves_and_exits_129(tmp_path: Path) -> None:
    """Found running a loop with a guard in a terminal (bash under a pty, as sshd runs it),
    output to the terminal or to a file, and closing the terminal after step 5: the job ended
    at step 6 with no save, killed by the SIGHUP (or, printing to the terminal, by the
    `OSError: [Errno 5] Input/output error` of its next print), every step since the last
    save lost. Here the job is the session's leader with the terminal as its controlling one
    (`ssh host python train.py`): the kernel sends it the SIGHUP as the terminal closes."""
    record = tmp_path / "record"
    env = dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path))
    pid, master = pty.fork()
    if pid == 0:  # the job: a session of its own, the pty its controlling terminal
        with suppress(BaseException):
            sighup_as_in_a_terminal()
            os.execve(sys.executable, [sys.executable, str(SCRIPT), str(record)], env)
        os._exit(127)
    try:
        with suppress(OSError):  # the job's terminal output, read so it never blocks
            eventually(
                lambda: os.read(master, 65536) is not None and steps(record) >= 5,
                timeout=60,
                what="step 5",
            )
        os.close(master)  # the ssh session closes: the kernel hangs up the terminal
        master = -1
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        if master >= 0:
            os.close(master)
        if pid:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    done = records(record)
    saved = [r["saved"] for r in done if "saved" in r]
    assert saved and saved[-1] >= 5, done[-3:]
    assert done[-1] == {"exit": 129}, done[-3:]
    assert os.waitstatus_to_exitcode(status) == 129


def test_a_job_started_under_nohup_trains_on_through_a_sighup(tmp_path: Path) -> None:
    """`nohup python train.py &`: the job starts with SIGHUP ignored, and the guard leaves it
    so (as a background job's ignored SIGINT): the terminal's end is not the job's."""
    record = tmp_path / "record"
    job = start_in_session(tmp_path, ["nohup", sys.executable, str(SCRIPT), str(record)])
    try:
        eventually(lambda: steps(record) >= 3, timeout=60, what="step 3")
        os.killpg(job.pid, signal.SIGHUP)
        after = steps(record)
        eventually(lambda: steps(record) >= after + 10, timeout=60, what="10 more steps")
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=60) == 143
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert records(record)[-1] == {"exit": 143}


def test_a_print_to_a_terminal_that_hung_up_saves_as_its_sighup_would(tmp_path: Path) -> None:
    """Found printing each step to the terminal (`bash -i` under a pty, as sshd runs it) and
    closing it: the terminal answers a write with EIO from the moment it hangs up, and bash's
    SIGHUP comes a moment later; a print in between raised `OSError: [Errno 5] Input/output
    error` in the loop, before the guard saw any signal, and the job ended unsaved. Here the
    job's output is a terminal that is not its controlling one (no SIGHUP ever comes): the
    window made as long as it gets. The print that meets the hung-up terminal is dropped, and
    the guard saves and exits as on that terminal's SIGHUP."""
    record = tmp_path / "record"
    master, terminal = pty.openpty()
    try:
        job = subprocess.Popen(
            as_in_a_terminal([sys.executable, str(SCRIPT), str(record)]),
            stdin=subprocess.DEVNULL,
            stdout=terminal,
            stderr=terminal,
            cwd=tmp_path,
            env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
            start_new_session=True,  # the pty is not its controlling terminal: no SIGHUP
        )
    finally:
        os.close(terminal)
    said = b""
    try:
        with suppress(OSError):  # the job's terminal output, read so it never blocks

            def read() -> bool:
                nonlocal said
                said += os.read(master, 65536)
                return steps(record) >= 5

            eventually(read, timeout=60, what="step 5")
        os.close(master)  # the terminal hangs up
        master = -1
        code = job.wait(timeout=60)
    finally:
        if master >= 0:
            os.close(master)
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    done = records(record)
    saved = [r["saved"] for r in done if "saved" in r]
    assert saved and saved[-1] >= 5, (done[-3:], said[-2000:])
    assert done[-1] == {"exit": 129}, done[-3:]
    assert code == 129
