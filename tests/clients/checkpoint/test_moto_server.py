"""The loopback S3 server of `forewarn.clients.checkpoint.testing`: moto, serving as it does,
without listing its own package folder at every request."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import testing
from support import eventually, requires

# moto's server modules are imported by the one test that looks into them: imported here, at
# module level, every pytest worker loaded them while collecting (~0.15 CPU-s each, eight
# workers a run) whether or not it ran a test of this file. Not `requires("moto.server")`:
# finding a submodule imports its package.
pytestmark = requires("moto")


def test_the_server_looks_moto_s_services_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_backends = pytest.importorskip("moto.backends")
    moto_server_module = pytest.importorskip("moto.server")

    # moto's server asked `list_of_moto_modules()` twice a request, which lists and stats
    # moto's package folder (~170 entries): a third of the server's CPU for each S3 request
    # (2.3 ms of CPU a request with it, 1.6 without; the suite's S3 tests send thousands).
    original = moto_backends.list_of_moto_modules
    monkeypatch.setattr(moto_backends, "list_of_moto_modules", original)
    served: list[Any] = []
    monkeypatch.setattr(moto_server_module, "main", served.append)

    testing.serve_moto(["-H", "127.0.0.1", "-p", "1"])
    assert served == [["-H", "127.0.0.1", "-p", "1"]]

    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        listed.append(str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    names = list(moto_backends.list_of_moto_modules())
    assert list(moto_backends.list_of_moto_modules()) == names
    assert listed == []
    monkeypatch.setattr(os, "listdir", real_listdir)
    # The same services as moto finds, "s3" among them (how the server dispatches a signed
    # S3 request).
    assert names == list(original()) and "s3" in names


def test_the_started_server_answers_s3(s3_env: dict[str, str]) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    client.create_bucket(Bucket="moto-server-check")
    client.put_object(Bucket="moto-server-check", Key="a/b", Body=b"data")
    listed = client.list_objects_v2(Bucket="moto-server-check", Prefix="a/")
    assert [entry["Key"] for entry in listed["Contents"]] == ["a/b"]
    assert client.get_object(Bucket="moto-server-check", Key="a/b")["Body"].read() == b"data"


_PARENT = """
import time
from forewarn.clients.checkpoint.testing import moto_server
with moto_server() as endpoint:
    print(endpoint, flush=True)
    time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_server_ends_when_the_process_that_started_it_dies() -> None:
    """A run that ended in an INTERNALERROR never ran the session fixture's finalizer, and
    its moto server ran on after pytest had exited. Killed, the starting process leaves no
    server behind."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True)
    server: int | None = None
    try:
        assert parent.stdout is not None
        endpoint = parent.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), endpoint
        children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
        (server,) = map(int, children)
        assert _running(server)
        parent.kill()
        parent.wait()
        eventually(lambda: not _running(server), 10, "the moto server's exit")
        port = int(endpoint.rsplit(":", 1)[1])
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        parent.kill()
        parent.wait()
        if server is not None and _running(server):
            os.kill(server, signal.SIGKILL)


def test_a_port_taken_between_a_pick_and_the_servers_bind_is_not_taken_for_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server's port was a number picked and let go before moto bound it: another
    server listening there in between was yielded as the S3 endpoint (any connect counted as
    started), and the tests' buckets went to it. Whatever happens to a picked number, the
    endpoint is the server's own."""
    import boto3

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(8)
        other = taken.getsockname()[1]
        monkeypatch.setattr(testing, "free_port", lambda: other)
        with testing.moto_server() as endpoint:
            assert endpoint != f"http://127.0.0.1:{other}"
            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                region_name="us-east-1",
            )
            client.create_bucket(Bucket="its-own-port")
            assert [b["Name"] for b in client.list_buckets()["Buckets"]] == ["its-own-port"]
