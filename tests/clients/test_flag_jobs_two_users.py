"""Two jobs of different users reading one flag file themselves (no agent with the local
provider runs) on a shared runtime directory: the first job's `checkpoint-now.jobs/` was its
user's alone (0700), so the other user's job could not join, saw no other job, and removed the
file at its own save while the first job had not saved for it (or had not even looked: it then
never saved for that request at all)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.flagjobs import _job_gone
from hypothesis import given
from hypothesis import strategies as st
from other_user import call_as, other_user, shared_tmp
from support import eventually


def _job(flag: Path) -> CheckpointGuard:
    return CheckpointGuard(notices=False, handle_signals=False, flag_file=flag, agree=False)


def _other_users_job_saves(flag: Path) -> dict[str, object]:
    """A job of the other user takes the flag and saves for it: what it left behind."""
    guard = _job(flag)
    try:
        joined = guard._flag_jobs is not None and guard._flag_jobs.joined
        eventually(lambda: guard.due(1), timeout=5, what="the other user's save")
        guard.saved(1, 0.01)
        return {"joined": joined, "flag": flag.exists()}
    finally:
        guard.close()


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    uid, gid = other_user()
    return shared_tmp(uid, gid)


def test_another_users_job_joins_and_leaves_the_flag_to_the_job_still_saving(
    shared: Path,
) -> None:
    uid, gid = other_user()
    flag = shared / "checkpoint-now"
    first = _job(flag)  # this user's job, there first: it makes the directory
    try:
        flag.write_text("")
        flag.chmod(0o666)
        eventually(lambda: first.due(1), timeout=5, what="the first job's flag")
        left = call_as(uid, gid, lambda: _other_users_job_saves(flag))
        assert left == {"joined": True, "flag": True}, "removed while the first job saves"
        mode = (shared / "checkpoint-now.jobs").stat().st_mode
        assert stat.S_IMODE(mode) == 0o1777  # sticky: each job removes only its own place
        first.saved(1, 0.01)
        assert not flag.exists()
    finally:
        first.close()
    assert not (shared / "checkpoint-now.jobs").exists()


def test_a_job_that_cannot_see_the_other_jobs_leaves_the_flag_and_says_so(
    shared: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory an older version made for its user alone: the other user's job cannot
    join; it saves, and leaves the file to the jobs it cannot see."""
    uid, gid = other_user()
    flag = shared / "checkpoint-now"
    first = _job(flag)
    try:
        os.chmod(shared / "checkpoint-now.jobs", 0o700)
        flag.write_text("")
        eventually(lambda: first.due(1), timeout=5, what="the first job's flag")

        def saves() -> dict[str, object]:
            records: list[str] = []
            handler = logging.Handler()
            handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
            logging.getLogger("forewarn.clients").addHandler(handler)
            return {
                **_other_users_job_saves(flag),
                "said": any("cannot join" in r for r in records),
            }

        left = call_as(uid, gid, saves)
        assert left == {"joined": False, "flag": True, "said": True}
        first.saved(1, 0.01)
        assert not flag.exists()
    finally:
        first.close()


def _reaped_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


@pytest.mark.parametrize("job_alive", [False, True])
def test_an_unreadable_place_an_older_version_left_holds_the_flag_only_while_its_job_runs(
    shared: Path, job_alive: bool
) -> None:
    """An older version made its place 0600: a job of it killed (kill -9, the OOM killer)
    left that file in the sticky directory, where the other user's job can neither read nor
    remove it, and that job kept the flag for ever after its save. The place's name says
    whose it was: a pid no process has is a job gone."""
    uid, gid = other_user()
    flag = shared / "checkpoint-now"
    jobs = shared / "checkpoint-now.jobs"
    jobs.mkdir()
    jobs.chmod(0o1777)
    pid = os.getpid() if job_alive else _reaped_pid()
    place = jobs / f"{pid}-0badc0de"
    place.write_text("")
    place.chmod(0o600)
    flag.write_text("")
    flag.chmod(0o666)
    left = call_as(uid, gid, lambda: _other_users_job_saves(flag))
    assert left == {"joined": True, "flag": job_alive}, left


@given(st.text(max_size=30))
def test_a_place_name_that_names_no_pid_is_never_taken_for_a_job_gone(name: str) -> None:
    pid_text, dash, _ = name.partition("-")
    if not (dash and pid_text.isascii() and pid_text.isdigit()):
        assert _job_gone(name) is False
    else:
        _job_gone(name)  # any number: an answer, never an error
