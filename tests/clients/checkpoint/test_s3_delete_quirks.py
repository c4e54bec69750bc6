"""Deleting a generation on S3-compatible services whose multi-object delete differs from
AWS's: GCS's S3 interoperability has none (400 NotImplemented), and any service answers keys
it could not delete inside a 200 reply. A loopback proxy in front of moto plays the service."""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, S3Options

NOT_IMPLEMENTED = (
    b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NotImplemented</Code><Message>A header "
    b"or query you provided requested a function that is not implemented.</Message>"
    b"<Details>POST ?delete is not implemented for objects.</Details></Error>"
)


class DeleteQuirksProxy(ThreadingHTTPServer):
    """Forwards to moto; answers DeleteObjects (POST ?delete) as `mode` says: "gcs" (400
    NotImplemented) or "refused" (200, every key in Errors as AccessDenied)."""

    daemon_threads = True

    def __init__(self, upstream: str, mode: str) -> None:
        self.upstream = urlsplit(upstream)
        self.mode = mode
        self.batch_deletes = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: DeleteQuirksProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        for key, value in headers:
            if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "POST" and urlsplit(self.path).query.startswith("delete"):
            self.server.batch_deletes += 1
            if self.server.mode == "gcs":
                self._reply(400, [("Content-Type", "application/xml")], NOT_IMPLEMENTED)
                return
            keys = re.findall(rb"<Key>(.*?)</Key>", body or b"")
            errors = b"".join(
                b"<Error><Key>%s</Key><Code>AccessDenied</Code><Message>Access Denied"
                b"</Message></Error>" % key
                for key in keys
            )
            result = b'<?xml version="1.0" encoding="UTF-8"?><DeleteResult>%s</DeleteResult>'
            self._reply(200, [("Content-Type", "application/xml")], result % errors)
            return
        upstream = http.client.HTTPConnection(
            self.server.upstream.hostname, self.server.upstream.port, timeout=60
        )
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        upstream.close()
        self._reply(reply.status, reply.getheaders(), data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


@pytest.fixture
def proxy(moto_endpoint: str, request: pytest.FixtureRequest) -> Iterator[DeleteQuirksProxy]:
    server = DeleteQuirksProxy(moto_endpoint, request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


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
