"""Uploads without `Expect: 100-continue`. botocore adds it to every request whose body is a
stream, and the store's part and small-file bodies are streams (to count their bytes as they
move): before each body it waits up to 1 s for the service's `100 Continue`. A service or
load balancer that does not send one cost a second per part (a 64 MiB commit of 5 MiB parts
took 7-8 s instead of 1-1.4 s through such a proxy, moto behind it), and one that refuses the
expectation on an empty body (400, as S3-compatible servers built on Drogon did) failed every
save holding an empty file. The bodies were bytes, with no such header, before they were
streamed; the parts are retried whole anyway, so the body the expectation would spare on a
refusal is one part's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.s3 import MIN_PART
from s3_proxy import XML, Reply, Request, S3Proxy


class IgnoresTheExpectation(S3Proxy):
    """Never answers `100 Continue`; refuses `Expect: 100-continue` on an empty body (400);
    records which requests said it."""

    continues = False

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.expecting: list[str] = []

    def answer(self, request: Request) -> Reply | None:
        headers = {key.lower(): value for key, value in request.headers.items()}
        if headers.get("expect", "").lower() == "100-continue":
            self.expecting.append(f"{request.command} {request.path}")
            if headers.get("content-length") == "0":
                return Reply(400, XML, b"<Error><Code>BadRequest</Code></Error>")
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[IgnoresTheExpectation]:
    with IgnoresTheExpectation(moto_endpoint) as server:
        yield server


def test_parts_and_files_go_up_without_waiting_for_a_100_continue(
    proxy: IgnoresTheExpectation, bucket: str
) -> None:
    store = CheckpointStore(
        f"s3://{bucket}/run",
        s3=S3Options(endpoint_url=proxy.url, part_size=MIN_PART, concurrency=1),
    )
    model = bytes(range(256)) * ((2 * MIN_PART + 1) // 256 + 1)  # three parts
    with store.save(1) as gen:
        gen.write_bytes("model.bin", model)
        gen.write_bytes("config.json", b"{}")
        gen.write_bytes("empty.txt", b"")
    assert proxy.expecting == []
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1
    assert latest.read_bytes("model.bin") == model and latest.read_bytes("empty.txt") == b""
    store.close()
