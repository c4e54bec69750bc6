"""Uploads stuck on stalled connections (a front-end host of the service gone silent: its
connections hang, new ones work) must not hold up other saves: the background save that
`final()` cancels and leaves behind is exactly such a save, and the final one comes next."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint import s3 as s3_backend
from support import eventually

STALL_AFTER = 1 << 20  # bytes a connection carries, once stalling is on, before it hangs


class StallingProxy:
    """A TCP proxy to moto. While `stall` is set, a connection that carries more than
    STALL_AFTER bytes towards the server stops forwarding for good, both ways, until
    `release()` resets it."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.stall = False
        self.stalled: list[socket.socket] = []
        self._released = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            # A save left behind retrying after the test (its stalled connection reset by
            # release()), when the session's moto server is gone: the retry fails, as the
            # storage would, instead of this thread raising.
            client.close()
            return
        carried = 0
        try:
            while True:
                ready, _, _ = select.select([client, server], [], [], 0.2)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client and self.stall:
                        carried += len(data)
                        if carried > STALL_AFTER:
                            self.stalled.append(client)
                            self._released.wait()
                            return
                    (server if sock is client else client).sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            server.close()

    def release(self) -> None:
        if self._released.is_set():
            return
        for sock in self.stalled:
            # A reset, so the stuck requests fail now instead of at their read timeout.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        self._released.set()

    def close(self) -> None:
        self.release()
        self._listener.close()


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[StallingProxy]:
    server = StallingProxy(moto_endpoint)
    yield server
    server.close()


def test_a_save_stuck_on_stalled_connections_does_not_hold_up_the_next(
    proxy: StallingProxy, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_timeout = 30.0
    monkeypatch.setattr(s3_backend, "READ_TIMEOUT", read_timeout)
    options = S3Options(endpoint_url=proxy.url, part_size=5 << 20, concurrency=2)
    store = CheckpointStore(f"s3://{bucket}/run", s3=options)
    stuck = store.save(1)
    stream = stuck.open("model.bin")
    proxy.stall = True
    stream.write(bytes(10 << 20))  # two parts, one upload thread each, both stalled
    eventually(lambda: len(proxy.stalled) >= 2, what="both parts of step 1 stalled")
    proxy.stall = False

    data = b"w" * (11 << 20)  # a multipart upload of its own
    started = time.monotonic()
    store.flush(2, lambda gen: gen.write_bytes("model.bin", data))
    took = time.monotonic() - started
    assert took < read_timeout / 2, f"the save waited {took:.1f} s behind the stuck one"

    proxy.release()
    stuck.abort("left behind")
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 2
    assert latest.read_bytes("model.bin") == data
    store.close()
