"""Two jobs on one prefix: the next job (a replacement pod, a restarted unit) starts while the
one before it is still writing its final save. The new job's first save aborts dead uploads,
and must leave that one alone. moto stamps every upload `Initiated` 2010-11-10; a loopback
proxy in front of it plays AWS, answering ListMultipartUploads with the time each upload was
really created (the test backdates one to play a writer killed long ago)."""

from __future__ import annotations

import http.client
import os
import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options


class InitiatedProxy(ThreadingHTTPServer):
    """Forwards to moto; records when each multipart upload was created and reports that
    time (or the one set in `initiated`) as the upload's `Initiated`."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.initiated: dict[str, datetime] = {}
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: InitiatedProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
        upstream = http.client.HTTPConnection(
            self.server.upstream.hostname, self.server.upstream.port, timeout=60
        )
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        reply = upstream.getresponse()
        data = reply.read()
        upstream.close()
        if self.command == "POST" and "uploads" in query:
            found = re.search(rb"<UploadId>(.*?)</UploadId>", data)
            if found:
                self.server.initiated[found.group(1).decode()] = datetime.now(timezone.utc)
        elif self.command == "GET" and "uploads" in query:
            data = re.sub(rb"<Upload>.*?</Upload>", self._stamp, data, flags=re.DOTALL)
        self._reply(reply.status, reply.getheaders(), data)

    def _stamp(self, match: re.Match[bytes]) -> bytes:
        upload = match.group(0)
        found = re.search(rb"<UploadId>(.*?)</UploadId>", upload)
        when = self.server.initiated.get(found.group(1).decode()) if found else None
        if when is None:
            return upload
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return re.sub(
            rb"<Initiated>.*?</Initiated>", f"<Initiated>{stamp}</Initiated>".encode(), upload
        )

    def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)  # sends this server's own Date
        for key, value in headers:
            if key.lower() not in (
                "transfer-encoding",
                "content-length",
                "connection",
                "date",
                "server",
            ):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[InitiatedProxy]:
    server = InitiatedProxy(moto_endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def uploads(client: Any, bucket: str) -> list[str]:
    reply = client.list_multipart_uploads(Bucket=bucket)
    return sorted(upload["Key"] for upload in reply.get("Uploads", []))


def test_the_next_jobs_first_save_spares_the_previous_jobs_final_save(
    proxy: InitiatedProxy, bucket: str
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    url = f"s3://{bucket}/run"
    options = S3Options(endpoint_url=proxy.url, part_size=5 << 20)
    old_job = CheckpointStore(url, s3=options)
    old_job.flush(90, lambda gen: gen.write_bytes("model.bin", b"weights-90"))
    # Left two hours ago by a writer killed mid-upload: dead.
    dead = client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000050/model.bin")
    proxy.initiated[dead["UploadId"]] -= timedelta(hours=2)
    # The old job's final save, still uploading (one part sent) when the next job starts.
    final = old_job.save(100)
    stream = final.open("model.bin")
    data = os.urandom(6 << 20)
    stream.write(data)
    assert uploads(client, bucket) == [
        "run/step-000000000050/model.bin",
        "run/step-000000000100/model.bin",
    ]

    new_job = CheckpointStore(url, s3=options)
    new_job.flush(95, lambda gen: gen.write_bytes("model.bin", b"weights-95"))
    assert uploads(client, bucket) == ["run/step-000000000100/model.bin"]

    stream.write(b"the end")
    stream.close()
    final.__exit__(None, None, None)
    assert final.committed is not None
    got = new_job.get(100, verify="checksums").read_bytes("model.bin")
    assert got == data + b"the end"


def test_a_single_rank_save_aborts_its_own_steps_upload_however_recent(
    proxy: InitiatedProxy, bucket: str
) -> None:
    """A job killed while uploading step 7 and resumed at once saves 7 again: that upload is
    a minute old, and dead (a single rank is the step's only writer)."""
    import boto3

    client = boto3.client("s3", endpoint_url=proxy.url)
    client.create_multipart_upload(Bucket=bucket, Key="run/step-000000000007/model.bin")
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    store.flush(7, lambda gen: gen.write_bytes("model.bin", b"weights-7"))
    assert uploads(client, bucket) == []
    assert store.get(7, verify="checksums").read_bytes("model.bin") == b"weights-7"
