"""A torch loop run by hand in a terminal (`bash -i` under a pty, as sshd runs it) whose
DataLoader or process pool feeds it from workers: when the terminal closes, bash sends SIGHUP
to the job's whole process group, workers included. They keep feeding the loop until the
guard's save, the job exits 129, and no worker is left behind."""

from __future__ import annotations

import json
import os
import pty
import shlex
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from job_session import (
    HeldStart,
    end_session,
    every_worker_ends,
    session_processes,
    start_in_session,
)
from support import as_in_a_terminal, eventually, sighup_as_in_a_terminal

SCRIPT = Path(__file__).with_name("hangup_loader_job.py")


def records(path: Path) -> list[dict[str, int]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    except FileNotFoundError:
        return []


def steps(path: Path) -> int:
    return max((r.get("step", 0) for r in records(path)), default=0)


def drain(master: int) -> bool:
    with suppress(OSError):
        os.read(master, 65536)
    return True


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
@pytest.mark.parametrize("kind", ["loader", "pool"])
def test_a_closed_terminal_leaves_the_workers_feeding_the_loop_until_the_save(
    tmp_path: Path, kind: str, method: str
) -> None:
    """Found walking a torch loop with a guard and a DataLoader with two workers whose batches
    are slow, typed into `bash -i` under a pty, the terminal closed after step 5: bash's
    SIGHUP to the job's process group killed the workers, and the loop raised `DataLoader
    worker (pid …) is killed by signal: Hangup` before the guard's save (exit 1, every step
    since the last save lost); a Pool's map hung on its dead workers."""
    closed_terminal(tmp_path, [kind, method])


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("init", ["ignore_job_signals", "worker_init_fn()"])
def test_workers_given_their_init_outlive_a_closed_terminal_either_way_it_is_written(
    tmp_path: Path, init: str, method: str
) -> None:
    """Found reading the README: `worker_init_fn=ignore_job_signals` given uncalled (as people
    write it) left the workers without SIGHUP protection, so a closed terminal's SIGHUP ended
    them and the loop raised `DataLoader worker (pid …) is killed by signal: Hangup` before
    the save; `worker_init_fn()` protected them. Both spellings now protect the same."""
    closed_terminal(tmp_path, ["loader", method, init])


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_workers_print_to_a_terminal_that_hung_up_does_not_end_the_loop_before_the_save(
    tmp_path: Path, method: str
) -> None:
    """Found typing a torch loop whose DataLoader workers print (a dataset's progress line)
    into `bash -i` under a pty, its output the terminal, and closing the terminal after step
    5: a spawn or forkserver worker's next print raised `OSError: [Errno 5] Input/output
    error` in the worker, which the DataLoader raised in the loop before the guard's save (3
    of 3 runs each, no save, the loop's last record step 5 or 6); a fork worker's print
    was dropped (its stdout the main process's wrapped copy), saved at step 6, exit 129."""
    closed_terminal(tmp_path, ["loader", method, "none", "prints"], output_to_terminal=True)


def closed_terminal(tmp_path: Path, job: list[str], output_to_terminal: bool = False) -> None:
    """The job (hangup_loader_job.py's arguments after RECORD) typed into `bash -i` under a
    pty, as sshd runs it, the terminal closed after step 5: saved, exit 129, nothing left.
    `output_to_terminal`: its stdout is the terminal (its stderr still a file)."""
    record = tmp_path / "record"
    env = dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path), PS1="$ ")
    pid, master = pty.fork()
    if pid == 0:  # the login shell of an ssh session: the pty is its controlling terminal
        with suppress(BaseException):
            sighup_as_in_a_terminal()  # bash cannot reset a SIGHUP ignored at its start
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
        os._exit(127)
    # The job's output to files, as `python train.py > log 2>&1` in a terminal: a print to the
    # terminal between its hangup and bash's SIGHUP raises EIO in the loop before any signal
    # (a race the guard cannot see: check 45c lost it once, loader-spawn), and its
    # traceback, if any, is what a failure here must show.
    errors = tmp_path / "job.err"
    os.set_blocking(master, False)  # the terminal shows only bash's prompt now: never wait on it
    command = shlex.join([sys.executable, str(SCRIPT), str(record), *job])
    if not output_to_terminal:
        command += f" > {shlex.quote(str(tmp_path / 'job.out'))}"
    command += f" 2> {shlex.quote(str(errors))}"
    sid = pid
    try:
        os.write(master, command.encode() + b"\n")
        eventually(lambda: drain(master) and steps(record) >= 5, timeout=120, what="step 5")
        os.close(master)  # the ssh session closes: the kernel hangs up the terminal
        master = -1
        os.waitpid(pid, 0)  # bash, having sent its job SIGHUP
        pid = 0
        eventually(lambda: not session_processes(sid), timeout=60, what="the job's end")
    finally:
        if master >= 0:
            os.close(master)
        for line in session_processes(sid):  # what was left behind, so the failure says it
            with suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        if pid:
            os.waitpid(pid, 0)
    done = records(record)
    saved = [r["saved"] for r in done if "saved" in r]
    said = errors.read_text() if errors.exists() else ""
    assert saved and saved[-1] >= 5, (done[-3:], said[-2000:])
    assert done[-1] == {"exit": 129}, done[-3:]


def start_job(tmp_path: Path, kind: str, method: str, nohup: bool = False) -> subprocess.Popen[str]:
    record = tmp_path / "record"
    command = [sys.executable, str(SCRIPT), str(record), kind, method]
    return start_in_session(tmp_path, ["nohup", *command] if nohup else as_in_a_terminal(command))


