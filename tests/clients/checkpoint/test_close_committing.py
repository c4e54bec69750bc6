"""`CheckpointStore.close()` (and the end of its `with` block) while a save of the store is
being committed on another thread (a background save, one `flush(timeout=)` gave up on):
close() waits for that commit to end, at most `RELEASE_WITHIN`, and says when it failed; a
save started after close() is refused, naming the closed store. On local disk and on moto in
server mode; the commit is held at its manifest by an event in a wrapping backend."""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import (
    CheckpointError,
    CheckpointStore,
    GenerationExistsError,
)
from forewarn.clients.checkpoint import store as store_module
from forewarn.clients.checkpoint.manifest import MANIFEST, generation_name
from forewarn.clients.checkpoint.options import open_backend
from forewarn.clients.checkpoint.testing import DelegatingBackend
from support import eventually
from test_s3_two_writers import CLAIM, root_keys

HELD = f"{generation_name(100)}/{MANIFEST}"
DATA = b"first" * 1000


class HeldCommit(DelegatingBackend):
    """Holds the write of step 100's manifest (the commit under way) until `go` is set, then
    writes it, or raises `fail`."""

    def __init__(self, url: str) -> None:
        super().__init__(open_backend(url))
        self.arrived = threading.Event()
        self.go = threading.Event()
        self.fail: BaseException | None = None

    def put_small(self, key: str, data: bytes) -> None:
        if key == HELD:
            self.arrived.set()
            assert self.go.wait(60)
            if self.fail is not None:
                raise self.fail
        super().put_small(key, data)


@pytest.fixture
def held(store_url: str) -> Iterator[HeldCommit]:
    backend = HeldCommit(store_url)
    try:
        yield backend
    finally:
        backend.go.set()


def committing(store: CheckpointStore) -> tuple[threading.Thread, list[BaseException]]:
    """Step 100 saved on a thread of its own, held at its manifest once this returns."""
    errors: list[BaseException] = []

    def save() -> None:
        try:
            with store.save(100) as gen:
                gen.write_bytes("a.bin", DATA)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=save, name="committing")
    thread.start()
    assert isinstance(store.backend, HeldCommit)
    assert store.backend.arrived.wait(30), errors
    return thread, errors


def closing(close: Callable[[], Any], caplog: pytest.LogCaptureFixture) -> threading.Thread:
    """`close` on a thread, once it is seen waiting for the commit (or has returned)."""
    thread = threading.Thread(target=close, name="closing")
    thread.start()
    eventually(
        lambda: not thread.is_alive() or "is being committed: waiting" in caplog.text,
        timeout=30,
        what="close() to wait for the commit under way, or to return",
    )
    return thread


def claims(url: str, store: CheckpointStore) -> list[str]:
    return [CLAIM] if url.startswith("s3://") and CLAIM in root_keys(store) else []


@pytest.mark.parametrize("how", ["close", "with"])
def test_close_waits_for_a_save_being_committed_to_end(
    store_url: str,
    held: HeldCommit,
    how: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, close() returned while the commit went on: a script that then ended by
    os._exit, or started the next job on the store, found the step it had just saved
    missing (and, on S3, claimed for the lease)."""
    monkeypatch.setattr(store_module, "RELEASE_WITHIN", 60.0)
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")
    store = CheckpointStore(backend=held)
    saving, errors = committing(store)

    def with_block() -> None:
        with store:
            pass

    closer = closing(store.close if how == "close" else with_block, caplog)
    assert closer.is_alive(), "close() returned while step 100 was being committed"
    held.go.set()
    closer.join(30)
    assert not closer.is_alive()
    # Right as close() returns, before the committing thread is waited for.
    reader = CheckpointStore(store_url)
    latest = reader.latest(verify="checksums")
    assert latest is not None and latest.step == 100, caplog.text
    assert latest.read_bytes("a.bin") == DATA
    assert claims(store_url, reader) == []
    # Refused as committed (generations are immutable), not as claimed by another writer.
    with pytest.raises(GenerationExistsError):
        reader.save(100)
    reader.close()
    saving.join(30)
    assert errors == []


def test_close_reports_a_commit_that_fails(
    store_url: str,
    held: HeldCommit,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before, a commit that failed after close() returned was said to nobody when its
    thread's caller did not look (a save `flush(timeout=)` had given up on)."""
    monkeypatch.setattr(store_module, "RELEASE_WITHIN", 60.0)
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")
    held.fail = OSError(errno.EIO, "the disk went away")
    store = CheckpointStore(backend=held)
    saving, errors = committing(store)
    closer = closing(store.close, caplog)
    assert closer.is_alive(), "close() returned while step 100 was being committed"
    held.go.set()
    closer.join(30)
    assert not closer.is_alive()
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failed) == 1, caplog.text
    message = failed[0].getMessage()
    assert "the store was closed while step-000000000100 in " in message
    assert store_url.rstrip("/").split("/")[-1] in message
    assert "that commit failed: it is not saved (OSError: [Errno 5] the disk went away)" in message
    # Nothing is left of it: neither claimed nor half-written.
    reader = CheckpointStore(store_url)
    assert reader.latest() is None
    assert 100 not in reader.steps()
    assert claims(store_url, reader) == []
    reader.close()
    saving.join(30)
    assert [type(error) for error in errors] == [OSError]


