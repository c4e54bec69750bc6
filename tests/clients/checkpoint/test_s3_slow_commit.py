"""A CompleteMultipartUpload slower than the read timeout (S3 may take minutes for a large
object; moto took over two for 1 GiB on a loaded machine) must not be retried: the retries
of a commit still in progress fail, and the upload never completes (issue 20's 1 GiB run)."""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint import s3 as s3_backend

DELAY = 2.5  # the commit's answer comes this late; the ordinary read timeout is 1 s


class SlowCommitProxy(ThreadingHTTPServer):
    """Loopback HTTP proxy to moto that holds every CompleteMultipartUpload for DELAY s."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.commits = 0
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(BaseHTTPRequestHandler):
    server: SlowCommitProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.command == "POST" and "uploadId=" in self.path:
            self.server.commits += 1
            time.sleep(DELAY)
        upstream = http.client.HTTPConnection(
            self.server.upstream.hostname, self.server.upstream.port, timeout=60
        )
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        try:
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up on this request (its read timeout)
        upstream.close()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[SlowCommitProxy]:
    server = SlowCommitProxy(moto_endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


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
