"""A background save whose last write is made while its parts hang on a service that stopped
answering (its connections stalled): the next `save()`, `close()`, or a `final()` at that
very step gave them up only after botocore's timeouts and retries (about 6 minutes), since
the stall was counted only until the last write; the interpreter's exit gave them up at
EXIT_STALL_SECONDS. They are given up at that bound now, saying what was given up."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from forewarn.clients.checkpoint import (
    BackgroundSaveError,
    BackgroundSaver,
    CheckpointStore,
    S3Options,
    background,
)
from forewarn.clients.checkpoint import s3 as s3_backend
from support import eventually
from test_s3_stalled import StallingProxy

STALL_BOUND = 2.0  # EXIT_STALL_SECONDS for these tests
# Well under botocore's 60 s read timeout: a wait that reaches it was not bounded by the stall.
LIMIT = 25.0


@pytest.fixture
def stalling(moto_endpoint: str) -> Iterator[StallingProxy]:
    server = StallingProxy(moto_endpoint)
    yield server
    server.close()


def in_thread(call: Callable[[], object], limit: float) -> BaseException | object:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    assert outcome, f"still waiting after {limit:.0f} s"
    return outcome[0]


@pytest.mark.parametrize("then", ["save", "close", "final"])
def test_parts_stalled_after_the_last_write_are_given_up_at_the_stall_bound(
    then: str,
    stalling: StallingProxy,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", STALL_BOUND)
    before = set(threading.enumerate())  # an earlier test's threads are not this one's
    options = S3Options(endpoint_url=stalling.url, part_size=5 << 20, concurrency=2)
    store = CheckpointStore(f"s3://{bucket}/run", s3=options)
    saver = BackgroundSaver(store)
    stalling.stall = True
    # No torch needed: the saver pickles the bytes, one write of three parts.
    saver.save(7, {"w": bytes(12 << 20)})
    eventually(lambda: saver._writes_done, what="the save's last write made")
    eventually(lambda: stalling.stalled, what="a part of step 7 stalled")

    calls: dict[str, Callable[[], object]] = {
        "save": lambda: saver.save(8, {"w": b"next"}),
        "close": saver.close,
        "final": lambda: saver.final(7, {"w": b"final"}, seconds_left=1.0),
    }
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="forewarn.clients"):
        outcome = in_thread(calls[then], LIMIT)
    took = time.monotonic() - started
    assert isinstance(outcome, BackgroundSaveError), outcome
    assert outcome.step == 7
    said = str(outcome)
    assert "made its last write, but the parts it still had to upload sent nothing" in said
    assert "it is not committed and never will be" in said
    assert "the last durable generation is none" in said
    assert took < STALL_BOUND + 10, f"{then}() waited {took:.1f} s"
    assert any("step 7" in record.getMessage() for record in caplog.records), caplog.text

    stalling.release()  # the stuck parts fail at once: the save left behind ends
    for thread in threading.enumerate():
        if thread.name == "forewarn-background-save-7":
            thread.join(LIMIT)
            assert not thread.is_alive(), "the save given up did not end once released"
    eventually(
        lambda: (
            not any(t.name.startswith("forewarn-s3") for t in set(threading.enumerate()) - before)
        ),
        what="the stuck part uploads ended once released",
    )
    assert store.latest() is None  # nothing of step 7 committed
    store.close()


def test_part_retries_resending_their_bytes_do_not_count_as_progress(
    stalling: StallingProxy, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service that accepts connections and never answers (moto stopped with SIGSTOP): each
    part's retry, one per read timeout, reads its body from the start into fresh socket
    buffers, and those bytes counted as progress, so a save whose parts were stalled was
    given up only after botocore's retries (about 7 minutes in the field, EXIT_STALL_SECONDS
    120 s against a 60 s read timeout). Here the read timeout is 1 s and the bound 4 s."""
    monkeypatch.setattr(s3_backend, "READ_TIMEOUT", 1.0)
    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", 4.0)
    before = set(threading.enumerate())
    options = S3Options(endpoint_url=stalling.url, part_size=5 << 20, concurrency=2)
    store = CheckpointStore(f"s3://{bucket}/run", s3=options)
    saver = BackgroundSaver(store)
    stalling.stall = True
    saver.save(7, {"w": bytes(12 << 20)})
    eventually(lambda: saver._writes_done, what="the save's last write made")
    started = time.monotonic()
    outcome = in_thread(saver.close, LIMIT)
    took = time.monotonic() - started
    assert isinstance(outcome, BackgroundSaveError), outcome
    assert "the parts it still had to upload sent nothing for 4 s" in str(outcome), outcome
    assert took < 4.0 + 8, f"close() waited {took:.1f} s"
    stalling.release()
    eventually(
        lambda: (
            not any(t.name.startswith("forewarn-s3") for t in set(threading.enumerate()) - before)
        ),
        20,
        "the stuck part uploads ended once released",
    )
    assert store.latest() is None
    store.close()
