"""An S3 endpoint that accepts connections and never answers (a hung service): a save given
a deadline (a terminate's final save) fails there, saying so, instead of running on past it
(60 s per request, 6 times) until the SIGKILL cuts it off without a word."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, CommitTimeout, S3Options
from forewarn.clients.checkpoint.testing import loopback_s3_env
from support import LazyModule, requires

torch = LazyModule("torch")


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


def in_thread(call: object, limit: float) -> BaseException | object:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())  # type: ignore[operator]
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    assert outcome, f"still saving after {limit:.0f} s"
    return outcome[0]


def test_a_save_with_a_timeout_to_a_silent_endpoint_fails_at_it(silent_endpoint: str) -> None:
    store = CheckpointStore("s3://bucket/run", s3=S3Options(endpoint_url=silent_endpoint))
    started = time.monotonic()
    failure = in_thread(
        lambda: store.flush(1, lambda gen: gen.write_bytes("model.bin", b"w"), timeout=2.0), 40
    )
    assert isinstance(failure, CommitTimeout), failure
    assert time.monotonic() - started < 20
    assert "step-000000000001 was not committed" in str(failure)
    assert "within 2.0 s" in str(failure)


@requires("torch")
def test_the_final_background_save_to_a_silent_endpoint_fails_at_the_deadline(
    silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.0)  # the grace past it
    store = CheckpointStore("s3://bucket/run", s3=S3Options(endpoint_url=silent_endpoint))
    saver = BackgroundSaver(store)
    started = time.monotonic()
    failure = in_thread(lambda: saver.final(5, {"w": torch.zeros(1000)}, seconds_left=3.0), 40)
    assert isinstance(failure, CommitTimeout), failure
    assert time.monotonic() - started < 20
    assert "step-000000000005 was not committed" in str(failure)
