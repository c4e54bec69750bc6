"""A terminate too close for a final save waits, past the deadline, for the last parts of the
upload in flight while they move, and cancels them once they stop. A part whose bytes were all
sent and whose answer came late (a busy S3-compatible service: 5 s here, moto behind a proxy
that holds each UploadPart's answer) sends nothing while it waits for that answer: read as a
stopped link after `TAIL_QUIET_SECONDS` (3 s), it was cut 3 s before it would have committed,
the step nearly durable lost for a final save the time left had been judged too short for."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import Reply, Request, S3Proxy
from support import eventually

# How long the proxy holds each UploadPart's answer once it has the part's whole body.
LATE = background.TAIL_QUIET_SECONDS + 2.0


class LateAnswers(S3Proxy):
    """Holds each UploadPart's answer `late` seconds (0: none) after its body arrived;
    `holding` counts the parts being held now."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.late = 0.0
        self.holding = 0
        self._lock = threading.Lock()

    def answer(self, request: Request) -> Reply | None:
        if request.command == "PUT" and "partNumber" in request.query and self.late:
            with self._lock:
                self.holding += 1
            time.sleep(self.late)  # the scenario's answer time, not a synchronisation
            with self._lock:
                self.holding -= 1
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[LateAnswers]:
    with LateAnswers(moto_endpoint) as server:
        yield server


def test_last_parts_whose_answers_come_late_are_waited_for(proxy: LateAnswers, bucket: str) -> None:
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    proxy.late = LATE
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    eventually(lambda: saver._writes_done, what="the save's last write (its parts uploading)")
    eventually(lambda: proxy.holding >= 2, what="both parts' bodies sent, their answers held")
    # Saves were timed at 1.5 s and this one started 10 s ago: due to end at once, and no
    # time is left for a final save alone: its last parts are waited for while they move.
    saver._durable_estimate = 1.5
    saver._started = time.monotonic() - 10.0
    final = saver.final(3, {"w": b"three"}, seconds_left=0.0)
    proxy.late = 0.0
    assert final.choice == "waited", final.reason
    assert "last parts" in final.reason, final.reason
    assert [generation.step for generation in store.generations()] == [1, 2, 3]
    store.close()
