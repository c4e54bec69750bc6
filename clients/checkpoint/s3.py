"""The S3-compatible backend (AWS S3, DigitalOcean Spaces, MinIO, GCS interoperability).

boto3 is imported when the first request is made, never at package import. Large objects go
up as multipart uploads whose parts are sent concurrently while the writer keeps producing;
small ones as a single PUT. Memory per file stays near `part_size * (concurrency + 3)`.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import hashlib
import io
import logging
import math
import os
import queue
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from datetime import datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from . import s3claim
from .backend import (
    NO_CLAIM,
    RANK_CLAIM,
    Backend,
    ObjectWriter,
    OnDone,
    Progress,
    UnfinishedUpload,
)
from .errors import CheckpointError, StorageError, StoreConfigError, StoreNotFoundError
from .hashing import Buffer, digest_stream, is_immutable
from .manifest import COMMIT, OUTPUTS, parse_generation_name
from .requestlimits import RequestLimits, request_limits
from .s3claim import S3Claim, claim_name, remove_stale
from .s3claim import service_time as _service_time
from .s3profile import profile_named

log = logging.getLogger("forewarn.checkpoint")

MIN_PART = 5 << 20  # S3's smallest part but the last
MAX_PART = 5 << 30
PARTS_PER_SIZE = 1000
# The same as boto3's TransferConfig defaults, which measured fastest against moto too.
DEFAULT_PART = 8 << 20
DEFAULT_CONCURRENCY = 10
CHECKSUM_ALGORITHM = "CRC32"  # botocore's default request checksum
PART_CHECKSUM = "ChecksumCRC32"
# boto3's own read timeout, for every request but the commit of a multipart upload.
READ_TIMEOUT = 60.0
# boto3's is 60 s, and a request is tried 6 times (RETRIES + 1): a final save against an
# endpoint that took no connections ran for over 6 minutes, far past any notice deadline,
# before failing. A connection to a live endpoint opens in milliseconds (3 s outlasts one lost
# SYN), so a dead one fails in about 20 s, retries included.
CONNECT_TIMEOUT = 3.0
RETRIES = 5
# How long a part's retry fills its fresh connection's socket buffers before its bytes can be
# told from progress: filling them takes milliseconds; far under any read timeout.
RETRY_FILL_SECONDS = 2.0
# S3 may take minutes to answer CompleteMultipartUpload for a large object (AWS documents it;
# moto joins every part in memory first: over two minutes for 1 GiB on a loaded machine). A
# shorter read timeout makes botocore retry a commit still in progress, and the retries fail
# (moto answers 500: the parts were already taken), so a large upload never completes.
COMPLETE_READ_TIMEOUT = 900.0
# How long closing the store may spend on aborting the uploads of failed saves it kept (as
# long as its release of the claims, `RELEASE_WITHIN` in store.py).
CLOSE_ABORT_SECONDS = 10.0
# boto3's TransferConfig default: how many times a download tries a file's GET.
_DOWNLOAD_ATTEMPTS = 5
# How often a file's writer waiting for a part looks whether the file was given up.
_STOP_TICK = 0.1


class _PartThreads:
    """Up to `workers` threads running one file's part uploads, as a ThreadPoolExecutor
    would, but daemon threads: at the interpreter's exit concurrent.futures joins every
    executor's threads before any atexit hook runs, so parts stuck on stalled connections
    (60 s per attempt, 6 attempts each) held the exit for as long as they hung, past the
    bound the exit puts on a background save that stopped moving (EXIT_STALL_SECONDS), and
    a process whose final save had failed by its timeout hung on its way out."""

    def __init__(self, workers: int, name: str) -> None:
        self._workers = workers
        self._name = name
        self._work: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._started = 0
        self._idle = threading.Semaphore(0)  # released by a thread each time it waits for work

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Run `fn(*args)` on one of the threads; called by the file's writer only."""
        future: Future[Any] = Future()
        self._work.put((future, fn, args))
        if not self._idle.acquire(blocking=False) and self._started < self._workers:
            thread = threading.Thread(
                target=self._run, name=f"{self._name}_{self._started + 1}", daemon=True
            )
            try:
                thread.start()
            except RuntimeError:
                # Python 3.12 and newer start no thread once the interpreter is exiting (the
                # exit hooks wait for a background save still being written): the threads
                # there are take the part, else this one sends it, as before.
                if self._started == 0:
                    while True:
                        try:
                            queued = self._work.get_nowait()
                        except queue.Empty:
                            break
                        if queued is not None:
                            self._one(*queued)
                return future
            self._started += 1
        return future

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            self._one(*item)
            item = None  # the part's bytes go once it is sent, not when the next one comes
            self._idle.release()

    @staticmethod
    def _one(future: Future[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if future.set_running_or_notify_cancel():  # else cancelled: the file was discarded
            try:
                future.set_result(fn(*args))
            except BaseException as error:
                future.set_exception(error)

    def shutdown(self) -> None:
        """Let the threads end once the work queued before this is done."""
        for _ in range(self._started):
            self._work.put(None)


class _SentBody(io.BufferedIOBase):
    """A part's body that tells `moved()` each time the connection takes more of it (the HTTP
    client reads it a block at a time as the socket drains, and again from the start on a
    retry). Progress was a part's answer, and only the oldest part's: on a slow link (8 MiB
    parts at under 70 KB/s each) no part is answered within EXIT_STALL_SECONDS, and a save
    whose bytes were flowing was given up at the exit as hung. A connection that stopped
    taking bytes stops the reads, so a stalled upload still reads as one.

    `check()` runs before each block and raises once the file is given up (`WriteCancelled`,
    which botocore passes through unretried): the request ends there and its connection is
    closed, so a cancelled save's parts leave the link to the final save.

    `body` is read where it lies, never copied whole: a part sliced off bytes nobody can
    change (a view of them) costs no copy of its own."""

    def __init__(
        self, body: Buffer, moved: Callable[[], None], check: Callable[[], None] | None = None
    ) -> None:
        super().__init__()
        self._view = memoryview(body).cast("B")
        self._position = 0
        self._moved = moved
        self._check = check
        self._size = len(self._view)
        self._taken = 0  # the furthest any attempt has read
        self._retry_began: float | None = None  # when the latest retry read from the start
        self._whole = False  # the current attempt has read the body to its end

    @property
    def size(self) -> int:
        return self._size

    @property
    def taken(self) -> int:
        """The furthest any attempt has read."""
        return self._taken

    def awaiting_answer(self) -> bool:
        """Whether the current attempt has handed every byte to its connection: what it
        waits for now is the service's answer (bounded by the client's read timeout, after
        which a retry reads from the start again: botocore rewinds the body first, and from
        then the retry awaits nothing until it has read it whole once more)."""
        return self._whole and self.tell() >= self._size

    def getvalue(self) -> bytes:
        """The whole body (as `io.BytesIO.getvalue`), a copy."""
        return bytes(self._view)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        if self._check is not None:
            self._check()
        if self._taken and self.tell() == 0:
            self._retry_began = time.monotonic()
        start = min(self._position, self._size)
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        data = bytes(self._view[start:end])
        self._position = max(self._position, end)
        self._whole = self.tell() >= self._size
        # A retry reads the body from the start again: bytes an earlier attempt took are no
        # progress. Counted as such, a service that accepts connections and never answers
        # (moto stopped with SIGSTOP) had each part's retries, one per 60 s read timeout,
        # fill the socket buffers again, and a save was given up only after about 7 minutes
        # instead of EXIT_STALL_SECONDS. Nor are a retry's first moments past that point: its
        # fresh connection's buffers take a burst at once, often a little further than the
        # last attempt's did (4.85 MB then 5.24 MB of a 5 MiB part on loopback), and each such
        # burst started the stall over. A link that is alive still carries the retry on after
        # RETRY_FILL_SECONDS.
        if self.tell() > self._taken:
            self._taken = self.tell()
            began = self._retry_began
            if began is None or time.monotonic() - began >= RETRY_FILL_SECONDS:
                self._moved()
        return data


class S3Writer(ObjectWriter):
    sends_after_writes = True  # parts upload on their threads after the last write

    def __init__(self, backend: S3Backend, key: str, name: str, on_done: OnDone | None) -> None:
        super().__init__(name, on_done)
        self._backend = backend
        self._key = key
        self.completion_timeout = COMPLETE_READ_TIMEOUT
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._upload_id: str | None = None
        self._parts: deque[Future[dict[str, Any]]] = deque()  # in flight, in order
        self._collecting: Future[dict[str, Any]] | None = None  # the oldest, being waited for
        # The file's own upload threads, not the backend's: a save left behind with its parts
        # stuck on stalled connections (a cancelled background save) held every thread of a
        # shared pool, and the final save's parts queued behind them until they timed out.
        self._pool: _PartThreads | None = None
        self._etags: list[dict[str, Any]] = []
        self._sent = 0
        # The bodies of the requests under way (parts, or the single PUT), for
        # `answers_awaited`: read from the upload threads and the saver's.
        self._bodies: set[_SentBody] = set()
        self._bodies_lock = threading.Lock()
        self._answered = 0  # the bytes of the requests answered
        # Every part carries a CRC32 the upload declared up front, as boto3's transfer manager
        # does: S3 then keeps a composite CRC32 of the object, and a server told no algorithm
        # may checksum the whole object once more when the upload completes.
        self._checksum: dict[str, str] = (
            {"ChecksumAlgorithm": CHECKSUM_ALGORITHM} if backend.upload_checksums else {}
        )

    def _part_size(self) -> int:
        # The final size is unknown while streaming and S3 allows 10,000 parts: doubling the
        # part size every 1,000 parts reaches S3's 5 TiB object limit from 8 MiB parts.
        sent = len(self._etags) + len(self._parts)
        return min(self._backend.part_size << (sent // PARTS_PER_SIZE), MAX_PART)

    def _sink(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        if not self._chunks:
            # A large write needs no staging copy: slice whole parts straight off it.
            # Bytes nobody can change are sliced, not copied: the copy cost the no-checksum
            # commit more than boto3's plain upload (bench/checkpoint_commit: 1.04-1.07).
            keep = view if is_immutable(data) else None
            while len(view) >= (size := self._part_size()):
                self._send_part(keep[:size] if keep is not None else bytes(view[:size]))
                view = view[size:]
                keep = view if keep is not None else None
            if not len(view):
                return
        whole_bytes = isinstance(data, bytes) and len(view) == len(data)
        self._chunks.append(data if whole_bytes else bytes(view))  # type: ignore[arg-type]
        self._buffered += len(view)
        if self._buffered >= self._part_size():
            joined = b"".join(self._chunks)
            start = 0
            while len(joined) - start >= (size := self._part_size()):
                self._send_part(joined[start : start + size])
                start += size
            rest = joined[start:]
            self._chunks = [rest] if rest else []
            self._buffered = len(rest)

    def _send_part(self, body: bytes | memoryview) -> None:
        backend = self._backend
        self._sent += len(body)
        if self._upload_id is None:
            with backend.bucket_named():
                reply = backend.client.create_multipart_upload(
                    Bucket=backend.bucket, Key=self._key, **self._checksum
                )
            self._upload_id = reply["UploadId"]
        # Bound what is queued so a fast producer cannot pile every part up in memory.
        while len(self._parts) >= backend.concurrency + 2:
            self._collect_oldest()
        number = len(self._etags) + len(self._parts) + 1
        if self._pool is None:
            self._pool = _PartThreads(backend.concurrency, "forewarn-s3")
        self._parts.append(self._pool.submit(self._upload_part, number, body))

    def _upload_part(self, number: int, body: bytes | memoryview) -> dict[str, Any]:
        checksum = dict(self._checksum)
        if checksum:
            # Computed here, on an upload thread (zlib releases the GIL), and sent as a header:
            # left to botocore, the CRC32 would travel as a trailer, wrapping the body in
            # aws-chunked framing that costs a copy on each side of the connection.
            crc = zlib.crc32(body).to_bytes(4, "big")
            checksum[PART_CHECKSUM] = base64.b64encode(crc).decode("ascii")
        with self._open(_SentBody(body, self._moved, self.raise_if_stopped)) as sent:
            reply = self._backend.client.upload_part(
                Bucket=self._backend.bucket,
                Key=self._key,
                UploadId=self._upload_id,
                PartNumber=number,
                Body=sent,
                **checksum,
            )
        self._moved()  # any part answered, not only the oldest
        part = {"PartNumber": number, "ETag": reply["ETag"]}
        if PART_CHECKSUM in checksum:
            # An upload that declared an algorithm completes only with every part's checksum.
            part[PART_CHECKSUM] = checksum[PART_CHECKSUM]
        return part

    @contextlib.contextmanager
    def _open(self, body: _SentBody) -> Iterator[_SentBody]:
        """`body` counted in `answers_awaited` while its request is under way."""
        with self._bodies_lock:
            self._bodies.add(body)
        answered = False
        try:
            yield body
            answered = True
        finally:
            with self._bodies_lock:
                self._bodies.discard(body)
                if answered:
                    self._answered += body.size

    def bytes_sent(self) -> int:
        with self._bodies_lock:
            return self._answered + sum(body.taken for body in self._bodies)

    def answers_awaited(self) -> bool:
        with self._bodies_lock:
            return any(body.awaiting_answer() for body in self._bodies)

    def _moved(self) -> None:
        on_progress = self.on_progress
        if on_progress is not None:
            on_progress()

    def _collect_oldest(self) -> None:
        self._collecting = self._parts.popleft()
        if self.stop is not None:
            # Given up meanwhile, the file is discarded at once (its running parts end at
            # their next block, or by their own timeouts on a stalled connection).
            while not wait([self._collecting], timeout=_STOP_TICK).done:
                self.raise_if_stopped()
        with self._backend.bucket_named():  # a bucket deleted while the parts upload
            self._etags.append(self._collecting.result())
        self._collecting = None
        self._moved()

    def _finish(self) -> None:
        backend = self._backend
        body = b"".join(self._chunks)
        self._chunks = []
        if self._upload_id is None:
            # Its bytes moving are progress too (as a part's): a file under a part over a slow
            # link was otherwise given up as hung with its bytes flowing.
            with (
                backend.bucket_named(),
                self._open(_SentBody(body, self._moved, self.raise_if_stopped)) as sent,
            ):
                backend.client.put_object(Bucket=backend.bucket, Key=self._key, Body=sent)
            return
        if body:
            self._send_part(body)
        # The parts upload meanwhile; this thread would only wait for them.
        self._hasher.help()
        while self._parts:
            self._collect_oldest()
        self._stop_pool()
        parts = sorted(self._etags, key=lambda part: part["PartNumber"])
        # Given up now, with every part uploaded, nothing is left to spare the link: the
        # completion goes ahead, and the commit after it is the saver's to judge.
        if self.on_sent is not None:
            self.on_sent()
        try:
            with backend.bucket_named():
                backend.completer.complete_multipart_upload(
                    Bucket=backend.bucket,
                    Key=self._key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except Exception as exc:
            if _error_code(exc) != "NoSuchUpload" or not self._completed_already(parts):
                raise

    def _completed_already(self, parts: list[dict[str, Any]]) -> bool:
        """Whether a commit answered NoSuchUpload was a retry of one that went through.

        botocore retries a commit whose answer was lost (a reset connection, a read timeout);
        S3 answers the retry with success, MinIO and others with NoSuchUpload, which failed
        the save of an object that was there. It is this upload's object when it has the size
        sent and the ETag S3-compatible services give a multipart object: the MD5 of the
        parts' MD5s, then '-' and their count."""
        backend = self._backend
        try:
            head = backend.client.head_object(Bucket=backend.bucket, Key=self._key)
        except Exception:
            return False
        if int(head.get("ContentLength", -1)) != self._sent:
            return False
        try:
            digests = b"".join(bytes.fromhex(str(part["ETag"]).strip('"')) for part in parts)
        except ValueError:
            digests = None
        if digests is not None:
            md5 = hashlib.md5(digests, usedforsecurity=False).hexdigest()
            if head.get("ETag") == f'"{md5}-{len(parts)}"':
                return True
        # ETags that are no MD5s (SSE-KMS, SSE-C, a service's own encryption): the save
        # failed though its object was there, a terminate's final save too. The object's
        # bytes are read back and checked against this file's checksum instead (a rare path:
        # a lost answer to the completion, on a service answering its retry NoSuchUpload).
        checksum = self._hasher.hexdigest()
        try:
            reply = backend.client.get_object(Bucket=backend.bucket, Key=self._key)
            with reply["Body"] as body:
                size, found = digest_stream(body, checksum)
        except Exception:
            return False
        return size == self._sent and found == checksum

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()  # every part was collected or cancelled
            self._pool = None

    def _discard(self) -> None:
        self._chunks = []
        # A copy: at the exit another thread discards while the writer's own may collect.
        running = [future for future in list(self._parts) if not future.cancel()]
        if self._collecting is not None:
            running.append(self._collecting)  # the one the writer's thread waits for
        self._parts.clear()
        self._stop_pool()
        if self._upload_id is None:
            return
        # Aborted at once, not after the parts still running end: parts stuck on stalled
        # connections held that wait for minutes, and at the exit (which bounds its abort of
        # unfinished saves by RELEASE_WITHIN) the upload, its parts billed, and the step's
        # claim stayed behind. A part that completes after the abort may still hold storage
        # (S3 documents it), so each one ending well aborts the upload once more.
        self._abort_upload(say=True)
        for future in running:
            future.add_done_callback(self._abort_after)

    def _abort_after(self, part: Future[dict[str, Any]]) -> None:
        if not part.cancelled() and part.exception() is None:
            self._abort_upload()

    def _abort_upload(self, *, say: bool = False) -> None:
        # One left unaborted (the service unreachable, credentials expired) expires by the
        # bucket's lifecycle rule, or is aborted by a later sweep. Said once (`say`): left
        # unsaid, its parts stayed stored and billed with nothing telling of them.
        # The backend keeps it for this store's next save to abort by its ID (`abort_left_
        # uploads`): before, it stood until the next sweep (UPLOAD_SWEEP_INTERVAL, 600 s).
        backend = self._backend
        upload_id = self._upload_id
        if upload_id is None:
            return
        try:
            backend.client.abort_multipart_upload(
                Bucket=backend.bucket, Key=self._key, UploadId=upload_id
            )
        except Exception as exc:
            if _error_code(exc) == "NoSuchUpload":
                return
            backend.left_upload(self._key, upload_id)
            if say:
                log.warning(
                    "forewarn: could not abort the upload of %s in %s (%s): its parts stay "
                    "stored (and billed) until this store's next committed save aborts it, "
                    "the bucket's lifecycle rule expires them, a later save's sweep of "
                    "unfinished uploads aborts it, or `forewarn checkpoint prune %s --keep N "
                    "--abort-uploads` does",
                    self._key,
                    backend.url,
                    exc,
                    backend.url,
                )


# A save's client is made for this share of the time left, and made again once the time left
# falls under what it was made for: a request then never outlasts the time left when it
# starts, and a save makes a few clients, not one a request.
_WITHIN_SHARE = 0.8


class _ClientWithin:
    """The client of a save that must end by `deadline` (monotonic): its requests' limits
    fit the time left when each starts."""

    def __init__(
        self,
        make: Callable[[RequestLimits], Any],
        deadline: float,
        *,
        single_attempt: bool,
        base: RequestLimits,
    ) -> None:
        self._base = base
        self._make = make
        self._deadline = deadline
        self._single_attempt = single_attempt
        self._lock = threading.Lock()
        self._made: tuple[RequestLimits, Any] | None = None

    def limits(self) -> RequestLimits:
        """The limits a request starting now gets."""
        left = (self._deadline - time.monotonic()) * _WITHIN_SHARE
        limits = request_limits(left, self._base)
        if self._single_attempt:
            whole = max(left, limits.worst_seconds)
            return RequestLimits(min(limits.connect_timeout, whole), whole, 1)
        return limits

    def get(self) -> Any:
        with self._lock:
            left = self._deadline - time.monotonic()
            made = self._made
            if made is None or made[0].worst_seconds > left:
                wanted = self.limits()
                if made is None or wanted != made[0]:
                    made = self._made = (wanted, self._make(wanted))
            return made[1]


class _CurrentClient:
    """A bounded save's client as it is when each request starts (for the save's claim,
    which keeps a client for as long as it is held)."""

    def __init__(self, clients: _ClientWithin) -> None:
        self._clients = clients

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clients.get(), name)


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` → ("bucket", "some/prefix")."""
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StoreConfigError(f"store URL {url!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/")


class S3Backend(Backend):
    # S3 (and the services that speak it) answers a PUT only once the object is stored
    # across its devices, and a read finds only an object so stored: one that reads back is
    # durable, only the answer to its write was an error (said before: `it may not be durable
    # yet: a crash of the machine (a power loss) may lose it`, true of a local disk only).
    written_despite_error = (
        "the service stored the marker (it reads back as written), so it is as durable as any "
        "object there: only the answer to its write was an error"
    )

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        upload_checksums: bool | None = None,
        part_size: int = DEFAULT_PART,
        concurrency: int = DEFAULT_CONCURRENCY,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        attempts: int | None = None,
    ) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self._connect_timeout = _seconds_option("connect_timeout", connect_timeout, CONNECT_TIMEOUT)
        self._read_timeout = _seconds_option("read_timeout", read_timeout, READ_TIMEOUT)
        # None: boto3's own setting (AWS_MAX_ATTEMPTS, the config file's `max_attempts`),
        # read with the first request (botocore loads then), else RETRIES + 1.
        self._attempts = None if attempts is None else _attempts_option(attempts)
        self._limits: RequestLimits | None = None
        self._watch: RequestWatch | None = None
        # As the keys are: `s3://b/run/` and `s3://b//run` are `s3://b/run`, and a copy out
        # recorded under one spelling is in place for another (`get_dir`), not copied again.
        self.url = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        if not MIN_PART <= part_size <= MAX_PART:
            raise StoreConfigError(
                f"part_size must be between {MIN_PART} and {MAX_PART} bytes (S3's limits)"
            )
        if concurrency < 1:
            raise StoreConfigError(f"concurrency must be at least 1, got {concurrency}")
        if addressing_style not in (None, "auto", "path", "virtual"):
            raise StoreConfigError(
                f"addressing_style must be auto, path or virtual, not {addressing_style!r}"
            )
        self.part_size = part_size
        self.concurrency = concurrency
        self.upload_checksums = (
            resolve_upload_checksums(endpoint_url) if upload_checksums is None else upload_checksums
        )
        self._options: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region": region,
            "access_key_id": access_key_id,
            "secret_access_key": secret_access_key,
            "session_token": session_token,
            "profile": profile,
            "addressing_style": addressing_style,
            "upload_checksums": self.upload_checksums,
        }
        self._client: Any = None
        self._completer: Any = None
        self._batch_delete = True  # DeleteObjects, until the service says it has none
        self._conditional_writes = True  # claims (`s3claim`), until the service refuses one
        self._claims_swept: float | None = None  # when `remove_stale_claims` last listed
        self._lock = threading.Lock()
        # The uploads of failed saves whose abort failed, upload ID to key (`left_upload`):
        # shared with the copies `within` makes, as is their lock.
        self._left: dict[str, str] = {}
        self._left_lock = threading.Lock()
        # A save's copy that must end in time (`within`): its clients, remade as time runs out.
        self._timed: tuple[_ClientWithin, _ClientWithin] | None = None

    @property
    def limits(self) -> RequestLimits:
        """Each request's connect and read timeouts and attempts: the S3 options', else
        for attempts boto3's own setting (`AWS_MAX_ATTEMPTS`, else the AWS config file's
        `max_attempts` for the store's profile), else RETRIES + 1."""
        limits = self._limits
        if limits is None:
            attempts = self._attempts
            if attempts is None:
                with self._profile_named():
                    attempts = configured_attempts(self._options["profile"]) or RETRIES + 1
            limits = self._limits = RequestLimits(
                self._connect_timeout, self._read_timeout, attempts
            )
        return limits

    def _profile_named(self) -> contextlib.AbstractContextManager[None]:
        """A named profile neither AWS file holds as the store's `StorageError` (botocore
        raises it where it first reads the profile: the attempts, or the client)."""
        return profile_named(self.url, self._options["profile"])

    @property
    def identity(self) -> str:
        # `s3://bucket/prefix/` and `s3://bucket//prefix` are the same objects.
        return f"s3://{self.bucket}/{self.prefix}"

    def within(self, seconds: float) -> S3Backend:
        """A copy of this backend for one save that must end within `seconds` (an exit's save
        of several ranks): each request, retries included, fails once it cannot end in the
        time left when it starts (`request_limits`), where the defaults let one request the
        storage stopped answering run 365 s. The commit of a multipart upload gets one
        attempt, of the whole time left (a retry of one in progress fails)."""
        bounded = copy.copy(self)
        bounded._lock = threading.Lock()
        bounded._client = bounded._completer = None
        deadline = time.monotonic() + seconds

        options = dict(self._options)
        base = self.limits

        def make(limits: RequestLimits) -> Any:
            with self._profile_named():
                client = make_client(concurrency=self.concurrency, limits=limits, **options)
            return _Named(client, self.url, limits)

        bounded._timed = (
            _ClientWithin(make, deadline, single_attempt=False, base=base),
            _ClientWithin(make, deadline, single_attempt=True, base=base),
        )
        return bounded

    @property
    def client(self) -> Any:
        if self._timed is not None:
            return self._timed[0].get()
        if self._client is None:
            with self._lock:
                if self._client is None:
                    with self._profile_named():
                        client = make_client(
                            concurrency=self.concurrency, limits=self.limits, **self._options
                        )
                    if self._watch is not None:
                        self._watch.install(client)
                    self._client = _Named(client, self.url, self.limits)
        return self._client

    def watch_requests(self, say: Callable[[str], None]) -> RequestWatch:
        """Have `say` told of each request left unanswered for a few seconds (the
        commands' wait line); `close()` the watch returned when done."""
        watch = RequestWatch(self.limits, say)
        with self._lock:
            self._watch = watch
            for client in (self._client, self._completer):
                if client is not None:
                    watch.install(client)
        return watch

    @property
    def completer(self) -> Any:
        """The client for CompleteMultipartUpload: the same, with a read timeout of minutes."""
        if self._timed is not None:
            return self._timed[1].get()
        if self._completer is None:
            with self._lock:
                if self._completer is None:
                    read_timeout = max(COMPLETE_READ_TIMEOUT, self.limits.read_timeout)
                    with self._profile_named():
                        completer = make_client(
                            concurrency=self.concurrency,
                            read_timeout=read_timeout,
                            limits=self.limits,
                            **self._options,
                        )
                    if self._watch is not None:
                        self._watch.install(completer)
                    limits = dataclasses.replace(self.limits, read_timeout=read_timeout)
                    self._completer = _Named(completer, self.url, limits)
        return self._completer

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _dir(self, prefix: str) -> str:
        full = self._key(prefix) if prefix else self.prefix
        return f"{full}/" if full else ""

    def writer(self, key: str, on_done: OnDone | None = None) -> ObjectWriter:
        return S3Writer(self, self._key(key), key, on_done)

    def put_small(self, key: str, data: bytes) -> None:
        with self.bucket_named():
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    @contextlib.contextmanager
    def bucket_named(self) -> Iterator[None]:
        """botocore's `NoSuchBucket` as the store's own error, naming the bucket and the
        prefix: `latest()` on a mistyped bucket said "The specified bucket does not exist",
        and a first save there (its claim, its file) said so too."""
        try:
            yield
        except Exception as exc:
            if _error_code(exc) == "NoSuchBucket":
                raise StoreNotFoundError(
                    f"the bucket {self.bucket!r} does not exist (store prefix {self.prefix!r})"
                ) from exc
            raise

    def get_small(self, key: str) -> bytes | None:
        with self.bucket_named():
            try:
                reply = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except Exception as exc:
                if _is_missing(exc):
                    return None
                raise
            body: bytes = reply["Body"].read()
        return body

    def open_read(self, key: str) -> IO[bytes]:
        with self.bucket_named():
            try:
                reply = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            except Exception as exc:
                if _is_missing(exc):
                    raise FileNotFoundError(f"s3://{self.bucket}/{self._key(key)}") from None
                raise
        stream: IO[bytes] = reply["Body"]
        return stream

    def list_children(self, prefix: str) -> list[str]:
        base = self._dir(prefix)
        names: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        with self.bucket_named():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    names.append(common["Prefix"][len(base) :].rstrip("/"))
        return names

    def list_sizes(self, prefix: str) -> dict[str, int]:
        base = self._dir(prefix)
        sizes: dict[str, int] = {}
        paginator = self.client.get_paginator("list_objects_v2")
        with self.bucket_named():
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for item in page.get("Contents", []):
                    sizes[item["Key"][len(base) :]] = int(item["Size"])
        return sizes

    def size_of(self, key: str) -> int | None:
        with self.bucket_named():
            try:
                reply = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            except Exception as exc:
                if _is_missing(exc):
                    return None
                raise
        return int(reply["ContentLength"])

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def delete_tree(self, prefix: str) -> None:
        # The marker goes first so a half-deleted generation never counts.
        self.delete(f"{prefix}/{COMMIT}")
        base = self._dir(prefix)
        self._delete_keys([base + key for key in self.list_sizes(prefix)], prefix)
        try:
            paginator = self.client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for upload in page.get("Uploads", []):
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
        except Exception as exc:
            # The objects are gone; unfinished uploads are invisible to readers and expire by
            # the bucket's lifecycle rule. Credentials without s3:ListBucketMultipartUploads
            # (a common narrow bucket policy) otherwise failed every save that found a dead
            # writer's leftovers, and every retention pass.
            log.warning(
                "forewarn: %s: could not abort unfinished uploads under %s: %s",
                self.url,
                prefix,
                exc,
            )

    def claim(self, prefix: str, *, rank: int = 0) -> Callable[[], None]:
        if not self._conditional_writes:
            return NO_CLAIM
        label = prefix if rank == 0 else f"{prefix} (rank {rank})"
        key = self._key(claim_name(prefix, rank))
        # A bounded save's claim is released as the save ends, failed or not: with a client
        # made at its start, storage that stopped answering held a failed exit save's end
        # (and its job's ack) 20 s past the requests' bound (37.6 s of a 25 s lead).
        client = self.client if self._timed is None else _CurrentClient(self._timed[0])
        claim = S3Claim(client, self.bucket, key, self.url, label)
        with self.bucket_named():
            taken = claim.take()
        if taken:
            return claim.release
        # Said once: the service refused the conditional write (see `S3Claim.take`).
        self._conditional_writes = False
        return NO_CLAIM

    def claimed(self, prefix: str) -> bool:
        if not self._conditional_writes:
            return False
        if s3claim.live(self.client, self.bucket, self._key(claim_name(prefix))):
            return True
        # The other ranks' (a rank may reach its save before rank 0 does): a listing of this
        # generation's claims only.
        paginator = self.client.get_paginator("list_objects_v2")
        ranks = self._key(f".{prefix}{RANK_CLAIM}")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=ranks):
            for item in page.get("Contents", []):
                if s3claim.RANK_CLAIM_KEY.fullmatch(item["Key"][len(ranks) :]) and s3claim.live(
                    self.client, self.bucket, item["Key"]
                ):
                    return True
        return False

    def writer_gone(self, prefix: str) -> bool:
        # Only a claim naming a process of this machine's boot and PID namespace that is no
        # longer running proves its writer gone (a job killed here, `prune` run here after
        # it); a claim of another machine, or none (a service without conditional writes, a
        # claim swept a lease after the kill), proves nothing.
        if not self._conditional_writes:
            return False
        ranks = self._key(f".{prefix}{RANK_CLAIM}")
        keys = [self._key(claim_name(prefix))]
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=ranks):
            for item in page.get("Contents", []):
                if s3claim.RANK_CLAIM_KEY.fullmatch(item["Key"][len(ranks) :]):
                    keys.append(item["Key"])
        found = 0
        for key in keys:
            try:
                raw = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except Exception as exc:
                if _is_missing(exc):
                    continue
                raise
            if not s3claim._gone_from_here(raw):
                return False
            found += 1
        return found > 0

    def _claimed_once(self, prefix: str, seen: dict[str, bool]) -> bool:
        """`claimed(prefix)`, asked once per sweep; a claim that cannot be read counts as
        held (the upload waits for the next sweep rather than a live save failing)."""
        if prefix not in seen:
            try:
                seen[prefix] = self.claimed(prefix)
            except Exception:
                seen[prefix] = True
        return seen[prefix]

    def remove_stale_claims(self) -> int:
        # Once per lease, not at every commit (a listing each, ~25 ms against moto): a claim
        # goes stale only a lease after its last renewal, and a stale one blocks nothing but
        # its own step, whose next save takes it over at once or after the lease anyway. So
        # a killed writer's claim stays at most a lease longer; live writers' claims are
        # never touched by the sweep, however often it runs.
        now = time.monotonic()
        if self._claims_swept is not None and now - self._claims_swept < s3claim.LEASE:
            return 0
        self._claims_swept = now
        return remove_stale(self.client, self.bucket, self._dir(""))

    def _delete_keys(self, keys: list[str], prefix: str) -> None:
        failed: list[str] = []
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            if self._batch_delete:
                try:
                    reply = self.client.delete_objects(
                        Bucket=self.bucket,
                        Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True},
                    )
                except Exception as exc:
                    if _error_code(exc) != "NotImplemented":
                        raise
                    # GCS's S3 interoperability has no multi-object delete: every retention
                    # pass failed there, and so did every save over a dead writer's leftovers.
                    self._batch_delete = False
                else:
                    # Quiet mode still reports the keys it could not delete, in a 200 reply.
                    failed += [f"{e.get('Key')}: {e.get('Code')}" for e in reply.get("Errors", [])]
                    continue
            for key in batch:
                self.client.delete_object(Bucket=self.bucket, Key=key)
        if failed:
            raise CheckpointError(
                f"could not delete {len(failed)} objects of {prefix} in {self.url} "
                f"(first {failed[0]})"
            )

    def download(self, key: str, destination: Path, like: str, progress: Progress | None) -> str:
        # boto3's concurrent ranged download writes the parts out of order, so the file is
        # hashed once it is complete (from the page cache), before the caller renames it.
        from boto3.s3.transfer import TransferConfig

        # boto3 tries a file's GET again over a stall or a reset mid-file (5 times), each
        # with botocore's attempts: a service that answered all but that GET held `get` for
        # 5 * attempts * read timeout. The store's `attempts` caps its tries too.
        config = TransferConfig(
            multipart_chunksize=self.part_size,
            max_concurrency=self.concurrency,
            num_download_attempts=min(self.limits.attempts, _DOWNLOAD_ATTEMPTS),
        )
        done = 0
        lock = threading.Lock()

        def arrived(amount: int) -> None:
            nonlocal done
            with lock:
                done += amount
                if progress is not None:
                    progress(done)

        from boto3.exceptions import RetriesExceededError

        try:
            self.client.download_file(
                self.bucket, self._key(key), str(destination), Config=config, Callback=arrived
            )
        except RetriesExceededError as exc:
            # Its message is "Max Retries Exceeded", naming neither the file nor the cause.
            raise exc.last_exception from exc

        with open(destination, "rb") as handle:
            return digest_stream(handle, like)[1]

    def unfinished_uploads(self, *, sizes: bool = True) -> list[UnfinishedUpload]:
        # A save killed while its only files were multipart uploads left no object under its
        # generation: `ls` did not list it at all, and only `prune --abort-uploads` found it.
        root = self._dir("")
        found: list[UnfinishedUpload] = []
        uploads = self.client.get_paginator("list_multipart_uploads")
        with self.bucket_named():
            pages = list(uploads.paginate(Bucket=self.bucket, Prefix=root))
        for page in pages:
            now = _service_time(page)
            for upload in page.get("Uploads", []):
                named = generation_file(root, upload["Key"])
                if named is None:
                    continue
                top, name = named
                initiated = upload.get("Initiated")
                age = (
                    max((now - initiated).total_seconds(), 0.0)
                    if isinstance(initiated, datetime)
                    else None
                )
                size = 0
                if not sizes:
                    found.append(UnfinishedUpload(top, name, size, age))
                    continue
                parts = self.client.get_paginator("list_parts")
                try:
                    for listed in parts.paginate(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    ):
                        size += sum(int(part.get("Size", 0)) for part in listed.get("Parts", []))
                except Exception as exc:
                    if _error_code(exc) != "NoSuchUpload":
                        raise
                    continue  # completed or aborted since it was listed
                found.append(UnfinishedUpload(top, name, size, age))
        found.sort(key=lambda upload: -(upload.age_seconds or 0.0))
        return found

    def left_upload(self, key: str, upload_id: str) -> None:
        """Keep the upload `upload_id` of `key`, which a failed save could not abort, for
        `abort_left_uploads`."""
        with self._left_lock:
            self._left[upload_id] = key

    def abort_left_uploads(self) -> int:
        # By upload ID, which only the failed save's writer used: a retry of its step (its
        # own new upload) and another job's save of the same key are never touched.
        with self._left_lock:
            left = list(self._left.items())
        aborted = 0
        for upload_id, key in left:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception as exc:
                if _error_code(exc) != "NoSuchUpload":  # gone already: aborted, or expired
                    log.debug("forewarn: the upload of %s still cannot be aborted: %s", key, exc)
                    continue
            else:
                aborted += 1
                log.info(
                    "forewarn: aborted the upload of %s in %s that a failed save could not abort",
                    key,
                    self.url,
                )
            with self._left_lock:
                self._left.pop(upload_id, None)
        return aborted

    def close(self) -> None:
        # The uploads of failed saves that could not be aborted then wait for the next save's
        # commit: a script whose last save failed so and then closed the store (its last
        # line) left their parts stored and billed, with nothing said. Tried once more here,
        # bounded (a service still down costs no more than CLOSE_ABORT_SECONDS); each one
        # still left is said.
        with self._left_lock:
            if not self._left:
                return
        self.within(CLOSE_ABORT_SECONDS).abort_left_uploads()
        with self._left_lock:
            left = sorted(self._left.items(), key=lambda item: item[1])
        for upload_id, key in left:
            log.warning(
                "forewarn: the upload of %s in %s (upload ID %s), left by a failed save, "
                "could not be aborted at close: its parts stay stored (and billed) until the "
                "bucket's lifecycle rule expires them, a later save's sweep of unfinished "
                "uploads aborts it, or `forewarn checkpoint prune %s --keep N --abort-uploads` "
                "does",
                key,
                self.url,
                upload_id,
                self.url,
            )

    def abort_stale_uploads(
        self, keep_prefix: str | None, *, older_than: float = 0.0, dead_prefix: str | None = None
    ) -> int:
        keep = self._dir(keep_prefix) if keep_prefix is not None else None
        dead = self._dir(dead_prefix) if dead_prefix is not None else None
        root = self._dir("")
        aborted = 0
        claimed: dict[str, bool] = {}  # generation → a live writer's claim holds it
        paginator = self.client.get_paginator("list_multipart_uploads")
        with self.bucket_named():
            pages = list(paginator.paginate(Bucket=self.bucket, Prefix=root))
        for page in pages:
            now = _service_time(page)
            for upload in page.get("Uploads", []):
                if keep is not None and upload["Key"].startswith(keep):
                    continue
                # Only the store's own files: a store at the bucket's root (or a prefix above
                # another store) aborted every other upload in progress in the bucket.
                top, slash, _rest = upload["Key"][len(root) :].partition("/")
                if not slash or (top != OUTPUTS and parse_generation_name(top) is None):
                    continue
                if older_than > 0 and not (dead is not None and upload["Key"].startswith(dead)):
                    initiated = upload.get("Initiated")
                    if (
                        isinstance(initiated, datetime)
                        and (now - initiated).total_seconds() < older_than
                    ):
                        continue
                # Old is not dead: a save of a large step uploading for longer than the bound
                # (or one under way while this runs by hand, `prune --abort-uploads`) renews
                # its claim, and its upload aborted failed that save.
                dead_writer = dead is not None and upload["Key"].startswith(dead)
                if not dead_writer and top != OUTPUTS and self._claimed_once(top, claimed):
                    continue
                with contextlib.suppress(Exception):  # another cleaner may have won
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted += 1
        return aborted


