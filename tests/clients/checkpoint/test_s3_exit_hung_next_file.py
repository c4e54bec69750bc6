"""An exit's save of several files to a service that stops answering after the first one:
the upload of the next file never starts (its CreateMultipartUpload is held unanswered). The
save must fail a grace past the deadline, as for any save that moves nothing, and not wait
out botocore's read timeouts and retries (60 s, six times) as if the first file's completion
were still under way."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import (
    CheckpointStore,
    CommitTimeout,
    GenerationWriter,
    S3Options,
    background,
)
from forewarn.clients.checkpoint.s3 import MIN_PART
from forewarn.clients.event import Event
from s3_proxy import Reply, Request, S3Proxy

# The grace past the deadline (FINAL_SAVE_GRACE_SECONDS, 60 s in use), scaled down.
GRACE = 1.5


class HoldsTheNextUpload(S3Proxy):
    """Holds the CreateMultipartUpload of `b.bin` unanswered until `release` is set."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.release = threading.Event()

    def answer(self, request: Request) -> Reply | None:
        path = request.path.split("?", 1)[0]
        if request.command == "POST" and "uploads" in request.query and path.endswith("/b.bin"):
            self.release.wait(60)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[HoldsTheNextUpload]:
    with HoldsTheNextUpload(moto_endpoint) as server:
        try:
            yield server
        finally:
            server.release.set()


def test_an_exit_save_whose_next_file_never_starts_uploading_fails_a_grace_past_the_deadline(
    proxy: HoldsTheNextUpload, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first file's upload completing counted as the save moving ("completing": a
    CompleteMultipartUpload may take minutes) until the user's write returned: a save then
    held on the next file's CreateMultipartUpload read as moving, and the exit waited out
    botocore's timeouts (minutes) past the deadline and its grace."""
    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", GRACE)
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    guard = CheckpointGuard(notices=False, handle_signals=False, flag_file=None, store=store)
    now = datetime.now(timezone.utc)
    guard._on_event(
        Event(
            id="aws/spot-itn/next-file",
            seq=1,
            action="terminate",
            reason="spot-interruption",
            provider="aws",
            deadline=now,  # passed: the save has the grace, then only while it moves
            noticed_at=now,
            sent_at=now,
        )
    )
    assert guard.due(9) and guard.should_exit
    assert store.latest() is None  # the client is made before the clock runs

    def write(gen: GenerationWriter) -> None:
        gen.write_bytes("a.bin", os.urandom(MIN_PART + 1))
        gen.write_bytes("b.bin", os.urandom(MIN_PART + 1))

    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(guard.save(9, write))
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    saving = threading.Thread(target=run, daemon=True)
    saving.start()
    saving.join(GRACE + 10)
    assert outcome, f"the exit's save still waited {time.monotonic() - started:.0f} s in"
    assert isinstance(outcome[0], CommitTimeout), outcome[0]
    assert guard.exit_code == 1
    proxy.release.set()
    store.close()
