"""S3-compatible services whose listings lag their writes (Ceph RGW across zones, older Swift
S3 layers, some gateways): an object just written reads back at once but is not yet listed.
A loopback proxy in front of moto leaves the newest generation out of every listing while
reads of its objects answer as usual."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from s3_proxy import Reply, Request, S3Proxy


class LaggingListing(S3Proxy):
    """Leaves out of ListObjectsV2 replies every key and common prefix holding `hidden`."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.hidden: str | None = None

    def forwarded(self, request: Request, reply: Reply) -> Reply | None:
        if self.hidden is None or request.command != "GET" or "list-type" not in request.query:
            return reply
        hidden = re.escape(self.hidden.encode())
        data = re.sub(
            rb"<Contents>(?:(?!</Contents>).)*?%s.*?</Contents>" % hidden, b"", reply.data
        )
        data = re.sub(
            rb"<CommonPrefixes>(?:(?!</CommonPrefixes>).)*?%s.*?</CommonPrefixes>" % hidden,
            b"",
            data,
        )
        return Reply(reply.status, reply.headers, data)


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[LaggingListing]:
    with LaggingListing(moto_endpoint) as server:
        yield server


def _weights(step: int) -> Any:
    return lambda gen: gen.write_bytes("model.bin", f"weights-{step}".encode())


def test_a_save_whose_files_are_not_listed_yet_commits(proxy: LaggingListing, bucket: str) -> None:
    """The commit lists the generation to check every file is there (another job's retention
    may have deleted it): a file not listed yet failed the save (`model.bin is missing from
    storage`) and deleted it, every save on such a service. A file missing from the listing
    is looked up by itself before it counts as missing."""
    url = f"s3://{bucket}/run"
    store = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url))
    proxy.hidden = "step-000000000005/model.bin"
    assert store.flush(5, _weights(5)).generation.step == 5
    latest = store.latest(verify="checksums")  # its files not listed yet either
    assert latest is not None and latest.step == 5
    store.close()
    with CheckpointStore(url) as direct:
        assert direct.verify(5, checksums=True).ok


def test_a_resume_finds_the_newest_generation_before_it_is_listed(
    proxy: LaggingListing, bucket: str
) -> None:
    """A job restarted right after its predecessor's final save listed the store without that
    generation and resumed from the one before: the steps between were trained again (and
    the final save was the one the terminate paid for). `latest()` now also checks the step
    LATEST names when the listing leaves it out (still verifying it, never trusting it)."""
    url = f"s3://{bucket}/run"
    with CheckpointStore(url) as direct:
        for step in (10, 20):
            direct.flush(step, _weights(step))
    proxy.hidden = "step-000000000020/"
    store = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url))
    assert store.steps() == [10]  # the lag itself
    latest = store.latest()
    assert latest is not None and latest.step == 20
    assert latest.read_bytes("model.bin") == b"weights-20"
    store.close()
