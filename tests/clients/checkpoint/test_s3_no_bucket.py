"""A store on an S3 bucket that does not exist: every read raises the store's own error naming
the bucket and the prefix, and `forewarn checkpoint` says so in one line, exit 3 (the store
could not be read). `latest()` raised botocore's `NoSuchBucket`, "The specified bucket does
not exist", naming neither."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, StoreNotFoundError
from s3_proxy import XML, Reply, Request, S3Proxy


@pytest.fixture
def missing_bucket(s3_env: dict[str, str]) -> str:
    return f"missing-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(
    "read",
    [
        lambda store: store.latest(),
        lambda store: store.generations(),
        lambda store: store.get(5),
        lambda store: store.restore(lambda generation: None),
        lambda store: store.latest_hint(),
        lambda store: store.flush(1, lambda gen: gen.write_bytes("model.pt", b"weights")),
        lambda store: store.abort_stale_uploads(),
    ],
    ids=["latest", "generations", "get", "restore", "hint", "first save", "abort"],
)
def test_each_read_of_a_missing_bucket_names_the_bucket_and_prefix(
    missing_bucket: str, read: Callable[[CheckpointStore], Any]
) -> None:
    store = CheckpointStore(f"s3://{missing_bucket}/runs/job-1")
    try:
        with pytest.raises(StoreNotFoundError) as refused:
            read(store)
    finally:
        store.close()
    assert isinstance(refused.value, CheckpointError)
    message = str(refused.value)
    assert f"the bucket {missing_bucket!r} does not exist" in message
    assert "'runs/job-1'" in message


def test_a_first_background_save_into_a_missing_bucket_names_it(missing_bucket: str) -> None:
    """A job's first save, to a mistyped bucket, failed with botocore's "An error occurred
    (NoSuchBucket) when calling the PutObject operation: The specified bucket does not
    exist", naming neither the bucket nor the store (its claim's write, the first request)."""
    from forewarn.clients.checkpoint import BackgroundSaveError, BackgroundSaver

    store = CheckpointStore(f"s3://{missing_bucket}/runs/job-1")
    saver = BackgroundSaver(store)
    try:
        saver.save(1, {"w": b"weights"})
        saver.wait()
        with pytest.raises(BackgroundSaveError) as refused:
            saver.check()
    finally:
        store.close()
    assert isinstance(refused.value.cause, StoreNotFoundError)
    assert f"the bucket {missing_bucket!r} does not exist" in str(refused.value)


def test_a_first_save_without_conditional_writes_names_the_missing_bucket(
    missing_bucket: str,
) -> None:
    """A service that refuses conditional writes takes no claim: the file's own first
    request (a PutObject, or a multipart upload's start) meets the missing bucket."""
    store = CheckpointStore(f"s3://{missing_bucket}/runs/job-1")
    store.backend._conditional_writes = False  # type: ignore[attr-defined]
    for size in (7, 6 << 20):
        with pytest.raises(StoreNotFoundError, match=f"the bucket {missing_bucket!r}"):
            store.flush(1, lambda gen: gen.write_bytes("model.pt", os.urandom(size)))  # noqa: B023
    store.close()


@pytest.mark.parametrize("command", ["ls", "show", "verify", "get", "prune"])
def test_the_command_names_the_missing_bucket_and_exits_3(
    missing_bucket: str, command: str, tmp_path: Path
) -> None:
    url = f"s3://{missing_bucket}/runs/job-1"
    argv = {"get": [url, str(tmp_path / "dest")], "prune": [url, "--keep", "1"]}.get(command, [url])
    result = subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", command, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"the bucket {missing_bucket!r} does not exist" in result.stderr
    assert "'runs/job-1'" in result.stderr


class BucketDeleted(S3Proxy):
    """The bucket is deleted while a save is under way: from the first request `trigger`
    matches on, every request is answered `NoSuchBucket`, as S3 answers once it is gone."""

    def __init__(self, upstream: str, trigger: Callable[[Request], bool]) -> None:
        super().__init__(upstream)
        self.trigger = trigger
        self.gone = False

    def answer(self, request: Request) -> Reply | None:
        self.gone = self.gone or self.trigger(request)
        if not self.gone:
            return None
        return Reply(404, XML, _NO_SUCH_BUCKET)


_NO_SUCH_BUCKET = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchBucket</Code>"
    b"<Message>The specified bucket does not exist</Message></Error>"
)


@pytest.mark.parametrize(
    "trigger",
    [
        lambda request: request.command == "PUT" and request.query.get("partNumber") == ["2"],
        lambda request: request.command == "POST" and "uploadId" in request.query,
    ],
    ids=["at a part", "at the completion"],
)
def test_a_bucket_deleted_while_a_save_uploads_is_named(
    moto_endpoint: str, bucket: str, trigger: Callable[[Request], bool]
) -> None:
    """A bucket deleted mid-save (its parts uploading, or at the upload's completion) failed
    the save with botocore's bare `NoSuchBucket: An error occurred (NoSuchBucket) when calling
    the UploadPart operation: The specified bucket does not exist`, naming neither the bucket
    nor the store, where a first save's request raised StoreNotFoundError (found: a fault
    proxy in front of moto answering NoSuchBucket from the second part on)."""
    from forewarn.clients.checkpoint import S3Options
    from forewarn.clients.checkpoint.s3 import MIN_PART

    with BucketDeleted(moto_endpoint, trigger) as proxy:
        store = CheckpointStore(
            f"s3://{bucket}/runs/job-1",
            s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART, concurrency=1),
        )
        try:
            with pytest.raises(StoreNotFoundError, match=f"the bucket {bucket!r} does not"):
                store.flush(1, lambda gen: gen.write_bytes("model.pt", os.urandom(3 * MIN_PART)))
        finally:
            store.close()
    assert proxy.gone
