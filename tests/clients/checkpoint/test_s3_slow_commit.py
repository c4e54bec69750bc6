"""A CompleteMultipartUpload slower than the read timeout (S3 may take minutes for a large
object; moto took over two for 1 GiB on a loaded machine) must not be retried: the retries
of a commit still in progress fail, and the upload never completes (issue 20's 1 GiB run)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint import s3 as s3_backend
from s3_proxy import Reply, Request, S3Proxy

DELAY = 2.5  # the commit's answer comes this late; the ordinary read timeout is 1 s


class SlowCommitProxy(S3Proxy):
    """Holds every CompleteMultipartUpload for DELAY s."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.commits = 0

    def answer(self, request: Request) -> Reply | None:
        if request.command == "POST" and "uploadId" in request.query:
            self.commits += 1
            time.sleep(DELAY)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[SlowCommitProxy]:
    with SlowCommitProxy(moto_endpoint) as server:
        yield server


def test_a_commit_slower_than_the_read_timeout_completes_once(
    proxy: SlowCommitProxy, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_backend, "READ_TIMEOUT", 1.0)
    monkeypatch.setattr(s3_backend, "COMPLETE_READ_TIMEOUT", 30.0)
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    data = os.urandom(12 << 20)  # more than one 8 MiB part: a multipart upload
    with store.save(1) as gen, gen.open("state.bin") as stream:
        stream.write(data)
    assert proxy.commits == 1, "the commit was retried"
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    assert latest.read_bytes("state.bin") == data