def generation_file(root: str, key: str) -> tuple[str, str] | None:
    """The generation and the file within it that the bucket's `key` names in the store whose
    keys begin with `root`; None for any other key (another store's, a claim, `outputs/`)."""
    if not key.startswith(root):
        return None
    top, slash, name = key[len(root) :].partition("/")
    if not slash or not name or parse_generation_name(top) is None:
        return None
    return top, name


def resolve_upload_checksums(endpoint_url: str | None) -> bool:
    """Whether uploads carry boto3's CRC32 checksums when the store was not told.

    boto3's own AWS_REQUEST_CHECKSUM_CALCULATION wins (`when_supported` on, `when_required`
    off). Otherwise on for AWS itself and off for any other endpoint: several S3-compatible
    services (GCS interoperability, OCI, LocalStack, some MinIO and Spaces versions) reject
    the checksums boto3 sends since 1.36, as aws-chunked trailers or as headers.
    """
    calculation = os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION", "").strip().lower()
    if calculation in ("when_supported", "when_required"):
        return calculation == "when_supported"
    if calculation:
        raise StoreConfigError(
            f"AWS_REQUEST_CHECKSUM_CALCULATION={calculation!r} is neither when_supported "
            "nor when_required"
        )
    return endpoint_url is None and not (
        os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def _is_missing(exc: Exception) -> bool:
    return _error_code(exc) in ("NoSuchKey", "404", "NotFound")


# One botocore data loader per data path for the whole process. A loader parses the S3 model,
# the endpoint rules and the partitions (eight JSON files, about 0.05 CPU-s) and keeps them;
# each new session made its own loader and parsed them again, twice per store (its client and
# its completer). The loader holds only those files: credentials, region and configuration
# stay with each session.
_LOADERS: dict[str | None, Any] = {}
_LOADERS_LOCK = threading.Lock()


def _botocore_session(profile: str | None) -> Any:
    import botocore.session
    from botocore.loaders import create_loader

    session = botocore.session.get_session()
    if profile is not None:
        # The data path may come from the profile's section, as botocore reads it.
        session.set_config_variable("profile", profile)
    data_path = session.get_config_variable("data_path")
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = create_loader(data_path)
    session.register_component("data_loader", loader)
    return session


def _drop_repeated_paths(loader: Any) -> None:
    """boto3 appends its own data directory to the loader of every session it makes: on a
    shared loader the list would grow by one entry a client."""
    with _LOADERS_LOCK:
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))


