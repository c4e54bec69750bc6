"""DataLoader workers under a job-wide SIGTERM: with `worker_init_fn()` they keep feeding the
loop (and still end with it); without it the loop dies, as systemd's control-group kill and
torchrun's process-group signal make it die."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.workers import worker_init_fn
from forked_ranks import RankLauncher, RankProcess
from support import eventually, requires

pytestmark = requires("torch")

SCRIPT = Path(__file__).with_name("loader_job.py")
# loader_own_handler.py as a fresh interpreter: it imports torch, and its spawn worker imports
# torch again (~5 CPU-s in all; 24 s of wall time at load 10). A suite run on the 2-core
# machine went past the 60 s bound this had. A hung job still fails, at this bound.
JOB_BOUND = 240


def start(
    launcher: RankLauncher, mode: str, stop_at: int, *more: str, session: bool = False, **env: str
) -> RankProcess:
    """The job forked from a launcher that imported torch once (tests/forked_ranks.py): its
    own process (and, with `session`, process group), pipes, signals and exit code, without
    the ~2 CPU-s of a fresh interpreter's torch import. Its spawn and forkserver workers, and
    the fork server, start as fresh interpreters all the same."""
    return launcher.start(
        SCRIPT, [mode, str(stop_at), *more], dict(os.environ, OMP_NUM_THREADS="1", **env),
        session=session,
    )  # fmt: skip


def first_batch(proc: RankProcess) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        event = json.loads(line)
        if event.get("workers"):
            return event


def sigterm_from_outside(proc: RankProcess) -> tuple[list[int], str, str]:
    """Send SIGTERM to each of the job's DataLoader workers from this process (not their main
    process), then let the job run to its end: the workers, stdout and stderr."""
    try:
        workers: list[int] = first_batch(proc)["workers"]
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return workers, out, err


def workers_end(workers: list[int], what: str) -> None:
    eventually(
        lambda: not any(os.path.exists(f"/proc/{pid}") for pid in workers), timeout=15, what=what
    )


def test_guarded_workers_ignore_a_foreign_sigterm_and_end_with_the_job(
    rank_launcher: RankLauncher,
) -> None:
    proc = start(rank_launcher, "guarded", 150)
    workers, out, err = sigterm_from_outside(proc)
    assert proc.returncode == 0, err
    batches = [json.loads(line) for line in out.splitlines()]
    assert batches[-1].get("leaving"), "the loop went on to its planned end"
    workers_end(workers, "the workers to end with the job")


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_guarded_workers_outlive_a_foreign_sigterm_and_end_when_the_job_exits(
    start_method: str,
    rank_launcher: RankLauncher,
) -> None:
    """A spawn or forkserver worker already has threads when its init runs (import torch
    starts OpenBLAS's): blocking SIGTERM in the init's thread left them open to it, and the
    SIGTERM killed the worker. The job then exits with its iterator alive, so multiprocessing's
    exit handler stops the workers with its SIGTERM, which such a thread can take: the worker
    must still end, or the handler waits for it for ever."""
    proc = start(rank_launcher, "guarded", 60, start_method, "1", "keep")
    workers, out, err = sigterm_from_outside(proc)
    assert proc.returncode == 0, err
    assert "exited unexpectedly" not in err, err
    batches = [json.loads(line) for line in out.splitlines()]
    assert batches[-1].get("leaving"), "the loop went on to its planned end"
    workers_end(workers, "the workers to end with the job")


def test_a_sigterm_to_the_whole_group_leaves_forkserver_workers_feeding_the_loop(
    rank_launcher: RankLauncher,
) -> None:
    """systemd's control-group kill and a process-group kill also reach multiprocessing's fork
    server, the forkserver workers' parent; torch's worker loop ends when its parent is gone,
    so the fork server's death took every worker, and the loop raised before the save."""
    proc = start(rank_launcher, "guarded", 40, "forkserver", "2", session=True)
    try:
        first_batch(proc)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"
    eventually(
        lambda: not running_in_group(proc.pid),
        timeout=15,
        what="the fork server and the workers to end with the job",
        interval=0.1,
    )


def test_a_preload_the_job_sets_itself_still_keeps_the_fork_server_through_the_sigterm(
    tmp_path: Path,
    rank_launcher: RankLauncher,
) -> None:
    """A job that calls `multiprocessing.set_forkserver_preload([...])` itself (to preload its
    own modules), after forewarn was imported, replaced forewarn's preload: the fork server
    died of a job-wide SIGTERM, and with it every worker, so the loop raised `DataLoader
    worker ... exited unexpectedly` before the save."""
    proc = start(
        rank_launcher,
        "guard",
        40,
        "forkserver",
        "2",
        session=True,
        LOADER_JOB_PRELOAD="__main__",
        FOREWARN_RUNTIME_DIR=str(tmp_path / "run"),
    )
    try:
        first_batch(proc)
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"


@pytest.mark.slow(10)
def test_a_sigterm_to_the_whole_group_while_the_fork_server_starts_does_not_end_it(
    tmp_path: Path,
    rank_launcher: RankLauncher,
) -> None:
    """The fork server starts with the first forkserver worker and imports its preload (the
    main module first, torch with it: seconds) before forewarn's module has it block SIGTERM:
    a job-wide SIGTERM then ended it, and the DataLoader raised as it asked it for a worker,
    before the save. It now starts with SIGTERM blocked."""
    hold = tmp_path / "server-starting"
    proc = start(
        rank_launcher,
        "guard",
        20,
        "forkserver",
        "1",
        session=True,
        LOADER_JOB_PRELOAD="fork_server_hold",
        LOADER_JOB_SERVER_HOLD=str(hold),
        # Python 3.11's fork server is given the job's sys.path but does not use it.
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(SCRIPT.parent), os.environ.get("PYTHONPATH")])
        ),
        FOREWARN_RUNTIME_DIR=str(tmp_path / "run"),
    )
    try:
        eventually(hold.exists, timeout=120, what="the fork server to be starting")
        os.killpg(proc.pid, signal.SIGTERM)
        hold.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"


