"""What a part's body tells as progress while the HTTP client reads it: an attempt's bytes
past the furthest any attempt took, but not a retry's first moments, when its fresh
connection's socket buffers take a burst whether or not the service reads anything."""

from __future__ import annotations

import types

import pytest
from forewarn.clients.checkpoint import s3 as s3_backend
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

BLOCK = 128 << 10


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(s3_backend, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


def body(size: int) -> tuple[s3_backend._SentBody, list[int]]:
    told: list[int] = []
    part = s3_backend._SentBody(bytes(size), lambda: told.append(1))
    return part, told


def test_a_retry_filling_fresh_buffers_a_little_further_is_no_progress(clock: Clock) -> None:
    """Seen in CI under load: a 5 MiB part's first attempt took 4.85 MB into the stalled
    connection's buffers, a retry 1 s later took the rest at once, and the stall bound
    started over (close() waited 13.7 s for a 4 s bound)."""
    part, told = body(40 * BLOCK)
    for _ in range(37):
        part.read(BLOCK)
    assert len(told) == 37  # the first attempt's bytes are progress
    clock.now += 1.0  # its read timeout; botocore reads the body from the start again
    part.seek(0)
    while part.read(BLOCK):
        pass
    assert len(told) == 37, "a retry's burst into fresh buffers counted as progress"


def test_a_retry_still_carried_after_the_fill_is_progress(clock: Clock) -> None:
    """A retry on a live link (the first attempt reset) goes on taking bytes: past the
    furthest point after RETRY_FILL_SECONDS, that is progress again."""
    part, told = body(40 * BLOCK)
    for _ in range(10):
        part.read(BLOCK)
    part.seek(0)
    for _ in range(12):
        part.read(BLOCK)
    assert len(told) == 10
    clock.now += s3_backend.RETRY_FILL_SECONDS
    part.read(BLOCK)
    assert len(told) == 11


@settings(max_examples=examples(60), deadline=None)
@given(
    attempts=st.lists(
        st.lists(st.integers(min_value=1, max_value=3 * BLOCK), min_size=1, max_size=8),
        min_size=1,
        max_size=5,
    ),
    size=st.integers(min_value=1, max_value=16 * BLOCK),
)
def test_only_the_first_attempt_advancing_tells_progress_within_the_fill(
    attempts: list[list[int]], size: int
) -> None:
    """Any reads, any retries, all within the fill window: progress is told exactly for the
    first attempt's reads that took new bytes, and the body's bytes are read unchanged."""
    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    told: list[int] = []
    part = s3_backend._SentBody(data, lambda: told.append(1))
    expected = 0
    for number, reads in enumerate(attempts):
        part.seek(0)
        got = b""
        for read in reads:
            before = part.tell()
            chunk = part.read(read)
            got += chunk
            if number == 0 and part.tell() > before:
                expected += 1
        assert got == data[: len(got)]
    assert len(told) == expected


@settings(max_examples=examples(60), deadline=None)
@given(
    attempts=st.lists(
        st.lists(st.integers(min_value=1, max_value=3 * BLOCK), min_size=1, max_size=8),
        min_size=1,
        max_size=5,
    ),
    size=st.integers(min_value=0, max_value=8 * BLOCK),
)
def test_a_body_awaits_its_answer_only_once_its_current_attempt_read_it_whole(
    attempts: list[list[int]], size: int
) -> None:
    """What `final()`'s tail wait counts as an answer awaited, not a stopped link: the current
    attempt has read every byte; a retry reading from the start again awaits nothing until it
    reaches the end once more. `taken` is the furthest any attempt read."""
    part = s3_backend._SentBody(bytes(size), lambda: None)
    furthest = 0
    for reads in attempts:
        part.seek(0)  # botocore's retry rewinds the body
        assert not part.awaiting_answer() or size == 0
        for read in reads:
            part.read(read)
            furthest = max(furthest, part.tell())
            assert part.awaiting_answer() == (part.tell() >= size)
            assert part.taken == furthest
