"""Bad days for the store (issue 15 item 9): a full disk at the LATEST hint, corrupt bytes
on the way out, uploads left behind by killed S3 writers."""

from __future__ import annotations

import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CorruptGenerationError, S3Options
from forewarn.clients.checkpoint.testing import DelegatingBackend
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, requires


class FullDiskAtLatest(DelegatingBackend):
    """The disk fills up just after COMMIT: writing LATEST fails with ENOSPC."""

    full = True

    def put_small(self, key: str, data: bytes) -> None:
        if key == "LATEST" and self.full:
            raise OSError(errno.ENOSPC, "No space left on device", key)
        super().put_small(key, data)


def test_a_full_disk_at_latest_does_not_fail_a_committed_generation(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FullDiskAtLatest(make_store().backend)
    store = CheckpointStore(backend=backend)
    result = store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))
    # Committed, and reported as committed: nobody retries a save that succeeded.
    assert result.generation.step == 1
    assert "LATEST hint was not written" in caplog.text
    assert store.latest_hint() is None
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.read_bytes("model.bin") == b"weights-1"
    # Space is back: the next commit moves the hint on.
    backend.full = False
    store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights-2"))
    assert store.latest_hint() == 2


class FullDiskAtManifest(DelegatingBackend):
    """The files fit, then the disk is full: the manifest cannot be written."""

    full = True

    def put_small(self, key: str, data: bytes) -> None:
        if key.endswith("/MANIFEST.json") and self.full:
            raise OSError(errno.ENOSPC, "No space left on device", key)
        super().put_small(key, data)


def test_a_commit_that_fails_at_the_manifest_removes_the_files_it_wrote(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FullDiskAtManifest(make_store().backend)
    store = CheckpointStore(backend=backend)
    backend.full = False
    store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))
    backend.full = True
    with pytest.raises(OSError, match="No space left"):
        store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights-2" * 1000))
    # On a full disk the files left behind would make every later save fail as well.
    assert store.steps() == [1]
    assert "step-000000000002 was not committed" in caplog.text
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    backend.full = False
    assert store.flush(3, lambda gen: gen.write_bytes("model.bin", b"weights-3")).generation


class FullDiskInTheFiles(DelegatingBackend):
    """The disk fills up while a file is written: its writes fail with ENOSPC after `room`
    bytes."""

    room = 64 << 10

    def writer(self, key: str, on_done: Any = None) -> Any:
        inner = self.inner.writer(key, on_done)
        sink, written = inner._sink, [0]

        def full(data: Any) -> None:
            written[0] += memoryview(data).nbytes
            if written[0] > self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            sink(data)

        inner._sink = full
        return inner


@requires("torch")
def test_a_full_disk_under_torch_save_is_raised_as_itself(make_store: Any) -> None:
    """torch.save turns its stream's exception into its own RuntimeError ("unexpected pos 896
    vs 790"): a full disk under a real torch loop read as a torch bug, in the exception and
    in the background saver's error alike."""
    import torch
    from forewarn.clients.checkpoint import BackgroundSaveError, BackgroundSaver

    store = CheckpointStore(backend=FullDiskInTheFiles(make_store().backend))
    state = {"w": torch.zeros(100_000)}
    with pytest.raises(OSError) as raised, store.save(1) as gen, gen.open("state.pt") as stream:
        torch.save(state, stream)
    assert raised.value.errno == errno.ENOSPC
    if sys.version_info >= (3, 11):
        assert "step-000000000001/state.pt" in "".join(raised.value.__notes__)
    assert store.steps() == []  # nothing of it is left
    saver = BackgroundSaver(store)
    saver.save(2, state)
    with pytest.raises(BackgroundSaveError, match="No space left on device") as failed:
        saver.close()
    assert isinstance(failed.value.cause, OSError)
    assert store.steps() == []


