"""Checksums computed while the bytes are written, on several cores.

The hash is SHA-256: with the SHA extensions that most x86-64 and ARMv8 servers have,
OpenSSL's SHA-256 ran at 1.7 GB/s on one core of the development machine, against 0.9 GB/s
for BLAKE2b and 0.7 GB/s for MD5. One core hashing at 1.7 GB/s can still be slower than a
fast disk, so a file is hashed in 16 MiB blocks (hashlib releases the GIL): during the writes
on a pool of one thread fewer than the cores (the writer keeps one, copying into the page cache
or a socket), and once the writes stop on the writer's thread too, while the disk or the
network finishes the transfer:

- a file of at most one block gets the plain SHA-256 of its bytes, `sha256:<hex>`
  (`sha256sum` agrees);
- a larger file gets `sha256-blocks-16m:<hex>`, the SHA-256 of the concatenated 32-byte
  SHA-256 digests of its 16 MiB blocks in order (the last block may be shorter).

The verifier accepts both, and any hashlib algorithm named as `<name>:<hex>`.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any

ALGORITHM = "sha256"
BLOCKS = "sha256-blocks-16m"
BLOCK = 16 << 20
# Bytes the hashing may hold on to beyond what the caller already holds.
_MAX_PENDING = 128 << 20
READ_CHUNK = 8 << 20

Buffer = bytes | bytearray | memoryview

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _reset_after_fork() -> None:
    # A forked child has none of the parent's threads: an inherited pool would never run.
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def hash_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                # One core stays with the writer (copying into the page cache or a socket);
                # the writer itself hashes whatever is left once it stops writing.
                workers = max(1, min(8, (os.cpu_count() or 2) - 1))
                _pool = ThreadPoolExecutor(workers, thread_name_prefix="forewarn-hash")
    return _pool


def digest_bytes(data: Buffer) -> str:
    return f"{ALGORITHM}:{hashlib.new(ALGORITHM, data).hexdigest()}"


def _hash_pieces(pieces: Sequence[Buffer]) -> bytes:
    hasher = hashlib.sha256()
    for piece in pieces:
        hasher.update(piece)
    return hasher.digest()


def _combine(digests: list[bytes]) -> str:
    if len(digests) == 1:
        return f"{ALGORITHM}:{digests[0].hex()}"
    return f"{BLOCKS}:{hashlib.sha256(b''.join(digests)).hexdigest()}"


def new_hash(checksum: str) -> Any:
    """A fresh hash object for the plain algorithm a stored checksum names."""
    algorithm = checksum.split(":", 1)[0]
    if algorithm not in hashlib.algorithms_available:
        raise ValueError(f"unknown checksum algorithm {algorithm!r} in {checksum!r}")
    return hashlib.new(algorithm)


def digest_stream(
    stream: IO[bytes],
    like: str = ALGORITHM + ":",
    write: Callable[[Buffer], object] | None = None,
) -> tuple[int, str]:
    """Read `stream` to its end: (size, checksum in the scheme `like` names). `write`, when
    given, gets every chunk too (a copy hashed while it is made)."""
    sink = write or _ignore
    if like.split(":", 1)[0] == BLOCKS:
        hasher = StreamHasher()
        while True:
            block = stream.read(BLOCK)
            if not block:
                break
            hasher.feed(block, sink)
        return hasher.size, hasher.hexdigest()
    plain = new_hash(like)
    size = 0
    while True:
        chunk = stream.read(READ_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        plain.update(chunk)
        sink(chunk)
    return size, f"{plain.name}:{plain.hexdigest()}"


def digest_data(data: Buffer, like: str) -> str:
    """The checksum of bytes in memory, in the scheme `like` names."""
    if like.split(":", 1)[0] == BLOCKS:
        hasher = StreamHasher()
        hasher.feed(data, _ignore)
        return hasher.hexdigest()
    plain = new_hash(like)
    plain.update(data)
    return f"{plain.name}:{plain.hexdigest()}"


class _Block:
    """One block's hashing, run once by whichever thread claims it first: a pool worker, or
    the writer when it would otherwise wait for the pool."""

    __slots__ = ("_claim", "_pieces", "future")

    def __init__(self, pieces: list[Buffer]) -> None:
        self._pieces: Sequence[Buffer] = pieces
        self._claim = threading.Lock()
        self.future: Future[bytes] = Future()

    def run(self) -> None:
        if not self._claim.acquire(blocking=False):
            return
        try:
            self.future.set_result(_hash_pieces(self._pieces))
        except BaseException as exc:
            self.future.set_exception(exc)
        finally:
            self._pieces = ()  # the caller may reuse or free its buffers

    def result(self) -> bytes:
        self.run()
        return self.future.result()


def _ignore(_data: Buffer) -> None:
    return None


def _immutable(data: Buffer) -> bool:
    """Whether nobody can change these bytes after the call returns (so hashing may lag)."""
    if isinstance(data, memoryview):
        return data.readonly and isinstance(data.obj, bytes)
    return isinstance(data, bytes)


class StreamHasher:
    """Hashes a byte stream in 16 MiB blocks on the shared pool while the caller writes it."""

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._pieces: list[Buffer] = []
        self._piece_bytes = 0
        self._pending: deque[tuple[_Block, int]] = deque()
        self._pending_bytes = 0
        self._last_owner: object = None
        self.size = 0

    def feed(self, data: Buffer, write: Callable[[Buffer], object]) -> None:
        """Hash `data` and call `write(data)`, the two at once.

        Returns once the write is done and, unless `data` is immutable (`bytes` or a view of
        them), once its bytes are hashed or copied, so the caller may reuse the buffer.
        """
        view = memoryview(data).cast("B")
        self.size += len(view)
        immutable = _immutable(data)
        must_wait: list[_Block] = []
        while len(view):
            room = BLOCK - self._piece_bytes
            piece, view = view[:room], view[room:]
            whole = len(piece) == BLOCK
            if not immutable and not whole:
                piece = memoryview(bytes(piece))  # kept past this call: copy it
            self._pieces.append(piece)
            self._piece_bytes += len(piece)
            if self._piece_bytes == BLOCK:
                block = self._submit()
                if not immutable and whole:
                    must_wait.append(block)
        write(data)
        for block in must_wait:
            block.result()

    def hexdigest(self) -> str:
        """The checksum of everything fed; the calling thread hashes what no worker has begun."""
        if self._pieces or not self._blocks:
            if self._blocks:
                self._submit()
            else:
                # One block or less: no thread handoff.
                self._blocks.append(_Block(self._pieces))
                self._pieces = []
        digests = [block.result() for block in self._blocks]
        self.close()
        return _combine(digests)

    def help(self) -> None:
        """Hash, on the calling thread, the queued blocks no worker has begun."""
        for block in self._blocks:
            block.run()

    def close(self) -> None:
        self._pieces = []
        self._pending.clear()
        self._pending_bytes = 0
        self._last_owner = None

    def _submit(self) -> _Block:
        pieces, self._pieces, self._piece_bytes = self._pieces, [], 0
        pinned = 0
        for piece in pieces:
            owner = piece.obj if isinstance(piece, memoryview) else piece
            # Slices of a buffer the caller holds anyway pin nothing new after the first.
            if owner is not self._last_owner:
                pinned += len(piece)
                self._last_owner = owner
        while self._pending and self._pending_bytes + pinned > _MAX_PENDING:
            oldest, size = self._pending.popleft()
            oldest.result()
            self._pending_bytes -= size
        block = _Block(pieces)
        hash_pool().submit(block.run)
        self._blocks.append(block)
        self._pending.append((block, pinned))
        self._pending_bytes += pinned
        return block