def make_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    access_key_id: str | None,
    secret_access_key: str | None,
    session_token: str | None,
    profile: str | None,
    addressing_style: str | None,
    concurrency: int,
    upload_checksums: bool,
    read_timeout: float | None = None,
    limits: RequestLimits | None = None,
) -> Any:
    """A boto3 S3 client. Arguments win; otherwise boto3 reads AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE, AWS_REGION/AWS_DEFAULT_REGION and
    AWS_ENDPOINT_URL_S3/AWS_ENDPOINT_URL itself. `limits`: the timeouts and attempts of each
    request (the store's S3 options, or those of a save that must end in time; default
    CONNECT_TIMEOUT, READ_TIMEOUT, RETRIES + 1); `read_timeout` in place of its read timeout."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        from forewarn.protocol.install import extra_hint

        raise StoreConfigError(
            f"an s3:// checkpoint store needs boto3: {extra_hint('aws')}"
        ) from None
    if (access_key_id is None) != (secret_access_key is None):
        raise StoreConfigError("give both access_key_id and secret_access_key, or neither")
    session = boto3.session.Session(
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        aws_session_token=session_token,
        profile_name=profile,
        region_name=region,
        botocore_session=_botocore_session(profile),
    )
    _drop_repeated_paths(session._loader)
    s3_options: dict[str, Any] = {}
    if addressing_style:
        s3_options["addressing_style"] = addressing_style
    # Unsigned payloads: signing would SHA-256 every part once more (always on http; on https
    # whenever a part carries a precomputed checksum header). Each part's integrity is
    # covered by its CRC32 header (when upload_checksums is on), by the SHA-256 the store
    # records for every file and checks with verify="checksums", and by TLS on https.
    s3_options["payload_signing_enabled"] = False
    checksums: dict[str, Any] = {}
    if not upload_checksums:
        # Several S3-compatible services reject boto3's default CRC32 trailers.
        checksums = {
            "request_checksum_calculation": "when_required",
            "response_checksum_validation": "when_required",
        }
    if limits is None:
        limits = RequestLimits(CONNECT_TIMEOUT, READ_TIMEOUT, RETRIES + 1)
    retries = {"total_max_attempts": limits.attempts, "mode": "standard"}
    timeouts = {
        "connect_timeout": limits.connect_timeout,
        "read_timeout": read_timeout if read_timeout is not None else limits.read_timeout,
    }
    config = Config(
        max_pool_connections=concurrency + 4,
        retries=retries,
        s3=s3_options or None,
        **timeouts,
        **checksums,
    )
    # Signing needs some region; S3-compatible services accept us-east-1 when they ignore it.
    region_name = region or session.region_name or os.environ.get("AWS_REGION") or "us-east-1"
    given = "endpoint_url" if endpoint_url else "AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL"
    url = (
        endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    if url is not None:
        # botocore takes `ftp://host` here and fails only at the first request, which read
        # as a store that could not be read (exit 3) rather than bad input.
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            raise StoreConfigError(
                f"S3 endpoint ({given}) is not an http(s)://host[:port] URL: {exc}"
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StoreConfigError(
                f"S3 endpoint ({given}) is not an http(s)://host[:port] URL: {url!r}"
            )
    try:
        client = session.client(
            "s3", endpoint_url=endpoint_url, region_name=region_name, config=config
        )
    except ValueError as exc:
        # botocore's "Invalid endpoint: htp:/host" is a bare ValueError: a typo, not a bug.
        raise StoreConfigError(
            f"S3 endpoint ({given}) is not an http(s)://host[:port] URL: {exc}"
        ) from None
    _no_expect_continue(client)
    return client


def _no_expect_continue(client: Any) -> None:
    """No `Expect: 100-continue` on this client's uploads. botocore adds it to any request
    whose body is a stream, as the parts' and small files' bodies are (to count their bytes
    as they move), and then waits up to 1 s for the service's `100 Continue` before each
    body: a service or load balancer that sends none cost a second per part (a 64 MiB commit
    5-7 times slower), and one refusing the expectation on an empty body (400) failed every
    save holding an empty file. A refusal it would spare the body of costs one part's bytes;
    a part is retried whole anyway."""
    from botocore import handlers

    add_expect_header = getattr(handlers, "add_expect_header", None)
    if add_expect_header is not None:
        client.meta.events.unregister("before-call.s3", add_expect_header)


def _seconds_option(name: str, value: float | None, default: float) -> float:
    """An S3 option in seconds: more than 0 and finite (None: `default`)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StoreConfigError(f"{name} is a number of seconds, not {value!r}")
    if not 0 < value < math.inf:
        raise StoreConfigError(f"{name} must be more than 0 seconds and finite, not {value!r}")
    return float(value)