def test_get_file_and_get_dir_refuse_corrupt_bytes(make_store: Any, tmp_path: Path) -> None:
    store = make_store()
    data = os.urandom(100_000)
    with store.save(1) as gen:
        gen.write_bytes("dir/model.bin", data)
        gen.write_bytes("dir/config.json", b"{}")
    generation = store.latest()
    key = "step-000000000001/dir/model.bin"
    with store.backend.open_read(key) as stream:
        good = stream.read()
    store.backend.put_small(key, good[:500] + bytes([good[500] ^ 0x01]) + good[501:])

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CorruptGenerationError, match=r"dir/model\.bin does not match"):
        generation.get_file("dir/model.bin", out / "model.bin")
    with pytest.raises(CorruptGenerationError, match=r"dir/model\.bin does not match"):
        generation.get_dir("dir", out / "tree")
    # Nothing corrupt was handed over, and no temp file stays behind; nor half a tree:
    # config.json, copied before model.bin failed, stayed alone in it, and a retry into the
    # directory then mixed with it.
    assert not (out / "model.bin").exists()
    assert not (out / "tree" / "model.bin").exists()
    assert [p for p in out.rglob("*") if p.is_file()] == []

    store.backend.put_small(key, good)
    done: list[tuple[int, int]] = []
    generation.get_file(
        "dir/model.bin", out / "model.bin", progress=lambda d, t: done.append((d, t))
    )
    assert (out / "model.bin").read_bytes() == data
    assert done and done[-1] == (len(data), len(data))


def _killed_writer(url: str, endpoint: str) -> None:
    store = CheckpointStore(url, s3=S3Options(part_size=5 << 20, endpoint_url=endpoint))
    gen = store.save(7)
    stream = gen.open("model.bin")
    stream.write(os.urandom(6 << 20))  # one part sent: the multipart upload exists
    time.sleep(60)  # killed here, mid-upload


def uploads(bucket: str) -> list[str]:
    import boto3

    reply = boto3.client("s3").list_multipart_uploads(Bucket=bucket)
    return sorted(upload["Key"] for upload in reply.get("Uploads", []))


def test_a_killed_s3_writers_upload_is_aborted_by_the_next_save(
    bucket: str, s3_env: dict[str, str]
) -> None:
    import boto3

    url = f"s3://{bucket}/run"
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_killed_writer, args=(url, s3_env["AWS_ENDPOINT_URL"]))
    process.start()
    deadline = time.monotonic() + 60
    while not uploads(bucket) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert uploads(bucket) == ["run/step-000000000007/model.bin"]
    # Another rank of this job may be uploading into the step being saved: that one stays.
    boto3.client("s3").create_multipart_upload(Bucket=bucket, Key="run/step-000000000009/x")

    store = CheckpointStore(url, commit_timeout=0.2)
    assert uploads(bucket) == ["run/step-000000000007/model.bin", "run/step-000000000009/x"]
    gen = store.save(9, rank=0, world_size=2)  # the first save of a restarted job's rank 0
    assert uploads(bucket) == ["run/step-000000000009/x"]
    gen.abort("rank 1 never comes in this test")
    assert store.abort_stale_uploads() == 1
    assert uploads(bucket) == []


def test_a_single_rank_job_saving_the_killed_step_again_aborts_its_upload(
    bucket: str,
) -> None:
    """The usual restart: killed while uploading step 7's first file (nothing finished, so
    nothing to find by listing the generation), resumed from 6, it saves 7 again."""
    import boto3

    client = boto3.client("s3")
    key = "run/step-000000000007/model.bin"
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 100)
    store = CheckpointStore(f"s3://{bucket}/run")
    store.flush(7, lambda gen: gen.write_bytes("model.bin", b"weights-7"))
    assert uploads(bucket) == []
    assert store.get(7, verify="checksums").read_bytes("model.bin") == b"weights-7"


def test_a_store_at_the_buckets_root_aborts_only_its_own_uploads(bucket: str) -> None:
    """The sweep of stale uploads at the first save, and by hand, must not reach uploads that
    are not the store's: another tool's, or another store's below a prefix of this one."""
    import boto3

    client = boto3.client("s3")
    for key in (
        "datasets/shard-0.tar",  # another tool uploading into the same bucket
        "runs/job-2/step-000000000001/model.bin",  # a store below this one
        "step-000000000003/model.bin",  # a killed writer of this store
        "outputs/step-000000000003.jsonl",  # a killed BatchProgress of this store
    ):
        client.create_multipart_upload(Bucket=bucket, Key=key)
    store = CheckpointStore(f"s3://{bucket}")
    with store.save(9) as gen:
        gen.write_bytes("model.bin", b"weights")
    others = ["datasets/shard-0.tar", "runs/job-2/step-000000000001/model.bin"]
    assert uploads(bucket) == others
    assert store.abort_stale_uploads() == 0
    assert CheckpointStore(f"s3://{bucket}/runs").abort_stale_uploads() == 0
    assert uploads(bucket) == others


