"""Deleting a generation on S3-compatible services whose multi-object delete differs from
AWS's: GCS's S3 interoperability has none (400 NotImplemented), and any service answers keys
it could not delete inside a 200 reply. A loopback proxy in front of moto plays the service."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, S3Options
from s3_proxy import XML, Reply, Request, S3Proxy

NOT_IMPLEMENTED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NotImplemented</Code><Message>A header "
    b"or query you provided requested a function that is not implemented.</Message>"
    b"<Details>POST ?delete is not implemented for objects.</Details></Error>"
)


class DeleteQuirksProxy(S3Proxy):
    """Answers DeleteObjects (POST ?delete) as `mode` says: "gcs" (400 NotImplemented) or
    "refused" (200, every key in Errors as AccessDenied)."""

    def __init__(self, upstream: str, mode: str) -> None:
        super().__init__(upstream)
        self.mode = mode
        self.batch_deletes = 0

    def answer(self, request: Request) -> Reply | None:
        if request.command != "POST" or "delete" not in request.query:
            return None
        self.batch_deletes += 1
        if self.mode == "gcs":
            return Reply(400, XML, NOT_IMPLEMENTED)
        keys = re.findall(rb"<Key>(.*?)</Key>", request.body or b"")
        errors = b"".join(
            b"<Error><Key>%s</Key><Code>AccessDenied</Code><Message>Access Denied"
            b"</Message></Error>" % key
            for key in keys
        )
        result = b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>%s</DeleteResult>'
        return Reply(200, XML, result % errors)


@pytest.fixture
def proxy(moto_endpoint: str, request: pytest.FixtureRequest) -> Iterator[DeleteQuirksProxy]:
    with DeleteQuirksProxy(moto_endpoint, request.param) as server:
        yield server


def _weights(step: int) -> Any:
    return lambda gen: gen.write_bytes("model.bin", f"weights-{step}".encode())


@pytest.mark.parametrize("proxy", ["gcs"], indirect=True)
def test_retention_and_leftovers_are_deleted_without_multi_object_delete(
    proxy: DeleteQuirksProxy, bucket: str
) -> None:
    store = CheckpointStore(f"s3://{bucket}/run", keep=1, s3=S3Options(endpoint_url=proxy.url))
    # A dead writer's leftover at the step the restarted job saves first.
    store.backend.put_small("step-000000000002/model.bin", b"half")
    for step in (2, 3, 4):
        assert store.flush(step, _weights(step)).generation.step == step
    assert store.steps() == [4]
    assert proxy.batch_deletes == 1  # asked once, then one request per object
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.read_bytes("model.bin") == b"weights-4"
    store.close()


@pytest.mark.parametrize("proxy", ["refused"], indirect=True)
def test_objects_the_service_would_not_delete_are_reported(
    proxy: DeleteQuirksProxy, bucket: str
) -> None:
    url = f"s3://{bucket}/run"
    store = CheckpointStore(url, s3=S3Options(endpoint_url=proxy.url))
    for step in (1, 2):
        store.flush(step, _weights(step))
    pruning = CheckpointStore(url, keep=1, s3=S3Options(endpoint_url=proxy.url))
    with pytest.raises(CheckpointError, match=r"run/step-000000000001/\S+: AccessDenied"):
        pruning.prune()
    store.close()
    pruning.close()
