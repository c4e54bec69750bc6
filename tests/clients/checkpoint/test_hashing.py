"""Checksums while writing: block-wise SHA-256 on a thread pool, whatever the write sizes and
whether the caller reuses its buffer."""

from __future__ import annotations

import hashlib
import io
import os
import random

import pytest
from forewarn.clients.checkpoint.hashing import (
    BLOCK,
    StreamHasher,
    digest_data,
    digest_stream,
)


def reference(data: bytes) -> str:
    if len(data) <= BLOCK:
        return "sha256:" + hashlib.sha256(data).hexdigest()
    digests = b"".join(
        hashlib.sha256(data[i : i + BLOCK]).digest() for i in range(0, len(data), BLOCK)
    )
    return "sha256-blocks-16m:" + hashlib.sha256(digests).hexdigest()


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 12345])
@pytest.mark.parametrize("kind", ["bytes", "view", "reused bytearray"])
def test_checksum_does_not_depend_on_how_bytes_arrive(size: int, kind: str) -> None:
    data = os.urandom(size)
    chooser = random.Random(size)
    hasher = StreamHasher()
    written: list[bytes] = []
    buffer = bytearray()
    start = 0
    while start < size:
        length = chooser.choice([1, 100, 5000, 1 << 20, 7 << 20, BLOCK, 20 << 20])
        chunk = data[start : start + length]
        if kind == "bytes":
            hasher.feed(chunk, lambda piece: written.append(bytes(piece)))
        elif kind == "view":
            view = memoryview(data)[start : start + length]
            hasher.feed(view, lambda piece: written.append(bytes(piece)))
        else:
            buffer[:] = chunk
            hasher.feed(buffer, lambda piece: written.append(bytes(piece)))
            buffer[:] = b"\xff" * len(buffer)  # the caller reuses its buffer at once
        start += length
    assert b"".join(written) == data
    assert hasher.size == size
    assert hasher.hexdigest() == reference(data)
    assert digest_stream(io.BytesIO(data), like=reference(data)) == (size, reference(data))
    assert digest_data(data, reference(data)) == reference(data)


def test_a_small_file_has_the_plain_sha256() -> None:
    hasher = StreamHasher()
    hasher.feed(b"hello", lambda piece: None)
    assert hasher.hexdigest() == "sha256:" + hashlib.sha256(b"hello").hexdigest()


def test_the_writer_hashes_what_the_pool_has_not_begun(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from forewarn.clients.checkpoint import hashing

    # The pool's only worker is stuck: every block must be hashed by the writer's thread,
    # once, and neither a reused buffer nor the final digest may wait for the pool.
    busy = ThreadPoolExecutor(1)
    gate = threading.Event()
    busy.submit(gate.wait)
    monkeypatch.setattr(hashing, "hash_pool", lambda: busy)
    try:
        data = os.urandom(3 * BLOCK + 12345)
        hasher = StreamHasher()
        buffer = bytearray(data[: 2 * BLOCK])
        hasher.feed(buffer, lambda piece: None)  # mutable: returns once its blocks are hashed
        buffer[:] = b"\0" * len(buffer)
        hasher.feed(data[2 * BLOCK :], lambda piece: None)
        hasher.help()
        assert hasher.hexdigest() == reference(data)
    finally:
        gate.set()
        busy.shutdown()