def test_a_file_that_cannot_be_created_raises_only_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import sys

    from forewarn.clients.checkpoint import local

    def read_only(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    store = CheckpointStore(tmp_path / "store")
    store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))
    monkeypatch.setattr(local, "open", read_only, raising=False)
    from forewarn.clients.checkpoint import CommitError

    # The store's own error naming it, the OSError its cause (see the test below).
    with pytest.raises(CommitError, match="read-only file system") as failed:
        store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights-2"))
    assert isinstance(failed.value.__cause__, OSError)
    gc.collect()
    assert [hook.exc_value for hook in unraisable] == []
    monkeypatch.undo()
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1


class NoLocks(DelegatingBackend):
    """A filesystem without POSIX locks (NFS mounted nolock), like S3: nothing tells the
    writers of one step in two processes apart."""

    def claim(self, prefix: str, *, rank: int = 0) -> Any:
        return lambda: None


def _stale_job(url: str, size: int, ready: Any, go: Any, outcomes: Any) -> None:
    """The job that was reclaimed, still saving steps 7 and 8 (in a process of its own)."""
    from forewarn.clients.checkpoint import GenerationExistsError

    store = CheckpointStore(backend=NoLocks(CheckpointStore(url).backend))
    for step in (7, 8):
        stale = store.save(step)
        stale.write_bytes("model.bin", b"s" * size)
        ready.put(step)
        go.get(timeout=60)
        if step == 7:
            try:
                stale.commit()
                outcomes.put("committed")
            except GenerationExistsError as exc:
                outcomes.put(str(exc))
        else:
            # A stale save that fails instead (its with block raised) must not remove it either.
            stale.abort("the stale job's write failed")
            outcomes.put("aborted")


@pytest.mark.parametrize("stale_size", [1000, 999], ids=["same-size", "other-size"])
def test_a_stale_writer_of_the_same_step_never_overwrites_or_deletes_the_commit(
    make_store: Any, store_url: str, stale_size: int
) -> None:
    """The job that was reclaimed is still saving (a pod in its grace period) while its
    replacement, resumed from the same checkpoint, saves the same steps into the same store."""
    fresh = b"f" * 1000
    context = multiprocessing.get_context("fork")
    ready, go, outcomes = context.Queue(), context.Queue(), context.Queue()
    stale_job = context.Process(
        target=_stale_job, args=(store_url, stale_size, ready, go, outcomes)
    )
    stale_job.start()
    new_job = CheckpointStore(backend=NoLocks(make_store().backend))
    try:
        assert ready.get(timeout=60) == 7
        new_job.flush(7, lambda gen: gen.write_bytes("model.bin", fresh))
        go.put(None)
        assert "committed by another writer" in outcomes.get(timeout=60)
        assert ready.get(timeout=60) == 8
        new_job.flush(8, lambda gen: gen.write_bytes("model.bin", fresh))
        go.put(None)
        assert outcomes.get(timeout=60) == "aborted"
    finally:
        stale_job.join(60)
        if stale_job.is_alive():
            stale_job.kill()
            stale_job.join()
    assert stale_job.exitcode == 0
    for step in (7, 8):
        generation = make_store().get(step, verify="checksums")
        assert generation.read_bytes("model.bin") == fresh


def test_get_file_creates_its_directory_and_refuses_a_directory(
    make_store: Any, tmp_path: Path
) -> None:
    """docs/checkpoint.md: `get_file(name, destination)` copies to a local file. Into a
    directory that did not exist yet it failed with FileNotFoundError naming its hidden temp
    file (`.model.pt.part-...`), after the download; onto an existing directory, with
    IsADirectoryError naming the temp file too."""
    store = make_store()
    with store.save(1) as gen:
        gen.write_bytes("model.pt", b"weights")
    generation = store.latest()
    copy = generation.get_file("model.pt", tmp_path / "out" / "deeper" / "model.pt")
    assert copy.read_bytes() == b"weights"
    with pytest.raises(IsADirectoryError, match=rf"{tmp_path / 'out'} is a directory"):
        generation.get_file("model.pt", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["deeper"]


def _killed_while_writing_latest(root: str) -> None:
    """Commits step 1, but stops for good just before its LATEST temp file is renamed."""
    real_replace = os.replace

    def stuck(src: Any, dst: Any) -> None:
        if str(dst).endswith("LATEST"):
            signal.pause()  # the parent SIGKILLs this process here
        real_replace(src, dst)

    os.replace = stuck  # type: ignore[assignment]
    CheckpointStore(root).flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))


