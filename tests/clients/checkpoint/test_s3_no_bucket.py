"""A store on an S3 bucket that does not exist: every read raises the store's own error naming
the bucket and the prefix, and `forewarn checkpoint` says so in one line, exit 3 (the store
could not be read). `latest()` raised botocore's `NoSuchBucket`, "The specified bucket does
not exist", naming neither."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointError, CheckpointStore, StoreNotFoundError


@pytest.fixture
def missing_bucket(s3_env: dict[str, str]) -> str:
    return f"missing-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(
    "read",
    [
        lambda store: store.latest(),
        lambda store: store.generations(),
        lambda store: store.get(5),
        lambda store: store.restore(lambda generation: None),
    ],
    ids=["latest", "generations", "get", "restore"],
)
def test_each_read_of_a_missing_bucket_names_the_bucket_and_prefix(
    missing_bucket: str, read: Callable[[CheckpointStore], Any]
) -> None:
    store = CheckpointStore(f"s3://{missing_bucket}/runs/job-1")
    try:
        with pytest.raises(StoreNotFoundError) as refused:
            read(store)
    finally:
        store.close()
    assert isinstance(refused.value, CheckpointError)
    message = str(refused.value)
    assert f"the bucket {missing_bucket!r} does not exist" in message
    assert "'runs/job-1'" in message


@pytest.mark.parametrize("command", ["ls", "verify", "get"])
def test_the_command_names_the_missing_bucket_and_exits_3(
    missing_bucket: str, command: str, tmp_path: Path
) -> None:
    url = f"s3://{missing_bucket}/runs/job-1"
    argv = [url, str(tmp_path / "dest")] if command == "get" else [url]
    result = subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "checkpoint", command, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"the bucket {missing_bucket!r} does not exist" in result.stderr
    assert "'runs/job-1'" in result.stderr
