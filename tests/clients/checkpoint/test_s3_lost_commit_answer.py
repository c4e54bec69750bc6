"""A CompleteMultipartUpload that went through but whose answer was lost (a reset
connection): botocore retries it, and MinIO answers the retry NoSuchUpload where S3 answers
success. The file is there; the save must not fail, or discard it. A loopback proxy in front
of moto plays MinIO (moto itself answers the retry with success)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from s3_proxy import XML, Reply, Request, S3Proxy

NO_SUCH_UPLOAD = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The '
    b"specified multipart upload does not exist. The upload ID may be invalid, or the upload "
    b"may have been aborted or completed.</Message></Error>"
)


class LostAnswerProxy(S3Proxy):
    """The first CompleteMultipartUpload of each upload goes through but its connection is
    reset instead of answered; any later one is answered NoSuchUpload."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.completed: set[str] = set()
        self.lost = 0

    def answer(self, request: Request) -> Reply | None:
        if _commit(request) in self.completed:
            return Reply(404, XML, NO_SUCH_UPLOAD)
        return None

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        upload = _commit(request)
        if upload:
            self.completed.add(upload)
            self.lost += 1
            return None
        return reply


def _commit(request: Request) -> str:
    """The upload a CompleteMultipartUpload completes, or ''."""
    return request.query.get("uploadId", [""])[0] if request.command == "POST" else ""


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[LostAnswerProxy]:
    with LostAnswerProxy(moto_endpoint) as server:
        yield server


def test_a_commit_whose_answer_was_lost_still_saves(proxy: LostAnswerProxy, bucket: str) -> None:
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=5 << 20)
    )
    data = bytes(range(256)) * (45 << 10)  # 11.25 MiB: three parts
    generation = store.flush(1, lambda gen: gen.write_bytes("model.bin", data)).generation
    assert proxy.lost == 1
    assert generation.read_bytes("model.bin") == data
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    store.close()


def test_another_object_at_the_key_is_not_taken_for_the_upload(
    proxy: LostAnswerProxy, bucket: str
) -> None:
    """NoSuchUpload for an upload that really is gone (aborted by another job's clean-up)
    while an older object of another size or content sits at the key: the save fails."""
    import boto3

    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=5 << 20)
    )
    gen = store.save(1)
    stream = gen.open("model.bin")
    stream.write(b"a" * (6 << 20))
    upload = stream._upload_id  # type: ignore[attr-defined]
    assert upload is not None
    proxy.completed.add(upload)  # its commit will be answered NoSuchUpload
    key = "run/step-000000000001/model.bin"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"b" * ((6 << 20) + 1))
    with pytest.raises(Exception, match="NoSuchUpload"):
        stream.close()
    gen.abort("the file could not be committed")
    store.close()


class EncryptedETags(LostAnswerProxy):
    """As LostAnswerProxy, on a service whose objects' ETags are no MD5s (SSE-KMS, SSE-C,
    MinIO with its KMS): an object's HEAD and GET answer an ETag of random hex."""

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        answered = super().forwarded(request, reply)
        if answered is None or request.command not in ("HEAD", "GET") or request.query:
            return answered
        headers = [
            (key, f'"{uuid.uuid4().hex}"' if key.lower() == "etag" else value)
            for key, value in answered.headers
        ]
        return Reply(answered.status, headers, answered.data)


@pytest.fixture
def encrypted(moto_endpoint: str) -> Iterator[EncryptedETags]:
    with EncryptedETags(moto_endpoint) as server:
        yield server


def test_a_lost_commit_answer_on_a_service_whose_etags_are_no_md5s_still_saves(
    encrypted: EncryptedETags, bucket: str
) -> None:
    """The retried completion answered NoSuchUpload was taken for this upload's only when the
    object's ETag was the MD5 of its parts' MD5s: with encryption (SSE-KMS, SSE-C, MinIO's
    KMS) it never is, and the save failed though its object was there. The object's bytes
    are read back and checked against the file's checksum instead; another object's (same
    size, other bytes) is still refused."""
    import boto3

    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=encrypted.url, part_size=5 << 20)
    )
    data = bytes(range(256)) * (45 << 10)  # 11.25 MiB: three parts
    generation = store.flush(1, lambda gen: gen.write_bytes("model.bin", data)).generation
    assert encrypted.lost == 1
    assert generation.read_bytes("model.bin") == data

    gen = store.save(2)
    stream = gen.open("model.bin")
    stream.write(b"a" * (6 << 20))
    upload = stream._upload_id  # type: ignore[attr-defined]
    assert upload is not None
    encrypted.completed.add(upload)  # its commit will be answered NoSuchUpload
    key = "run/step-000000000002/model.bin"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"b" * (6 << 20))
    with pytest.raises(Exception, match="NoSuchUpload"):
        stream.close()
    gen.abort("the file could not be committed")
    store.close()