def _latest_temps(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.name.startswith(".LATEST.tmp-"))


def test_a_kill_while_latest_is_written_leaves_no_temp_file_for_good(tmp_path: Path) -> None:
    """A process killed while it wrote LATEST left `.LATEST.tmp-*` in the store's root, and
    nothing ever removed it: the next commit removes its stale ones, by name and age only."""
    from support import eventually

    root = tmp_path / "store"
    child = multiprocessing.get_context("fork").Process(
        target=_killed_while_writing_latest, args=(str(root),)
    )
    child.start()
    try:
        left = eventually(lambda: root.is_dir() and _latest_temps(root), what="LATEST's temp")
    finally:
        if child.pid is not None:
            os.kill(child.pid, signal.SIGKILL)
        child.join()
    assert child.exitcode == -signal.SIGKILL
    (stale,) = left
    old = time.time() - 86400  # a day: far past any bound a live writer needs
    os.utime(root / stale, (old, old))
    # A temp file of a commit that may still be running, and files that are not the
    # store's own temp files, are left alone.
    fresh = f".LATEST.tmp-{os.getpid()}-0123abcd"
    (root / fresh).write_bytes(b"2\n")
    for name in (".LATEST.tmp-notours", "LATEST.tmp-1-0123abcd", "notes.txt"):
        (root / name).write_bytes(b"x")
        os.utime(root / name, (old, old))
    store = CheckpointStore(root)
    store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights-2"))
    assert _latest_temps(root) == sorted([fresh, ".LATEST.tmp-notours"])
    assert (root / "LATEST.tmp-1-0123abcd").exists() and (root / "notes.txt").exists()
    assert store.latest_hint() == 2
    assert [generation.step for generation in store.generations()] == [1, 2]


def test_a_second_writer_of_a_step_this_process_is_saving_is_refused(make_store: Any) -> None:
    """Two writers of one step in one process (a background save and an exit save, a save
    given up by its timeout and its retry): the second deleted the first's finished files as
    a dead writer's leftovers (the local lock is the process's, so it let the second in),
    and the first then failed on missing files or committed the second's."""
    from forewarn.clients.checkpoint import CommitError

    store = make_store()
    first = store.save(5, metadata={"writer": "first"})
    first.write_bytes("model.bin", b"m" * 1000)
    still_open = first.open("optimizer.bin")
    still_open.write(b"o" * 100)
    for other in (store, make_store()):
        with pytest.raises(
            CommitError,
            match=r"step-000000000005 is already being saved in .* by this process \(rank 0, "
            r"thread .*\)",
        ):
            other.save(5)
    # Another step, or another rank of the same step (ranks run as threads), is no conflict.
    store.flush(4, lambda gen: gen.write_bytes("model.bin", b"4"))
    still_open.close()
    first.commit()
    generation = make_store().get(5, verify="checksums")
    assert generation.metadata == {"writer": "first"}
    assert generation.read_bytes("model.bin") == b"m" * 1000
    # A writer dropped without commit or abort holds the step no longer once it is gone.
    dropped = store.save(6)
    dropped.write_bytes("model.bin", b"dropped")
    del dropped
    import gc

    gc.collect()
    store.flush(6, lambda gen: gen.write_bytes("model.bin", b"6"))
    assert make_store().get(6, verify="checksums").read_bytes("model.bin") == b"6"