def _attempts_option(value: int | None) -> int:
    """The `attempts` S3 option: a whole number, at least 1 (None: RETRIES + 1)."""
    if value is None:
        return RETRIES + 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StoreConfigError(f"attempts must be a whole number, 1 or more, not {value!r}")
    return value


def configured_attempts(profile: str | None) -> int | None:
    """boto3's own setting of how many times a request is tried, the first included:
    `AWS_MAX_ATTEMPTS` (blank is unset), else the AWS config file's `max_attempts` in the
    section of `profile` (else `AWS_PROFILE`'s, else the default's); None when neither
    sets it. The store gives botocore its attempts explicitly (its own default is 6), which
    overrode both. A value that is not a whole number of 1 or more is `StoreConfigError`."""
    raw = os.environ.get("AWS_MAX_ATTEMPTS", "")
    if raw.strip():
        return _configured_count(raw, "AWS_MAX_ATTEMPTS")
    from botocore.exceptions import ProfileNotFound

    session = _botocore_session(profile)
    try:
        scoped = session.get_scoped_config()
    except ProfileNotFound:
        return None  # refused by the client's own session, at the first request, as before
    value = scoped.get("max_attempts")
    if value is None or not str(value).strip():
        return None
    where = session.get_config_variable("config_file")
    name = profile or session.profile or "default"
    return _configured_count(str(value), f"max_attempts in {where} (profile {name})")