def test_close_waits_for_a_commit_at_most_release_within(
    store_url: str,
    held: HeldCommit,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Storage that stopped answering mid-commit holds close() only `RELEASE_WITHIN`, which
    says the step is not durable yet."""
    monkeypatch.setattr(store_module, "RELEASE_WITHIN", 0.5)
    caplog.set_level(logging.WARNING, logger="forewarn.checkpoint")
    store = CheckpointStore(backend=held)
    saving, errors = committing(store)
    store.close()
    assert "step-000000000100 in " in caplog.text
    assert "was still being committed after 0 s: it is not durable yet" in caplog.text
    held.go.set()
    saving.join(30)
    assert errors == []
    reader = CheckpointStore(store_url)
    latest = reader.latest()
    assert latest is not None and latest.step == 100
    assert claims(store_url, reader) == []
    reader.close()


@pytest.mark.parametrize("how", ["save", "flush", "with"])
def test_a_save_after_close_is_refused_naming_the_closed_store(store_url: str, how: str) -> None:
    """Before, a closed store went on saving (its backend's close() releases nothing yet):
    a save after close() was neither refused nor, from then on, ended by a close()."""
    store = CheckpointStore(store_url)
    if how == "with":
        with store:
            pass
    else:
        store.close()
    expected = rf"cannot save step-000000000007 in {store.url}: this CheckpointStore was closed"
    with pytest.raises(CheckpointError, match=expected):
        if how == "flush":
            store.flush(7, lambda gen: gen.write_bytes("a.bin", DATA))
        else:
            store.save(7)
    reader = CheckpointStore(store_url)
    assert reader.steps() == []
    assert claims(store_url, reader) == []
    reader.close()


class HeldClaim(DelegatingBackend):
    """Holds `claim` (a save starting) until `go` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(open_backend(url))
        self.arrived = threading.Event()
        self.go = threading.Event()

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        self.arrived.set()
        assert self.go.wait(60)
        return super().claim(prefix, rank=rank)


def test_a_save_starting_while_the_store_closes_is_refused_and_lets_go(store_url: str) -> None:
    """A save that had passed the check when close() ran on another thread, and that
    close() did not see yet, ends too: it holds nothing once refused."""
    backend = HeldClaim(store_url)
    store = CheckpointStore(backend=backend)
    errors: list[BaseException] = []

    def save() -> None:
        try:
            store.save(100)
        except BaseException as exc:
            errors.append(exc)

    saving = threading.Thread(target=save)
    saving.start()
    try:
        assert backend.arrived.wait(30)
        store.close()
    finally:
        backend.go.set()
    saving.join(30)
    assert len(errors) == 1 and isinstance(errors[0], CheckpointError), errors
    assert "this CheckpointStore was closed" in str(errors[0])
    reader = CheckpointStore(store_url)
    assert claims(store_url, reader) == []
    # Nothing of this process holds the step either: another save of it goes ahead.
    with reader.save(100) as gen:
        gen.write_bytes("a.bin", DATA)
    reader.close()
