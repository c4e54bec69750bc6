"""Background saves (issue 20): the training thread waits only for the snapshot, LATEST moves
once the generation is complete, a failure surfaces at the next save, and the terminate path
waits for or cancels the in-flight save by the time left."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forewarn.clients.checkpoint.background as background_module
import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.background import (
    BackgroundSaveError,
    BackgroundSaver,
    load_state,
)
from forewarn.clients.checkpoint.testing import DelegatingBackend
from support import LazyModule, eventually, requires

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")


def state(step: int, rows: int = 256) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(step)
    return {
        "model": {"w": torch.randn(rows, 64, generator=generator), "b": torch.arange(rows)},
        "step": step,
        "rng": [1, 2, step],
    }


class Gated(DelegatingBackend):
    """Writes of a generation's state file wait while that step is held, crawl when it is
    slow (every write takes 50 ms, as over a poor link), and fail when told."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.held: dict[str, threading.Event] = {}
        self.stuck = threading.Semaphore(0)  # released once per write that starts waiting
        self.waiting = 0  # writes waiting on a hold now
        self.slow: set[str] = set()
        self.fail = False

    def hold(self, step: int) -> threading.Event:
        release = threading.Event()
        self.held[f"step-{step:012d}/"] = release
        return release

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        generation = key.split("/", 1)[0] + "/"
        if not key.endswith("state.pt"):
            return inner
        outer = self
        original = inner.write

        def write(data: Any) -> int:
            release = outer.held.get(generation)
            if release is not None and not release.is_set():
                outer.waiting += 1
                outer.stuck.release()
                try:
                    if not release.wait(60):
                        raise TimeoutError("the test never released the write")
                finally:
                    outer.waiting -= 1
            if generation in outer.slow:
                time.sleep(0.05)
            if outer.fail:
                raise OSError(28, "No space left on device")
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def test_the_loop_waits_for_the_snapshot_only(make_store: Any) -> None:
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    release = backend.hold(1)
    live = state(1)
    timing = saver.save(1, live)
    # The upload is held: the save returned, nothing is committed, LATEST did not move.
    assert saver.in_flight == 1 and store.latest() is None and store.latest_hint() is None
    live["model"]["w"].add_(1.0)  # training goes on, changing the live tensors
    release.set()
    generation = saver.wait()
    assert generation is not None and generation.step == 1 and store.latest_hint() == 1
    restored = load_state(store.latest(verify="checksums"))  # type: ignore[arg-type]
    assert torch.equal(restored["model"]["w"], state(1)["model"]["w"])  # the snapshot's bits
    assert restored["rng"] == [1, 2, 1]
    assert timing.stall_seconds >= 0 and saver.last.durable_seconds is not None  # type: ignore[union-attr]
    # The buffers are reused: one extra copy of the state, not one per save.
    first = saver._buffers["model", "w"].data_ptr()
    saver.save(2, state(2))
    saver.wait()
    assert saver._buffers["model", "w"].data_ptr() == first
    assert store.latest().step == 2  # type: ignore[union-attr]