def _configured_count(raw: str, name: str) -> int:
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise StoreConfigError(
            f"{name}={raw!r} is not a whole number of attempts, 1 or more (S3Options "
            "attempts, or forewarn checkpoint's --attempts, wins over it when given)"
        )
    return int(text)


# How long a request goes unanswered before a `RequestWatch` says what it waits for.
WAIT_NOTICE_SECONDS = 5.0


class RequestWatch:
    """Says (through `say`) which request a client has waited on for `after` seconds with no
    answer: where, which attempt of how many, and the read timeout that will end it. For the
    commands (`forewarn checkpoint ...`), which were silent for minutes on a hung service."""

    def __init__(
        self,
        limits: RequestLimits,
        say: Callable[[str], None],
        *,
        after: float = WAIT_NOTICE_SECONDS,
    ) -> None:
        self._limits = limits
        self._say = say
        self._after = after
        self._lock = threading.Lock()
        self._local = threading.local()
        # By thread: (started, method, url, attempt), until the attempt ends.
        self._waiting: dict[int, tuple[float, str, str, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def install(self, client: Any) -> None:
        events = client.meta.events
        events.register("before-call.s3", self._call)
        events.register("before-send.s3", self._send)
        events.register("needs-retry.s3", self._ended)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="forewarn-s3-wait", daemon=True
                )
                self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _call(self, **_: Any) -> None:
        self._local.attempt = 0

    def _send(self, request: Any, **_: Any) -> None:
        attempt = getattr(self._local, "attempt", 0) + 1
        self._local.attempt = attempt
        with self._lock:
            self._waiting[threading.get_ident()] = (
                time.monotonic(),
                str(request.method),
                str(request.url).split("?")[0],
                attempt,
            )

    def _ended(self, **_: Any) -> None:
        with self._lock:
            self._waiting.pop(threading.get_ident(), None)

    def _run(self) -> None:
        said: set[tuple[int, float]] = set()
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                waiting = list(self._waiting.items())
            for ident, (started, method, url, attempt) in waiting:
                if now - started < self._after or (ident, started) in said:
                    continue
                said.add((ident, started))
                self._say(
                    f"waiting for an answer from {url} ({method}): none for "
                    f"{now - started:.0f} s (attempt {attempt} of {self._limits.attempts}, "
                    f"read timeout {self._limits.read_timeout:g} s each)"
                )


def timeout_words(error: BaseException, limits: RequestLimits) -> str | None:
    """The limit that ended a request `error` (or its cause) reports, in words: botocore's
    timeout errors name the URL only."""
    try:
        from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError
    except ImportError:  # pragma: no cover - no S3 store without botocore
        return None
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ReadTimeoutError):
            return (
                f"no answer within the read timeout of {limits.read_timeout:g} s, "
                f"{limits.attempts} attempts"
            )
        if isinstance(seen, ConnectTimeoutError):
            return (
                f"no connection within the connect timeout of {limits.connect_timeout:g} s, "
                f"{limits.attempts} attempts"
            )
        seen = seen.__cause__ or seen.__context__
    return None


