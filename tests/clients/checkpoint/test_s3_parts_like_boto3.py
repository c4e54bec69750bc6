"""The store's multipart upload on the wire, pinned against s3transfer's (boto3's
`upload_fileobj`) for the same object through the same client configuration: the parts'
sizes and count, each part's checksum headers and their values (CRC32 when the store sends
checksums, none when it does not), and the complete call's body. Recorded by a proxy in front
of the moto server; nothing pinned them, so a change in how the store cut or signed its parts
(or in botocore's defaults it follows) went unseen until a service refused it. Past
PARTS_PER_SIZE parts the store's parts grow (s3transfer's stay one size): not at this size."""

from __future__ import annotations

import io
import threading
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.s3 import DEFAULT_PART
from s3_proxy import Reply, Request, S3Proxy
from support import requires

pytestmark = requires("boto3")

# Three full parts of the default size and a short last one: s3transfer's default chunk size
# is the store's default part size, so both cut the same.
SIZE = 3 * DEFAULT_PART + 12345


class Recorder(S3Proxy):
    """Forwards everything; records the multipart requests under `prefix` (whose key path
    names which upload made them)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def answer(self, request: Request) -> Reply | None:
        with self._lock:
            self.requests.append(request)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[Recorder]:
    with Recorder(moto_endpoint) as server:
        yield server


def _headers(request: Request) -> dict[str, str]:
    return {key.lower(): value for key, value in request.headers.items()}


def _checksum_headers(request: Request) -> dict[str, str]:
    """The headers that say or carry a checksum, and how the body is framed."""
    return {
        key: value
        for key, value in _headers(request).items()
        if key.startswith(("x-amz-checksum", "x-amz-sdk-checksum", "x-amz-trailer"))
        or key in ("content-md5", "content-encoding", "x-amz-decoded-content-length")
    }


def _upload(proxy: Recorder, key_part: str) -> dict[str, Any]:
    """The multipart upload of the key holding `key_part`: its create's checksum headers,
    each part's (number, length, checksum headers), and the complete call's parts."""
    mine = [r for r in proxy.requests if key_part in r.path.split("?")[0]]
    creates = [r for r in mine if r.command == "POST" and "uploads" in r.query]
    parts = [r for r in mine if r.command == "PUT" and "partNumber" in r.query]
    completes = [r for r in mine if r.command == "POST" and "uploadId" in r.query]
    assert len(creates) == 1 and len(completes) == 1, [(r.command, r.path) for r in mine]
    by_number = sorted(parts, key=lambda r: int(r.query["partNumber"][0]))
    body = completes[0].body or b""
    tree = ElementTree.fromstring(body)
    complete = [
        {child.tag.split("}")[-1]: (child.text or "") for child in part}
        for part in tree
        if part.tag.split("}")[-1] == "Part"
    ]
    return {
        "create": _checksum_headers(creates[0]),
        "parts": [
            (
                int(r.query["partNumber"][0]),
                len(r.body or b""),
                _checksum_headers(r),
            )
            for r in by_number
        ],
        "complete": complete,
        "complete headers": {
            k: v
            for k, v in _checksum_headers(completes[0]).items()
            if k not in ("content-md5", "x-amz-checksum-crc32")  # of its own body
        },
    }


@pytest.mark.parametrize("checksums", [True, False], ids=["crc32", "no checksums"])
def test_the_stores_parts_are_s3transfers_parts_on_the_wire(
    proxy: Recorder, bucket: str, checksums: bool
) -> None:
    from boto3.s3.transfer import TransferConfig

    data = bytes(range(251)) * (SIZE // 251 + 1)
    data = data[:SIZE]
    store = CheckpointStore(
        f"s3://{bucket}/store-run",
        s3=S3Options(endpoint_url=proxy.url, upload_checksums=checksums),
    )
    with store.save(1) as gen:
        gen.write_bytes("model.bin", data)
    # boto3 through the store's own client configuration (checksums as the store's).
    client = store._backend.client  # type: ignore[attr-defined]
    client.upload_fileobj(io.BytesIO(data), bucket, "boto3-run/model.bin", Config=TransferConfig())
    ours, theirs = _upload(proxy, "store-run"), _upload(proxy, "boto3-run")
    assert [p[1] for p in ours["parts"]] == [DEFAULT_PART] * 3 + [12345]
    assert ours == theirs
    crc = [p[2].get("x-amz-checksum-crc32") for p in ours["parts"]]
    assert all(crc) if checksums else not any(crc), ours["parts"]
    assert all(("ChecksumCRC32" in part) == checksums for part in ours["complete"]), ours
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.read_bytes("model.bin") == data
    store.close()
