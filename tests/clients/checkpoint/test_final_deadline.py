"""`final()`'s deadline as it stands (`FinalDeadline`) and the moment its wait for the save in
flight ends for it (`_start_by`): unmoved, the bound taken once before; moved either way, the
final save keeps its estimate before the deadline as it stands."""

from __future__ import annotations

import time

from forewarn.clients.checkpoint.background import CANCEL_GRACE_SECONDS, _start_by
from forewarn.clients.checkpoint.final_deadline import MOVED_SECONDS, FinalDeadline
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

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
