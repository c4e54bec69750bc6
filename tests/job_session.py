"""The processes still running in a job's session, for the tests that kill a job's main
process and check that nothing it started is left on the node for the next job."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import suppress
from pathlib import Path

from support import eventually


def start_in_session(tmp_path: Path, argv: list[str]) -> subprocess.Popen[str]:
    """`argv` started in a session of its own, as a job of its own: its output dropped, its
    errors kept for the failure, its runtime directory `tmp_path` (its guard's flag file
    there, never the machine's)."""
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )


def session_processes(sid: int) -> list[str]:
    """The session's processes still running, as `ps` lines (pid, sid, state, command): not a
    zombie, which is gone in all but its parent's table (a spawn or forkserver start's resource
    tracker and fork server end once the job has exited, and wait there for init's reaping)."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in out.splitlines()
        if line.split()[1] == str(sid) and not line.split()[2].startswith("Z")
    ]


def end_session(job: subprocess.Popen[str]) -> None:
    """Kill what is left of the job's session (a worker the test found still running) and reap
    the job."""
    for line in session_processes(job.pid):
        with suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    with suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def left_behind(sid: int) -> list[str]:
    """What each process of the session still running is doing: its parent, its signals
    pending, blocked and caught, and where each of its threads waits in the kernel (a rare
    leftover worker seen in two clean-clone runs, not found again by hand)."""
    said = []
    for line in session_processes(sid):
        pid = line.split()[0]
        with suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            fields = dict(row.split(":", 1) for row in status.splitlines() if ":" in row)
            kept = {k: fields[k].strip() for k in ("PPid", "SigPnd", "ShdPnd", "SigBlk", "SigCgt")}
            waits = [(task / "wchan").read_text() for task in Path(f"/proc/{pid}/task").iterdir()]
            said.append(f"{line.strip()} {kept} threads waiting in {waits}")
    return said


def every_worker_ends(sid: int, timeout: float) -> None:
    """Wait for every process of the session to end; past `timeout`, fail saying what each
    one left is doing (`left_behind`)."""
    try:
        eventually(lambda: not session_processes(sid), timeout=timeout, what="every worker's end")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; left: {left_behind(sid)}") from None


class HeldStart:
    """Has the job (hangup_loader_job.py) hold a spawn or forkserver worker other than the
    first as it imports the main module, as one still importing torch is on a loaded machine:
    it blocks reading the FIFO `release` in the job's directory, whose only writer is this
    test, until `release()` closes that end (or the test's process ends). Not a timed wait:
    the worker goes on exactly when the test says."""

    def __init__(self, directory: Path) -> None:
        fifo = directory / "release"
        os.mkfifo(fifo)
        # A reader for a moment, so that the write end opens at once; not inheritable, so the
        # job's processes never hold the write end and keep the held worker waiting.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self._writer: int | None = os.open(fifo, os.O_WRONLY)
        os.close(reader)
        (directory / "hold-a-start").touch()

    def release(self) -> None:
        """The held worker reads the end of the FIFO and goes on with its start."""
        if self._writer is not None:
            os.close(self._writer)
            self._writer = None
