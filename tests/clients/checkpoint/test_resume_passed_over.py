"""The next job's resume says which generation it gets, and why, when newer ones are not
committed. A job killed (SIGKILL) at each phase of a commit left a newer generation that
`latest()` rightly passed over, without a word: the job resumed from an older step while
`forewarn checkpoint ls` listed the newer one as `partial`, and nothing told the user whether
resume had missed it or why. A real writer process on local disk and on the moto server."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from forewarn.clients.checkpoint import CheckpointStore

# Saves step 1 whole, then step 2, and dies (SIGKILL) at argv[2]: "write" (mid-file), one of
# the commit's small files ("MANIFEST.json", "COMMIT") or "LATEST" (after the COMMIT marker:
# step 2 is whole), or holds its save open until stdin closes ("hold"). With a third argument,
# "first", it saves no step 1: step 2 is the store's first save.
_WRITER = """
import os, signal, sys
from forewarn.clients.checkpoint import CheckpointStore, S3Options

url, phase = sys.argv[1], sys.argv[2]
options = {"s3": S3Options(part_size=5 << 20)} if url.startswith("s3://") else {}
store = CheckpointStore(url, **options)
if sys.argv[3:] != ["first"]:
    with store.save(1) as gen:
        with gen.open("state.pt") as f:
            f.write(b"one")
put = store.backend.put_small

def dying(key, data):
    if key.endswith(phase):
        os.kill(os.getpid(), signal.SIGKILL)
    return put(key, data)

store.backend.put_small = dying
with store.save(2) as gen:
    with gen.open("state.pt") as f:
        f.write(os.urandom(6 << 20))
        if phase == "write":
            os.kill(os.getpid(), signal.SIGKILL)
        if phase == "hold":
            print("saving", flush=True)
            sys.stdin.read()
            os._exit(0)
"""


def _resumed(url: str, caplog: pytest.LogCaptureFixture) -> tuple[int | None, list[str]]:
    store = CheckpointStore(url)
    try:
        with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
            caplog.clear()
            latest = store.latest()
            store.latest()  # said once, not at every look
        said = [r.getMessage() for r in caplog.records if "resuming from it" in r.getMessage()]
        return (latest.step if latest is not None else None), said
    finally:
        store.close()


@pytest.mark.parametrize("phase", ["write", "MANIFEST.json", "COMMIT"])
def test_a_save_killed_before_its_commit_marker_is_passed_over_saying_why(
    store_url: str, phase: str, caplog: pytest.LogCaptureFixture
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _WRITER, store_url, phase], capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr
    step, said = _resumed(store_url, caplog)
    assert step == 1
    if phase == "write" and store_url.startswith("s3://"):
        # Its only part is an unfinished multipart upload, which no listing shows: there is
        # no step 2 in the store to pass over.
        assert said == []
        return
    assert len(said) == 1, said
    assert said[0].startswith("forewarn: checkpoint step-000000000001 in "), said
    assert "newer step-000000000002 is not committed" in said[0], said
    assert "writer was killed or failed before the COMMIT marker" in said[0], said


def test_a_save_killed_after_its_commit_marker_is_resumed_from_without_a_word(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _WRITER, store_url, "LATEST"], capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr
    assert _resumed(store_url, caplog) == (2, [])


def test_a_save_another_process_still_writes_is_named_as_such(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, store_url, "hold"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "saving\n"
        step, said = _resumed(store_url, caplog)
    finally:
        writer.kill()
        writer.wait()
    assert step == 1
    if store_url.startswith("s3://"):
        assert said == []  # its part is an unfinished upload, which no listing shows
        return
    assert len(said) == 1, said
    assert "newer step-000000000002 is still being saved by another process" in said[0], said


def test_a_first_save_killed_before_its_commit_marker_is_named_by_a_start_from_nothing(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """found: a torch job SIGKILLed at a terminate's deadline while its first checkpoint was
    being written (step 20 uploading, the exit's save of step 21 started) left step 21
    partial; the next job's `restore()` returned None without a word and the agent logged
    "nothing to resume (a fresh run, or one that saved nothing before it stopped)", where
    the same kill after one committed save named the partial generation it passed over."""
    killed = subprocess.run(
        [sys.executable, "-c", _WRITER, store_url, "COMMIT", "first"],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr
    store = CheckpointStore(store_url)
    try:
        with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
            assert store.latest() is None
            assert store.restore(lambda generation: generation) is None  # said once
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if "no committed generation" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("forewarn: no committed generation in "), said
    assert "to resume from: step-000000000002 is not committed" in said[0], said
    assert "writer was killed or failed before the COMMIT marker" in said[0], said
