"""`final()` says what it waits for when it starts waiting for the upload in flight, and how
that goes while it waits. It said nothing until the wait was over (tens of seconds on a slow
link), then "final checkpoint of step N: ...; writing it now" with the figures it had chosen
by before the wait: the operator watched a silent job. Against the moto server behind a slow
link on loopback."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, S3Options, background
from forewarn.clients.checkpoint.s3 import MIN_PART
from slow_link import SlowLink, small_send_buffers
from support import eventually

# Each part of the upload in flight takes 3 s at this rate per connection.
RATE = MIN_PART / 3
# How often the wait says how it goes (10 s in the field): shorter, to see it in seconds.
NEWS = 0.5


@pytest.fixture
def link(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLink]:
    small_send_buffers(monkeypatch)
    with SlowLink(moto_endpoint) as proxy:
        yield proxy
        proxy.rate = None


def test_final_says_what_it_waits_for_as_it_starts_and_while_it_waits(
    link: SlowLink, bucket: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background, "PROGRESS_LOG_SECONDS", NEWS, raising=False)
    store = CheckpointStore(
        f"s3://{bucket}/run", s3=S3Options(endpoint_url=link.url, part_size=MIN_PART)
    )
    saver = BackgroundSaver(store)
    saver.save(1, {"w": b"one"})
    saver.wait()
    link.rate = RATE
    saver.save(2, {"w": os.urandom(2 * MIN_PART)})
    eventually(lambda: link.busy(256 << 10) >= 1, what="a part's bytes moving")
    # Saves were timed at 5 s: step 2 and the final save fit in the 60 s left, so it waits.
    saver._durable_estimate = 5.0
    saver._started = time.monotonic()
    called = time.time()  # the wall clock of the log records' `created`
    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        final = saver.final(3, {"w": b"three"}, seconds_left=60.0)
    # Waited for, or cancelled when a loaded moto answered its last part over 3 s late
    # (`TAIL_QUIET_SECONDS`, before the deadline): either way, the wait is what is said.
    assert final.choice in ("waited", "cancelled"), final.reason
    lines = [(r.created, r.getMessage()) for r in caplog.records]
    started = [(at, line) for at, line in lines if "waiting for the background save" in line]
    going = [(at, line) for at, line in lines if "still waiting" in line]
    chose = [(at, line) for at, line in lines if "writing it now" in line]
    assert started and chose, lines
    (began, first), (wrote, last) = started[0], chose[0]
    # Said as the wait began, with what it waits for and the time left; not once it ended.
    assert began - called < 1.0, (began - called, lines)
    assert "of step 3: waiting for the background save of step 2 first" in first, first
    assert re.search(r"\d+\.\d MiB sent", first), first
    assert re.search(r"\d+\.\d s to the deadline", first), first
    # While it waits: how far the upload is, of how many bytes, and the time left.
    assert going, lines
    assert all(began < at < wrote for at, _line in going), lines
    # (of the file torch.save wrote: more than the state's 10 MiB of bytes, which it pickles
    # as text)
    assert any(re.search(r"\d+\.\d MiB of \d+\.\d MiB sent", line) for _at, line in going), going
    # The final save's line, with the time the wait took and what is left now.
    waited = float(re.search(r"writing it now \((\d+\.\d) s after", last).group(1))  # type: ignore[union-attr]
    assert waited >= wrote - began - 0.5, (waited, last)
    left = float(re.search(r"(\d+\.\d) s to the deadline\)", last).group(1))  # type: ignore[union-attr]
    assert abs(left - (60.0 - waited)) < 1.0, last
    assert [generation.step for generation in store.generations()][-1] == 3
    store.close()