# Service error codes by what they mean to the user, and the `S3Options` fields that change it.
_DENIED = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "403", "Forbidden"})
_BAD_KEYS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidSecurity"})
_EXPIRED = frozenset(
    {"ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"}
)
_THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
)
_CREDENTIALS = ("access_key_id", "secret_access_key", "profile")
_CREDENTIAL_SOURCES = (
    "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the shared credentials "
    "file, an instance role"
)


def _tries(limits: RequestLimits) -> str:
    return f"{limits.attempts} attempt{'s' if limits.attempts != 1 else ''}"


def storage_error(error: BaseException, url: str, limits: RequestLimits) -> StorageError:
    """botocore's (or boto3's) `error` from a request of the store at `url` as the store's
    own `StorageError`: the store, what went wrong in words and the `S3Options` fields that
    change it (botocore's messages name one request's URL, or only a code), then its own
    text. `limits` are those the request ran under."""
    from botocore import exceptions as bx

    cause: BaseException = error
    last = getattr(error, "last_exception", None)  # boto3's RetriesExceededError
    if isinstance(last, BaseException):
        cause = last
    detail = " ".join(str(cause).split()) or type(cause).__name__
    response = getattr(cause, "response", None)
    if not isinstance(response, dict):
        response = None
    options: tuple[str, ...] = ()
    words: str
    if isinstance(cause, bx.ReadTimeoutError):
        words = f"no answer within the read timeout of {limits.read_timeout:g} s, {_tries(limits)}"
        options = ("read_timeout", "attempts")
    elif isinstance(cause, bx.ConnectTimeoutError):
        words = (
            f"no connection within the connect timeout of {limits.connect_timeout:g} s, "
            f"{_tries(limits)}"
        )
        options = ("connect_timeout", "endpoint_url", "attempts")
    elif isinstance(cause, bx.EndpointConnectionError):
        parts = urlsplit(str(getattr(cause, "kwargs", {}).get("endpoint_url", "")))
        where = f"{parts.scheme}://{parts.netloc}" if parts.netloc else "the endpoint"
        words = f"could not connect to {where}, {_tries(limits)}"
        options = ("endpoint_url", "attempts")
    elif isinstance(cause, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        words = "no credentials found"
        if isinstance(cause, bx.PartialCredentialsError):
            words = "the credentials found are incomplete"
        return StorageError(url, words, detail, options=_CREDENTIALS, also=_CREDENTIAL_SOURCES)
    elif isinstance(cause, bx.ClientError) or response is not None:
        code = str((response or {}).get("Error", {}).get("Code", ""))
        status = (response or {}).get("ResponseMetadata", {}).get("HTTPStatusCode")
        said = " ".join(str(part) for part in (status, code) if part) or "no code"
        if code in _EXPIRED:
            words = f"the credentials expired ({said})"
            options = ("session_token", *_CREDENTIALS)
        elif code in _BAD_KEYS:
            words = f"the credentials were refused ({said})"
            options = _CREDENTIALS
        elif code in _DENIED or (status == 403 and not code):
            words = f"access denied ({said}): the credentials' policy does not allow this"
            options = _CREDENTIALS
        elif code in _THROTTLED or status in (429, 503):
            words = f"the service asked to slow down ({said}) through {_tries(limits)}"
            options = ("attempts",)
        elif isinstance(status, int) and status >= 500:
            words = f"the service failed ({said}) through {_tries(limits)}"
            options = ("attempts",)
        else:
            words = f"the service refused the request ({said})"
    elif isinstance(cause, (bx.ConnectionClosedError, bx.ResponseStreamingError)):
        words = f"the connection was closed before the answer was complete, {_tries(limits)}"
        options = ("attempts",)
    else:
        words = f"the request failed ({type(cause).__name__})"
        if isinstance(cause, bx.HTTPClientError):
            words = f"the connection failed ({type(cause).__name__}), {_tries(limits)}"
            options = ("attempts",)
    return StorageError(url, words, detail, options=options, response=response)


def _is_storage_client_error(error: BaseException) -> bool:
    """Whether `error` is one of botocore's or boto3's own (a bad parameter is this code's
    fault, not the storage's, and is left as it is)."""
    module = type(error).__module__
    if not module.startswith(("botocore", "boto3", "s3transfer")):
        return False
    return type(error).__name__ != "ParamValidationError"


class _Named:
    """A boto3 client, or a paginator or streaming body of one, whose requests raise
    `StorageError` (`storage_error`) instead of botocore's errors; anything else as is."""

    def __init__(self, inner: Any, url: str, limits: RequestLimits) -> None:
        self._inner = inner
        self._url = url
        self._limits = limits

    @property
    def inner(self) -> Any:
        return self._inner

    def _named(self, error: BaseException) -> StorageError:
        return storage_error(error, self._url, self._limits)

    def _wrap(self, value: Any, key: object = None) -> Any:
        """A reply's streaming body (of `key`), a paginator or a page iterator wrapped in
        turn."""
        if isinstance(value, dict) and "Body" in value and hasattr(value["Body"], "read"):
            value = dict(value)
            value["Body"] = _NamedBody(value["Body"], self._url, self._limits, str(key))
            return value
        from botocore.paginate import PageIterator, Paginator

        if isinstance(value, (Paginator, PageIterator)):
            return _Named(value, self._url, self._limits)
        return value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name in ("meta", "exceptions") or not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return self._wrap(value(*args, **kwargs), kwargs.get("Key"))
            except Exception as error:
                if _is_storage_client_error(error):
                    raise self._named(error) from error
                raise

        return call

    def __iter__(self) -> Iterator[Any]:
        pages = iter(self._inner)
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except Exception as error:
                if _is_storage_client_error(error):
                    raise self._named(error) from error
                raise
            yield page


class _NamedBody(io.RawIOBase):
    """A reply's streaming body whose reads raise `StorageError` (a body that stalls past
    the read timeout, a connection reset mid-body), naming the object: botocore's error
    for a body read says `Read timeout on endpoint URL: "None"`, and a read of a body is
    tried once, whatever the request's attempts."""

    def __init__(self, inner: Any, url: str, limits: RequestLimits, key: str) -> None:
        super().__init__()
        self._body = inner
        self._url = url
        self._limits = limits
        self._key = key

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        try:
            data: bytes = self._body.read(None if size is None or size < 0 else size)
        except Exception as error:
            if _is_storage_client_error(error):
                raise self._named(error) from error
            raise
        return data

    def _named(self, error: BaseException) -> StorageError:
        from botocore.exceptions import ReadTimeoutError

        seconds = self._limits.read_timeout
        # botocore's text names no URL here ("None"): the connection's own error does.
        inner = getattr(error, "kwargs", {}).get("error") or error
        detail = f"{type(error).__name__}: {' '.join(str(inner).split())}"
        if isinstance(error, ReadTimeoutError):
            what = f"the body of {self._key} stopped: nothing more within the read timeout "
            return StorageError(
                self._url, f"{what}of {seconds:g} s", detail, options=("read_timeout",)
            )
        what = f"the body of {self._key} was cut off ({type(error).__name__})"
        return StorageError(self._url, what, detail)

    def readall(self) -> bytes:
        return self.read()

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(memoryview(buffer).cast("B")))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._body.close()
        super().close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._body, name)