def test_closing_the_store_with_a_background_save_in_flight_waits_for_its_commit(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Leaving the store's `with` block while the saver's last save was still being written
    aborted that save: the run's last checkpoint was lost, said only as `ValueError: write to
    'step-.../state.pt' after it was closed` at the exit."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    release = backend.hold(1)
    saver.save(1, state(1))
    closing = threading.Thread(target=store.close)
    try:
        assert backend.stuck.acquire(timeout=60)  # the upload is under way, held
        closing.start()
        eventually(
            lambda: "the store is being closed while the background save of step 1" in caplog.text,
            what="close() to say it waits for the save in flight",
        )
        assert closing.is_alive()
    finally:
        release.set()
    closing.join(60)
    assert not closing.is_alive()
    saver.close()  # the save committed: no failure to raise
    latest = make_store().latest(verify="checksums")
    assert latest is not None and latest.step == 1
    assert torch.equal(load_state(latest)["model"]["w"], state(1)["model"]["w"])


def test_a_failing_upload_is_reported_at_the_next_save(make_store: Any) -> None:
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    saver.save(1, state(1))
    saver.wait()
    backend.fail = True
    saver.save(2, state(2))  # returns: the failure happens in the background
    saver.wait()
    backend.fail = False
    with pytest.raises(BackgroundSaveError, match=r"step 2 failed: OSError.*No space left"):
        saver.save(3, state(3))
    assert store.latest().step == 1  # type: ignore[union-attr]
    assert 2 not in store.steps()  # nothing partial left
    saver.save(3, state(3))  # reported once; the next save goes ahead
    saver.close()
    assert store.latest().step == 3  # type: ignore[union-attr]


def test_a_sparse_tensor_in_the_state_is_saved_in_the_background(make_store: Any) -> None:
    """A sparse tensor was copied into a dense host buffer: save() raised torch's "copy_()
    between dense and sparse Tensors is not implemented", and the state could not be saved
    in the background at all."""
    store = make_store()
    saver = BackgroundSaver(store)
    sparse = torch.eye(4).to_sparse()
    saver.save(1, {"embedding": sparse, **state(1)})
    saver.close()
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    loaded = load_state(latest)
    assert loaded["embedding"].is_sparse
    assert torch.equal(loaded["embedding"].to_dense(), torch.eye(4))
    assert torch.equal(loaded["model"]["w"], state(1)["model"]["w"])


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(lambda a, b: {"a/b": a, "a": {"b": b}}, id="a key holding a slash"),
        pytest.param(lambda a, b: {"x": {1: a, "1": b}}, id="an int key and its digits"),
        pytest.param(lambda a, b: {"x": [a], "x/0": b}, id="a list index and a key"),
    ],
)
def test_tensors_whose_paths_read_alike_keep_their_own_values(make_store: Any, layout: Any) -> None:
    """The snapshot's host buffers were keyed by the tensor's path joined with "/": two
    tensors of one shape at paths that joined alike ("a/b" and "a" then "b"; 1 and "1")
    shared one buffer, and the generation held the second tensor's values in both places
    (save() and the commit said nothing)."""
    store = make_store()
    saver = BackgroundSaver(store)
    saver.save(1, layout(torch.zeros(8), torch.ones(8)))
    saver.close()
    latest = store.latest(verify="checksums")
    assert latest is not None
    assert _same(load_state(latest), layout(torch.zeros(8), torch.ones(8)))


def _same(saved: Any, expected: Any) -> bool:
    if isinstance(expected, dict):
        return saved.keys() == expected.keys() and all(
            _same(saved[key], value) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return len(saved) == len(expected) and all(map(_same, saved, expected))
    return bool(torch.equal(saved, expected))


def test_a_modules_state_dict_keeps_its_type_and_version_metadata(make_store: Any) -> None:
    """The snapshot rebuilt every mapping as a plain dict: a module's state_dict (an
    OrderedDict whose `_metadata` holds each submodule's version) came back without it, so
    `load_state_dict` took the checkpoint for one of the oldest format, where torch.save's
    file of the same state keeps it."""
    store = make_store()
    saver = BackgroundSaver(store)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    saver.save(1, {"model": model.state_dict(), "optim": {"state": {}, "param_groups": []}})
    saver.close()
    latest = store.latest(verify="checksums")
    assert latest is not None
    saved = load_state(latest)["model"]
    assert type(saved) is type(model.state_dict())
    assert saved._metadata == model.state_dict()._metadata  # {"1": {"version": 2}, ...}
    assert saved.keys() == model.state_dict().keys()
    model.load_state_dict(saved)


def test_buffers_of_tensors_no_longer_in_the_state_are_let_go(make_store: Any) -> None:
    """A host buffer was kept for every path any save had held: a state whose keys change
    from save to save (a tensor per epoch, per evaluation, an EMA turned off) kept a copy
    of each one that was gone, and host memory grew by one tensor per save until the
    process was killed for it."""
    store = make_store()
    saver = BackgroundSaver(store)
    saver.save(1, {"model": {"w": torch.zeros(64)}, "epoch-1": torch.ones(1024)})
    saver.wait()
    gone = weakref.ref(saver._buffers["epoch-1",])
    saver.save(2, {"model": {"w": torch.zeros(64)}, "epoch-2": torch.ones(1024)})
    saver.close()
    assert gone() is None
    assert sorted(saver._buffers) == [("epoch-2",), ("model", "w")]
    assert torch.equal(load_state(store.latest())["epoch-2"], torch.ones(1024))  # type: ignore[arg-type]


def test_tied_weights_are_copied_once_and_saved_once(make_store: Any) -> None:
    """A module with tied weights (an embedding shared with the output layer) lists one
    tensor under two keys: the snapshot copied it into two buffers and wrote it twice (host
    memory and the file one extra copy of it, where torch.save writes a shared storage
    once), and the loaded state no longer shared it."""
    store = make_store()
    saver = BackgroundSaver(store)
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(512, 64)
    model.head = torch.nn.Linear(64, 512, bias=False)
    model.head.weight = model.embed.weight
    live = model.state_dict()
    assert live["embed.weight"].data_ptr() == live["head.weight"].data_ptr()
    saver.save(1, {"model": live})
    saver.close()
    assert len(saver._buffers) == 1
    latest = store.latest(verify="checksums")
    assert latest is not None
    (size,) = [entry.size for entry in latest.manifest.files if entry.name == "state.pt"]
    assert size < 1.5 * 512 * 64 * 4
    saved = load_state(latest)["model"]
    assert saved["embed.weight"].data_ptr() == saved["head.weight"].data_ptr()
    assert torch.equal(saved["head.weight"], model.embed.weight.detach())


def test_a_background_save_under_several_torch_distributed_ranks_is_refused_at_once(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gloo ranks each saving with a BackgroundSaver hung training at the first save:
    the commit's collectives ran on the saver's thread beside the loop's all_reduce. The
    save is refused before anything is copied; a single rank's saves go on as before."""
    import torch.distributed as dist

    store = make_store()
    saver = BackgroundSaver(store)
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    with pytest.raises(
        CheckpointError, match=r"step 1: torch.distributed runs 2 ranks.*async_save_dcp"
    ):
        saver.save(1, state(1))
    assert saver.in_flight is None and saver._buffers == {} and store.steps() == []
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 1)
    saver.save(1, state(1))
    assert saver.wait() is not None and store.latest().step == 1  # type: ignore[union-attr]


def test_terminate_waits_for_the_in_flight_save_only_if_the_deadline_allows(
    make_store: Any,
) -> None:
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    saver.save(1, state(1))
    saver.wait()  # timed: the plan for the final save has a figure
    threading.Timer(0.2, backend.hold(2).set).start()
    saver.save(2, state(2))
    waited = saver.final(3, state(3), seconds_left=600.0)
    assert waited.choice == "waited" and "fit in 600.0 s" in waited.reason
    assert [g.step for g in store.generations()] == [1, 2, 3]

    backend.slow.add("step-000000000004/")
    saver.save(4, state(4))
    cancelled = saver.final(5, state(5), seconds_left=0.0)
    assert cancelled.choice == "cancelled" and "do not fit in 0.0 s" in cancelled.reason
    assert cancelled.generation.step == 5
    assert [g.step for g in store.generations()] == [1, 2, 3, 5]
    assert torch.equal(load_state(store.get(5))["model"]["w"], state(5)["model"]["w"])


def layers(step: int) -> dict[str, Any]:
    """A state whose tensors are large enough to be hashed in place (`StableMemory`)."""
    generator = torch.Generator().manual_seed(step)
    return {
        "layers": [torch.randn(64, 1024, generator=generator) for _ in range(4)],
        "step": step,
        "scale": torch.tensor(float(step)),
    }


def test_the_write_starts_while_the_snapshot_is_copied_and_the_file_is_torch_saves(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import zipfile

    from forewarn.clients.checkpoint import background

    # The installed torch takes the overlapped path (one whose torch.save changed inside
    # would fall back to copying everything first: this test would say so).
    assert background._can_overlap(torch)
    store = CheckpointStore(tmp_path / "store")
    saver = BackgroundSaver(store, overlap=True)
    saver.save(1, layers(1))  # allocates the buffers
    saver.wait()

    first_written = threading.Event()
    real_write_record = background._AfterCopy.write_record

    def write_record(self: Any, name: str, data: Any, size: int) -> Any:
        written = real_write_record(self, name, data, size)
        if name == "data/0":
            first_written.set()
        return written

    overlapped: list[bool] = []
    real_copied = background._Copies.copied
    count = 0

    def copied(self: Any, buffer: Any) -> None:
        nonlocal count
        real_copied(self, buffer)
        count += 1
        if count == 4:  # the last tensor is yet to be copied
            overlapped.append(first_written.wait(60))

    monkeypatch.setattr(background._AfterCopy, "write_record", write_record)
    monkeypatch.setattr(background._Copies, "copied", copied)
    saver.save(2, layers(2))
    saver.close()
    assert overlapped == [True]  # the first tensor was written before the last was copied

    data = store.get(2, verify="checksums").read_bytes("state.pt")
    expected = io.BytesIO()
    torch.save(layers(2), expected)
    assert data == expected.getvalue()  # byte for byte what torch.save writes
    assert zipfile.ZipFile(io.BytesIO(data)).testzip() is None  # every record's CRC-32 holds


def test_a_snapshot_that_fails_raises_at_once_and_commits_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import background

    store = CheckpointStore(tmp_path / "store")
    saver = BackgroundSaver(store, overlap=True)
    saver.save(1, layers(1))
    saver.wait()
    real_copied = background._Copies.copied
    count = 0

    def copied(self: Any, buffer: Any) -> None:
        nonlocal count
        count += 1
        if count == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        real_copied(self, buffer)

    monkeypatch.setattr(background._Copies, "copied", copied)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        saver.save(2, layers(2))
    # The writer, waiting for the second tensor, gave up: nothing of step 2 is left.
    assert saver.in_flight is None and store.steps() == [1] and store.latest_hint() == 1
    monkeypatch.setattr(background._Copies, "copied", real_copied)
    saver.check()  # the failure was raised by the save itself, not left for later
    saver.save(3, layers(3))
    saver.close()
    assert torch.equal(
        load_state(store.get(3, verify="checksums"))["layers"][3], layers(3)["layers"][3]
    )


def _saving_forever(url: str, environ: dict[str, str]) -> None:
    # A fork server's children inherit the environment it started with, not this test's
    # (the S3 fixture's endpoint and credentials).
    os.environ.clear()
    os.environ.update(environ)
    store = CheckpointStore(url)
    saver = BackgroundSaver(store)
    step = 1
    while True:
        saver.save(step, state(step, rows=40_000))  # 10 MiB per save
        step += 1


def uploading(store: CheckpointStore) -> bool:
    """Whether an S3 multipart upload was left in progress (S3 lists no unfinished file)."""
    backend: Any = store.backend
    if not hasattr(backend, "client"):
        return False
    reply = backend.client.list_multipart_uploads(Bucket=backend.bucket, Prefix=backend.prefix)
    return bool(reply.get("Uploads"))


def _fork_server() -> Any:
    """Savers forked from a server that imported torch and ran nothing: torch's thread pools
    do not survive a fork of a process that used them, and a spawned saver imports torch
    afresh (about 2 CPU-seconds each on this machine)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "forewarn.clients.checkpoint.background", __name__])
    return context


@pytest.mark.timeout(900)
def test_sigkill_during_background_uploads_never_leaves_a_partial_generation(
    store_url: str,
) -> None:
    context = _fork_server()
    store = CheckpointStore(store_url)
    partial = 0
    # At least four kills, each checked; on local disk more (up to 12) until one has landed
    # mid-upload: where a kill lands is timing, and on a loaded machine four once all missed.
    for trial in range(12):
        if trial >= 4 and (partial or store_url.startswith("s3://")):
            break
        process = context.Process(
            target=_saving_forever, args=(store_url, dict(os.environ)), daemon=True
        )
        process.start()
        deadline = time.monotonic() + 300
        while store.latest() is None:
            assert time.monotonic() < deadline, "the saver committed nothing"
            time.sleep(0.02)
        time.sleep(0.1 * (trial % 4))
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)
        latest = store.latest(verify="checksums")
        assert latest is not None
        restored = load_state(latest)
        assert torch.equal(restored["model"]["w"], state(latest.step, rows=40_000)["model"]["w"])
        for generation in store.generations():
            assert store.verify(generation, checksums=True).ok
        partial += any(step > latest.step for step in store.steps()) or uploading(store)
        for step in store.steps():  # the next trial starts over from step 1
            store.delete(step)
    if not store_url.startswith("s3://"):
        # On S3 an upload in progress is invisible to a listing and its window is short:
        # there the test checks the outcome of every kill, not where it landed.
        assert partial >= 1, "no kill landed during a background upload"


_LOOP_WITHOUT_CLOSE = """
import sys, time
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import DelegatingBackend

class Slow(DelegatingBackend):  # every write 50 ms, as over a poor link
    def writer(self, key, on_done=None):
        inner = self.inner.writer(key, on_done)
        original = inner.write
        def write(data):
            time.sleep(0.05)
            return original(data)
        inner.write = write
        return inner

store = CheckpointStore(backend=Slow(CheckpointStore(sys.argv[1]).backend))
# One save, at the last step: with every 10, step 30's was skipped while step 20 uploaded.
guard = CheckpointGuard(every_steps=30, store=store, background=True, notices=False,
                        flag_file=None, handle_signals=False)
weights = torch.zeros(int(sys.argv[2]))
step = 0
while step < 30:
    step += 1
    weights.fill_(step)
    if guard.due(step):
        guard.save_state(step, {"w": weights})
print("in flight:", guard.saver.in_flight, flush=True)
sys.exit(guard.exit_code)  # the training-loop lines, without guard.close()
"""


@pytest.mark.parametrize("size", [1000, 20_000_000])
def test_a_run_that_ends_without_close_still_commits_its_last_background_save(
    store_url: str, size: int
) -> None:
    """The saver's thread is a daemon: a run that finished (or raised out of its loop)
    without close() exited while its last periodic save was still being written, and the
    final state of a finished run was a partial generation. A state of 80 MB then failed
    there ("cannot schedule new futures after shutdown"): by the time the exit waits for the
    save, the interpreter's shutdown has stopped the thread pools that hash its blocks (and
    upload its S3 parts), so that work now runs on the saver's own thread."""
    done = subprocess.run(
        [sys.executable, "-c", _LOOP_WITHOUT_CLOSE, store_url, str(size)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "in flight: 30" in done.stdout  # the exit came while step 30 was being written
    assert "failed" not in done.stderr
    with CheckpointStore(store_url) as store:
        latest = store.latest(verify="checksums")
        assert latest is not None and latest.step == 30
        assert torch.equal(load_state(latest)["w"], torch.full((size,), 30.0))
    assert "still being written: waiting for its commit" in done.stderr


_EXIT_ON_A_HUNG_MOUNT = """
import sys, threading
import torch
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, background
from forewarn.clients.checkpoint.testing import DelegatingBackend

class Hung(DelegatingBackend):  # the second write never returns, as on a hung NFS mount
    def writer(self, key, on_done=None):
        inner = self.inner.writer(key, on_done)
        original, writes = inner.write, []
        def write(data):
            writes.append(1)
            if len(writes) > 1:
                threading.Event().wait()
            return original(data)
        inner.write = write
        return inner

background.EXIT_STALL_SECONDS = float(sys.argv[2])
saver = BackgroundSaver(CheckpointStore(backend=Hung(CheckpointStore(sys.argv[1]).backend)))
saver.save(7, {"w": torch.zeros(1000)})
print("in flight:", saver.in_flight, flush=True)
"""


def test_the_exit_stops_waiting_for_a_background_save_stuck_in_a_write(tmp_path: Path) -> None:
    """The exit hook waited for the save in flight as long as its write hung: on a hung mount
    the process never exited, and its job was never restarted."""
    url = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_ON_A_HUNG_MOUNT, url, "1.0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "in flight: 7" in done.stdout
    assert "background save of step 7 wrote nothing for 1 s" in done.stderr
    assert "it is not committed, and the last durable generation is none" in done.stderr
    assert CheckpointStore(url).latest() is None


# -- through CheckpointGuard(background=True) ------------------------------------------------


def background_guard(store: CheckpointStore, **options: Any) -> Any:
    from forewarn.clients import CheckpointGuard

    options.setdefault("notices", False)
    options.setdefault("flag_file", None)
    return CheckpointGuard(store=store, background=True, handle_signals=False, **options)


def test_the_guard_saves_in_the_background_and_raises_a_failure_at_the_next_due(
    tmp_path: Any,
) -> None:
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    release = backend.hold(10)
    live = state(10)
    assert [step for step in range(1, 11) if guard.due(step)] == [10]
    result = guard.save_state(10, live)
    # Returned after the snapshot: nothing durable yet, the loop goes on.
    assert not result.exit and result.generation is None and result.reasons == ("periodic",)
    assert store.latest_hint() is None and guard.durable_step is None
    live["model"]["w"].add_(1.0)
    release.set()
    assert guard.saver.wait() is not None
    assert store.latest_hint() == 10 and guard.durable_step == 10
    assert torch.equal(load_state(store.get(10))["model"]["w"], state(10)["model"]["w"])

    backend.fail = True
    guard.save_state(20, state(20)) if guard.due(20) else pytest.fail("step 20 not due")
    guard.saver.wait()
    backend.fail = False
    with pytest.raises(BackgroundSaveError, match=r"step 20 failed: OSError.*No space left"):
        guard.due(21)  # the next check raises it, once
    assert guard.due(22), "a failed save asks for another one"
    retried = guard.save_state(22, state(22))
    assert retried.reasons == ("retry",)
    guard.saver.wait()
    assert store.latest_hint() == 22 and 20 not in store.steps()

    # A failure while an exit is pending is not raised: the final save comes first.
    guard.saver.wait()
    backend.fail = True
    guard.save_state(32, state(32)) if guard.due(32) else pytest.fail("step 32 not due")
    guard.saver.wait()
    backend.fail = False
    guard.request("signal", exit=True)
    assert guard.due(33)  # the failure of step 32 is not raised
    final = guard.save_state(33, state(33))
    assert final.exit and final.generation.step == 33 and store.latest_hint() == 33
    guard.close()


def test_a_flag_file_is_removed_only_once_its_background_save_is_durable(
    tmp_path: Path,
) -> None:
    """With no agent the guard answers the flag file itself. With background saves it removed
    the file at the snapshot, seconds before the save was durable: a script that waits for
    the file to go before it takes the machine lost that save."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    flag = tmp_path / "checkpoint-now"
    guard = background_guard(store, flag_file=flag)
    try:
        backend.fail = True
        flag.touch()
        eventually(lambda: guard.due(1), what="the flag file's save")
        assert guard.save_state(1, state(1)).reasons == ("flag",)
        guard.saver.wait()
        with pytest.raises(BackgroundSaveError):
            guard.due(2)
        assert flag.exists(), "a failed save does not answer the flag file"
        backend.fail = False
        release = backend.hold(3)
        assert guard.due(3)
        assert "flag" in guard.save_state(3, state(3)).reasons  # it asks again
        assert backend.stuck.acquire(timeout=60)  # the upload is under way
        guard._check_flag()  # the ticker's look at the file meanwhile
        assert flag.exists() and store.latest_hint() is None
        assert not guard.due(4), "the file counts once while its save is written"
        release.set()
        eventually(lambda: not flag.exists(), what="the flag file removed")
        assert store.latest_hint() == 3
        assert not guard.due(5)
    finally:
        guard.close()


def _waits_for_the_save_in_flight(thread: threading.Thread) -> bool:
    """Whether `thread` is inside BackgroundSaver.wait() (the save in flight is held)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wait" and code.co_filename.endswith("background.py"):
            return True
        frame = frame.f_back
    return False


def test_an_exit_asked_for_while_a_save_waits_for_a_stalled_upload_saves_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SIGTERM that came while save_state waited (inside saver.save()) for the upload in
    flight was answered by that background save: the loop waited for the whole upload, and
    a stalled one held it until the platform's SIGKILL, then for a second upload of this
    step. Now the exit goes through final() at once: no deadline known (a signal), the
    stalled upload is cancelled and this step is saved synchronously."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    release = backend.hold(10)
    try:
        assert guard.due(10)
        guard.save_state(10, state(10))
        assert backend.stuck.acquire(timeout=60)  # step 10's upload stalls
        assert not guard.due(20)  # skipped while step 10 uploads; saved all the same
        saving, answers = _in_thread(lambda: guard.save_state(20, state(20)))
        eventually(lambda: _waits_for_the_save_in_flight(saving), what="save_state to wait")
        guard.request("signal", exit=True)
        saving.join(30)
        assert not saving.is_alive(), "the exit waited for the stalled upload"
        assert answers[0].exit and answers[0].choice == "cancelled"
        assert answers[0].generation.step == 20
        assert store.latest_hint() == 20
        assert f"checkpoint {store.url}/step-000000000020" in caplog.text
    finally:
        release.set()
        guard.close()
    eventually(lambda: 10 not in store.steps(), what="the cancelled upload to be cleaned up")
    assert store.steps() == [20]  # the cancelled upload never commits


def test_an_exit_asked_for_while_a_save_waits_whose_final_save_fails_exits_with_1(
    tmp_path: Path,
) -> None:
    """A terminate that came while save_state waited for the upload in flight: its final
    save failing raises from save_state and the exit code is 1, not 143 ("saved for a
    reclaim"): the state of the exit was not saved."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    release = backend.hold(10)
    failures: list[BaseException] = []

    def save_20() -> None:
        try:
            guard.save_state(20, state(20))
        except BaseException as error:
            failures.append(error)

    try:
        assert guard.due(10)
        guard.save_state(10, state(10))
        assert backend.stuck.acquire(timeout=60)
        assert not guard.due(20)  # skipped while step 10 uploads; saved all the same
        saving = threading.Thread(target=save_20, daemon=True)
        saving.start()
        eventually(lambda: _waits_for_the_save_in_flight(saving), what="save_state to wait")
        backend.fail = True
        guard.request("signal", exit=True)
        saving.join(30)
        assert not saving.is_alive() and failures, "the final save did not fail"
        assert guard.exit_code == 1
    finally:
        release.set()
        guard.close()
    assert store.latest_hint() is None


def test_a_run_whose_last_background_save_failed_does_not_exit_0(tmp_path: Path) -> None:
    """The loop's last periodic save failed in the background and close() only logged it:
    exit_code stayed 0, so `sys.exit(guard.exit_code)` marked the Job complete (torchrun
    reported success) and the run's last steps, saved nowhere, were never redone."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    assert guard.due(10)
    guard.save_state(10, state(10))
    guard.saver.wait()
    backend.fail = True
    assert guard.due(20)
    guard.save_state(20, state(20))  # the loop's last step: it leaves
    guard.close()
    assert store.latest_hint() == 10
    assert guard.exit_code == 1


def test_a_failed_background_save_saved_again_leaves_exit_code_0(tmp_path: Path) -> None:
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    backend.fail = True
    assert guard.due(10)
    guard.save_state(10, state(10))
    guard.saver.wait()
    backend.fail = False
    with pytest.raises(BackgroundSaveError):
        guard.due(11)
    assert guard.due(11)  # the retry
    guard.save_state(11, state(11))
    guard.close()
    assert store.latest_hint() == 11
    assert guard.exit_code == 0


def test_the_guards_stall_counts_the_wait_for_the_save_in_flight(tmp_path: Path) -> None:
    """docs/checkpoint.md: a save while one is in flight first waits for it, and that wait
    is part of the stall (what training paid, acked to the agent as stall_seconds)."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    release = backend.hold(10)
    try:
        assert guard.due(10)
        guard.save_state(10, state(10))
        assert backend.stuck.acquire(timeout=60)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        assert not guard.due(20)  # skipped while step 10 uploads; saved all the same
        started = time.monotonic()
        result = guard.save_state(20, state(20))
        waited = time.monotonic() - started
        assert waited >= 0.25
        assert result.flush_seconds >= 0.25 and guard.saver.last.stall_seconds >= 0.25
    finally:
        release.set()
        guard.close()
    assert store.latest_hint() == 20


def test_an_exit_without_a_deadline_cancels_the_upload_and_saves_synchronously(
    tmp_path: Any,
) -> None:
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    guard.save_state(10, state(10)) if guard.due(10) else pytest.fail("not due")
    guard.saver.wait()
    held = backend.hold(20)  # released only after the final save: the cancel must not wait
    guard.save_state(20, state(20)) if guard.due(20) else pytest.fail("not due")
    # The worst case: the upload is stuck inside a write (a hung mount), where no cancel flag
    # is read until the write returns.
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    guard.request("signal", exit=True)  # as SIGTERM does: no deadline known
    assert guard.due(21)
    final = guard.save_state(21, state(21))
    # The final save did not wait for the stuck write: it is still stuck.
    assert backend.waiting == 1 and not held.is_set()
    assert (
        final.exit
        and final.choice == "cancelled"
        and "deadline is unknown" in (final.choice_reason or "")
    )
    assert final.generation is not None and final.generation.step == 21
    assert store.latest_hint() == 21
    assert store.verify(20).problems == ("not committed",)
    # The cancelled upload, let go now, stops at its next write and never commits.
    held.set()
    guard.close()
    eventually(lambda: 20 not in store.steps())
    assert store.steps() == [10, 21] and store.latest_hint() == 21
    assert torch.equal(load_state(store.get(21))["model"]["w"], state(21)["model"]["w"])


@contextlib.contextmanager
def _guard_with_agent(
    tmp_path: Any, store: CheckpointStore, **options: Any
) -> Iterator[tuple[Any, Any, dict[str, str]]]:
    """A real agent with its local provider, and a background guard that has heard its first
    heartbeat: (agent, guard, the agent's environment)."""
    from support import AgentProcess, agent_env

    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = background_guard(
            store, notices=True, events=agent.events, control=agent.control_endpoint, **options
        )
        eventually(lambda: guard.notices.alive, what="the agent's first heartbeat")
        yield agent, guard, env


def _acks(env: dict[str, str]) -> list[dict[str, Any]]:
    """The acks the agent wrote to its telemetry, oldest first."""
    from pathlib import Path

    from forewarn.agent.telemetry import FILE_NAME, read_records

    path = Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME
    return [r for r in read_records(path) if r["kind"] == "ack"] if path.exists() else []


def _ack_outcomes(env: dict[str, str]) -> list[tuple[Any, ...]]:
    """(notice id, step, outcome) of each ack in the agent's telemetry."""
    return [(r["notice_id"], r["step"], r["outcome"]) for r in _acks(env)]


def test_a_terminate_during_an_upload_waits_when_the_deadline_allows_and_acks_why(
    tmp_path: Any,
) -> None:
    """A real agent: the terminate arrives while step 20 is uploading; with a minute left the
    guard waits for it, writes step 21, and the agent's telemetry carries both the background
    acks (stall apart from durable) and the final save's choice and reason."""
    import json
    from datetime import datetime, timedelta, timezone

    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    with _guard_with_agent(tmp_path, store, every_steps=10) as (agent, guard, env):
        guard.save_state(10, state(10)) if guard.due(10) else pytest.fail("not due")
        guard.saver.wait()
        release = backend.hold(20)
        guard.save_state(20, state(20)) if guard.due(20) else pytest.fail("not due")
        deadline = datetime.now(timezone.utc) + timedelta(seconds=60)
        raised = agent.control(
            {
                "op": "notify",
                "action": "terminate",
                "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        )
        eventually(lambda: guard.due(21), what="the terminate")
        threading.Timer(0.2, release.set).start()
        final = guard.save_state(21, state(21))
        assert final.exit and final.choice == "waited", final.choice_reason
        assert "fit in" in (final.choice_reason or "")
        assert final.generation.step == 21 and store.steps() == [10, 20, 21]
        guard.close()
        records = eventually(
            lambda: len(_acks(env)) >= 3 and _acks(env), what="three acks in the telemetry"
        )
    by_step = {record["step"]: record for record in records}
    for step in (10, 20):
        assert by_step[step]["stall_seconds"] >= 0 and by_step[step]["durable_seconds"] >= 0
        assert by_step[step]["flush_seconds"] == by_step[step]["durable_seconds"]
    # Step 10's few bytes may be committed before save_state has returned (the training
    # thread descheduled after starting the writer: 7.6 ms of stall beside 7.1 ms to durable
    # in one loaded run), so only the held upload's order is certain.
    assert by_step[20]["durable_seconds"] >= 0.2  # it waited for the held upload
    assert by_step[20]["stall_seconds"] < by_step[20]["durable_seconds"]
    last = by_step[21]
    assert last["notice_id"] == raised["notice"]["id"] and last["choice"] == "waited"
    assert "fit in" in last["note"], json.dumps(last)


def _drain_by_the_flag_file(env: dict[str, str], guard: Any, step: int) -> Path:
    """The agent's flag file written: once the guard says step `step` is due (the agent's
    drain has reached it), the flag file's path."""
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    flag.write_text("")
    eventually(lambda: guard.due(step), what="the drain")
    return flag


def _acked_saved_and_the_flag_file_removed(
    env: dict[str, str], guard: Any, flag: Path, notice: str, step: int
) -> None:
    """The agent removed the flag file; the guard closed; the drain `notice` acked "saved"
    at `step` in the agent's telemetry."""
    eventually(lambda: not flag.exists(), what="the agent to remove the flag file")
    guard.close()
    saved = (notice, step, "saved")
    eventually(lambda: saved in _ack_outcomes(env), what="the drain's ack")


def _wait_for_the_save_thread_to_end(step: int) -> None:
    """Until the background save thread of `step` (a cancelled save, run on) has ended."""
    eventually(
        lambda: (
            not any(
                thread.name == f"forewarn-background-save-{step}" and thread.is_alive()
                for thread in threading.enumerate()
            )
        ),
        what="the cancelled save to end",
    )


def test_a_drain_whose_background_save_failed_is_acked_saved_by_the_retry(
    tmp_path: Any,
) -> None:
    """A real agent with its local provider: the flag file raises a drain, the background
    save for it fails, and the retry that the failure asks for answers the drain too: the
    agent hears "saved" for it and removes the flag file (it was acked only "failed")."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    with _guard_with_agent(tmp_path, store) as (_agent, guard, env):
        flag = _drain_by_the_flag_file(env, guard, 1)
        backend.fail = True
        first = guard.save_state(1, state(1))
        assert first.reasons == ("drain",) and len(first.notices) == 1
        guard.saver.wait()
        backend.fail = False
        with pytest.raises(BackgroundSaveError):
            guard.due(2)
        assert guard.due(2), "a failed save asks for another one"
        retried = guard.save_state(2, state(2))
        assert retried.reasons == ("retry",) and retried.notices == first.notices
        assert guard.saver.wait() is not None
        eventually(lambda: not flag.exists(), what="the agent to remove the flag file")
        guard.close()
        drain = first.notices[0]
        eventually(lambda: len(_acks(env)) >= 2, what="two acks in the telemetry")
    assert _ack_outcomes(env) == [(drain, 1, "failed"), (drain, 2, "saved")]


def test_a_drain_at_the_step_still_uploading_is_that_save_and_acked_when_it_commits(
    tmp_path: Any,
) -> None:
    """A drain arriving at a periodic step whose background save is still uploading: the
    second save_state of that step used to wait for the whole upload, then fail in the
    background on the committed generation (GenerationExistsError), which the next due()
    raised as BackgroundSaveError. It is the same save: it returns at once, nothing fails,
    and the drain is acked "saved" once that upload commits."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    with _guard_with_agent(tmp_path, store, every_steps=10) as (_agent, guard, env):
        release = backend.hold(10)
        first = guard.save_state(10, state(10)) if guard.due(10) else pytest.fail("not due")
        assert first.reasons == ("periodic",) and guard.saver.in_flight == 10
        flag = _drain_by_the_flag_file(env, guard, 10)
        answers: list[Any] = []
        second = threading.Thread(target=lambda: answers.append(guard.save_state(10, state(10))))
        second.start()
        second.join(30)
        returned = not second.is_alive()
        release.set()  # without the fix, the second save waits here for the held upload
        second.join()
        assert returned, "the second save of step 10 waited for the upload in flight"
        (drained,) = answers
        assert drained.reasons == ("drain",) and len(drained.notices) == 1
        assert guard.saver.wait() is not None
        assert not guard.due(11)  # nothing failed: no BackgroundSaveError, no retry
        assert store.steps() == [10] and guard.durable_step == 10
        _acked_saved_and_the_flag_file_removed(env, guard, flag, drained.notices[0], 10)
    assert all(outcome == "saved" for _notice, _step, outcome in _ack_outcomes(env))


def test_a_drain_whose_small_save_commits_before_save_state_returns_is_acked_saved(
    tmp_path: Any,
) -> None:
    """A save of a few bytes can be committed by the writer thread before save_state has
    recorded which notices it answers. The commit's ack then went out with no notice id, and
    the drain was never acked "saved" (the agent kept its flag file). Here the upload is made
    to commit before save_state goes on, every time."""
    store = CheckpointStore(str(tmp_path / "ckpt"))
    with _guard_with_agent(tmp_path, store, every_steps=100) as (_agent, guard, env):
        save = guard.saver.save

        def save_then_commit(*args: Any, **kwargs: Any) -> Any:
            timing = save(*args, **kwargs)
            assert guard.saver.wait() is not None  # committed before save_state goes on
            return timing

        guard.saver.save = save_then_commit  # type: ignore[method-assign]
        flag = _drain_by_the_flag_file(env, guard, 5)
        drained = guard.save_state(5, state(5))
        assert drained.reasons == ("drain",) and len(drained.notices) == 1
        _acked_saved_and_the_flag_file_removed(env, guard, flag, drained.notices[0], 5)


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def test_a_terminate_that_waited_for_an_upload_which_then_stalls_still_saves_in_time(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """final() chose to wait (the estimates fit) for an upload that then stalled: it used to
    wait for it with no bound, past the deadline, so the platform's SIGKILL took the final
    save too. It waits only until the final save must start, then cancels the stalled one."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    saver.save(1, state(1))
    saver.wait()  # timed: the plan has a figure
    # Time enough that the figures fit and final() chooses to wait: a loaded machine makes
    # the figure seconds (1.2 s of S3 in one clean-clone run, where 2 s did not fit).
    estimate = saver._durable_estimate or 0.0
    # The bound this test is about, not the upload idle 3 s (`TAIL_QUIET_SECONDS`, its own
    # tests in test_s3_stalled_periodic.py): on a loaded machine the figure made the bound
    # later than 3 s, and the idle rule cancelled first ("moved nothing for 3 s").
    monkeypatch.setattr(background_module, "TAIL_QUIET_SECONDS", 600.0)
    seconds_left = max(2.0, 2 * estimate + 2.0)
    held = backend.hold(2)
    saver.save(2, state(2))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    thread, answers = _in_thread(lambda: saver.final(3, state(3), seconds_left=seconds_left))
    thread.join(30)
    returned = not thread.is_alive()
    held.set()  # without the fix, final() waits here for the stalled upload
    thread.join()
    assert returned, "final() waited for the stalled upload past its deadline"
    (final,) = answers
    assert final.choice == "cancelled" and "still uploading after" in final.reason
    assert final.generation.step == 3 and store.latest_hint() == 3
    eventually(lambda: 2 not in store.steps())  # the stalled save stops and never commits
    assert [g.step for g in store.generations()] == [1, 3]


def test_a_terminate_at_the_step_still_uploading_says_so_when_the_deadline_passes(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The save in flight is the final one (same step): final() waits for it even past the
    deadline, but used to do so silently until the SIGKILL; it now logs, at the deadline,
    that the final save is still uploading and not durable."""
    import logging

    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    held = backend.hold(2)
    saver.save(2, state(2))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    caplog.set_level(logging.WARNING, logger="forewarn.clients")
    thread, answers = _in_thread(lambda: saver.final(2, state(2), seconds_left=0.2))

    def warned() -> bool:
        return any("still uploading" in record.getMessage() for record in caplog.records)

    try:
        eventually(warned, what="a warning that the deadline passed with the upload in flight")
    finally:
        held.set()
        thread.join()
    (final,) = answers
    assert final.choice == "waited" and final.generation.step == 2
    (line,) = [r.getMessage() for r in caplog.records if "still uploading" in r.getMessage()]
    assert "step 2" in line and "deadline passed" in line and "not durable" in line


def test_close_says_so_when_a_terminate_deadline_passes_during_its_wait_for_an_upload(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """close() waits for the upload in flight (the last state there is). A terminate that
    arrives meanwhile and whose deadline passes used to leave no trace before the SIGKILL;
    the guard now logs that the step is still uploading and not durable."""
    import logging
    from datetime import datetime, timedelta, timezone

    from support import AgentProcess, agent_env

    env = agent_env(tmp_path)
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    caplog.set_level(logging.WARNING, logger="forewarn.clients")
    with AgentProcess(tmp_path, env=env) as agent:
        guard = background_guard(
            store, every_steps=10, notices=True, events=agent.events, control=agent.control_endpoint
        )
        eventually(lambda: guard.notices.alive, what="the agent's first heartbeat")
        held = backend.hold(10)
        guard.save_state(10, state(10)) if guard.due(10) else pytest.fail("not due")
        assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
        closing, _answers = _in_thread(guard.close)  # the loop is done
        deadline = datetime.now(timezone.utc) + timedelta(seconds=0.5)
        agent.control(
            {
                "op": "notify",
                "action": "terminate",
                "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        )

        def warned() -> list[str]:
            return [r.getMessage() for r in caplog.records if "still uploading" in r.getMessage()]

        try:
            (line,) = eventually(warned, what="a warning that the deadline passed")
        finally:
            held.set()
            closing.join()
    assert "step 10" in line and "deadline passed" in line and "not durable" in line
    assert store.latest_hint() == 10  # close went on waiting, and the upload ended


class CommitsDuringTheCancel(DelegatingBackend):
    """A generation's commit starts (every file written) and goes on only once the saver has
    cancelled it: too late for the cancel to stop it."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.saver: BackgroundSaver | None = None
        self.committing = threading.Event()
        self.hold = True

    def make_durable(self, prefix: str) -> None:
        if self.hold and self.saver is not None:
            self.hold = False
            cancel = self.saver._cancel
            self.committing.set()
            if not cancel.wait(60):
                raise TimeoutError("the test never cancelled the save")
        super().make_durable(prefix)


def test_final_reports_an_in_flight_save_that_committed_during_the_cancel_as_committed(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """final() said it cancelled the save in flight when that save, already committing,
    committed within the cancel's grace: the report must say what really happened."""
    from forewarn.clients.checkpoint import background

    # The grace ends when the save does: a long one keeps a slow shared machine from
    # leaving the commit behind, and costs nothing.
    monkeypatch.setattr(background, "CANCEL_GRACE_SECONDS", 30.0)
    backend = CommitsDuringTheCancel(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    backend.saver = saver
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 12):
        loss = model(torch.randn(4, 32)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 10:
            saver.save(10, {"model": model.state_dict(), "step": 10})
    assert backend.committing.wait(30)
    final = saver.final(11, {"model": model.state_dict(), "step": 11}, seconds_left=None)
    assert [g.step for g in store.generations()] == [10, 11]
    assert store.verify(10) and store.verify(11)
    assert final.choice == "waited", final.reason
    assert "committed before the cancel reached it" in final.reason
    assert final.generation.step == 11


class ClosesSlowly(DelegatingBackend):
    """The state file of step `held` is written at once, then its close (which sends what is
    left: S3's buffered tail and parts, the local file's fsync) waits until `release` is
    set."""

    def __init__(self, inner: Any, held: int) -> None:
        super().__init__(inner)
        self.held = f"step-{held:012d}/"
        self.closing = threading.Event()
        self.release = threading.Event()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not (key.startswith(self.held) and key.endswith("state.pt")):
            return inner
        original = inner.close

        def close() -> None:
            self.closing.set()
            if not self.release.wait(60):
                raise TimeoutError("the test never released the close")
            original()

        inner.close = close  # type: ignore[method-assign]
        return inner


def test_a_save_cancelled_past_its_last_write_never_commits_after_the_final_save(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save past its last write with bytes still to send read no cancel: once final()
    had left it behind, said "cancelled" and committed the newer step, it sent them and
    committed too, moved `saver.last_durable` back to its older step and reported itself to
    `on_done` (the guard's hook) as a fresh commit. It stops before sending them now, and
    the final save's step stays the last durable one."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "CANCEL_GRACE_SECONDS", 0.1)
    backend = ClosesSlowly(make_store().backend, held=5)
    store = CheckpointStore(backend=backend)
    told: list[int] = []
    saver = BackgroundSaver(store, on_done=lambda timing, _gen, _error: told.append(timing.step))
    saver.save(5, state(5))
    assert backend.closing.wait(30)
    final = saver.final(6, state(6), seconds_left=None)
    assert final.choice == "cancelled" and final.generation.step == 6, final.reason
    backend.release.set()
    _wait_for_the_save_thread_to_end(5)
    assert saver.last_durable is not None and saver.last_durable.step == 6
    assert told == []
    assert [generation.step for generation in store.generations()] == [6]
    latest = store.latest()
    assert latest is not None and latest.step == 6


def test_a_local_save_cancelled_during_its_last_fsync_still_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save whose bytes are all on their way to the disk (its last fsync under way when
    final() cancels it) has nothing left that the final save could gain: given up after the
    fsync, its generation was lost for nothing. It commits, and final() says so."""
    from forewarn.clients.checkpoint import background, local

    # The grace ends when the save does: a long one keeps a slow shared machine from
    # leaving the commit behind, and costs nothing.
    monkeypatch.setattr(background, "CANCEL_GRACE_SECONDS", 30.0)
    store = CheckpointStore(str(tmp_path / "store"))
    saver = BackgroundSaver(store)
    fsyncing = threading.Event()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "step-000000000005" in path and "state.pt" in path and not fsyncing.is_set():
            fsyncing.set()
            if not saver._cancel.wait(60):
                raise TimeoutError("the test never cancelled the save")
        real_fsync(fd)

    monkeypatch.setattr(local.os, "fsync", fsync)
    saver.save(5, state(5))
    assert fsyncing.wait(30)
    final = saver.final(6, state(6), seconds_left=None)
    assert final.choice == "waited", final.reason
    assert "committed before the cancel reached it" in final.reason
    assert [generation.step for generation in store.generations()] == [5, 6]
    assert saver.last_durable is not None and saver.last_durable.step == 6


class CommitsAfterTheFinalSave(DelegatingBackend):
    """Step `held`'s commit starts (every file written and closed) and goes on only once the
    test releases it, after the final save."""

    def __init__(self, inner: Any, held: int) -> None:
        super().__init__(inner)
        self.held = f"step-{held:012d}"
        self.committing = threading.Event()
        self.release = threading.Event()

    def make_durable(self, prefix: str) -> None:
        if prefix == self.held:
            self.committing.set()
            if not self.release.wait(60):
                raise TimeoutError("the test never released the commit")
        super().make_durable(prefix)


def test_a_cancelled_save_whose_commit_ends_after_the_final_one_leaves_it_the_last_durable(
    make_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save cancelled once its commit had begun cannot be stopped (its marker may be on
    its way); left behind after the cancel's grace, it committed after the final save and
    moved `saver.last_durable` back to its older step, and told `on_done` (the guard, which
    acked the notices `saved` at that step after the exit's save) of a fresh commit."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "CANCEL_GRACE_SECONDS", 0.1)
    backend = CommitsAfterTheFinalSave(make_store().backend, held=5)
    store = CheckpointStore(backend=backend)
    told: list[int] = []
    saver = BackgroundSaver(store, on_done=lambda timing, _gen, _error: told.append(timing.step))
    saver.save(5, state(5))
    assert backend.committing.wait(30)
    final = saver.final(6, state(6), seconds_left=None)
    assert final.generation.step == 6, final.reason
    backend.release.set()
    _wait_for_the_save_thread_to_end(5)
    assert [generation.step for generation in store.generations()] == [5, 6]
    assert saver.last_durable is not None and saver.last_durable.step == 6
    assert told == []
    latest = store.latest()
    assert latest is not None and latest.step == 6


@pytest.mark.parametrize(
    "bad", ["", "/abs/state.pt", "a/../b.pt", "COMMIT", "parts/x.pt", ".state.pt.tmp-1"]
)
def test_a_bad_file_name_is_refused_when_the_saver_is_made(make_store: Any, bad: str) -> None:
    """The name was checked only by the first save's write: a typo failed mid-run, at worst
    at a terminate's final save, and that step's work was lost."""
    from forewarn.clients.checkpoint import InvalidNameError

    store = make_store()
    with pytest.raises(InvalidNameError, match=r"BackgroundSaver\(file_name=.*\)"):
        BackgroundSaver(store, file_name=bad)
    with pytest.raises(InvalidNameError, match=r"file_name must be a str"):
        BackgroundSaver(store, file_name=Path("state.pt"))  # type: ignore[arg-type]
    assert store.steps() == []
    saver = BackgroundSaver(store, file_name="nested/model state.pt")
    saver.save(1, state(1))
    saver.close()
    restored = load_state(store.get(1), file_name="nested/model state.pt")
    assert torch.equal(restored["model"]["w"], state(1)["model"]["w"])


def test_an_exit_save_of_the_step_still_uploading_is_refused_not_mixed_into_it(
    make_store: Any,
) -> None:
    """A synchronous save of the step a background save is still writing (a terminate's exit
    save of the periodic step, made with store.flush) deleted or overwrote the files of the
    one in flight, which then committed another save's bytes or failed on missing files."""
    from forewarn.clients.checkpoint import CommitError

    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    held = backend.hold(7)
    saver.save(7, state(7))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"

    def exit_save(gen: Any) -> None:
        # Not state.pt: the backend holds every write of that name in step 7.
        with gen.open("exit.pt") as stream:
            torch.save(state(70), stream)

    for writer in (store, make_store()):  # the same store, or another one on the same URL
        with pytest.raises(CommitError, match=r"step-000000000007 is already being saved .* by"):
            writer.flush(7, exit_save)
    held.set()
    assert saver.wait() is not None
    saver.check()
    generation = store.latest(verify="checksums")
    assert generation is not None and generation.step == 7
    assert torch.equal(load_state(generation)["model"]["w"], state(7)["model"]["w"])
    # Once that save ended the step is free again: a save of it now is told it is committed.
    from forewarn.clients.checkpoint import GenerationExistsError

    with pytest.raises(GenerationExistsError):
        store.flush(7, exit_save)


def test_final_at_the_step_whose_background_save_just_committed_reports_it_durable(
    make_store: Any,
) -> None:
    """A terminate handled at the step the periodic background save was made at: while that
    save was still uploading, final() waited for it ("waited"); once it had committed (a
    small or fast save), final() saved the step again and raised GenerationExistsError, so the
    exit path of a script using the saver crashed (exit 1) with its state durable."""
    store = make_store()
    saver = BackgroundSaver(store)
    saver.save(5, state(5))
    assert saver.wait() is not None and saver.last_durable is not None
    final = saver.final(5, state(5), seconds_left=30.0)
    assert final.generation.step == 5 and final.choice == "nothing in flight"
    assert "already durable" in final.reason
    assert store.latest().step == 5  # type: ignore[union-attr]
    assert load_state(store.get(5))["step"] == 5


# The docs' loop written inside `with CheckpointGuard(...)`, ending by sys.exit(guard.exit_code)
# in the block; a terminate comes while save_state(20) waits for the upload of step 10, so
# the background save of step 20 answers it, and that save then fails.
_EXIT_INSIDE_THE_GUARDS_WITH = """
import sys, threading, time
import torch
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import DelegatingBackend

held = threading.Event()

class Backend(DelegatingBackend):
    def writer(self, key, on_done=None):
        inner = self.inner.writer(key, on_done)
        original = inner.write
        def write(data):
            if key.startswith("step-000000000010/"):
                held.wait()
            if key.startswith("step-000000000020/"):
                raise OSError(28, "No space left on device")
            return original(data)
        inner.write = write
        return inner

store = CheckpointStore(backend=Backend(CheckpointStore(sys.argv[1]).backend))
with CheckpointGuard(
    every_steps=10, store=store, background=True, notices=False, flag_file=None
) as guard:
    main = threading.main_thread().ident
    def waiting():  # save_state(20) waits for step 10's upload
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "wait" and frame.f_code.co_filename.endswith(
                "background.py"
            ):
                return True
            frame = frame.f_back
        return False
    def terminate():
        while not waiting():
            time.sleep(0.01)
        guard.request("terminate", exit=True)
        held.set()
    threading.Thread(target=terminate, daemon=True).start()
    for step in (10, 20):
        guard.due(step)  # step 20's is skipped while step 10 uploads; saved all the same
        if guard.save_state(step, {"w": torch.full((1000,), float(step))}).exit:
            print("exit asked at", step, "code", guard.exit_code, flush=True)
            sys.exit(guard.exit_code)
"""


def test_a_terminate_during_the_wait_whose_final_save_fails_exits_1_from_the_with_block(
    tmp_path: Path,
) -> None:
    """A terminate while save_state(20) waits for step 10's upload makes it the final save
    (the upload is cancelled: no deadline is known to wait by); that save failing leaves the
    guard's `with` block by the error, and the process exits 1 (before, it exited 143 as if
    the exit's state were saved: see docs/checkpoint.md)."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_INSIDE_THE_GUARDS_WITH, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "exit asked at" not in done.stdout, done.stderr
    assert "the checkpoint of step 20 was NOT saved" in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    assert done.returncode == 1, done.stderr
    latest = CheckpointStore(str(tmp_path / "store")).latest()
    assert latest is None or latest.step == 10


def test_guard_close_stops_waiting_for_a_save_that_writes_nothing(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """guard.close() waited for the background save in flight with no bound: one stuck in a
    write (a hung mount, a storage service that stopped answering) held the process for as
    long as the mount stayed hung, so the job was never restarted (the interpreter's exit
    already gives up after EXIT_STALL_SECONDS without a byte written). close() now gives up
    the same way, with an ERROR naming the step and the last durable generation."""
    import logging

    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 0.5)
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    caplog.set_level(logging.WARNING)
    guard = background_guard(store, every_steps=10)
    assert guard.due(10)
    guard.save_state(10, state(10))
    guard.saver.wait()
    held = backend.hold(20)
    assert guard.due(20)
    guard.save_state(20, state(20))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    closing, _answers = _in_thread(guard.close)
    try:
        closing.join(30)
        assert not closing.is_alive(), "close() still waits for a save that writes nothing"
    finally:
        held.set()
        closing.join()
    (line,) = [r.getMessage() for r in caplog.records if "wrote nothing" in r.getMessage()]
    assert "step 20" in line and "step-000000000010" in line
    assert guard.durable_step == 10


@pytest.mark.parametrize("where", ["the copy", "after the writer started"])
def test_a_keyboard_interrupt_inside_save_leaves_nothing_in_flight(
    make_store: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ctrl-C landing inside `save()` just after its writer thread started (past the copy):
    the writer committed and then waited forever for the snapshot-taken event, so
    `in_flight` never cleared, and close(), the store's close and the interpreter's exit
    waited for it (the exit gave up after 120 s of no writes). Now the interrupt is raised
    at once and nothing stays in flight. One during the overlapped copy (which was handled)
    is kept to that."""
    from forewarn.clients.checkpoint import background

    store = make_store()
    saver = BackgroundSaver(store, overlap=where == "the copy")
    real_copy = BackgroundSaver._copy
    real_copy_attribute = BackgroundSaver.__dict__["_copy"]
    real_hook = background._hook_exit

    def interrupted_copy(copies: Any, done: Any) -> None:
        if done is not None:
            raise KeyboardInterrupt
        real_copy(copies, done)

    def interrupted_hook(saver: Any) -> None:
        real_hook(saver)
        raise KeyboardInterrupt

    if where == "the copy":
        monkeypatch.setattr(BackgroundSaver, "_copy", staticmethod(interrupted_copy))
    else:
        monkeypatch.setattr(background, "_hook_exit", interrupted_hook)
    saving, answers = _in_thread(lambda: _raised(lambda: saver.save(1, state(1))))
    saving.join(20)
    assert not saving.is_alive(), "save() hung on the interrupt"
    assert answers == [KeyboardInterrupt]
    # Put back by hand: undo() would also drop the S3 fixture's environment.
    monkeypatch.setattr(BackgroundSaver, "_copy", real_copy_attribute)
    monkeypatch.setattr(background, "_hook_exit", real_hook)
    eventually(lambda: saver.in_flight is None, timeout=20, what="nothing left in flight")
    with contextlib.suppress(CheckpointError):
        saver.check()  # the interrupted copy's save failed: said once
    saver.save(2, state(2))
    durable = saver.wait()
    saver.check()
    assert durable is not None and durable.step == 2


def _raised(call: Any) -> type[BaseException] | None:
    try:
        call()
    except BaseException as exc:
        return type(exc)
    return None


class SlowCommit(DelegatingBackend):
    """Every file of a generation is written; its commit (the directory's fsync, on S3 the
    listing before the manifest) waits until released, as a slow disk's last fsync or a
    slow service's CompleteMultipartUpload does."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.committing = threading.Event()
        self.release = threading.Event()

    def make_durable(self, prefix: str) -> None:
        self.committing.set()
        if not self.release.wait(60):
            raise TimeoutError("the test never released the commit")
        super().make_durable(prefix)


def test_guard_close_waits_for_a_save_whose_file_is_written_and_commit_is_slow(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() gives up on a save that writes nothing for EXIT_STALL_SECONDS; one whose file
    is all written and whose commit is slow (a last fsync of gigabytes on a slow disk) is not
    stuck in a write, and its commit is bounded by the storage's own timeouts: close() waits
    for it, and it commits."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 0.01)
    backend = SlowCommit(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    assert guard.due(10)
    guard.save_state(10, state(10))
    assert backend.committing.wait(60), "the save never reached its commit"
    looks: list[float] = []
    real_stalled = BackgroundSaver.stalled_seconds

    def counted(self: Any) -> float:
        looks.append(real_stalled(self))
        return looks[-1]

    monkeypatch.setattr(BackgroundSaver, "stalled_seconds", counted)
    closing, _answers = _in_thread(guard.close)
    try:
        eventually(lambda: len(looks) >= 3, what="close() looking at the save a few times")
        assert closing.is_alive(), "close() gave up on a save that is committing"
    finally:
        backend.release.set()
        closing.join(60)
    assert guard.durable_step == 10 and store.latest_hint() == 10


@pytest.mark.parametrize("exit_at", [0, 10])
def test_the_final_save_line_reads_right_with_nothing_in_flight(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, exit_at: int
) -> None:
    """With no background save running, the exit's WARNING read `...: there was no the
    background save; no background save was running`: each choice now says it in a sentence,
    and the first exit of a run (nothing ever saved) and one after a committed save alike."""
    guard = background_guard(CheckpointStore(str(tmp_path / "ckpt")), every_steps=10)
    if exit_at:
        guard.save_state(exit_at, state(exit_at, rows=4)) if guard.due(exit_at) else pytest.fail()
        guard.saver.wait()
    caplog.set_level(logging.WARNING, logger="forewarn.clients")
    guard.request("signal", exit=True)
    assert guard.due(exit_at + 1)
    final = guard.save_state(exit_at + 1, state(exit_at + 1, rows=4))
    guard.close()
    assert final.exit and final.choice == "nothing in flight"
    (line,) = [r.getMessage() for r in caplog.records if "final checkpoint" in r.getMessage()]
    assert line == (
        f"forewarn: final checkpoint at step {exit_at + 1} (unknown time left): "
        f"{final.choice_reason}"
    )


def test_a_terminate_too_close_for_a_final_save_keeps_the_upload_nearly_done(
    make_store: Any,
) -> None:
    """A terminate whose time left is shorter than a save (a slow disk), during an upload that
    is nearly done: final() cancelled the upload because the two did not fit together, and
    started a final save that could not fit alone either; the deadline's SIGKILL cut that one,
    and the job resumed from the save before the upload's. The upload, nearer its end than
    a new save could be, is waited for first; the final save is still tried after it."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    saver.save(1, state(1))
    saver.wait()
    estimate = 0.5
    saver._durable_estimate = estimate  # the disk is slow: saves were timed at 0.5 s
    held = backend.hold(2)
    saver.save(2, state(2))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    time.sleep(estimate)  # as long as a whole save takes: the upload is due to end now
    threading.Timer(0.01, held.set).start()
    final = saver.final(3, state(3), seconds_left=estimate * 0.9)
    assert final.choice == "waited", final.reason
    assert "the final save alone" in final.reason, final.reason
    assert final.generation.step == 3
    assert [g.step for g in store.generations()] == [1, 2, 3]


def test_a_terminate_shorter_than_the_first_upload_so_far_keeps_it_with_no_save_timed(
    make_store: Any,
) -> None:
    """The first save still uploading, none timed yet, and a terminate with less time left
    than that upload has already run: final() cancelled it (`no save has been timed yet to
    plan with`) for a final save of the same state, which takes longer than the upload has
    run so far and so could not fit either: the deadline's SIGKILL cut it, and nothing at all
    was durable (found: a 3 s lead 5 s into the first upload). The upload's time so far is a
    figure to plan with: it is waited for first, the final save still tried after it."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    held = backend.hold(1)
    saver.save(1, state(1))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    time.sleep(0.5)  # the scenario: the first upload has run 0.5 s when the terminate comes
    threading.Timer(0.05, held.set).start()  # and ends just after
    final = saver.final(2, state(2), seconds_left=0.3)
    assert final.choice == "waited", final.reason
    assert "no save has been timed yet" in final.reason, final.reason
    assert "waited for step 1 first" in final.reason, final.reason
    assert final.generation.step == 2
    assert [g.step for g in store.generations()] == [1, 2]


def test_a_terminate_longer_than_the_first_upload_so_far_still_cancels_it(
    make_store: Any,
) -> None:
    """With more time left than the first upload has run, nothing says the final save does
    not fit: the upload is cancelled for it, as before."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    held = backend.hold(1)
    saver.save(1, state(1))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    try:
        final = saver.final(2, state(2), seconds_left=600.0)
    finally:
        held.set()
    assert final.choice == "cancelled", final.reason
    assert "no save has been timed yet" in final.reason, final.reason
    assert final.generation.step == 2
    eventually(lambda: 1 not in store.steps())
    assert [g.step for g in store.generations()] == [2]


def test_an_upload_waited_for_in_place_of_a_final_save_is_cancelled_at_the_deadline(
    make_store: Any,
) -> None:
    """The upload waited for because the final save alone did not fit stalls: at the deadline
    it is cancelled and the final save is still tried (it may yet end before the SIGKILL)."""
    backend = Gated(make_store().backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    saver.save(1, state(1))
    saver.wait()
    saver._durable_estimate = 0.5  # the disk is slow: saves were timed at 0.5 s
    held = backend.hold(2)
    saver.save(2, state(2))
    assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
    time.sleep(0.4)  # due to end in 0.1 s, within the 0.2 s left; then it stalls
    try:
        final = saver.final(3, state(3), seconds_left=0.2)
    finally:
        held.set()
    assert final.choice == "cancelled", final.reason
    assert "waited for step 2 first" in final.reason
    assert "still uploading when the deadline came" in final.reason
    assert final.generation.step == 3
    eventually(lambda: 2 not in store.steps())  # the stalled save stops and never commits
    assert [g.step for g in store.generations()] == [1, 3]


def _error_of(call: Any) -> BaseException | None:
    try:
        call()
    except BaseException as exc:
        return exc
    return None


def _answers_within_15_seconds(call: Any, what: str) -> list[BaseException | None]:
    """What `call` raised (None: nothing), run in a thread that must be done 15 s on: `what`
    says the wait that had no bound."""
    saving, answers = _in_thread(lambda: _error_of(call))
    saving.join(15)
    assert not saving.is_alive(), what
    return answers


@contextlib.contextmanager
def _stuck_upload(tmp_path: Path, step: int) -> Iterator[tuple[Any, CheckpointStore, Any]]:
    """A background guard saving every 10 steps into a store (its gated backend, the store,
    the guard) whose upload of `step` is stuck in its write: the periodic saves from step 10
    to `step` made (those before it durable), the stuck one released as the block ends."""
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    guard = background_guard(store, every_steps=10)
    release = backend.hold(step)
    try:
        for at in range(10, step + 1, 10):
            if at > 10:
                guard.saver.wait()
            assert guard.due(at)
            guard.save_state(at, state(at))
        assert backend.stuck.acquire(timeout=60), "the upload never reached its write"
        yield backend, store, guard
    finally:
        release.set()


def test_the_next_periodic_save_stops_waiting_for_an_upload_that_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A periodic save_state while the upload before it was stuck in a write (a hung NFS
    mount, a storage service that stopped answering) waited for it in ticks with no bound:
    training stopped for as long as the mount stayed hung, with nothing said, and the job was
    never restarted. Now, past EXIT_STALL_SECONDS without a byte written (the bound close()
    and the exit already have), the stuck save is left behind (it never commits) and
    save_state raises BackgroundSaveError, as for a failed upload; the retry saves again."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 0.5)
    caplog.set_level(logging.WARNING)
    with _stuck_upload(tmp_path, 20) as (_, store, guard):
        # Due by the schedule alone while step 20 uploads: skipped (test_s3_stalled_periodic);
        # a save the loop makes all the same waits for step 20, bounded.
        assert not guard.due(30)
        (error,) = _answers_within_15_seconds(
            lambda: guard.save_state(30, state(30)),
            "save_state still waits for an upload that writes nothing",
        )
        assert isinstance(error, BackgroundSaveError) and error.step == 20, error
        assert "wrote nothing" in str(error)
        assert guard.durable_step == 10
        assert guard.due(31)  # the retry asked for
        guard.save_state(31, state(31))
    guard.close()
    assert store.latest_hint() == 31
    # The save left behind never commits, and its files go: released above, its thread
    # aborts on its own time (check 29d, loaded, still listed it as close() returned).
    eventually(lambda: 20 not in store.steps(), timeout=10, what="step 20's files removed")
    assert store.latest_hint() == 31
    assert guard.exit_code == 0


def test_a_bare_saver_stops_waiting_for_an_upload_that_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BackgroundSaver.save() waits for the save in flight first: one stuck in a write held it
    for ever. It gives that one up as close() does, and raises it as the save's failure."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 0.5)
    backend = Gated(CheckpointStore(str(tmp_path / "ckpt")).backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    release = backend.hold(2)
    try:
        saver.save(1, state(1))
        saver.wait()
        saver.save(2, state(2))
        assert backend.stuck.acquire(timeout=60)
        answers = _answers_within_15_seconds(
            lambda: saver.save(3, state(3)), "save() still waits for an upload that writes nothing"
        )
        assert answers and isinstance(answers[0], BackgroundSaveError), answers
        assert answers[0].step == 2
    finally:
        release.set()
    saver.save(3, state(3))  # said once; the next save goes ahead
    saver.close()
    assert store.latest_hint() == 3
    assert 2 not in store.steps()


def test_an_exit_at_the_step_still_uploading_stops_waiting_once_it_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exit's save at the very step whose background save is in flight waits for that
    save (it is the final one), and waited with no bound: a SIGTERM's (no deadline) as long
    as the upload hung, a terminate's on past its deadline, so a hung mount held the process
    for ever where the machine stayed (the job never restarted, never resumed). Past
    EXIT_STALL_SECONDS without a byte written it is given up now (left behind, it never
    commits), and the exit's save fails as any other: raised, exit_code 1, the last durable
    generation named."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 0.5)
    caplog.set_level(logging.WARNING)
    with _stuck_upload(tmp_path, 20) as (_, store, guard):
        guard.request("signal", exit=True)
        (error,) = _answers_within_15_seconds(
            lambda: guard.save_state(20, state(20)),
            "the exit's save still waits for an upload that is stuck",
        )
        assert isinstance(error, BackgroundSaveError) and error.step == 20, error
        assert "wrote nothing" in str(error)
        assert guard.exit_code == 1
        assert "the checkpoint of step 20 was NOT saved" in caplog.text
    guard.close()
    assert store.latest_hint() == 10
    eventually(lambda: 20 not in store.steps(), what="the stuck save to be cleaned up")


def test_a_periodic_save_due_while_one_uploads_is_skipped_once_said_and_a_request_is_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/checkpoint.md: a save due by the schedule alone while the one before uploads is
    skipped (said once per save in flight), the first due() after that save ends saves, and
    `guard.request()` (the end of a run) is never skipped: it waits for the upload."""
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    with _stuck_upload(tmp_path, 10) as (_, store, guard):
        assert not any(guard.due(step) for step in range(20, 25))
        skipped = [r.getMessage() for r in caplog.records if "is skipped" in r.getMessage()]
        assert len(skipped) == 1, skipped
        assert skipped[0].startswith(
            "forewarn: the save due at step 20 is skipped: the background save of step 10 is "
            "still uploading ("
        ), skipped
        assert skipped[0].endswith("); the first step after it ends saves"), skipped
        guard.request("end")
        assert guard.due(25)
        saving, answers = _in_thread(lambda: guard.save_state(25, state(25)))
        eventually(lambda: _waits_for_the_save_in_flight(saving), what="save_state to wait")
    saving.join(30)
    assert answers and answers[0].reasons == ("end", "periodic"), answers
    assert guard.saver.wait() is not None
    assert guard.durable_step == 25 and store.latest_hint() == 25
    guard.close()
    # Skipped behind step 10, step 20's save came at the first due() after it ended: here,
    # the request's at step 25, which the schedule's counts from.
    assert not guard.due(26) and guard.due(35)


def test_a_drain_during_an_upload_is_said_once_after_a_skipped_periodic_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A periodic step skipped while step 10 uploads, then a drain during that same upload:
    the drain's wait is said too (once), and the first due() after the upload saves for it."""
    from datetime import datetime, timezone

    from forewarn.clients.event import Event

    caplog.set_level(logging.INFO, logger="forewarn.clients")
    with _stuck_upload(tmp_path, 10) as (_, _store, guard):
        assert not guard.due(20)
        now = datetime.now(timezone.utc)
        guard._on_event(
            Event(
                id="local/manual/d1",
                seq=1,
                action="drain",
                reason="manual",
                provider="local",
                deadline=None,
                noticed_at=now,
                sent_at=now,
            )
        )
        assert not any(guard.due(step) for step in range(21, 25))
    waits = [r.getMessage() for r in caplog.records if "save due at step" in r.getMessage()]
    assert len(waits) == 2, waits
    assert "the save due at step 20 is skipped" in waits[0], waits
    assert waits[1].startswith("forewarn: the drain's save due at step 21 waits: "), waits
    assert guard.saver.wait() is not None
    assert guard.due(25)
    result = guard.save_state(25, state(25))
    assert result.notices == ("local/manual/d1",) and "drain" in result.reasons, result
    guard.close()
