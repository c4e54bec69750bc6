"""An exit's save (one with a deadline) whose storage stops answering just after its commit,
at the requests only retention makes (the older generation's claim look-up and deletes). Its
retention ran on the store's own client, not bounded by the save's time: a single rank's
save that had committed was given up at its timeout (`CommitTimeout`) and a save of several
ranks held rank 0 for the client's timeouts and retries (minutes) past its bound. An exit's
save now leaves retention to the next commit, saying so."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from urllib.parse import unquote

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options
from forewarn.clients.checkpoint.manifest import generation_name
from s3_proxy import Reply, Request, S3Proxy

# The exit save's time: far below the client's read timeout and retries on a held request.
TIMEOUT = 3.0
OLD = generation_name(1)


class HoldsOldGeneration(S3Proxy):
    """While `holding`, holds every request naming the old generation (step 1: what only
    retention asks about once step 2 is saved) unanswered until `release` is set."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.holding = False
        self.held = 0
        self.release = threading.Event()

    def answer(self, request: Request) -> Reply | None:
        if self.holding and OLD in unquote(request.path):
            self.held += 1
            self.release.wait(120)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[HoldsOldGeneration]:
    with HoldsOldGeneration(moto_endpoint) as server:
        try:
            yield server
        finally:
            server.release.set()


@pytest.fixture
def store(proxy: HoldsOldGeneration, bucket: str) -> Iterator[CheckpointStore]:
    made = CheckpointStore(f"s3://{bucket}/run", keep=1, s3=S3Options(endpoint_url=proxy.url))
    yield made
    proxy.release.set()
    made.close()


def _write(gen: object) -> None:
    gen.write_bytes("model.bin", b"m" * 1024)  # type: ignore[attr-defined]


def test_a_single_ranks_exit_save_that_committed_is_not_held_by_retention(
    store: CheckpointStore, proxy: HoldsOldGeneration, caplog: pytest.LogCaptureFixture
) -> None:
    store.flush(1, _write)
    proxy.holding = True
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="forewarn.checkpoint"):
        flushed = store.flush(2, _write, timeout=TIMEOUT)
    took = time.monotonic() - started
    assert flushed.generation.step == 2
    assert took < TIMEOUT, f"the exit's save took {took:.1f} s"
    assert proxy.held == 0, "retention ran after the exit's save"
    assert "with a deadline: retention (keep=1) is left to the next commit" in caplog.text
    proxy.holding = False
    assert store.steps() == [1, 2]  # one more than keep until the next commit
    store.flush(3, _write)  # no deadline: retention runs, for both older generations
    assert store.steps() == [3]


def test_rank_0_of_an_exit_save_of_two_ranks_is_not_held_by_retention(
    store: CheckpointStore, proxy: HoldsOldGeneration
) -> None:
    store.flush(1, _write)
    proxy.holding = True
    outcome: dict[int, object] = {}

    def rank(number: int) -> None:
        try:
            with store.save(2, rank=number, world_size=2, requests_within=TIMEOUT) as gen:
                gen.write_bytes(f"model-{number}.bin", b"m" * 1024)
            outcome[number] = gen.committed
        except BaseException as exc:
            outcome[number] = exc

    started = time.monotonic()
    ranks = [threading.Thread(target=rank, args=(n,), daemon=True) for n in (0, 1)]
    for thread in ranks:
        thread.start()
    for thread in ranks:
        thread.join(TIMEOUT + 5)
    took = time.monotonic() - started
    assert not any(thread.is_alive() for thread in ranks), f"still saving after {took:.1f} s"
    assert [getattr(outcome[n], "step", outcome[n]) for n in (0, 1)] == [2, 2]
    assert proxy.held == 0, "retention ran after the exit's save"
