"""`final()`'s deadline as it stands (`FinalDeadline`) and the moment its wait for the save in
flight ends for it (`_start_by`): unmoved, the bound taken once before; moved either way, the
final save keeps its estimate before the deadline as it stands."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.background import CANCEL_GRACE_SECONDS, _start_by
from forewarn.clients.checkpoint.final_deadline import MOVED_SECONDS, FinalDeadline
from forewarn.clients.checkpoint.testing import DelegatingBackend
from hypothesis import given, settings
from hypothesis import strategies as st
from support import LazyModule, examples, requires

torch = LazyModule("torch")

# time.monotonic() runs on between the test's reading and the deadline's.
SLACK = 0.05
seconds = st.floats(0.0, 3600.0, allow_nan=False)


@settings(max_examples=examples(200), deadline=None)
@given(seconds_left=seconds, remaining=seconds, estimate=seconds)
def test_an_unmoved_deadline_ends_the_wait_where_the_bound_taken_once_did(
    seconds_left: float, remaining: float, estimate: float
) -> None:
    if remaining + estimate > seconds_left:
        return  # `final()` waits so only when both fit
    started = time.monotonic()
    deadline = FinalDeadline(
        started, seconds_left, lambda: started + seconds_left - time.monotonic()
    )
    start_by = _start_by(deadline, started + remaining, estimate)()
    before = max(seconds_left - estimate - CANCEL_GRACE_SECONDS, remaining)
    assert abs((start_by - started) - before) < SLACK
    assert deadline.words() == ""


@settings(max_examples=examples(200), deadline=None)
@given(seconds_left=seconds, moved=st.floats(-3600.0, 3600.0), remaining=seconds, estimate=seconds)
def test_a_moved_deadline_leaves_the_final_save_its_estimate_before_it(
    seconds_left: float, moved: float, remaining: float, estimate: float
) -> None:
    started = time.monotonic()
    now_left = seconds_left + moved
    deadline = FinalDeadline(started, seconds_left, lambda: started + now_left - time.monotonic())
    at = started + now_left
    start_by = _start_by(deadline, started + remaining, estimate)()
    # Never later than the final save's estimate allows, nor earlier than needed for it.
    assert start_by + estimate <= at + SLACK
    assert start_by >= at - estimate - CANCEL_GRACE_SECONDS - SLACK
    # Where the upload's own estimate still fits, it is never cut short.
    if started + remaining + estimate <= at - SLACK:
        assert start_by >= started + remaining - SLACK
    words = deadline.words()
    if abs(moved) >= MOVED_SECONDS + SLACK:
        assert ("later" if moved > 0 else "earlier") in words, words
        assert f"was {seconds_left:.1f} s" in words, words
    elif abs(moved) < MOVED_SECONDS - SLACK:
        assert words == ""


def test_a_deadline_no_longer_known_stays_where_it_was_last_seen() -> None:
    answers: list[float | None] = [30.0, None, None]
    started = time.monotonic()
    deadline = FinalDeadline(started, 60.0, lambda: answers.pop(0))
    seen = deadline.at()
    assert seen is not None and abs(seen - (time.monotonic() + 30.0)) < SLACK
    assert deadline.at() == seen  # the notice answered: the last deadline seen holds
    assert abs(deadline.moved() - (seen - (started + 60.0))) < SLACK
    fixed = FinalDeadline(started, 60.0)
    assert fixed.at() == started + 60.0 and not fixed.follows
    assert FinalDeadline(started, None).at() is None


class HeldStep(DelegatingBackend):
    """The state file of step 2 is held at its first write until `release` is set."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.reached = threading.Event()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not key.endswith("state.pt") or not key.startswith(f"step-{2:012d}/"):
            return inner
        original = inner.write

        def write(data: Any) -> int:
            self.reached.set()
            self.release.wait(30)
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def _short_notice(tmp_path: Path) -> tuple[BackgroundSaver, HeldStep]:
    """Step 2 uploading (held) 4 s into a save timed at 5 s: with 3 s left, the final save
    alone does not fit and the rest of step 2 does, so `final()` waits for it to the
    deadline (`_wait_to_deadline`)."""
    backend = HeldStep(CheckpointStore(str(tmp_path / "ckpt")).backend)
    saver = BackgroundSaver(CheckpointStore(backend=backend))
    saver.save(1, {"w": torch.arange(16.0)})
    saver.wait()
    saver.save(2, {"w": torch.arange(16.0) + 1})
    assert backend.reached.wait(30), "step 2 never reached its write"
    saver._durable_estimate = 5.0
    saver._started = time.monotonic() - 4.0
    return saver, backend


