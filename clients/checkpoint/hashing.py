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

A write returns once its bytes are hashed or copied, since the caller may reuse its buffer
(io's contract), unless the bytes lie in memory the writer was told stays unchanged until
the file is closed (`StableMemory`: the snapshot buffers of a background save, the tensors a
DCP save writes): those are hashed in place, while the writer goes on, and the hashing catches
up at the latest when the file is closed.
"""

from __future__ import annotations

import bisect
import ctypes
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


def submit(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """`pool.submit(fn, *args)`, or `fn` run on the calling thread once the interpreter is
    shutting down: concurrent.futures then refuses new work ("cannot schedule new futures
    after shutdown") before the exit waits for a background save still being written (see
    `BackgroundSaver.finish_in_flight`), and that save, the last state of the run, failed
    there."""
    try:
        return pool.submit(fn, *args)
    except RuntimeError as refused:
        if "shutdown" not in str(refused):
            raise
    future: Future[Any] = Future()
    try:
        future.set_result(fn(*args))
    except BaseException as error:
        future.set_exception(error)
    return future


class _PyBuffer(ctypes.Structure):
    # CPython's Py_buffer (part of the stable ABI since 3.11); only `buf` is read.
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


def buffer_address(data: Buffer) -> int | None:
    """Where a contiguous buffer's bytes start in memory (read-only ones too), or None when
    that cannot be told (a non-CPython interpreter)."""
    try:
        api = ctypes.pythonapi
        view = _PyBuffer()
        if api.PyObject_GetBuffer(ctypes.py_object(data), ctypes.byref(view), 0) != 0:
            return None
        try:
            return view.buf or 0
        finally:
            api.PyBuffer_Release(ctypes.byref(view))
    except (AttributeError, BufferError, TypeError, ValueError, OSError):
        return None


class StableMemory:
    """Memory ranges that stay allocated and unchanged until the files being written from
    them are closed, with a reference to each range's owner (a tensor, a storage) that keeps
    it allocated. A writer told about them hashes writes from inside a range in place,
    lagging behind the write, instead of waiting for (or copying) them before returning."""

    # Writes smaller than this are copied anyway: they cost less than looking them up.
    MIN_BYTES = 64 << 10

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: dict[int, int] = {}
        self._owners: list[object] = []
        self._lock = threading.Lock()

    def add(self, address: int, size: int, owner: object) -> None:
        """`size` bytes at `address`, kept allocated by `owner`, stay unchanged from now until
        the writes are closed."""
        if size <= 0 or address <= 0:
            return
        with self._lock:
            self._owners.append(owner)
            if self._ends.get(address, 0) >= address + size:
                return
            if address not in self._ends:
                bisect.insort(self._starts, address)
            self._ends[address] = address + size

    def covers(self, data: Buffer) -> bool:
        """Whether all of `data` lies inside one of the ranges."""
        view = memoryview(data)
        if view.nbytes < self.MIN_BYTES or not view.contiguous:
            return False
        start = buffer_address(view)
        if not start:
            return False
        with self._lock:
            index = bisect.bisect_right(self._starts, start) - 1
            if index < 0:
                return False
            return start + view.nbytes <= self._ends[self._starts[index]]

    def clear(self) -> None:
        """Forget every range and drop the references (once the files are closed)."""
        with self._lock:
            self._starts.clear()
            self._ends.clear()
            self._owners.clear()


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


def check_scheme(checksum: str) -> str:
    """`checksum`, when it names a scheme this verifier computes (the block scheme or a
    hashlib algorithm); else ValueError naming the algorithm."""
    if checksum.split(":", 1)[0] != BLOCKS:
        new_hash(checksum)
    return checksum


def new_hash(checksum: str) -> Any:
    """A fresh hash object for the plain algorithm a stored checksum names."""
    algorithm = checksum.split(":", 1)[0]
    if algorithm in hashlib.algorithms_available:
        hasher = hashlib.new(algorithm)
        # Not one whose digest takes a length no checksum gives (shake_128, shake_256): a
        # marker flipped to one raised TypeError out of latest() at every restart.
        if hasher.digest_size:
            return hasher
    raise ValueError(f"unknown checksum algorithm {algorithm!r} in {checksum!r}")


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


def is_immutable(data: Buffer) -> bool:
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
        self._pinned = 0  # bytes of the pieces not yet submitted that only this hasher holds
        self.size = 0

    def feed(
        self, data: Buffer, write: Callable[[Buffer], object], *, stable: bool = False
    ) -> None:
        """Hash `data` and call `write(data)`, the two at once.

        Returns once the write is done and, unless `data` is immutable (`bytes` or a view of
        them) or `stable` (the caller keeps it allocated and unchanged until `hexdigest()`),
        once its bytes are hashed or copied, so the caller may reuse the buffer.
        """
        view = memoryview(data).cast("B")
        self.size += len(view)
        immutable = is_immutable(data)
        must_wait: list[_Block] = []
        while len(view):
            room = BLOCK - self._piece_bytes
            piece, view = view[:room], view[room:]
            whole = len(piece) == BLOCK
            if stable:
                pinned = 0  # the caller holds these bytes until the end anyway
            elif immutable:
                owner = piece.obj
                # Slices of a buffer the caller holds anyway pin nothing new after the first.
                pinned = len(piece) if owner is not self._last_owner else 0
                self._last_owner = owner
            elif whole:
                pinned = 0  # waited for before this call returns
            else:
                piece = memoryview(bytes(piece))  # kept past this call: copy it
                pinned = len(piece)
            self._pieces.append(piece)
            self._piece_bytes += len(piece)
            self._pinned += pinned
            if self._piece_bytes == BLOCK:
                block = self._submit()
                if not immutable and not stable and whole:
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
        self._pinned = 0
        self._pending.clear()
        self._pending_bytes = 0
        self._last_owner = None

    def _submit(self) -> _Block:
        pieces, self._pieces, self._piece_bytes = self._pieces, [], 0
        pinned, self._pinned = self._pinned, 0
        while self._pending and self._pending_bytes + pinned > _MAX_PENDING:
            oldest, size = self._pending.popleft()
            oldest.result()
            self._pending_bytes -= size
        block = _Block(pieces)
        submit(hash_pool(), block.run)
        self._blocks.append(block)
        if pinned:
            self._pending.append((block, pinned))
            self._pending_bytes += pinned
        return block
