"""The directory's fsync failing (EIO) after the COMMIT marker's rename: the rename already
made the generation visible (readers take it, a restart resumes from it), so reporting the
save as failed told the job its step was not saved, left `last_durable` behind what readers
take, and the clean-up called the job's own marker "committed by another writer". The save
now returns the generation, committed, saying it may not be durable across a machine crash.

The error is injected at the store's `fsync_dir` seam (a failing fsync on a real file system
needs a device-mapper target and root); everything else is the real local store."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, local
from forewarn.clients.checkpoint.manifest import COMMIT
from s3_proxy import XML, Reply, Request, S3Proxy

_READ_LATEST = """
import sys
from forewarn.clients.checkpoint import CheckpointStore
latest = CheckpointStore(sys.argv[1]).latest(verify="checksums")
print("latest:", latest.step if latest is not None else None)
"""


def fail_after_the_commit_rename(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Make `fsync_dir` raise EIO for a generation's directory once its COMMIT is in place
    (the fsync after that rename, and none before it); returns the directories it failed."""
    real = local.fsync_dir
    failed: list[Path] = []

    def fsync_dir(path: Path) -> None:
        if path.name.startswith("step-") and (path / COMMIT).exists():
            failed.append(path)
            raise OSError(errno.EIO, "Input/output error", str(path))
        real(path)

    monkeypatch.setattr(local, "fsync_dir", fsync_dir)
    return failed


def latest_in_another_process(url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _READ_LATEST, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_sync_error_after_the_commit_rename_reports_the_generation_committed_not_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = str(tmp_path / "store")
    store = CheckpointStore(url)
    store.flush(1, lambda gen: gen.write_bytes("model.bin", b"one"))
    failed = fail_after_the_commit_rename(monkeypatch)

    with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
        result = store.flush(2, lambda gen: gen.write_bytes("model.bin", b"two"))

    assert failed, "the fsync after the COMMIT rename was not reached"
    assert result.generation.step == 2
    assert result.generation.unconfirmed is not None
    assert "Input/output error" in result.generation.unconfirmed
    said = caplog.text
    assert "checkpoint step-000000000002 is committed" in said
    assert "it may not be durable yet: a crash of the machine" in said
    assert "committed by another writer" not in said
    assert "was not committed" not in said
    # Readers agree with what the job was told: this one and another process.
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 2
    assert latest.read_bytes("model.bin") == b"two"
    assert latest_in_another_process(url) == "latest: 2"
    store.close()


def test_a_background_saves_last_durable_follows_a_commit_whose_sync_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "store")
    told: list[tuple[int, int | None, BaseException | None]] = []
    store = CheckpointStore(url)
    saver = BackgroundSaver(
        store,
        on_done=lambda timing, gen, error: told.append(
            (timing.step, gen.step if gen is not None else None, error)
        ),
    )
    fail_after_the_commit_rename(monkeypatch)
    saver.save(3, {"w": b"three"})
    saver.close()  # raises the save's failure, if any

    assert told == [(3, 3, None)]
    assert saver.last_durable is not None and saver.last_durable.step == 3
    assert saver.last_durable.unconfirmed is not None
    assert latest_in_another_process(url) == "latest: 3"
    store.close()


class MarkerAnswerFails(S3Proxy):
    """Every PUT of a COMMIT marker is stored by moto, then answered 500 InternalError (as S3
    answers now and then after storing an object): botocore's retries store it again and get
    the same answer, and the write raises with the marker in place."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.failed = 0

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        if request.command == "PUT" and request.path.split("?")[0].endswith(f"/{COMMIT}"):
            self.failed += 1
            return Reply(500, XML, INTERNAL_ERROR)
        return reply


INTERNAL_ERROR = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>We '
    b"encountered an internal error. Please try again.</Message></Error>"
)


def test_a_marker_whose_write_was_answered_an_error_on_s3_is_not_said_to_be_not_durable(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On S3 the marker read back from the service was stored by it, as durably as any
    object (S3 answers a PUT only once the object is stored): only the write's answer was an
    error. The warning said `it may not be durable yet: a crash of the machine (a power loss)
    may lose it`, true only of a local disk whose fsync failed (found: a proxy in front of
    moto answering the COMMIT PUT 500 after moto stored it)."""
    with MarkerAnswerFails(moto_endpoint) as proxy:
        url = f"s3://{bucket}/run"
        store = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url))
        with caplog.at_level(logging.WARNING, logger="forewarn.checkpoint"):
            result = store.flush(1, lambda gen: gen.write_bytes("model.bin", b"one"))
        store.close()

    assert proxy.failed >= 1
    assert result.generation.step == 1
    assert result.generation.unconfirmed is not None
    said = caplog.text
    assert "checkpoint step-000000000001 is committed" in said
    assert "may not be durable" not in said
    assert "crash of the machine" not in said
    assert "the service stored the marker" in said
    reader = CheckpointStore(url)
    latest = reader.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    reader.close()
