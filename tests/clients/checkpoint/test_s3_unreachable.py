"""An S3 endpoint that takes no connections (a hung service, a blackholed route) fails a save
within a bound well below a notice window, naming the endpoint."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options


@pytest.fixture
def unanswered_endpoint() -> Iterator[str]:
    """A listener that never accepts, its queue full: further connects hang (the kernel drops
    their SYNs), as to a service that is down behind a live route."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    address = listener.getsockname()
    held: list[socket.socket] = []
    try:
        for _ in range(64):
            probe = socket.socket()
            probe.settimeout(0.5)
            try:
                probe.connect(address)
            except TimeoutError:
                probe.close()
                break
            held.append(probe)  # queued: the next one may hang
        else:
            pytest.skip("the kernel never stopped queueing connections")
        yield f"http://127.0.0.1:{address[1]}"
    finally:
        for sock in held:
            sock.close()
        listener.close()


def test_a_save_to_an_endpoint_taking_no_connections_fails_within_a_minute(
    unanswered_endpoint: str, s3_env: dict[str, str]
) -> None:
    store = CheckpointStore("s3://bucket/run", s3=S3Options(endpoint_url=unanswered_endpoint))
    failures: list[BaseException] = []

    def save() -> None:
        try:
            store.flush(1, lambda gen: gen.write_bytes("model.bin", b"weights"))
        except BaseException as exc:
            failures.append(exc)

    saver = threading.Thread(target=save, daemon=True)
    saver.start()
    # boto3's own connect timeout alone is 60 s, and a request is tried 6 times.
    saver.join(60)
    assert not saver.is_alive(), "the save was still trying after 60 s"
    assert len(failures) == 1
    assert "Connect timeout on endpoint URL" in str(failures[0])
    assert unanswered_endpoint in str(failures[0])
    store.close()
