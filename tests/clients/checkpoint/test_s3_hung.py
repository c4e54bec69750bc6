"""An S3 endpoint that accepts connections and never answers (a hung service): a save given
a deadline (a terminate's final save) fails there, saying so, instead of running on past it
(60 s per request, 6 times) until the SIGKILL cuts it off without a word."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, CommitTimeout, S3Options
from support import LazyModule, requires

torch = LazyModule("torch")


def in_thread(call: object, limit: float) -> BaseException | object:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())  # type: ignore[operator]
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    assert outcome, f"still saving after {limit:.0f} s"
    return outcome[0]


def test_a_save_with_a_timeout_to_a_silent_endpoint_fails_at_it(silent_endpoint: str) -> None:
    store = CheckpointStore("s3://bucket/run", s3=S3Options(endpoint_url=silent_endpoint))
    started = time.monotonic()
    failure = in_thread(
        lambda: store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w"), timeout=2.0), 40
    )
    assert isinstance(failure, CommitTimeout), failure
    assert time.monotonic() - started < 20
    assert "step-000000000001 was not committed" in str(failure)
    assert "within 2.0 s" in str(failure)


@requires("torch")
def test_the_final_background_save_to_a_silent_endpoint_fails_at_the_deadline(
    silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.0)  # the grace past it
    store = CheckpointStore("s3://bucket/run", s3=S3Options(endpoint_url=silent_endpoint))
    saver = BackgroundSaver(store)
    # The state is made before the clock starts: `torch` is imported lazily, and its import
    # (3 s idle, 20 s and more at the suite's load) was timed as if it were the save's, which
    # failed the bound at a load of 11-19 with the deadline honoured. The bound is on final()
    # alone: 3 s of deadline, no grace; unbounded, the save hangs 60 s a request, 6 times.
    state = {"w": torch.zeros(1000)}
    started = time.monotonic()
    failure = in_thread(lambda: saver.final(5, state, seconds_left=3.0), 40)
    assert isinstance(failure, CommitTimeout), failure
    assert time.monotonic() - started < 20
    assert "step-000000000005 was not committed" in str(failure)


# A run that ends while its background save's parts hang on stalled connections (a front-end
# host of the service gone silent): the part uploads never return.
_EXIT_WITH_PARTS_STALLED = """
import sys, threading
import torch
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background, s3

stalled = threading.Event()

def upload_part(self, number, body):
    stalled.set()
    threading.Event().wait()  # a request on a stalled connection

s3.S3Writer._upload_part = upload_part
background.EXIT_STALL_SECONDS = 1.0
store = CheckpointStore(sys.argv[1], s3=S3Options(part_size=5 << 20))
saver = BackgroundSaver(store)
saver.save(7, {"w": torch.zeros(4 << 20)})  # 16 MiB: parts go to the upload threads
assert stalled.wait(60), "no part upload started"
print("stalled:", saver.in_flight, flush=True)
"""


def run_script(script: str, url: str) -> subprocess.CompletedProcess[str]:
    """`script` in a fresh interpreter with the store's URL as its argument; a minute at most."""
    return subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, timeout=60
    )


@requires("torch")
def test_the_exit_is_not_held_by_part_uploads_stuck_on_stalled_connections(bucket: str) -> None:
    """concurrent.futures joins its executors' threads at the interpreter's exit, before any
    atexit hook: a background save's part uploads stuck on stalled connections held the exit
    for as long as their requests hung (60 s per attempt, 6 attempts, each part), past the
    bound the exit puts on a save that stopped moving (EXIT_STALL_SECONDS), and a process whose
    final save had failed by its CommitTimeout hung on its way out the same way."""
    done = run_script(_EXIT_WITH_PARTS_STALLED, f"s3://{bucket}/run")
    assert done.returncode == 0, done.stderr
    assert "stalled: 7" in done.stdout
    assert (
        "background save of step 7 made its last write, but the parts it still had to upload "
        "sent nothing for 1 s" in done.stderr
    )


_EXIT_AFTER_A_FINAL_SAVE_TIMED_OUT = """
import sys, threading
from forewarn.clients.checkpoint import CheckpointStore, CommitTimeout, S3Options, s3

def upload_part(self, number, body):
    threading.Event().wait()  # a request on a stalled connection

s3.S3Writer._upload_part = upload_part
store = CheckpointStore(sys.argv[1], s3=S3Options(part_size=5 << 20))
try:
    store.flush(3, lambda gen: gen.write_bytes("model.bin", bytes(16 << 20)), timeout=1.0)
except CommitTimeout as error:
    print("timed out:", error, flush=True)
sys.exit(1)  # the guard's exit code when the exit's save was not saved
"""


def test_a_process_whose_final_save_timed_out_on_stalled_parts_exits_at_once(
    bucket: str,
) -> None:
    done = run_script(_EXIT_AFTER_A_FINAL_SAVE_TIMED_OUT, f"s3://{bucket}/run")
    assert done.returncode == 1, done.stderr
    assert "timed out: step-000000000003 was not committed" in done.stdout


def test_parts_are_sent_where_no_thread_may_start_as_at_exit_on_python_3_12(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.12 starts no thread from an exit hook, where a background save still being
    written is waited for: its parts are then sent on the writer's own thread."""
    import threading

    from forewarn.clients.checkpoint import s3 as s3_backend

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    threads = s3_backend._PartThreads(4, "forewarn-s3")
    assert threads.submit(lambda n: n * 2, 21).result(timeout=0) == 42
    threads.shutdown()


# A save given up at the exit while still writing: the writer waits in its queue of parts
# (concurrency 2: two parts running, two queued), its part uploads stuck on stalled
# connections. No torch: the saver pickles the bytes, one write of six parts.
_EXIT_WITH_THE_WRITER_WAITING_ON_STALLED_PARTS = """
import sys, threading
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background, s3
from forewarn.clients.checkpoint import store as store_module

stalled = threading.Event()

def upload_part(self, number, body):
    stalled.set()
    threading.Event().wait()  # a request on a stalled connection

s3.S3Writer._upload_part = upload_part
background.EXIT_STALL_SECONDS = 0.5
store_module.RELEASE_WITHIN = 5.0
store = CheckpointStore(sys.argv[1], s3=S3Options(part_size=5 << 20, concurrency=2))
saver = BackgroundSaver(store)
saver.save(7, {"w": bytes(27 << 20)})
assert stalled.wait(60), "no part upload started"
uploads = store.backend.client.list_multipart_uploads(Bucket=store.backend.bucket)
print("uploads:", len(uploads.get("Uploads", [])), flush=True)
"""


def test_the_exit_aborts_the_upload_of_a_save_given_up_while_its_parts_are_stalled(
    bucket: str,
) -> None:
    """The exit aborts the store's unfinished saves, and the file being written aborted its
    multipart upload only after waiting for every part still running: parts stuck on stalled
    connections held that wait past the exit's bound (RELEASE_WITHIN), so the upload (and
    every part already in it, billed) stayed behind, and so did the step's claim, until a
    job's first save an hour later or the bucket's lifecycle rule. Aborted first now."""
    import boto3

    done = run_script(_EXIT_WITH_THE_WRITER_WAITING_ON_STALLED_PARTS, f"s3://{bucket}/run")
    assert done.returncode == 0, done.stderr
    assert "uploads: 1" in done.stdout
    assert "the background save of step 7 wrote nothing" in done.stderr
    assert "did not let go of the claims" not in done.stderr, done.stderr
    client = boto3.client("s3")
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    left = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert [item["Key"] for item in left] == []
