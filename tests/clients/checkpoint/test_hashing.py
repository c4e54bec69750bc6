"""Checksums while writing: block-wise SHA-256 on a thread pool, whatever the write sizes and
whether the caller reuses its buffer."""

from __future__ import annotations

import hashlib
import io
import os
import random
from typing import Any

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


def test_stable_memory_covers_only_writes_inside_a_range() -> None:
    import ctypes

    from forewarn.clients.checkpoint.hashing import StableMemory, buffer_address

    owner = bytearray(4 * StableMemory.MIN_BYTES)
    start = ctypes.addressof(ctypes.c_char.from_buffer(owner))
    view = memoryview(owner)
    # Read-only views (what torch hands a stream) have an address too.
    assert buffer_address(view.toreadonly()[100:]) == start + 100
    stable = StableMemory()
    assert not stable.covers(view)
    stable.add(start, len(owner), owner)
    assert stable.covers(view)
    assert stable.covers(view[StableMemory.MIN_BYTES :])
    assert not stable.covers(view[: StableMemory.MIN_BYTES - 1])  # small: copied anyway
    assert not stable.covers(bytes(view))  # the same bytes elsewhere
    other = bytearray(2 * StableMemory.MIN_BYTES)
    assert not stable.covers(other)
    stable.clear()
    assert not stable.covers(view)


@pytest.mark.parametrize("size", [BLOCK - 1, BLOCK + 1, 3 * BLOCK + 12345])
def test_stable_writes_are_hashed_in_place_after_the_write_returns(
    monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from forewarn.clients.checkpoint import hashing

    # The pool's only worker is stuck: a stable write must return without any block hashed
    # and nothing copied; the digest, taken while the bytes are still unchanged, is right.
    busy = ThreadPoolExecutor(1)
    gate = threading.Event()
    busy.submit(gate.wait)
    monkeypatch.setattr(hashing, "hash_pool", lambda: busy)
    copies: list[int] = []
    real_bytes = bytes

    class Counting(bytes):
        def __new__(cls, source: Any = b"") -> Any:
            copies.append(len(memoryview(source)))
            return real_bytes(source)

    monkeypatch.setattr(hashing, "bytes", Counting, raising=False)
    try:
        data = bytearray(os.urandom(size))
        hasher = StreamHasher()
        view = memoryview(data)
        hasher.feed(view[:12345], lambda piece: None, stable=True)
        hasher.feed(view[12345:], lambda piece: None, stable=True)
        assert copies == []
        assert all(not block.future.done() for block in hasher._blocks)
        assert hasher.hexdigest() == reference(bytes(data))
    finally:
        gate.set()
        busy.shutdown()