@pytest.mark.parametrize("spelling", ["symlink", "dotdot", "file-url", "s3-slashes"])
def test_a_store_opened_through_another_path_is_the_same_store_to_its_writers(
    tmp_path: Path, spelling: str, request: pytest.FixtureRequest
) -> None:
    """A store opened through a symlink to its directory (or a path with `..`) counted as
    another store: a second save of a step this process was writing was let in, deleted the
    first's files as a dead writer's leftovers, and the first then failed or committed the
    second's bytes."""
    from forewarn.clients.checkpoint import CommitError

    real: str | Path = tmp_path / "disks" / "store"
    Path(real).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "disks")
    if spelling == "s3-slashes":
        real = f"s3://{request.getfixturevalue('bucket')}/runs/job-1"
        other: str | Path = real.replace("/runs/", "//runs/") + "/"
    else:
        other = {
            "symlink": tmp_path / "link" / "store",
            "dotdot": tmp_path / "disks" / ".." / "disks" / "store",
            "file-url": f"file://{tmp_path / 'link' / 'store'}",
        }[spelling]
    first_store, second_store = CheckpointStore(real), CheckpointStore(other)
    first = first_store.save(5, metadata={"writer": "first"})
    first.write_bytes("model.bin", b"m" * 1000)
    with pytest.raises(CommitError, match=r"step-000000000005 is already being saved in "):
        second_store.save(5)
    first.commit()
    generation = second_store.get(5, verify="checksums")
    assert generation.metadata == {"writer": "first"}
    assert generation.read_bytes("model.bin") == b"m" * 1000


def test_delegating_backend_forwards_close_and_every_other_backend_call(tmp_path: Path) -> None:
    """close() was not forwarded: a store over a wrapped backend never released the wrapped
    one's threads and connections."""
    from forewarn.clients.checkpoint import Backend
    from forewarn.clients.checkpoint.local import LocalBackend

    class Closing(LocalBackend):
        closed = 0

        def close(self) -> None:
            self.closed += 1

    inner = Closing(tmp_path / "store")
    with CheckpointStore(backend=DelegatingBackend(inner)) as store:
        store.flush(1, lambda gen: gen.write_bytes("model.bin", b"1"))
    assert inner.closed == 1
    public = {
        name
        for name, value in vars(Backend).items()
        if callable(value) and not name.startswith("_")
    }
    assert public - set(vars(DelegatingBackend)) == set()


def _killed_in_save(url: str) -> None:
    writer = CheckpointStore(url).save(7)
    writer.write_bytes("model.bin", b"killed")
    os._exit(9)


def _saving(url: str, step: int, ready: Any, go: Any, outcomes: Any) -> None:
    from forewarn.clients.checkpoint import CommitError

    try:
        writer = CheckpointStore(url).save(step)
    except CommitError as exc:
        outcomes.put(str(exc))
        return
    writer.write_bytes("model.bin", b"other")
    ready.put(step)
    go.get(timeout=60)
    writer.commit()
    outcomes.put("committed")


def test_a_commit_removes_the_lock_files_of_killed_writers_only(tmp_path: Path) -> None:
    """Each writer killed in a save left its `.step-N.lock`; only a later save of that very
    step removed it, and a step saved once (a final save at an off-schedule step) is never
    saved again: one file piled up per killed writer."""
    url = str(tmp_path / "store")
    context = multiprocessing.get_context("fork")
    killed = context.Process(target=_killed_in_save, args=(url,))
    killed.start()
    killed.join(60)
    assert killed.exitcode == 9
    ready, go, outcomes = context.Queue(), context.Queue(), context.Queue()
    live = context.Process(target=_saving, args=(url, 9, ready, go, outcomes))
    live.start()
    try:
        assert ready.get(timeout=60) == 9
        store = CheckpointStore(url)
        own = store.save(10)  # this process's, open across the commit below
        own.write_bytes("model.bin", b"own")
        locks = {".step-000000000007.lock", ".step-000000000009.lock", ".step-000000000010.lock"}
        assert locks <= set(os.listdir(url))
        store.flush(8, lambda gen: gen.write_bytes("model.bin", b"8"))
        left = {name for name in os.listdir(url) if name.endswith(".lock")}
        assert left == locks - {".step-000000000007.lock"}
        # This process's lock still holds after the sweep looked at it (closing any
        # descriptor of a locked file drops the process's lock on it).
        other = context.Process(target=_saving, args=(url, 10, ready, go, outcomes))
        other.start()
        other.join(60)
        assert "another process" in outcomes.get(timeout=60)
        go.put(None)
        assert outcomes.get(timeout=60) == "committed"
    finally:
        go.put(None)  # spare the live writer its wait when the test failed before
        live.join(60)
        if live.is_alive():
            live.kill()
            live.join()
    own.commit()
    assert [name for name in os.listdir(url) if name.endswith(".lock")] == []
    assert [generation.step for generation in store.generations()] == [8, 9, 10]


