"""Fixtures: a real S3-compatible server (moto in server mode) on loopback, and a store on
local disk or on that server, so most tests run against both backends."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import loopback_s3_env, moto_server


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = loopback_s3_env(moto_endpoint)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def bucket(s3_env: dict[str, str]) -> str:
    import boto3

    name = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["local", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    bucket_name = request.getfixturevalue("bucket")
    return f"s3://{bucket_name}/runs/job-1"


@pytest.fixture
def make_store(store_url: str) -> Iterator[Any]:
    stores: list[CheckpointStore] = []

    def make(**options: Any) -> CheckpointStore:
        store = CheckpointStore(store_url, **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def silent_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Accepts every connection, reads nothing and answers nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except (TimeoutError, OSError):
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for key, value in loopback_s3_env(endpoint).items():
        monkeypatch.setenv(key, value)
    try:
        yield endpoint
    finally:
        stop.set()
        acceptor.join()
        for sock in held:
            sock.close()
        listener.close()
