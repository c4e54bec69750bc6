"""The interpreter's exit waits for a background save to S3 whose CompleteMultipartUpload is
slow (S3 may take minutes for a large object): the exit counted a stall from the save's last
write, so a save whose parts were all sent and whose completion took longer than
EXIT_STALL_SECONDS (120 s) was given up as hung, and the process exited mid-commit. A real
process that ends without close(), against moto behind a proxy that holds the completion."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import Reply, Request, S3Proxy
from support import eventually

# EXIT_STALL_SECONDS in the child, from the moment it ends: while its completion is held, so
# the exit's wait is about the completion alone. Set from the start, the save's claim, the
# upload's creation and its parts' pauses had to fit in it too, and beside busy loops the
# exit gave the save up before its completion was even sent ('wrote nothing for 3 s').
STALL = 3.0
DELAY = STALL + 1.0  # how long the proxy holds each CompleteMultipartUpload past the exit
# A final save's grace (FINAL_SAVE_GRACE_SECONDS) while its completion is held, and otherwise.
HELD_GRACE = 0.5
REAL_GRACE = 60.0

_EXIT_WHILE_THE_UPLOAD_COMPLETES = """
import os, sys, time
from pathlib import Path
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options
from forewarn.clients.checkpoint import background, store

completing, exiting = Path(sys.argv[4]), Path(sys.argv[5])
options = S3Options(endpoint_url=sys.argv[2], part_size=5 << 20)
checkpoints = CheckpointStore(sys.argv[1], s3=options)
checkpoints.latest()  # the S3 client is made (CPU-bound) before the save's clock runs
saver = BackgroundSaver(checkpoints)
saver.save(7, {"w": os.urandom(12 << 20)})  # three parts: a multipart upload
print("in flight:", saver.in_flight, flush=True)
# The process ends once the proxy holds the upload's completion, with the exit's bounds
# scaled down: what the exit waits out is the completion alone.
deadline = time.monotonic() + 120
while not completing.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
background.EXIT_STALL_SECONDS = float(sys.argv[3])
store.RELEASE_WITHIN = float(sys.argv[3])  # the store's own exit wait for a commit under way
exiting.touch()
"""


class SlowCompleteProxy(S3Proxy):
    """Holds every CompleteMultipartUpload for `delay` s: once `exiting` exists, when one
    is set (from the child's exit: the completion outlasts its wait's bound whatever the
    machine's load made of the save before it), else from the request's arrival.
    `completing` is made as a completion arrives."""

    def __init__(self, upstream: str, directory: Path) -> None:
        super().__init__(upstream)
        self.completions = 0
        self.delay = DELAY
        self.completing = directory / "completing"
        self.exiting: Path | None = None
        # Told the grace a final save has: HELD_GRACE while a completion is held, REAL_GRACE
        # once its answer leaves.
        self.on_completion: Callable[[float], None] | None = None

    def answer(self, request: Request) -> Reply | None:
        if _completes(request):
            self.completions += 1
            if self.on_completion is not None:
                self.on_completion(HELD_GRACE)
            self.completing.touch()
            if self.exiting is not None:
                deadline = time.monotonic() + 120
                while not self.exiting.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
            time.sleep(self.delay)
        return None

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        if _completes(request) and self.on_completion is not None:
            self.on_completion(REAL_GRACE)
        return reply


def _completes(request: Request) -> bool:
    return request.command == "POST" and "uploadId" in request.query


@pytest.fixture
def proxy(moto_endpoint: str, tmp_path: Path) -> Iterator[SlowCompleteProxy]:
    with SlowCompleteProxy(moto_endpoint, tmp_path) as server:
        yield server


def test_the_exit_waits_for_a_background_save_whose_upload_completes_slowly(
    proxy: SlowCompleteProxy, bucket: str
) -> None:
    url = f"s3://{bucket}/run"
    proxy.exiting = proxy.completing.with_name("exiting")
    arguments = [url, proxy.url, str(STALL), str(proxy.completing), str(proxy.exiting)]
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_THE_UPLOAD_COMPLETES, *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "in flight: 7" in done.stdout
    assert proxy.completions == 1, done.stderr
    assert "wrote nothing" not in done.stderr, done.stderr
    latest = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url)).latest()
    assert latest is not None and latest.step == 7, done.stderr


def test_a_final_save_whose_upload_completes_slowly_past_its_grace_is_waited_for(
    proxy: SlowCompleteProxy, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminate's final save is waited for past its deadline and grace while it moves; its
    parts' bytes counted, its CompleteMultipartUpload under way did not (S3 may take minutes
    for a large object, sending nothing): with every byte sent, the final save was given up
    as hung a grace after its last part, CommitTimeout while its upload completed, and the
    process exited without the state of the exit. The exit's wait for a background save
    already counts a completion under way as no stall."""
    # The grace is scaled down (0.5 s) for what the test is about: the final save's timeout
    # made of it (then its floor, CANCEL_GRACE_SECONDS, 1 s) and the completion held past
    # both. The rest of the save (its claim, the upload's creation, the commit's requests
    # after the completion) has the real one: scaled down throughout, a loaded moto answered
    # one of those later than 0.5 s, and the save was given up ("moves nothing") outside the
    # completion. The save's motion is made right after its timeout.
    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)

    def grace(seconds: float) -> None:
        monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", seconds)

    class MotionWithTheRealGrace(background.SaveMotion):
        def __init__(self) -> None:
            super().__init__()
            grace(REAL_GRACE)

    monkeypatch.setattr(background, "SaveMotion", MotionWithTheRealGrace)
    proxy.on_completion = grace
    proxy.delay = 2.5  # the completion outlasts the grace and the timeout (at least 1 s)
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    assert store.latest() is None  # the client is made before the save's clock runs
    final = saver.final(9, {"w": os.urandom(MIN_PART + (1 << 20))}, seconds_left=0.0)
    assert final.generation.step == 9
    assert proxy.completions == 1
    latest = store.latest()
    assert latest is not None and latest.step == 9
    store.close()


def test_an_upload_completing_slowly_that_a_terminate_waits_for_is_not_cut(
    proxy: SlowCompleteProxy, bucket: str
) -> None:
    """A terminate too close for a final save waits past the deadline for the upload in
    flight while its last parts move. Once they were all sent, its completion and commit
    (minutes on S3 for a large object) moved nothing, and after 3 s (`TAIL_QUIET_SECONDS`)
    it was reported cancelled, "still uploading when the deadline came", though nothing can
    stop a completion under way: it committed on its own, left to the process's exit. Found
    as `'cancelled' == 'waited'` in `test_s3_slow_link.py` beside busy loops (a loaded moto's
    commit). A save whose every part is uploaded is now waited for until it commits."""
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    seconds_left = 1.0
    # Held past the deadline, the quiet that cut it and the cancel's grace after it.
    quiet = background.TAIL_QUIET_SECONDS + background.CANCEL_GRACE_SECONDS
    proxy.delay = seconds_left + quiet + 2.0
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    eventually(proxy.completing.exists, what="step 2's completion held")
    # Saves were timed at 1.5 s and this one started 1 s ago: due to end within the 1 s
    # left, where the final save alone does not fit.
    saver._durable_estimate = 1.5
    saver._started = time.monotonic() - 1.0
    final = saver.final(3, {"w": b"three"}, seconds_left=seconds_left)
    assert final.choice == "waited", final.reason
    assert "last parts" in final.reason, final.reason
    assert final.generation.step == 3
    assert proxy.completions == 1
    assert [generation.step for generation in store.generations()] == [1, 2, 3]
    assert saver.last_durable is not None and saver.last_durable.step == 3
    store.close()
