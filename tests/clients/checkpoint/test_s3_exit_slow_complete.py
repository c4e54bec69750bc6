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
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import Reply, Request, S3Proxy

# EXIT_STALL_SECONDS in the child. The parts' bytes moving are progress (each block a
# connection takes), so what it must outlast is the longest pause in them on a loaded machine,
# and the save's start before its first write (its claim, the upload's creation). Progress
# was the oldest part's answer only, and a 5 MiB part slower than this under 3x CPU load
# failed CI once (before that, 1.5 s had not been enough either).
STALL = 3.0
DELAY = STALL + 1.0  # how long the proxy holds each CompleteMultipartUpload

_EXIT_WHILE_THE_UPLOAD_COMPLETES = """
import os, sys
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options
from forewarn.clients.checkpoint import background, store

background.EXIT_STALL_SECONDS = float(sys.argv[3])
store.RELEASE_WITHIN = float(sys.argv[3])  # the store's own exit wait for a commit under way
options = S3Options(endpoint_url=sys.argv[2], part_size=5 << 20)
checkpoints = CheckpointStore(sys.argv[1], s3=options)
checkpoints.latest()  # the S3 client is made (CPU-bound) before the save's clock runs
saver = BackgroundSaver(checkpoints)
saver.save(7, {"w": os.urandom(12 << 20)})  # three parts: a multipart upload
print("in flight:", saver.in_flight, flush=True)
"""


class SlowCompleteProxy(S3Proxy):
    """Holds every CompleteMultipartUpload for DELAY s."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.completions = 0
        self.delay = DELAY

    def answer(self, request: Request) -> Reply | None:
        if request.command == "POST" and "uploadId" in request.query:
            self.completions += 1
            time.sleep(self.delay)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[SlowCompleteProxy]:
    with SlowCompleteProxy(moto_endpoint) as server:
        yield server


def test_the_exit_waits_for_a_background_save_whose_upload_completes_slowly(
    proxy: SlowCompleteProxy, bucket: str
) -> None:
    url = f"s3://{bucket}/run"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_THE_UPLOAD_COMPLETES, url, proxy.url, str(STALL)],
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
    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
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
