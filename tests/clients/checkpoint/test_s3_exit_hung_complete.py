"""An exit's final save whose upload completion is never answered (a service that stopped
answering at CompleteMultipartUpload). The completion counts as the save moving (S3 may take
minutes over it for a large object), bounded, as documented, by its read timeout: but the
client retried it, six attempts of that timeout each (900 s in use: an hour and a half), all
that time past the deadline and its grace."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import (
    BackgroundSaver,
    CheckpointStore,
    CommitTimeout,
    S3Options,
    background,
)
from forewarn.clients.checkpoint import s3 as s3_backend
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import Reply, Request, S3Proxy

# The completion's read timeout (COMPLETE_READ_TIMEOUT, 900 s in use) and the grace past the
# deadline (FINAL_SAVE_GRACE_SECONDS, 60 s in use), scaled down.
COMPLETE = 1.5
GRACE = 0.5


class NeverCompletes(S3Proxy):
    """Holds every CompleteMultipartUpload unanswered until `release` is set."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.release = threading.Event()
        self.completions = 0

    def answer(self, request: Request) -> Reply | None:
        if request.command == "POST" and "uploadId" in request.query:
            self.completions += 1
            self.release.wait(60)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[NeverCompletes]:
    with NeverCompletes(moto_endpoint) as server:
        try:
            yield server
        finally:
            server.release.set()


def test_a_final_save_whose_completion_never_answers_fails_after_one_read_timeout(
    proxy: NeverCompletes, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_backend, "COMPLETE_READ_TIMEOUT", COMPLETE)
    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", GRACE)
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the clock runs
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(saver.final(9, {"w": os.urandom(MIN_PART + 1)}, seconds_left=0.0))
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    saving = threading.Thread(target=run, daemon=True)
    saving.start()
    saving.join(COMPLETE + GRACE + 2.5)
    assert outcome, f"the final save still waited {time.monotonic() - started:.1f} s in"
    assert isinstance(outcome[0], CommitTimeout), outcome[0]
    proxy.release.set()
    store.close()