def test_an_empty_preload_the_job_set_gets_only_forewarns_module() -> None:
    """A job that set the fork server's preload empty (so that it imports no main module) had
    `__main__` put back with forewarn's module."""
    from multiprocessing import forkserver

    from forewarn.clients import workers

    before = forkserver._forkserver._preload_modules  # type: ignore[attr-defined]
    try:
        forkserver.set_forkserver_preload([])
        workers._preload_in_fork_server()
        preload = forkserver._forkserver._preload_modules  # type: ignore[attr-defined]
        assert preload == [workers.FORK_SERVER_PRELOAD]
    finally:
        forkserver._forkserver._preload_modules = before  # type: ignore[attr-defined]


@pytest.mark.slow(10)
def test_a_sigterm_to_the_whole_group_while_a_forkserver_worker_starts_does_not_end_it(
    tmp_path: Path,
    rank_launcher: RankLauncher,
) -> None:
    """A forkserver worker imports the main module before its worker_init_fn runs (Python
    3.11's fork server does not preload it; with torch that takes seconds, and a DataLoader
    without persistent workers starts its workers again at every pass): a job-wide SIGTERM
    then ended it, and the loop raised `DataLoader worker ... exited unexpectedly`."""
    hold = tmp_path / "starting"
    proc = start(
        rank_launcher, "guarded", 20, "forkserver", "1", session=True, LOADER_JOB_HOLD=str(hold)
    )
    try:
        eventually(hold.exists, timeout=120, what="the worker to be starting")
        os.killpg(proc.pid, signal.SIGTERM)
        hold.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"


@pytest.mark.slow(10)
def test_a_sigterm_to_the_whole_group_while_a_spawn_worker_starts_does_not_end_it(
    tmp_path: Path,
    rank_launcher: RankLauncher,
) -> None:
    """A spawn worker imports the main module before its worker_init_fn runs (seconds with
    torch, and a DataLoader without persistent workers starts its workers again at every pass):
    a job-wide SIGTERM then ended it, and under a guard the loop raised `DataLoader worker ...
    exited unexpectedly` before the save. It now starts with SIGTERM blocked, as a fork
    worker does. Given no worker_init_fn (the guard has it chained in as the worker is
    pickled), as most loops are."""
    hold = tmp_path / "starting"
    proc = start(
        rank_launcher,
        "guard",
        20,
        "spawn",
        "1",
        session=True,
        LOADER_JOB_HOLD=str(hold),
        FOREWARN_RUNTIME_DIR=str(tmp_path / "run"),
    )
    try:
        eventually(hold.exists, timeout=120, what="the worker to be starting")
        os.killpg(proc.pid, signal.SIGTERM)
        hold.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"


