"""A CompleteMultipartUpload that went through but whose answer was lost (a reset
connection): botocore retries it, and MinIO answers the retry NoSuchUpload where S3 answers
success. The file is there; the save must not fail, or discard it. A loopback proxy in front
of moto plays MinIO (moto itself answers the retry with success)."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options

NO_SUCH_UPLOAD = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The '
    b"specified multipart upload does not exist. The upload ID may be invalid, or the upload "
    b"may have been aborted or completed.</Message></Error>"
)


class LostAnswerProxy(ThreadingHTTPServer):
    """Forwards to moto. The first CompleteMultipartUpload of each upload goes through but
    its connection is reset instead of answered; any later one is answered NoSuchUpload."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.completed: set[str] = set()
        self.lost = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: LostAnswerProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upload = parse_qs(urlsplit(self.path).query).get("uploadId", [""])[0]
        commit = self.command == "POST" and bool(upload)
        if commit and upload in self.server.completed:
            self._reply(404, [("Content-Type", "application/xml")], NO_SUCH_UPLOAD)
            return
        upstream = http.client.HTTPConnection(
            self.server.upstream.hostname, self.server.upstream.port, timeout=60
        )
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        upstream.close()
        if commit:
            self.server.completed.add(upload)
            self.server.lost += 1
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            self.close_connection = True
            return
        self._reply(reply.status, reply.getheaders(), data)

    def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        head = self.command == "HEAD"  # its Content-Length is the object's
        for key, value in headers:
            if key.lower() not in ("transfer-encoding", "connection") and (
                head or key.lower() != "content-length"
            ):
                self.send_header(key, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[LostAnswerProxy]:
    server = LostAnswerProxy(moto_endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


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
