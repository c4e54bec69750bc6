"""Two processes saving the same step into one local store (a job restarted while the old one
still flushes its final save, or two jobs given the same directory): one commits, the other
gets a clear error and touches nothing of it; a writer that died holds nothing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CommitError
from support import LazyModule, eventually, requires

pytestmark = requires("torch")
torch = LazyModule("torch")

# Writes a.pt, says so, waits for the go file, writes b.pt and commits (or is killed first).
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import torch
    from forewarn.clients.checkpoint import CheckpointStore

    url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    torch.manual_seed(1)
    model = torch.nn.Linear(64, 64)
    with CheckpointStore(url).save(100) as gen:
        with gen.open("a.pt") as stream:
            torch.save(model.state_dict(), stream)
        ready.touch()
        while not go.exists():
            time.sleep(0.01)
        with gen.open("b.pt") as stream:
            torch.save(model.state_dict(), stream)
    print("committed", flush=True)
    """
)


def start_writer(tmp_path: Path, url: str) -> tuple[subprocess.Popen[str], Path, Path]:
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, url, str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    eventually(lambda: ready.exists() or child.poll() is not None, timeout=60)
    assert child.poll() is None, child.communicate()
    return child, ready, go


def save_here(store: CheckpointStore, seed: int) -> None:
    torch.manual_seed(seed)
    model = torch.nn.Linear(64, 64)
    with store.save(100) as gen:
        for name in ("a.pt", "b.pt"):
            with gen.open(name) as stream:
                torch.save(model.state_dict(), stream)


def test_a_second_writer_of_a_step_another_process_is_saving_is_refused(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    child, _ready, go = start_writer(tmp_path, url)
    try:
        store = CheckpointStore(url)
        with pytest.raises(CommitError, match=rf"another process \(pid {child.pid} .*step-0+100"):
            save_here(store, seed=2)
        go.touch()
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        assert "committed" in out
    finally:
        child.kill()
    # Before, the second writer deleted the first's a.pt as a dead writer's leftover and
    # renamed its own files over the first's: the commit named bytes that were not its own.
    generation = store.latest(verify="checksums")
    assert generation is not None and generation.step == 100
    assert store.verify(100, checksums=True).ok
    torch.manual_seed(1)
    expected = torch.nn.Linear(64, 64).state_dict()
    for name in ("a.pt", "b.pt"):
        loaded = torch.load(generation.path(name), weights_only=True)
        assert all(torch.equal(loaded[key], expected[key]) for key in expected)
    assert not [p for p in os.listdir(url) if p.endswith(".lock")]


def test_a_step_whose_writer_was_killed_is_saved_by_the_next_job(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    child, _ready, _go = start_writer(tmp_path, url)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    store = CheckpointStore(url)
    save_here(store, seed=3)
    assert store.verify(100, checksums=True).ok
    assert not [p for p in os.listdir(url) if p.endswith(".lock")]


def test_a_user_who_may_not_write_the_store_is_told_which_directory(tmp_path: Path) -> None:
    from other_user import call_as, other_user, shared_tmp

    uid, gid = other_user()
    parent = shared_tmp(0, 0)
    parent.chmod(0o755)
    root = parent / "store"  # another user's store, 0755: readable, not writable
    save_here(CheckpointStore(str(root)), seed=4)

    def save_as_other() -> str:
        try:
            with CheckpointStore(str(root)).save(200) as gen:
                gen.write_bytes("a.bin", b"x")
        except CommitError as exc:
            return str(exc)
        return "saved"

    try:
        message = call_as(uid, gid, save_as_other)
        assert f"the directory {root} is not writable by this user" in message, message
        assert CheckpointStore(str(root)).verify(100, checksums=True).ok
    finally:
        shutil.rmtree(parent)


def test_a_store_on_a_filesystem_without_locks_still_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An NFS mount with `nolock` or a FUSE mount of object storage answers lock requests
    with ENOLCK or EOPNOTSUPP: no save there may be taken for another writer's."""
    import errno
    import fcntl

    def no_locks(*_args: object) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "lockf", no_locks)
    store = CheckpointStore(str(tmp_path / "store"))
    save_here(store, seed=5)
    assert store.verify(100, checksums=True).ok
    assert not [p for p in os.listdir(tmp_path / "store") if p.endswith(".lock")]


def test_a_second_user_of_a_shared_store_is_told_whose_files_block_it(tmp_path: Path) -> None:
    """Two users saving under umask 022 into one shared directory: the second user's retention
    failed at the first user's generation at every save (and so never deleted its own older
    ones), and its save of a step the first user was killed in failed with a PermissionError
    naming a temp file."""
    import logging
    import tempfile

    from other_user import call_as, other_user

    first = other_user()
    second = (first[0] + 4321, first[1] + 4321)  # a uid of nobody else's files
    shared = Path(tempfile.mkdtemp(prefix="forewarn-shared-", dir="/tmp"))
    os.chmod(shared, 0o777)
    url = str(shared / "store")
    os.mkdir(url)
    os.chmod(url, 0o777)

    def save(*steps: int, killed_in: int | None = None) -> dict[str, object]:
        os.umask(0o022)
        said: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
        logging.getLogger("forewarn.checkpoint").addHandler(handler)
        store = CheckpointStore(url, keep=1)
        error = None
        for step in steps:
            try:
                with store.save(step) as gen:
                    with gen.open("model.pt") as stream:
                        torch.save(torch.nn.Linear(8, 8).state_dict(), stream)
                    if step == killed_in:
                        os._exit(9)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        return {"steps": store.steps(), "said": said, "error": error}

    # The children cannot read the interpreter's files (a pyenv under /root): what a save
    # imports lazily is loaded here first.
    with CheckpointStore(tmp_path / "warm", keep=1).save(1) as gen, gen.open("m.pt") as stream:
        torch.save(torch.nn.Linear(8, 8).state_dict(), stream)
    try:
        made = call_as(*first, lambda: save(1))
        assert made["steps"] == [1], made
        with pytest.raises(RuntimeError, match="no answer"):
            call_as(*first, lambda: save(5, killed_in=5))
        answer = call_as(*second, lambda: save(2, 3))
        assert answer["error"] is None, answer
        assert answer["steps"] == [1, 3, 5], "retention goes on past the other user's one"
        said = [line for line in answer["said"] if "retention cannot delete" in line]
        assert len(said) == 1, answer["said"]
        assert "step-000000000001" in said[0] and "belongs to forewarn-test" in said[0]
        assert "mode 0755" in said[0] and "umask 002" in said[0]
        error = call_as(*second, lambda: save(5))["error"]
        assert error is not None and error.startswith("CommitError: cannot save step-000000000005")
        assert f"{shared}/store/step-000000000005 belongs to forewarn-test" in error, error
    finally:
        shutil.rmtree(shared)
