"""Fixtures: a real S3-compatible server (moto in server mode) on loopback, and a store on
local disk or on that server, so most tests run against both backends."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def s3_environment(endpoint: str) -> dict[str, str]:
    """Dummy credentials and the loopback endpoint: nothing can reach real AWS."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "NO_PROXY": "*",
    }


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = Path(sys.executable).with_name("moto_server")
    command = [str(binary)] if binary.exists() else [sys.executable, "-m", "moto.server"]
    process = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"http://127.0.0.1:{port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("moto_server did not start")


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    process, endpoint = start_moto()
    try:
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = s3_environment(moto_endpoint)
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