def _sweeping(path: str, locked: Any, done: Any) -> None:
    """Another process's commit sweeping a killed writer's lock file: it holds the lock
    until told, as a sweep descheduled between its lock and its unlink does."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    os.pwrite(fd, b"pid 4194304 on a-killed-writer", 0)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    locked.set()
    done.wait(60)
    os.unlink(path)
    os._exit(0)


def test_a_save_waits_out_a_sweep_that_holds_a_killed_writers_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim finding the lock held looked again three times 10 ms apart, then refused the
    save naming the killed writer: another process's sweep held that writer's lock file
    longer than that whenever it was descheduled (a busy machine)."""
    import threading
    import types

    from forewarn.clients.checkpoint import local
    from support import eventually

    store_dir = tmp_path / "store"
    store_dir.mkdir()
    context = multiprocessing.get_context("fork")
    locked, done = context.Event(), context.Event()
    sweep = context.Process(
        target=_sweeping, args=(str(store_dir / ".step-000000000007.lock"), locked, done)
    )
    sweep.start()
    waits = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    clock = types.SimpleNamespace(time=time.time, monotonic=time.monotonic, sleep=sleep)
    monkeypatch.setattr(local, "time", clock)
    outcome: list[object] = []

    def save() -> None:
        try:
            outcome.append(CheckpointStore(str(store_dir)).flush(7, lambda gen: None))
        except Exception as exc:
            outcome.append(exc)

    try:
        assert locked.wait(60)
        saver = threading.Thread(target=save)
        saver.start()
        # Held well past three looks: the save must still be waiting, not refused.
        eventually(lambda: len(waits) >= 10 or outcome, timeout=60, what="the save to look")
        done.set()
        saver.join(60)
    finally:
        done.set()
        sweep.join(60)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    assert [generation.step for generation in CheckpointStore(str(store_dir)).generations()] == [7]


@settings(max_examples=examples(200), deadline=None)
@given(text=st.text(max_size=200), pid=st.integers(min_value=1, max_value=2**22))
def test_a_lock_file_names_its_writer_or_nobody(text: str, pid: int) -> None:
    """A lock file is read back from a shared directory: whatever it holds names one pid
    (as its writer wrote it) or none, and reading it never raises."""
    from forewarn.clients.checkpoint import local

    named = local._named_writer(text)
    assert named is None or (isinstance(named, int) and text.startswith(f"pid {named} on "))
    assert local._named_writer(f"pid {pid} on {text}") == pid


def test_a_save_whose_claim_release_was_interrupted_lets_go_of_the_step(tmp_path: Path) -> None:
    """Ctrl-C landing in the release of a step's claim (the S3 claim waits for its renewal
    and deletes its object there) skipped the rest: the step stayed held in this process, and
    every later save of it raised 'already being saved in ... by this process'."""
    from forewarn.clients.checkpoint.local import LocalBackend

    class InterruptedRelease(DelegatingBackend):
        def claim(self, prefix: str, *, rank: int = 0) -> Any:
            release = self.inner.claim(prefix, rank=rank)

            def interrupted() -> None:
                release()
                raise KeyboardInterrupt

            return interrupted

    store = CheckpointStore(backend=InterruptedRelease(LocalBackend(str(tmp_path / "store"))))
    writer = store.save(5)
    writer.write_bytes("model.bin", b"first")
    with pytest.raises(KeyboardInterrupt):
        writer.abort()
    store = CheckpointStore(str(tmp_path / "store"))
    store.flush(5, lambda gen: gen.write_bytes("model.bin", b"again"))
    assert store.get(5).read_bytes("model.bin") == b"again"