@pytest.mark.slow(10)
@pytest.mark.parametrize("mode", ["guarded", "guard"])
def test_a_sigterm_to_the_whole_group_while_a_fork_worker_starts_does_not_end_it(
    tmp_path: Path, mode: str, rank_launcher: RankLauncher
) -> None:
    """A fork worker runs torch's worker loop, which sets a SIGTERM handler of its own (one that
    ends the worker on anyone's SIGTERM) and seeds before it calls the worker_init_fn: a job-wide
    SIGTERM in that time (a DataLoader without persistent workers starts its workers again at
    every pass: every evaluation) ended it, and the loop raised `DataLoader worker ... exited
    unexpectedly` before the save. So with `worker_init_fn()`, and with none while a guard
    handles SIGTERM (the worker gets it chained in as it is forked)."""
    hold = tmp_path / "starting"
    proc = start(
        rank_launcher,
        mode,
        20,
        "fork",
        "1",
        session=True,
        LOADER_JOB_HOLD=str(hold),
        FOREWARN_RUNTIME_DIR=str(tmp_path / "run"),
    )
    try:
        eventually(hold.exists, timeout=120, what="the worker to be starting")
        os.killpg(proc.pid, signal.SIGTERM)
        hold.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(out.splitlines()[-1]).get("leaving"), "the loop went on to its planned end"


@pytest.mark.slow(10)
def test_without_a_guard_a_sigterm_to_the_whole_group_while_a_fork_worker_starts_ends_it(
    tmp_path: Path,
    rank_launcher: RankLauncher,
) -> None:
    """With neither `worker_init_fn()` nor a guard that handles SIGTERM, the worker forewarn
    chains its init into still ends on the job-wide SIGTERM, as it did without forewarn (the
    main process would end on it too, with nothing to save first)."""
    hold = tmp_path / "starting"
    proc = start(rank_launcher, "plain", 20, "fork", "1", session=True, LOADER_JOB_HOLD=str(hold))
    try:
        eventually(hold.exists, timeout=120, what="the worker to be starting")
        os.killpg(proc.pid, signal.SIGTERM)
        hold.unlink()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert "killed by signal: Terminated" in err, err[-2000:]


def test_other_forkserver_processes_still_end_on_terminate() -> None:
    """The fork server's children start with SIGTERM blocked; any process but a protected
    DataLoader worker gets it back when it starts to run."""
    import multiprocessing

    worker_init_fn()  # the fork server it starts from here on ignores SIGTERM
    context = multiprocessing.get_context("forkserver")
    child = context.Process(target=time_sleep, args=(60,), daemon=True)
    child.start()
    try:
        child.terminate()
        child.join(timeout=60)
        assert child.exitcode == -signal.SIGTERM
    finally:
        child.kill()


def time_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def running_in_group(pgid: int) -> list[int]:
    """The processes of process group `pgid` that are still running (zombies are done)."""
    running = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError):
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    running.append(int(entry))
    return running


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_guarded_workers_end_when_the_main_process_is_killed(
    start_method: str, rank_launcher: RankLauncher
) -> None:
    """A forkserver worker's parent is the fork server, which lives on while the worker does:
    a worker waiting for its parent to go outlived a killed main process for good."""
    # Not communicate() after the kill: a worker left alive holds the job's stdout open.
    with start(rank_launcher, "guarded", 100_000, start_method, "1") as proc:
        try:
            workers = first_batch(proc)["workers"]
        finally:
            proc.kill()
    try:
        workers_end(workers, "the workers to end with their killed main process")
    finally:
        for pid in workers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_worker_init_fn_pickles_outside_a_process_start() -> None:
    """Only a worker being started gets the main process's lifeline; any other copy (pickled,
    deep-copied by a framework) is a plain `worker_init_fn` chaining the same function."""
    init = pickle.loads(pickle.dumps(worker_init_fn(abs)))
    assert init.then is abs
    assert init.lifeline is None


def test_worker_init_fn_given_without_calling_it_is_a_clear_error() -> None:
    """`DataLoader(worker_init_fn=worker_init_fn)`, the parentheses forgotten: each worker
    called it with its id, which it took for the user's own init, and returned without
    protecting the worker; a job-wide SIGTERM then ended the workers before the save."""
    with pytest.raises(TypeError, match=r"worker_init_fn=worker_init_fn\(\)"):
        worker_init_fn(0)  # type: ignore[arg-type]  # what such a worker does
    with pytest.raises(TypeError, match="callable"):
        worker_init_fn("seed")  # type: ignore[arg-type]