def children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(each) for each in out.split()]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_under_nohup_the_workers_keep_sighup_ignored_and_the_loop_trains_on(
    tmp_path: Path, method: str
) -> None:
    """`nohup python train.py &`: SIGHUP ignored in the job stays ignored in its workers too."""
    record = tmp_path / "record"
    job = start_job(tmp_path, "loader", method, nohup=True)
    try:
        eventually(lambda: steps(record) >= 3, timeout=60, what="step 3")
        os.killpg(job.pid, signal.SIGHUP)
        after = steps(record)
        eventually(lambda: steps(record) >= after + 20, timeout=60, what="20 more steps")
        os.killpg(job.pid, signal.SIGTERM)
        assert job.wait(timeout=60) == 143
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert records(record)[-1] == {"exit": 143}
    assert job.stderr is not None
    assert "Hangup" not in job.stderr.read()


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["pool", "executor"])
def test_pool_workers_that_outlived_a_sighup_end_when_the_main_process_dies(
    tmp_path: Path, kind: str, method: str
) -> None:
    """A pool's workers have no lifeline (the pool's finalizer stops them at the exit): one
    that outlived a SIGHUP because a guard handled it would have been left blocked on the
    pool's task queue for ever had the main process died before its save (killed, a crash),
    in a session whose terminal is gone and that nobody stops any more."""
    record = tmp_path / "record"
    job = start_job(tmp_path, kind, method)
    try:
        eventually(lambda: steps(record) >= 3, timeout=60, what="step 3")
        # The pool's workers, and a spawn start's resource tracker, which ends with the job.
        workers = children(job.pid)
        assert workers
        for pid in workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)  # the group's SIGHUP, as the workers get it
        after = steps(record)
        eventually(lambda: steps(record) >= after + 5, timeout=60, what="5 more steps")
        os.kill(job.pid, signal.SIGKILL)  # the main process dies before any save
        job.wait()
        every_worker_ends(job.pid, timeout=30)
    finally:
        end_session(job)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_sent_a_sighup_after_the_main_process_died_end_mid_task(
    tmp_path: Path, method: str
) -> None:
    """Found walking last session's open case (a spawn Pool worker left after its main
    process's SIGKILL, its orphan watcher still polling 15 s on, py-spy): the main process is
    killed while its pool's workers run long tasks, and the group's SIGHUP (the terminal
    closing) reaches them after. The guard's byte still says it saves, so they outlive the
    SIGHUP and watch for their parent to go; the parent they watched was read as the SIGHUP
    was handled, after the main process had died (the reaper), so they ran their tasks to the
    end (a minute here, any length in a job) on the node the next job is given."""
    record = tmp_path / "record"
    job = start_job(tmp_path, "pool", method)
    try:
        eventually(lambda: steps(record) >= 3, timeout=60, what="step 3")
        workers = children(job.pid)
        (tmp_path / "long-tasks").touch()
        eventually(
            lambda: len(list(tmp_path.glob("long-task-*"))) >= 2, timeout=30, what="long tasks"
        )
        os.kill(job.pid, signal.SIGKILL)  # the main process dies before any save
        job.wait()
        for pid in workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)  # the group's SIGHUP, come just after
        every_worker_ends(job.pid, timeout=10)
    finally:
        end_session(job)


def test_a_spawn_pool_worker_still_starting_when_the_main_process_dies_ends(
    tmp_path: Path,
) -> None:
    """Found reproducing the rare leftover of the test above (spawn pool and executor, under
    load; py-spy: its orphan watcher watching parent 1, its main thread on the task queue's
    lock): a spawn worker still importing the main module (torch, seconds on a loaded machine)
    while its sibling fed the loop got the group's SIGHUP there, held until its protection,
    and the main process was killed before that protection ran. The parent it read to watch
    was already the reaper, so it outlived the SIGHUP watching a parent that never changed,
    and stayed blocked on the task queue for ever. An executor's worker keeps the queue's
    write end (a Pool's closes its copy, and may read the queue's end), so it stays every
    time here."""
    record = tmp_path / "record"
    held = HeldStart(tmp_path)
    job = start_job(tmp_path, "executor", "spawn")
    try:
        eventually(lambda: steps(record) >= 3, timeout=60, what="step 3")
        eventually(lambda: list(tmp_path.glob("held-*")), timeout=30, what="a held start")
        for pid in children(job.pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)  # the group's SIGHUP, as the workers get it
        os.kill(job.pid, signal.SIGKILL)  # the main process dies before any save
        job.wait()
        held.release()  # the held worker goes on to its protection
        every_worker_ends(job.pid, timeout=30)
    finally:
        end_session(job)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_resource_tracker_outlives_a_closed_terminals_sighup(
    tmp_path: Path, method: str
) -> None:
    """Found sending a spawn (or forkserver) DataLoader job's process group SIGHUP, as bash does
    as its terminal closes: multiprocessing's resource tracker, which ignores SIGINT and
    SIGTERM so that it outlives its job and cleans up after it, died of it; the job saved and
    exited 129, but warned twice `resource_tracker: process died unexpectedly, relaunching.
    Some resources might leak.` and printed 14 `KeyError` tracebacks (each semaphore freed
    after, unknown to the tracker started again), and what the dead tracker knew of would
    not have been cleaned up after a crash."""
    record = tmp_path / "record"
    job = start_job(tmp_path, "loader", method)
    try:
        eventually(lambda: steps(record) >= 5, timeout=120, what="step 5")
        os.killpg(job.pid, signal.SIGHUP)  # the closed terminal's, to the whole group
        assert job.wait(timeout=60) == 129
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert records(record)[-1] == {"exit": 129}
    assert job.stderr is not None
    said = job.stderr.read()
    assert "resource_tracker" not in said, said[-2000:]
    assert "KeyError" not in said, said[-2000:]