def _moving(first: float, then: float, after: float) -> Callable[[], float]:
    """Seconds left to a deadline `first` s out, moved to `then` s out `after` s from now."""
    began = time.monotonic()

    def left() -> float:
        now = time.monotonic()
        return began + (first if now - began < after else then) - now

    return left


@requires("torch")
def test_the_wait_for_a_short_notice_follows_its_deadline_moved_later(tmp_path: Path) -> None:
    """Waited for to the deadline as it stands: moved from 3 s to 30 s out, the upload that
    ends at 5 s commits (bounded by the old deadline, it was cancelled at 3 s)."""
    saver, backend = _short_notice(tmp_path)
    threading.Timer(5.0, backend.release.set).start()
    try:
        final = saver.final(3, {"w": torch.arange(16.0)}, 3.0, left=_moving(3.0, 30.0, 0.5))
    finally:
        backend.release.set()
    assert final.choice == "waited", final.reason
    assert "deadline moved later" in final.reason, final.reason
    assert [g.step for g in saver.store.generations()] == [1, 2, 3]
    saver.close()


@requires("torch")
def test_the_wait_for_a_short_notice_stops_at_its_deadline_moved_earlier(
    tmp_path: Path,
) -> None:
    """Moved from 3 s to 1.5 s out, the wait stops there (bounded by the old deadline, it
    went on to 3 s, the final save's own time cut by the SIGKILL at 1.5 s)."""
    saver, backend = _short_notice(tmp_path)
    began = time.monotonic()
    try:
        final = saver.final(3, {"w": torch.arange(16.0)}, 3.0, left=_moving(3.0, 1.5, 0.3))
    finally:
        backend.release.set()
    assert final.choice == "cancelled", final.reason
    assert "deadline moved earlier" in final.reason, final.reason
    # The final save (a small local write) began by the new deadline, not the old one.
    assert final.durable_seconds < 2.5 + CANCEL_GRACE_SECONDS, final
    assert time.monotonic() - began < 5.0
    saver.close()


@requires("torch")
def test_the_final_step_in_flight_says_when_its_deadline_moved_earlier_passes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The save in flight is of the final step itself, waited for past any deadline: moved
    from 30 s to 0.5 s out, the WARNING that the deadline passed with the final save not
    durable comes once the new one passes (by the old one, it never came: the SIGKILL did)."""
    backend = HeldStep(CheckpointStore(str(tmp_path / "ckpt")).backend)
    saver = BackgroundSaver(CheckpointStore(backend=backend))
    saver.save(2, {"w": torch.arange(16.0)})
    assert backend.reached.wait(30), "step 2 never reached its write"
    threading.Timer(2.0, backend.release.set).start()
    try:
        with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
            final = saver.final(2, {"w": torch.arange(16.0)}, 30.0, left=_moving(30.0, 0.5, 0.2))
    finally:
        backend.release.set()
    assert final.choice == "waited", final.reason
    passed = [r.getMessage() for r in caplog.records if "the deadline passed" in r.getMessage()]
    assert passed and re.search(r"passed \(0\.\d s\)", passed[0]), passed
    saver.close()
