"""Programs a protected DataLoader worker starts (a dataset that decodes with ffmpeg, a helper
process of its own) get SIGTERM and SIGINT as they would without forewarn."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("worker_programs.py")


def test_a_program_a_protected_worker_starts_ends_on_sigterm_and_sigint() -> None:
    """The worker ignored SIGTERM and SIGINT (SIG_IGN) and kept SIGTERM blocked, and an exec'd
    program keeps both: a program started from the dataset (`subprocess.Popen`,
    `os.posix_spawn`, `os.fork` and exec, `os.system`) or a process of the worker's own ignored
    `terminate()`, so a dataset that stops its decoder that way waited for it for ever, and the
    loop with it; and one still running outlived a stop until the platform's SIGKILL."""
    assert ended_by_signals("protected") == ended_by_signals("plain")


def ended_by_signals(mode: str) -> dict[str, int | None]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ended: dict[str, int | None] = json.loads(done.stdout)
    assert all(code is not None for code in ended.values()), f"{mode}: {ended}"
    return ended


JOB = Path(__file__).with_name("worker_in_program_job.py")


@pytest.mark.parametrize("end", ["sigterm", "done"])
def test_a_job_exits_while_its_protected_fork_worker_starts_a_program(
    tmp_path: Path, end: str
) -> None:
    """A protected worker starting a program has SIGTERM unblocked in the starting thread, so
    that the program gets it: a SIGTERM then runs the do-nothing handler, its sender unread.
    multiprocessing's exit handler stops the workers with SIGTERM and waits for them without a
    timeout: a fork worker that passed its main process's SIGTERM by, in a dataset that starts
    a decoder per item, kept the job from exiting after its save (measured: the README loop, a
    job-wide SIGTERM, persistent workers, 3 of 12 jobs hung) or at the end of training."""
    checkpoint = tmp_path / "checkpoint"
    proc = subprocess.Popen(
        [sys.executable, str(JOB), str(checkpoint), end],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path / "run")),
        start_new_session=True,
    )
    last = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("step "):
                last = int(line.split()[1])
                if end == "sigterm":
                    os.killpg(proc.pid, signal.SIGTERM)
                break
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not exit: its fork worker passed the exit's SIGTERM by")
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for line in out.splitlines():
        last = int(line.split()[1]) if line.startswith("step ") else last
    if end == "sigterm":
        assert proc.returncode == 143, err
        assert checkpoint.read_text() == str(last)
    else:
        assert proc.returncode == 0, err


TERMINATED = Path(__file__).with_name("terminated_while_starting.py")


@pytest.mark.parametrize("start", ["fork", "spawn", "forkserver"])
def test_terminate_while_a_protected_worker_starts_a_program_ends_it(start: str) -> None:
    """A protected worker starting a program has SIGTERM unblocked in the starting thread (the
    program gets it), and a SIGTERM there runs the do-nothing handler, its sender unread: its
    main process's `terminate()` then (torch's shutdown of a worker still busy after 5 s, in a
    dataset that decodes with a program per item) was passed by, and the worker ran on beside
    the main process, which never asked again. The main process now asks again while the
    worker lives, and the worker reads the request once the start is over."""
    done = subprocess.run(
        [sys.executable, str(TERMINATED), start], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ended"], done.stderr


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_terminate_while_a_protected_worker_runs_a_long_os_system_ends_it_at_once(
    start: str,
) -> None:
    """`os.system` runs for the whole of its program, and the worker had SIGTERM unblocked
    that long, so that the program would get it: its main process's `terminate()` ran the
    do-nothing handler, its sender unread, and so did every one sent again for 10 s. torch's
    DataLoader waits 5 s for each worker it terminates: one busy in a decoder run by
    `os.system` added 5 s per worker to leaving a pass (2 workers: 20 s, 10 without forewarn),
    an evaluation left on `should_exit` before the exit's save included. The program now
    starts with the signals unblocked while the worker keeps them blocked: the terminate is
    read at once."""
    done = subprocess.run(
        [sys.executable, str(TERMINATED), start, "30", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ended"], done.stderr


REUSED_PID = Path(__file__).with_name("terminate_reused_pid.py")


def test_a_terminate_sent_again_never_reaches_a_process_given_the_workers_pid() -> None:
    """The main process sends a protected worker's `terminate()` again while the worker lives,
    by its pid. Reaped outside its Popen (a SIGCHLD handler's `waitpid(-1)`) while a process
    it forked held its sentinel, it still looked alive, and the pid, once given to a new
    process, got the SIGTERMs meant for the worker for up to 10 s. They go to the worker's
    pidfd now, opened as it is terminated. Here in a pid namespace of the test's own, whose
    next pid it sets."""
    unshare = shutil.which("unshare")
    if unshare is None or not hasattr(os, "pidfd_open"):
        pytest.skip("no unshare, or no pidfd_open")
    # The hierarchy's first process is the namespace's init; the script is its child.
    done = subprocess.run(
        [
            unshare,
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            "sh",
            "-c",
            '"$0" "$1" "$2"; true',
            sys.executable,
            str(REUSED_PID),
            os.readlink("/proc/self/ns/pid"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and not done.stdout and "unshare" in done.stderr:
        pytest.skip(f"no user and pid namespace here: {done.stderr.strip()[:200]}")
    if done.stdout.startswith("no ns_last_pid"):
        pytest.skip(done.stdout.strip())
    assert done.stdout.split() == ["spared"], done.stdout + done.stderr


FINALIZATION = Path(__file__).with_name("terminate_at_finalization.py")


def test_a_terminate_while_the_interpreter_finalizes_exits_cleanly() -> None:
    """A protected worker's terminate from a `__del__` run as the interpreter finalizes (a
    DataLoader iterator collected then): looking whether the worker still ran imported a
    module there, and the exit printed an `Exception ignored` traceback."""
    done = subprocess.run(
        [sys.executable, str(FINALIZATION)], capture_output=True, text=True, timeout=20
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


GUARD_AT_IMPORT = Path(__file__).with_name("guard_in_worker_import.py")


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_a_guard_made_as_a_worker_imports_the_script_stays_out_of_the_job(
    tmp_path: Path, start: str
) -> None:
    """A script that makes its guard at module level and runs its loop under `if __name__ ==
    "__main__":` had a guard made in every spawn or forkserver DataLoader worker too, as the
    worker imports the script: each said twice, at every start, that "the SIGTERM handler was
    replaced after the guard installed its own (now pass_by)", subscribed to the agent as a
    client that never acks (no notice was ever flushed by every client), and took a place
    among the jobs reading the flag file, which then waited for saves no worker makes. Such a
    guard handles no signal, subscribes to nothing and reads no flag file."""
    done = subprocess.run(
        [sys.executable, str(GUARD_AT_IMPORT), start],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, FOREWARN_RUNTIME_DIR=str(tmp_path / "run")),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "handler": "pass_by",
        "notices": False,
        "flag_file": False,
        "signals": [],
    }, done.stderr
    assert "handler was replaced" not in done.stderr, done.stderr