def test_a_store_on_a_read_only_file_system_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store on a volume mounted read-only raised a bare `OSError: [Errno 30] Read-only
    file system: '.../.step-000000000002.lock'`, naming a hidden lock file, not the store. It
    is a CommitError naming the store's directory now (the OSError its cause). The file
    system is made read-only by failing every change under the store's root with EROFS, as
    the kernel does (mounting one needs root)."""
    from forewarn.clients.checkpoint import CommitError

    root = tmp_path / "store"
    store = CheckpointStore(root)
    store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights"))
    real_open, real_mkdir = os.open, os.mkdir

    def read_only(real: Any) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            flags = args[0] if real is real_open and args else 0
            writes = real is real_mkdir or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if writes and str(path).startswith(str(root)):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", read_only(real_open))
    monkeypatch.setattr(os, "mkdir", read_only(real_mkdir))
    for save in (
        lambda: store.flush(2, lambda gen: gen.write_bytes("model.bin", b"w")),
        lambda: store.save(3, rank=1, world_size=2).write_bytes("shard-1.bin", b"w"),
    ):
        with pytest.raises(CommitError, match="read-only file system") as failed:
            save()
        assert f"{root} is on a read-only file system" in str(failed.value)
        assert isinstance(failed.value.__cause__, OSError)
        assert failed.value.__cause__.errno == errno.EROFS
    latest = store.latest()  # reading is fine
    assert latest is not None and latest.read_bytes("model.bin") == b"weights"
    monkeypatch.undo()
    store.close()


@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_the_latest_temp_sweep_goes_by_the_stores_clock_not_this_machines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skew: float
) -> None:
    """On NFS a file's times are the server's: against this machine's clock, one an hour
    ahead deleted a live writer's temp file of LATEST, one an hour behind kept a killed
    writer's for ever. The age is taken against a time the store's file system gave."""
    import types

    from forewarn.clients.checkpoint import local

    root = tmp_path / "store"
    backend = local.LocalBackend(root)
    backend.put_small("LATEST", b"1\n")
    now = (root / "LATEST").stat().st_mtime
    live = root / f".LATEST.tmp-{os.getpid()}-0123abcd"
    live.write_bytes(b"2\n")
    dead = root / f".LATEST.tmp-{os.getpid()}-4567cdef"
    dead.write_bytes(b"3\n")
    os.utime(dead, (now - 3600, now - 3600))
    skewed = types.SimpleNamespace(
        time=lambda: time.time() + skew, monotonic=time.monotonic, sleep=time.sleep
    )
    monkeypatch.setattr(local, "time", skewed)
    assert backend.remove_stale_temps("LATEST", older_than=600) == 1
    assert live.exists() and not dead.exists()


def test_a_store_without_working_locks_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A local store on NFS without a lock manager (locks fail with ENOLCK) or a FUSE mount
    of object storage (EOPNOTSUPP) saves without a claim on its step: another job's save of
    that step, or its retention, no longer sees this one's save under way, and may delete or
    overwrite its files. That was said nowhere; the first save says it, once."""
    import fcntl
    import logging

    def no_locks(*_args: object) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "lockf", no_locks)
    store = CheckpointStore(str(tmp_path / "store"), keep=1)
    with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
        for step in (1, 2, 3):
            with store.save(step) as gen:
                gen.write_bytes("model.bin", b"m" * step)
    said = [r.getMessage() for r in caplog.records if "no working locks" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "store") in said[0] and os.strerror(errno.ENOLCK) in said[0]
    assert store.steps() == [3]
    store.close()


_KILLED_AT_FIRST_RENAME = """
import os, signal, sys
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1])
os.replace = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
with store.save(3) as gen:
    gen.write_bytes("model.bin", b"m" * 100_000)
"""


def test_a_save_killed_before_its_first_file_landed_leaves_no_temp_in_the_next_one(
    tmp_path: Path,
) -> None:
    """A save killed (SIGKILL: a reclaim) while its first file was still a temp file: the
    generation's directory held only that temp, which a save's look for a dead writer's
    leftovers passes over (temps are no files of a generation), so the restarted job's save
    of the same step committed around it and kept a whole file's bytes in the generation
    for as long as it is kept (for ever without retention), named by nothing."""
    url = str(tmp_path / "store")
    with CheckpointStore(url) as store, store.save(2) as gen:
        gen.write_bytes("model.bin", b"older")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_AT_FIRST_RENAME, url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    generation = tmp_path / "store" / "step-000000000003"
    assert [p.name for p in generation.iterdir() if ".tmp-" in p.name], "no temp was left"
    with CheckpointStore(url) as store:
        assert store.latest().step == 2  # type: ignore[union-attr]
        with store.save(3) as gen:  # the restarted job saves the step again
            gen.write_bytes("model.bin", b"newer")
        assert store.verify(3, checksums=True).ok
    assert sorted(p.name for p in generation.rglob("*")) == ["COMMIT", "MANIFEST.json", "model.bin"]


_RANK_KILLED_AT_FIRST_RENAME = """
import os, signal, sys
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1])
os.replace = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
store.save(3, rank=1, world_size=2).write_bytes("rank1/model.bin", b"r" * 100_000)
"""


