"""A training loop with background saves (`CheckpointGuard(background=True)`) through an S3
outage: the upload of one periodic save stalls (its connection stops forwarding), and the loop
goes on. The next periodic save waited for the stalled one until it was given up
(EXIT_STALL_SECONDS, 120 s in use): one step of the loop took about 106 s. A periodic save due
while the one before is still uploading is now skipped, said once; the stalled one's failure
is raised by due() once it is given up, and an exit's save cancels it at once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.checkpoint import BackgroundSaveError, CheckpointStore, S3Options, background
from forewarn.clients.event import Event
from support import LazyModule, eventually, requires
from test_s3_stalled import STALL_AFTER, StallingProxy

pytestmark = requires("torch")
torch = LazyModule("torch")

# The stall bound (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL_BOUND = 4.0
# A step of the loop: a training step that takes a moment.
STEP_SECONDS = 0.01
# The terminate's notice: how long before its deadline it comes.
NOTICE_SECONDS = 12.0


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[StallingProxy]:
    server = StallingProxy(moto_endpoint)
    yield server
    server.close()


@pytest.fixture
def guard(proxy: StallingProxy, bucket: str) -> Iterator[CheckpointGuard]:
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    made = CheckpointGuard(
        notices=False,
        handle_signals=False,
        flag_file=None,
        store=store,
        background=True,
        every_steps=2,
    )
    yield made
    proxy.release()  # the stalled upload's connection is reset: its thread ends
    made.close()
    store.close()


def _state(step: int) -> dict[str, object]:
    # More than a stalling connection carries: its upload stalls.
    return {"w": torch.full((STALL_AFTER // 2,), float(step)), "step": step}


def _terminate(seconds: float) -> Event:
    now = datetime.now(timezone.utc)
    return Event(
        id="aws/terminate/stalled",
        seq=1,
        action="terminate",
        reason="spot-interruption",
        provider="aws",
        deadline=now + timedelta(seconds=seconds),
        noticed_at=now,
        sent_at=now,
    )


class Loop:
    """The README's background-save loop, timing each step (its `due()` and save)."""

    def __init__(self, guard: CheckpointGuard) -> None:
        self.guard = guard
        self.step = 0
        self.longest = 0.0
        self.failures: list[BackgroundSaveError] = []
        self.result: object = None

    def one_step(self) -> None:
        self.step += 1
        time.sleep(STEP_SECONDS)
        started = time.monotonic()
        try:
            if self.guard.due(self.step):
                self.result = self.guard.save_state(self.step, _state(self.step))
        except BackgroundSaveError as error:
            self.failures.append(error)
        self.longest = max(self.longest, time.monotonic() - started)

    def until(self, done: object, what: str, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            assert time.monotonic() < end, f"timed out waiting for {what}"
            self.one_step()


def test_periodic_saves_are_skipped_while_a_stalled_upload_runs_and_training_goes_on(
    guard: CheckpointGuard,
    proxy: StallingProxy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(background, "EXIT_STALL_SECONDS", STALL_BOUND)
    saver = guard.saver
    assert saver is not None
    loop = Loop(guard)
    loop.until(lambda: guard.durable_step == 2, "step 2 to commit before the outage")
    proxy.stall = True
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    caplog.clear()
    loop.until(lambda: saver.in_flight is not None, "a save to be uploading in the outage")
    stalled_step = saver.in_flight
    loop.longest = 0.0
    loop.until(lambda: loop.failures, "the stalled save's failure", timeout=STALL_BOUND * 6)
    # Waited for, the next periodic save held this step for the whole stall bound (106 s
    # of the 120 s in use). Skipped, the steps go on; giving the stalled one up costs a step
    # the cancel's grace (1 s) once.
    assert loop.longest < STALL_BOUND / 2, f"a step of the loop took {loop.longest:.1f} s"
    assert loop.step > stalled_step + 4, "training did not go on"
    (failure,) = loop.failures
    assert failure.step == stalled_step and "given up" in str(failure)
    skipped = [r.getMessage() for r in caplog.records if "is skipped" in r.getMessage()]
    assert len(skipped) == 1, skipped
    assert f"the background save of step {stalled_step} is still uploading" in skipped[0]
    assert guard.durable_step == 2
    proxy.stall = False  # the outage ends: the retry commits
    loop.until(lambda: (guard.durable_step or 0) > stalled_step, "the retry to commit")


def test_an_exit_cancels_a_stalled_upload_at_once_and_saves_within_the_time_left(
    guard: CheckpointGuard, proxy: StallingProxy
) -> None:
    """final() waited for an upload it expected to end soon until the last moment its
    estimate of the final save allowed (the notice's time less that estimate and a second),
    even when the upload had moved nothing for minutes: a two-minute notice spent waiting on
    a dead connection, and a final save slower than its estimate missed the deadline. An
    upload that moves nothing for TAIL_QUIET_SECONDS is now cancelled then."""
    saver = guard.saver
    assert saver is not None
    loop = Loop(guard)
    loop.until(lambda: guard.durable_step == 2, "step 2 to commit before the outage")
    proxy.stall = True
    loop.until(lambda: saver.in_flight is not None, "a save to be uploading in the outage")
    eventually(lambda: proxy.stalled, what="its upload to stall")
    proxy.stall = False  # new connections work: the final save goes through
    guard._on_event(_terminate(NOTICE_SECONDS))
    started = time.monotonic()
    exited = lambda: getattr(loop.result, "exit", False)  # noqa: E731
    loop.until(exited, "the exit's save", timeout=NOTICE_SECONDS * 2)
    took = time.monotonic() - started
    # Waited for until its estimate's last moment, the exit's save ended at the deadline.
    assert took < NOTICE_SECONDS / 2, f"the exit's save ended {took:.1f} s after the notice"
    assert getattr(loop.result, "choice", None) == "cancelled", loop.result
    assert "moved nothing" in str(getattr(loop.result, "choice_reason", "")), loop.result
    assert guard.durable_step == loop.step
    latest = guard.store.latest() if guard.store is not None else None
    assert latest is not None and latest.step == loop.step


def test_an_exit_save_that_storage_holds_says_what_it_does_before_it_ends(
    guard: CheckpointGuard, proxy: StallingProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A GCP preemption (30 s) in an S3 outage: the exit's save began at the terminate,
    cancelled the stalled upload once it had moved nothing for 3 s, then hung itself until the
    SIGKILL at the deadline. The job's log said nothing after `the save due at step 120 is
    skipped`: what the final save chose was logged only once it was durable, and its first
    "still running" warning comes 30 s in. It now says when the exit's save starts, and what
    it chose about the upload in flight, while it runs."""
    saver = guard.saver
    assert saver is not None
    loop = Loop(guard)
    loop.until(lambda: guard.durable_step == 2, "step 2 to commit before the outage")
    proxy.stall = True
    loop.until(lambda: saver.in_flight is not None, "a save to be uploading in the outage")
    stalled_step = saver.in_flight
    eventually(lambda: proxy.stalled, what="its upload to stall")
    caplog.set_level(logging.INFO, logger="forewarn.clients")
    guard._on_event(_terminate(NOTICE_SECONDS))
    exited = lambda: getattr(loop.result, "exit", False)  # noqa: E731
    training = threading.Thread(
        target=loop.until, args=(exited, "the exit's save", NOTICE_SECONDS * 4), daemon=True
    )
    training.start()

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    (starts,) = eventually(lambda: said("the exit's save of step"), timeout=5, what="its start")
    assert f"the background save of step {stalled_step} is still uploading" in starts, starts
    (chose,) = eventually(
        lambda: said("; writing it now"), timeout=10, what="what the final save chose"
    )
    assert f"step {stalled_step} was expected" in chose and "moved nothing" in chose, chose
    assert not exited(), "the exit's save ended: nothing said it while it ran"
    proxy.stall = False
    proxy.release()  # the outage ends: the final save's retry goes through
    training.join(NOTICE_SECONDS * 4)
    assert exited(), "the exit's save did not end once the outage did"
    assert guard.durable_step == loop.step
