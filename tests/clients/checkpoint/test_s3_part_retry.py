"""A part whose upload fails partway through its body (a 500 from a front end that read half
of it, then closed the connection) is sent again whole, and the file commits intact: each
part's body is a stream the HTTP client reads block by block (so that bytes moving count as
progress), and a retry must start it again from its first byte."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import XML, Reply, Request, S3Proxy

_INTERNAL_ERROR = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
    b"<Message>We encountered an internal error. Please try again.</Message></Error>"
)


class FailsMidBody(S3Proxy):
    """Answers the first attempt of part 1 with a 500 after half of its body."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.attempts: list[int] = []  # the Content-Length of each attempt of part 1
        self._lock = threading.Lock()

    def cut_body(self, request: Request) -> tuple[int, Reply] | None:
        if request.command != "PUT" or request.query.get("partNumber") != ["1"]:
            return None
        length = int(request.headers.get("Content-Length") or 0)
        with self._lock:
            self.attempts.append(length)
            first = len(self.attempts) == 1
        return (length // 2, Reply(500, XML, _INTERNAL_ERROR)) if first else None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[FailsMidBody]:
    with FailsMidBody(moto_endpoint) as server:
        yield server


def test_a_part_failed_mid_body_is_sent_again_whole(proxy: FailsMidBody, bucket: str) -> None:
    data = os.urandom(MIN_PART + (64 << 10))  # two parts
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART)
    )
    store.flush(3, lambda gen: gen.write_bytes("model.bin", data))
    assert proxy.attempts == [MIN_PART, MIN_PART]
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 3
    assert latest.read_bytes("model.bin") == data
    store.close()
