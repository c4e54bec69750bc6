"""Background saves (issue 20): the training thread waits only for the snapshot, LATEST moves
once the generation is complete, a failure surfaces at the next save, and the terminate path
waits for or cancels the in-flight save by the time left."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.background import (
    BackgroundSaveError,
    BackgroundSaver,
    load_state,
)
from forewarn.clients.checkpoint.testing import DelegatingBackend

torch = pytest.importorskip("torch")


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
            if release is not None and not release.wait(60):
                raise TimeoutError("the test never released the write")
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
    first = saver._buffers["model/w"].data_ptr()
    saver.save(2, state(2))
    saver.wait()
    assert saver._buffers["model/w"].data_ptr() == first
    assert store.latest().step == 2  # type: ignore[union-attr]


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


def _saving_forever(url: str) -> None:
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


# Spawned, not forked (torch's thread pools do not survive a fork): each start imports torch.
@pytest.mark.timeout(900)
def test_sigkill_during_background_uploads_never_leaves_a_partial_generation(
    store_url: str,
) -> None:
    context = multiprocessing.get_context("spawn")
    store = CheckpointStore(store_url)
    partial = 0
    for trial in range(4):
        process = context.Process(target=_saving_forever, args=(store_url,), daemon=True)
        process.start()
        deadline = time.monotonic() + 300
        while store.latest() is None:
            assert time.monotonic() < deadline, "the saver committed nothing"
            time.sleep(0.02)
        time.sleep(0.1 * trial)
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
