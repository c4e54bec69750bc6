"""The same job started twice by mistake on one store (two live processes saving into it): each
job's saves interleaved with the other's generations, `latest()` resumed from whichever
committed last and `keep=N` counted both jobs' generations, and nothing said so. The second
writer now says it in one WARNING naming the first's pid; a predecessor that is gone (killed,
or ended) and more stores on one path in one process say nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore

# Saves step N into the store, says "saved", then waits for its standard input to close.
WRITER = textwrap.dedent(
    """
    import logging, sys
    from forewarn.clients.checkpoint import CheckpointStore
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    store = CheckpointStore(sys.argv[1])
    with store.save(int(sys.argv[2])) as gen:
        gen.write_bytes("model.pt", b"m" * 100)
    print("saved", flush=True)
    sys.stdin.read()
    """
)


def _writer(store: Path, step: int) -> subprocess.Popen[str]:
    job = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), str(step)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert job.stdout is not None and job.stdout.readline() == "saved\n"
    return job


def _end(job: subprocess.Popen[str]) -> str:
    """The job's standard error, once it ended."""
    _out, err = job.communicate(timeout=30)
    return err


def _other_writer_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "another process" in line and "store" in line]


def test_the_second_live_writer_of_a_store_says_so_once(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = _writer(store, 10)
    try:
        second = _writer(store, 11)
        err = _end(second)
    finally:
        first_err = _end(first)
    (line,) = _other_writer_lines(err)
    assert line.startswith("WARNING "), line
    assert f"pid {first.pid} " in line, line
    assert f"file://{store}" in line, line
    assert not _other_writer_lines(first_err), first_err


@pytest.mark.parametrize("how", ["killed", "ended"])
def test_a_writer_whose_predecessor_is_gone_says_nothing(tmp_path: Path, how: str) -> None:
    store = tmp_path / "store"
    first = _writer(store, 10)
    if how == "killed":
        first.send_signal(signal.SIGKILL)
    _end(first)
    err = _end(_writer(store, 11))
    assert not _other_writer_lines(err), err


def test_stores_on_one_path_in_one_process_say_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store"
    for step in (1, 2):
        with CheckpointStore(str(path)).save(step) as gen:
            gen.write_bytes("a", b"a")
    assert not [r for r in caplog.records if "another process" in r.getMessage()]


def test_a_writer_leaves_nothing_in_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's mark is an abstract socket name, no file: a lock file in the temporary
    directory left `forewarn-store-writers` there for good (the drills' "nothing left in
    TMPDIR" tests found it), and, that directory open to every user, a symlink there to a
    file of this user's had that file truncated and overwritten with the writer's pid."""
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    monkeypatch.setenv("TMPDIR", str(temporary))
    with CheckpointStore(str(tmp_path / "store")).save(5) as gen:
        gen.write_bytes("model.pt", b"m" * 100)
    assert list(temporary.iterdir()) == []


# A job's start: its guard made with the store, then (argv[2]) its first `due()` ("due"), or
# nothing more (torchrun's RANK in its environment: "rank"), or its rank becoming 1 before its
# first `due()` (`mp.spawn`: the guard made before `init_process_group`: "late-rank-1"); no
# save. Says "started", then waits for its standard input to close.
GUARD_STARTED = textwrap.dedent(
    """
    import logging, os, sys
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.checkpoint import CheckpointStore
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    store = CheckpointStore(sys.argv[1])
    guard = CheckpointGuard(
        every_steps=1000, store=store, notices=False, handle_signals=False, flag_file=None
    )
    if sys.argv[2] == "late-rank-1":
        os.environ["RANK"], os.environ["WORLD_SIZE"] = "1", "2"  # as the process group says
    if sys.argv[2] != "rank":
        guard.due(1)
    print("started", flush=True)
    sys.stdin.read()
    guard.close()
    """
)


def _started(store: Path, how: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    if how == "rank":
        env.update(RANK="0", WORLD_SIZE="1")
    job = subprocess.Popen(
        [sys.executable, "-c", GUARD_STARTED, str(store), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert job.stdout is not None and job.stdout.readline() == "started\n"
    return job


@pytest.mark.parametrize("how", ["due", "rank"])
def test_the_same_job_started_twice_is_told_at_its_start_not_at_its_first_save(
    tmp_path: Path, how: str
) -> None:
    """The second job's WARNING came at its first save, a checkpoint interval (an hour?)
    after both jobs started training on one store, and not at all while neither had saved
    yet. A guard given a store is its job's writer from its start: it says so when it is
    made (its rank known: torchrun's RANK), or else at its first `due()`."""
    store = tmp_path / "store"
    first = _started(store, how)
    try:
        second = _started(store, how)
        err = _end(second)
    finally:
        first_err = _end(first)
    (line,) = _other_writer_lines(err)
    assert f"pid {first.pid} " in line, line
    assert not _other_writer_lines(first_err), first_err
    assert not (store / "LATEST").exists()


def test_a_guard_made_before_its_rank_is_known_is_not_taken_for_a_second_job(
    tmp_path: Path,
) -> None:
    """Rank 1 of a job whose guards are made before `init_process_group`, without RANK in the
    environment (`mp.spawn`): taken for rank 0 when made, it would have said that another job
    saves into the store (its own rank 0)."""
    store = tmp_path / "store"
    first = _started(store, "due")
    try:
        second = _started(store, "late-rank-1")
        err = _end(second)
    finally:
        _end(first)
    assert not _other_writer_lines(err), err
