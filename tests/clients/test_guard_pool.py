"""A job whose loop uses a `multiprocessing.Pool` (fork start) under a CheckpointGuard, stopped
by a signal to its whole process group: the pool's workers keep serving the loop until the
guard's save, the job exits with the signal's code, and no worker is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest
from job_session import session_processes
from support import eventually

SCRIPT = Path(__file__).with_name("pool_job.py")


@pytest.mark.parametrize(
    ("kind", "signum", "code"),
    [
        ("pool", signal.SIGTERM, 143),
        ("pool", signal.SIGINT, 130),
        ("executor", signal.SIGTERM, 143),
    ],
)
def test_a_pool_keeps_serving_the_loop_through_a_group_signal_until_the_save(
    tmp_path: Path, kind: str, signum: signal.Signals, code: int
) -> None:
    """Found walking a loop that maps over a Pool at each step: the group's SIGTERM ended the
    pool's idle workers, one of them holding the lock of the pool's task queue, and the job
    saved and then hung in the pool's finalizer at its exit (or, mapping before its save, in
    `pool.map`), until the platform's SIGKILL: exit 137, not 143, steps lost in the second.
    A ProcessPoolExecutor's map after the SIGTERM raised BrokenProcessPool before the save:
    exit 1, the steps since the last save lost."""
    stop_by_a_group_signal(tmp_path, [kind], signum, code)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("kind", ["pool", "executor"])
def test_a_spawn_or_forkserver_pool_keeps_serving_the_loop_through_a_group_sigterm(
    tmp_path: Path, kind: str, method: str
) -> None:
    """Found walking the same loop with `get_context("spawn").Pool(2)` (and "forkserver",
    Python 3.14's default on Linux, and a ProcessPoolExecutor given either as its mp_context),
    the group sent SIGTERM after step 5: the Pool's map hung, no save, still running 30 s
    later (the SIGTERM had ended its workers mid-task); the executor spawn one raised
    BrokenProcessPool before the save, exit 1. Only fork pools' workers were protected: the
    README told users to pass `initializer=ignore_job_signals`."""
    stop_by_a_group_signal(tmp_path, [kind, method], signal.SIGTERM, 143)


def stop_by_a_group_signal(
    tmp_path: Path, args: list[str], signum: signal.Signals, code: int
) -> None:
    checkpoint = tmp_path / "ckpt"
    job = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(checkpoint), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        steps = 0
        for line in job.stdout:
            steps = json.loads(line).get("step", steps)
            if steps >= 3:
                break
        assert steps >= 3, job.stderr.read() if job.stderr else ""
        os.killpg(job.pid, signum)
        try:
            out, err = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            out, err = "", "the job did not exit 60 s after the signal"
        # The resource tracker and the fork server end once the job has exited, not before.
        with suppress(AssertionError):
            eventually(lambda: not session_processes(job.pid), timeout=10, what="no process")
        left = session_processes(job.pid)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    events = [json.loads(line) for line in out.splitlines()]
    saved = [e["saved"] for e in events if "saved" in e]
    assert job.returncode == code, err
    assert saved and saved[-1] >= steps, err
    assert int(checkpoint.read_text()) == saved[-1]
    assert f"exiting at step {saved[-1]} on {signal.Signals(signum).name}" in err
    assert not left, left


WITHOUT_A_GUARD = """
import json, multiprocessing, sys, time
import forewarn.clients
pool = multiprocessing.get_context(sys.argv[1]).Pool(1)
print(json.dumps([p.pid for p in pool._pool]), flush=True)
time.sleep(60)  # the scenario: the job waits while the test signals its worker
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_without_a_guard_a_pool_worker_still_ends_on_a_sigterm_from_outside(
    tmp_path: Path, method: str
) -> None:
    """The protection is the guard's: with none handling SIGTERM, a pool's worker ends on a
    job-wide SIGTERM as it would without forewarn, whatever its start method (a spawn or
    forkserver one sent it while it starts, too)."""
    job = subprocess.Popen(
        [sys.executable, "-c", WITHOUT_A_GUARD, method],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        (worker,) = json.loads(job.stdout.readline())
        os.kill(worker, signal.SIGTERM)  # from the test, not the pool's main process
        eventually(lambda: not alive(worker), timeout=15, what="the worker's end")
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def alive(pid: int) -> bool:
    """Running, not a zombie its parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    # Reaped between the open and the read, the read raises ESRCH (check 47c).
    except (FileNotFoundError, ProcessLookupError):
        return False


THE_USERS_INITIALIZER = """
import json, multiprocessing, sys
from concurrent.futures import ProcessPoolExecutor
from forewarn.clients import CheckpointGuard

seen = None


def remember(*args):
    global seen
    seen = args


def report(_):
    return seen


if __name__ == "__main__":
    guard = CheckpointGuard(every_steps=1000, notices=False)
    context = multiprocessing.get_context(sys.argv[1])
    with context.Pool(1, initializer=remember, initargs=("pool", 1)) as pool:
        print(json.dumps(pool.map(report, [0])), flush=True)
    with ProcessPoolExecutor(1, mp_context=context, initializer=remember, initargs=("x",)) as ex:
        print(json.dumps(list(ex.map(report, [0]))), flush=True)
    guard.close()
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_spawn_or_forkserver_pool_still_runs_the_users_initializer_with_its_arguments(
    tmp_path: Path, method: str
) -> None:
    """The protection is chained before the pool's own initializer, which still gets its
    initargs, in a worker started by pickling."""
    script = tmp_path / "job.py"
    script.write_text(THE_USERS_INITIALIZER)
    proc = subprocess.run(
        [sys.executable, str(script), method],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
    )
    assert proc.returncode == 0, proc.stderr
    pool, executor = (json.loads(line) for line in proc.stdout.splitlines())
    assert pool == [["pool", 1]]
    assert executor == [["x"]]


IGNORING_ON_ITS_OWN = """
import json, multiprocessing, os, sys
import forewarn.clients
from forewarn.clients.workers import ignore_job_signals


def pid(_):
    return os.getpid()


if __name__ == "__main__":
    pool = multiprocessing.get_context(sys.argv[1]).Pool(1, initializer=ignore_job_signals)
    for _ in sys.stdin:  # a line from the test: which worker serves the map now
        print(json.dumps(pool.map(pid, [0])), flush=True)
    pool.terminate()
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_pool_given_ignore_job_signals_outlives_a_sigterm_from_outside_without_a_guard(
    tmp_path: Path, method: str
) -> None:
    """Found checking the README's `initializer=ignore_job_signals` under every start method
    (10 SIGTERMs from outside, no guard): the fork pool's worker ended at the first one.
    Chained behind forewarn's own initializer, it had two threads reading its SIGTERMs, and
    the one that protects only while a guard handles SIGTERM took it."""
    script = tmp_path / "job.py"
    script.write_text(IGNORING_ON_ITS_OWN)
    job = subprocess.Popen(
        [sys.executable, str(script), method],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        assert job.stdin is not None and job.stdout is not None

        def serving() -> int:
            assert job.stdin is not None and job.stdout is not None
            job.stdin.write("\n")
            job.stdin.flush()
            (pid,) = json.loads(job.stdout.readline())
            return int(pid)

        worker = serving()
        for _ in range(10):
            os.kill(worker, signal.SIGTERM)  # from the test, not the pool's main process
            eventually(lambda: not pending(worker), timeout=15, what="the SIGTERM taken")
            assert serving() == worker
    finally:
        with suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def pending(pid: int) -> bool:
    """A signal is pending for the process (or it is gone: nothing will take it)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = dict(line.split(":", 1) for line in status)
    except FileNotFoundError:
        return False
    return any(int(lines[key], 16) for key in ("SigPnd", "ShdPnd"))
