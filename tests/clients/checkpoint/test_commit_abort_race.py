"""Commit and abort of one single-rank save racing (a store closed, or the interpreter
exiting, while another thread commits): exactly one of them ends the save. The outcome is
a committed generation that verifies or no generation at all, never a half-committed one,
and the save's claim on its step is let go of once, after whichever one won has finished.
On local disk and on S3 (moto in server mode), with the backend gated at the point each
side is inside its work."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CommitError
from forewarn.clients.checkpoint.backend import Backend
from forewarn.clients.checkpoint.testing import DelegatingBackend

STEP = 100
NAME = "step-000000000100"
DATA = b"weights" * 1000


class Gated(DelegatingBackend):
    """Holds the commit at its manifest, or the abort at its deletion, while `hold` is set;
    records what was in storage each time the claim was let go of."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.hold: str | None = None
        self.inside = threading.Event()
        self.go = threading.Event()
        self.released: list[dict[str, int]] = []

    def _gate(self, where: str) -> None:
        if self.hold == where:
            self.inside.set()
            assert self.go.wait(30)

    def put_small(self, key: str, data: bytes) -> None:
        if key == f"{NAME}/MANIFEST.json":
            self._gate("commit")
        super().put_small(key, data)

    def delete_tree(self, prefix: str) -> None:
        if prefix == NAME:
            self._gate("abort")
        super().delete_tree(prefix)

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        release = super().claim(prefix, rank=rank)

        def recorded() -> None:
            self.released.append(self.inner.list_sizes(prefix))
            release()

        return recorded


@pytest.fixture
def gated(make_store: Any) -> Gated:
    return Gated(make_store().backend)


def start(gated: Gated) -> tuple[CheckpointStore, Any]:
    store = CheckpointStore(backend=gated)
    gen = store.save(STEP)
    gen.write_bytes("model.bin", DATA)
    return store, gen


def in_thread(action: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    failed: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, failed


def assert_committed(store: CheckpointStore, gated: Gated) -> None:
    generation = store.get(STEP, verify="checksums")
    assert generation.read_bytes("model.bin") == DATA
    # Let go of once, and only with the generation whole: marker and manifest in.
    assert len(gated.released) == 1
    assert {"COMMIT", "MANIFEST.json", "model.bin"} <= set(gated.released[0])


def assert_aborted(store: CheckpointStore, gated: Gated) -> None:
    assert store.steps() == [], "an aborted save left files behind"
    assert store.latest() is None
    # Let go of once, and only once its files were gone: another writer may take the step.
    assert gated.released == [{}]
    # Nothing of this process holds the step any more.
    with store.save(STEP) as again:
        again.write_bytes("model.bin", DATA)
    assert store.get(STEP, verify="checksums").read_bytes("model.bin") == DATA


def test_an_abort_during_a_commit_leaves_the_commit_to_finish(gated: Gated) -> None:
    store, gen = start(gated)
    gated.hold = "commit"
    committing, failed = in_thread(gen.commit)
    assert gated.inside.wait(30)
    gen.abort("the store was closed")  # returns at once: the commit owns the save
    assert gated.released == [], "the claim was let go of under a commit still writing"
    gated.go.set()
    committing.join(30)
    assert not failed, failed
    assert gen.committed is not None
    assert_committed(store, gated)
    store.close()


def test_a_commit_during_an_abort_is_refused(gated: Gated) -> None:
    store, gen = start(gated)
    gated.hold = "abort"
    aborting, failed = in_thread(lambda: gen.abort("the interpreter exited"))
    assert gated.inside.wait(30)
    with pytest.raises(CommitError, match=r"already aborted \(the interpreter exited\)"):
        gen.commit()
    assert gated.released == [], "the claim was let go of under an abort still deleting"
    gated.go.set()
    aborting.join(30)
    assert not failed, failed
    assert gen.committed is None
    assert_aborted(store, gated)
    store.close()


@pytest.mark.parametrize("attempt", range(5))
def test_a_commit_and_an_abort_started_together_end_the_save_once(
    gated: Gated, attempt: int
) -> None:
    """Whichever wins, the other does nothing to the save."""
    store, gen = start(gated)
    together = threading.Barrier(2)
    refused: list[BaseException] = []

    def commit() -> None:
        together.wait(10)
        try:
            gen.commit()
        except CommitError as exc:
            refused.append(exc)

    def abort() -> None:
        together.wait(10)
        gen.abort("the store was closed")

    threads = [threading.Thread(target=commit), threading.Thread(target=abort)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if gen.committed is not None:
        assert not refused
        assert_committed(store, gated)
    else:
        assert len(refused) == 1 and "already aborted" in str(refused[0])
        assert_aborted(store, gated)
    store.close()