def test_a_rank_killed_mid_file_leaves_no_temp_in_the_generation_its_job_commits(
    tmp_path: Path,
) -> None:
    """A save of two ranks whose rank 1 was killed (a reclaim) while its file was still a
    temp: the restarted job saved the step again, committed, and the killed rank's temp (a
    whole shard's bytes, under a name no rank writes again) stayed in the committed
    generation for as long as it was kept, named by nothing. At the commit every temp not
    touched since before this save's earliest file was closed is a dead writer's."""
    import threading

    url = str(tmp_path / "store")
    killed = subprocess.run(
        [sys.executable, "-c", _RANK_KILLED_AT_FIRST_RENAME, url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    generation = tmp_path / "store" / "step-000000000003"
    (dead,) = [p for p in generation.rglob("*") if ".tmp-" in p.name]
    past = time.time() - 5  # (not needed on a fine clock: the new files close later anyway)
    os.utime(dead, (past, past))
    live = generation / ".rank2.bin.tmp-1-0badf00d"  # written since: not known to be dead
    live.write_bytes(b"still being written")
    os.utime(live, (time.time() + 60, time.time() + 60))

    def save(rank: int) -> None:
        with CheckpointStore(url) as store, store.save(3, rank=rank, world_size=2) as gen:
            gen.write_bytes(f"rank{rank}/model.bin", b"new" * rank)

    ranks = [threading.Thread(target=save, args=(rank,)) for rank in (0, 1)]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(60)
    with CheckpointStore(url) as store:
        assert store.verify(3, checksums=True).ok
    assert not dead.exists(), "the killed rank's temp stayed in the committed generation"
    assert live.exists()


@pytest.mark.parametrize("code", [errno.EINVAL, errno.EIO])
def test_a_file_system_without_directory_sync_still_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A local store on a file system whose directories have no fsync (the kernel answers
    EINVAL: CIFS before its no-op one, VirtualBox shared folders, some FUSE mounts) failed
    every save: make_durable's first directory sync raised, the commit removed the files, and
    the job never had a checkpoint (the guard's exit save on a terminate too). EINVAL there is
    that file system's answer, as PostgreSQL and the agent's own state writer take it; any
    other error from the sync still fails the save."""
    import stat

    real_fsync = os.fsync

    def no_directory_sync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", no_directory_sync)
    store = CheckpointStore(str(tmp_path / "store"), keep=2)
    if code == errno.EIO:
        with pytest.raises(OSError, match="Input/output"):
            store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights-1"))
        assert store.latest() is None
        store.close()
        return
    for step in (1, 2, 3):
        result = store.flush(step, lambda gen, s=step: gen.write_bytes("model.bin", b"w%d" % s))
        assert result.generation.step == step
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 3 and latest.read_bytes("model.bin") == b"w3"
    assert store.steps() == [2, 3] and store.latest_hint() == 3
    store.close()


@pytest.mark.parametrize("where", ["store", "above"])
def test_a_store_behind_a_dangling_symlink_is_no_first_start(tmp_path: Path, where: str) -> None:
    """A store reached through a symbolic link whose target went away (the volume it points
    to not mounted after a reboot, or removed): `latest()` returned None, so the job trained
    from step 0 as at a first start, and its save raised `FileExistsError: [Errno 17] File
    exists: '/ckpt'` (found: a store at a link to a directory then removed). Both now raise
    `StoreNotFoundError` naming the link and its target, and nothing is made anywhere."""
    from forewarn.clients.checkpoint import StoreNotFoundError

    volume = tmp_path / "volume"
    volume.mkdir()
    link = tmp_path / "ckpt"
    link.symlink_to(volume)
    root = link if where == "store" else link / "run-7"
    CheckpointStore(root).flush(1, lambda gen: gen.write_bytes("model.bin", b"weights"))
    for child in sorted(volume.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() and not child.is_symlink() else child.unlink()
    volume.rmdir()  # the volume is gone; the link stays
    store = CheckpointStore(root)
    said = f"{link} is a symbolic link to {volume}, which does not exist"
    with pytest.raises(StoreNotFoundError, match=said):
        store.latest()
    with pytest.raises(StoreNotFoundError, match=said):
        store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights"))
    assert not volume.exists()
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