def test_ignore_job_signals_called_in_the_main_process_is_a_clear_error() -> None:
    """`DataLoader(worker_init_fn=ignore_job_signals())`, called where it should be given: it
    ran in the training process itself, which then ignored SIGINT and exited 0 on its parent's
    SIGTERM (torchrun's, systemd's) without a save: a reclaimed job counted as complete."""
    proc = subprocess.run(
        [sys.executable, "-c", "from forewarn.clients.workers import *; ignore_job_signals()"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "worker_init_fn=ignore_job_signals" in proc.stderr.splitlines()[-1], proc.stderr


@pytest.mark.parametrize("start_method", ["fork", "forkserver"])
def test_plain_workers_die_of_the_sigterm_and_take_the_loop_down(
    start_method: str, rank_launcher: RankLauncher
) -> None:
    """Given no init and no guard, a worker (forewarn chains its init in all the same) ends on a
    SIGTERM from outside, as it did without forewarn."""
    proc = start(rank_launcher, "plain", 10_000, start_method, "2")
    _, _, err = sigterm_from_outside(proc)
    assert proc.returncode != 0
    # A forkserver worker is not this process's child: torch sees it gone, not how it ended.
    ended = "killed by signal: Terminated" if start_method == "fork" else "exited unexpectedly"
    assert ended in err, err[-2000:]


def _own_handler_job(
    launcher: RankLauncher, tmp_path: Path, *mode: str
) -> subprocess.CompletedProcess[str]:
    """loader_own_handler.py, forked from the launcher that imported torch and forewarn.clients
    once (a fresh interpreter spent ~3 CPU-s importing torch); its spawn workers start
    fresh all the same."""
    script = SCRIPT.with_name("loader_own_handler.py")
    argv = [str(tmp_path), *mode]
    job = launcher.start(script, argv, dict(os.environ, OMP_NUM_THREADS="1"))
    out, err = job.communicate(timeout=JOB_BOUND)
    return subprocess.CompletedProcess([str(script), *argv], job.returncode, out, err)


@pytest.mark.timeout(300)
def test_a_workers_own_sigterm_handler_still_runs_without_a_guard(
    tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """Importing forewarn.clients chains its init into every DataLoader worker. A worker whose
    own `worker_init_fn` installed a SIGTERM handler (to flush what it writes) never ran it:
    forewarn's thread took the signal and ended the worker itself, whoever sent it. With no
    guard, such a worker ends on SIGTERM as it did without forewarn: by its own handler."""
    job = _own_handler_job(rank_launcher, tmp_path)
    workers = json.loads(job.stdout.splitlines()[0])
    flushed = [pid for pid in workers if (tmp_path / f"flushed-{pid}").exists()]
    assert flushed == workers, job.stderr


@pytest.mark.timeout(300)
def test_under_a_guard_a_workers_own_sigterm_handler_does_not_take_a_foreign_sigterm(
    tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """A spawn worker has threads from before its init (a library's); one of them could take a
    job-wide SIGTERM, and Python then ran the handler the worker's own init installed, in its
    main thread, whoever sent it: under a guard the worker ended and the loop raised before the
    save, as a fork worker, whose forewarn thread takes it, does not."""
    job = _own_handler_job(rank_launcher, tmp_path, "guarded-spawn")
    assert job.stdout.splitlines()[1:] == ["read"], job.stderr
    assert not list(tmp_path.glob("flushed-*"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_protected_worker_ends_cleanly_while_its_own_thread_runs_torch(
    tmp_path: Path, start_method: str
) -> None:
    """Found closing the terminal of a guarded loop whose spawn DataLoader workers fed it (the
    save made, exit 129): in 1 run of 12 the log ended `terminate called without an active
    exception` and `RuntimeError: DataLoader worker (pid ...) is killed by signal: Aborted`.
    A spawn worker ended through the interpreter's finalization, which ends a daemon thread
    (there: multiprocessing's queue feeder pickling a batch into shared memory) when it next
    takes the GIL, and one inside a torch op that released it aborts the process (torch's
    own, forewarn or not; a thread spinning on torch ops makes it happen each run). A
    protected spawn DataLoader worker now ends as fork and forkserver ones do: `os._exit`
    once multiprocessing is done with it, its atexit handlers run first."""
    marker = tmp_path / "atexit"
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("spinning_worker_job.py")),
            start_method,
            str(marker),
        ],
        capture_output=True,
        text=True,
        timeout=JOB_BOUND,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert "terminate called" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["worker exit code 0"], (done.stdout, done.stderr[-2000:])
    if start_method == "spawn":  # forkserver (and fork) workers end by os._exit, as before
        assert marker.read_text() == "ran"
