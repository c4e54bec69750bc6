"""A training loop with background saves (`CheckpointGuard(background=True)`) whose store
fails, then recovers: S3 behind a loopback proxy that refuses every write (403 AccessDenied,
which botocore does not retry) until told to stop. The retry of a failed save came at the
second `due()` after it, every time: a dead store cost a snapshot copy and a failed upload
every other step for as long as it stayed dead. Failures in a row now wait longer and longer
for their retry, and a drain or a terminate still saves at once."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from forewarn.clients import CheckpointGuard, guard_background
from forewarn.clients.checkpoint import BackgroundSaveError, CheckpointStore, S3Options
from forewarn.clients.event import Event
from s3_proxy import XML, Reply, Request, S3Proxy

ACCESS_DENIED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)
# The backoff, scaled down: the first retry at once, then 0.4 s, then 0.8 s at most.
FIRST = 0.4
MOST = 0.8
# A step of the loop: a training step that takes a moment.
STEP_SECONDS = 0.005


class RefusingProxy(S3Proxy):
    """Forwards reads; refuses every write while `refusing` (a store whose credentials lost
    write access, a bucket policy changed under the job)."""

    refusing = True

    def answer(self, request: Request) -> Reply | None:
        if self.refusing and request.command in ("PUT", "POST"):
            return Reply(403, XML, ACCESS_DENIED)
        return None


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[RefusingProxy]:
    with RefusingProxy(moto_endpoint) as server:
        yield server


@pytest.fixture
def guard(proxy: RefusingProxy, bucket: str) -> Iterator[CheckpointGuard]:
    import torch  # noqa: F401 - imported before the loop's clock runs (seconds, the first time)

    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    made = CheckpointGuard(
        notices=False, handle_signals=False, flag_file=None, store=store, background=True
    )
    yield made
    made.close()
    store.close()


def _state(step: int) -> dict[str, object]:
    import torch

    return {"w": torch.full((4,), float(step)), "step": step}


def _notice(action: str, notice_id: str) -> Event:
    now = datetime.now(timezone.utc)
    return Event(
        id=notice_id,
        seq=1,
        action=action,
        reason="spot-interruption" if action == "terminate" else "rebalance-recommendation",
        provider="aws",
        deadline=now + timedelta(hours=1),
        noticed_at=now,
        sent_at=now,
    )


class Loop:
    """The README's background-save loop, catching a failed save's error to carry on."""

    def __init__(
        self, guard: CheckpointGuard, stride: int = 1, step_seconds: float = STEP_SECONDS
    ) -> None:
        self.guard = guard
        self.step = 0
        self.stride = stride  # how far each step moves the step counter
        self.step_seconds = step_seconds
        self.failed_at: list[float] = []  # when each failed save was raised by due()
        self.raised_at: list[int] = []  # the step at which each was raised
        self.saved_at: list[int] = []  # the steps saved at

    def one_step(self) -> bool:
        """One training step and its `due()`; whether it saved."""
        self.step += self.stride
        time.sleep(self.step_seconds)  # the scenario: a training step that takes a moment
        try:
            due = self.guard.due(self.step)
        except BackgroundSaveError:
            self.failed_at.append(time.monotonic())
            self.raised_at.append(self.step)
            return False
        if due:
            try:
                self.guard.save_state(self.step, _state(self.step))
            except BackgroundSaveError:  # the one before failed meanwhile
                self.failed_at.append(time.monotonic())
                self.raised_at.append(self.step)
                return False
            self.saved_at.append(self.step)
        return due

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.one_step()

    def until(self, done: object, what: str, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while not done():  # type: ignore[operator]
            assert time.monotonic() < end, f"timed out waiting for {what}"
            self.one_step()


def test_failed_background_saves_back_off_and_the_first_after_recovery_commits(
    guard: CheckpointGuard,
    proxy: RefusingProxy,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", FIRST)
    monkeypatch.setattr(guard_background, "RETRY_MAX_SECONDS", MOST)
    loop = Loop(guard)
    guard.request("manual")
    with caplog.at_level(logging.ERROR, logger="forewarn.clients"):
        loop.until(lambda: len(loop.failed_at) >= 6, "six failed saves", timeout=60)
        # The saver's thread says a failure after the loop can see it (check 37a, load 12):
        # waited for, not assumed.
        loop.until(lambda: "failed in a row: saving again in 1 s" in caplog.text, "the 1 s said")
    # Retried at every other step, they came 0.05 s apart (37 in 3.5 s of 5 ms steps);
    # backed off: at once, 0.4 s later, then every 0.8 s (later on a loaded machine).
    gaps = [later - earlier for earlier, later in itertools.pairwise(loop.failed_at)]
    assert gaps[1] >= FIRST - 0.05, gaps
    assert all(gap >= MOST - 0.05 for gap in gaps[2:]), gaps
    assert "saving again at the next step" in caplog.text
    assert "failed in a row: saving again in 1 s" in caplog.text
    assert guard.durable_step is None
    proxy.refusing = False
    loop.until(lambda: guard.durable_step is not None, "the retry after the recovery to commit")
    latest = guard.store.latest() if guard.store is not None else None
    assert latest is not None and latest.step == guard.durable_step
    # Recovered: the next failure is retried at once again (its count starts over). Told by
    # what the guard says, not by the time between the two failures: under load one upload's
    # refusal alone took longer than FIRST.
    proxy.refusing = True
    failed = len(loop.failed_at)
    caplog.clear()
    guard.request("manual")

    def said_now() -> list[str]:
        return [r.getMessage() for r in caplog.records if "background checkpoint" in r.getMessage()]

    with caplog.at_level(logging.ERROR, logger="forewarn.clients"):
        loop.until(lambda: len(loop.failed_at) >= failed + 2, "a failure and its prompt retry's")
        loop.until(lambda: len(said_now()) >= 2, "both failures said")
    said = said_now()
    assert said[0].endswith("saving again at the next step"), said
    assert "2 failed in a row" in said[1], said
    proxy.refusing = False
    loop.until(lambda: "retry" not in guard._pending, "the retry to be made")
    assert guard.saver is not None and guard.saver.wait() is not None
    guard.close()
    assert guard.exit_code == 0


@pytest.mark.parametrize("action", ["drain", "terminate"])
def test_a_notices_save_is_not_held_back_by_the_retrys_wait(
    guard: CheckpointGuard, proxy: RefusingProxy, monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 600.0)
    loop = Loop(guard)
    guard.request("manual")
    loop.until(lambda: len(loop.failed_at) >= 2, "two failures in a row")
    loop.run_for(0.5)
    assert len(loop.failed_at) == 2  # the third try waits 10 minutes
    proxy.refusing = False
    guard._on_event(_notice(action, f"aws/{action}/backoff"))
    assert loop.one_step(), f"the {action}'s save was held back by the retry's wait"
    assert guard.saver is not None and guard.saver.wait() is not None
    assert guard.durable_step == loop.step
    assert "retry" not in guard._pending  # that save answered the retry too
    assert guard.should_exit is (action == "terminate")


class Gate:
    """A plain value of the state whose snapshot (a deep copy) waits until let go: the
    terminate arrives while the background save is being taken, which then answers it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.let_go = threading.Event()

    def __deepcopy__(self, memo: dict[int, object]) -> str:
        self.entered.set()
        assert self.let_go.wait(60)
        return "gate"


def test_a_failed_background_save_that_answered_the_exit_promises_no_later_save(
    guard: CheckpointGuard, caplog: pytest.LogCaptureFixture
) -> None:
    """The ERROR line of a failed background save said "saving again at the next step" (or
    "in N s") also for the save that answered a terminate, after which the loop leaves and
    no save comes: the job was told of a retry that never happened."""
    import torch

    gate = Gate()
    saved: list[object] = []
    saving = threading.Thread(
        target=lambda: saved.append(guard.save_state(1, {"w": torch.ones(4), "gate": gate}))
    )
    with caplog.at_level(logging.ERROR, logger="forewarn.clients"):
        saving.start()
        assert gate.entered.wait(60), "the snapshot was never taken"
        guard._on_event(_notice("terminate", "aws/terminate/answered"))
        gate.let_go.set()
        saving.join(60)
        assert [getattr(result, "exit", None) for result in saved] == [True]  # it answered it
        assert guard.saver is not None
        guard.close()  # waits for the upload, which the store refuses
    said = [r.getMessage() for r in caplog.records if "background checkpoint" in r.getMessage()]
    assert len(said) == 1, said
    assert "no later save will come" in said[0], said
    assert "saving again" not in said[0], said
    assert "resumes from the last durable checkpoint (none)" in said[0], said
    assert guard.exit_code == 1


def test_the_log_says_each_background_save_copied_then_failed_and_what_saves_next(
    proxy: RefusingProxy,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With a periodic save at every step and a store that refuses writes, the log said
    "saved at step 8 (retry, periodic)" before that upload failed, and within seconds "5
    failed in a row: saving again in 40 s" while the next step saved again, and the one after.
    Each save now says it is copied and uploading, its failure comes after it, and the next
    try named is the periodic step that makes it."""
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 30.0)
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    guard = CheckpointGuard(
        notices=False,
        handle_signals=False,
        flag_file=None,
        store=store,
        background=True,
        every_steps=1,
    )
    loop = Loop(guard)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "forewarn.clients"]

    try:
        with caplog.at_level(logging.INFO, logger="forewarn.clients"):
            loop.until(lambda: len(loop.failed_at) >= 3, "three failed saves", timeout=60)
            loop.until(lambda: any("3 failed in a row" in line for line in said()), "the third")
    finally:
        guard.close()
        store.close()
    lines = said()
    assert not [line for line in lines if "saved at step" in line], lines
    failed = [n for n, line in enumerate(lines) if "the background checkpoint of step" in line]
    assert len(failed) >= 3, lines
    for index in failed:
        step = lines[index].split("the background checkpoint of step ")[1].split()[0]
        copied = [n for n, line in enumerate(lines) if line.startswith(f"forewarn: step {step} (")]
        assert copied and copied[0] < index, (step, lines)
        first = lines[copied[0]]
        assert "copied in" in first and "uploading it in the background" in first, first
    third = next(line for line in lines if "3 failed in a row" in line)
    assert "saving again at the next step (a periodic save at every step), or in 60 s" in third


class HoldingProxy(S3Proxy):
    """Holds the writes of step 2's save until `release`, then refuses them (its upload
    fails while the exit's save waits for it); forwards everything else."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.held = threading.Event()
        self.release = threading.Event()

    def answer(self, request: Request) -> Reply | None:
        if request.command in ("PUT", "POST") and "step-000000000002" in request.path:
            self.held.set()
            assert self.release.wait(60)
            return Reply(403, XML, ACCESS_DENIED)
        return None


def test_a_background_save_the_exits_save_waited_for_fails_without_a_false_next_step(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A terminate while the background save of step 2 uploads: the exit's save of step 3
    waits for it (`final()`), and it fails. Its ERROR line said "saving again at the next
    step" (or that no later save comes and the process exits with 1) while the exit's own
    save was already under way, and that save then committed."""
    saved: list[object] = []
    with HoldingProxy(moto_endpoint) as proxy:
        store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
        guard = CheckpointGuard(
            notices=False, handle_signals=False, flag_file=None, store=store, background=True
        )
        try:
            with caplog.at_level(logging.INFO, logger="forewarn.clients"):
                guard.save_state(1, _state(1))  # timed: the exit's save plans with it
                end = time.monotonic() + 60
                while guard.durable_step != 1:
                    assert time.monotonic() < end, "step 1 never became durable"
                    time.sleep(0.01)
                guard.save_state(2, _state(2))
                assert proxy.held.wait(60), "step 2's upload never reached the store"
                guard._on_event(_notice("terminate", "aws/terminate/waited"))
                assert guard.due(3)
                saving = threading.Thread(
                    target=lambda: saved.append(guard.save_state(3, _state(3)))
                )
                saving.start()
                end = time.monotonic() + 60
                while "the exit's save of step 3 starts" not in caplog.text:
                    assert time.monotonic() < end, "the exit's save never started"
                    time.sleep(0.01)
                proxy.release.set()
                saving.join(60)
                assert not saving.is_alive()
                guard.close()
        finally:
            proxy.release.set()
            store.close()
    assert [getattr(result, "exit", None) for result in saved] == [True]
    said = [
        r.getMessage() for r in caplog.records if "checkpoint of step 2 failed" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert "saving again" not in said[0], said
    assert "no later save will come" not in said[0], said
    assert "the exit's save of step 3" in said[0], said
    assert guard.durable_step == 3
    assert guard.exit_code != 1


def test_the_step_a_failure_says_it_saves_again_at_is_the_step_that_saves(
    proxy: RefusingProxy,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every 5 steps, on a store that refuses writes (found on a read-only tmpfs: the ERROR
    said "saving again at the next periodic step (every 5 steps)" and the saves came at
    steps 37 and 42, counted from the retry's save, or one step late where the `due()`
    raising the failure was the periodic step itself). Each line now names the step that
    saves: the periodic one, or the step after the one that raises the failure."""
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 30.0)
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    guard = CheckpointGuard(
        notices=False,
        handle_signals=False,
        flag_file=None,
        store=store,
        background=True,
        every_steps=5,
    )
    loop = Loop(guard)

    def lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "forewarn.clients" and "failed in a row" in r.getMessage()
        ]

    def answered(count: int) -> bool:
        """`count` lines said, and a save made after the failure of each was raised."""
        said = lines()
        if len(said) < count:
            return False
        last = int(said[count - 1].split("checkpoint of step ")[1].split()[0])
        raised = [step for step in loop.raised_at if step > last]
        return bool(raised) and any(step > raised[0] for step in loop.saved_at)

    try:
        with caplog.at_level(logging.INFO, logger="forewarn.clients"):
            loop.until(lambda: answered(4), "four failures in a row and their saves", timeout=60)
    finally:
        guard.close()
        store.close()
    for line in lines()[:4]:
        failed = int(line.split("checkpoint of step ")[1].split()[0])
        raised = min(step for step in loop.raised_at if step > failed)
        saved = min(step for step in loop.saved_at if step > raised)
        if "saving again at the first step from step " in line:
            named = int(line.split("the first step from step ")[1].split()[0])
            assert named == saved, (line, loop.raised_at, loop.saved_at)
        else:
            assert "saving again at the step after the one that raises" in line, line
            assert saved == raised + 1, (line, loop.raised_at, loop.saved_at)


def test_a_last_background_save_failing_while_close_waits_promises_no_next_step(
    moto_endpoint: str, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop ended with step 2's background save uploading, and close() waited for it: it
    failed, and its ERROR said "saving again at the next step" for a loop that had left (the
    line after it, close()'s, said it was not saved again). It now says close() waits for
    it and no save comes after it, as close()'s own line then does."""
    with HoldingProxy(moto_endpoint) as proxy:
        store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
        guard = CheckpointGuard(
            notices=False, handle_signals=False, flag_file=None, store=store, background=True
        )
        saver = guard.saver
        assert saver is not None
        waiting = threading.Event()
        wait = saver.wait

        def waited(timeout: float | None = None) -> bool:
            waiting.set()  # close() is waiting for the save in flight
            return wait(timeout)

        setattr(saver, "wait", waited)  # noqa: B010 - close() looks it up on the saver
        closing = threading.Thread(target=guard.close)
        try:
            with caplog.at_level(logging.INFO, logger="forewarn.clients"):
                guard.save_state(2, _state(2))
                assert proxy.held.wait(60), "step 2's upload never reached the store"
                closing.start()
                assert waiting.wait(60), "close() never waited for the save in flight"
                proxy.release.set()
                closing.join(60)
                assert not closing.is_alive()
        finally:
            proxy.release.set()
            store.close()
    said = [
        r.getMessage() for r in caplog.records if "checkpoint of step 2 failed" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert "saving again" not in said[0], said
    assert "close() waits for it: no later save will come" in said[0], said
    assert guard.exit_code == 1
    assert "was not saved again before close()" in caplog.text


def test_a_failures_next_save_is_named_right_when_steps_rise_by_more_than_one(
    proxy: RefusingProxy,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A loop whose step counter rises by 3 a step (gradient accumulation counted in micro
    batches; a DataLoader that skips samples) saving every 10 steps: the ERROR named `step
    40, the next periodic step`, a step the loop never takes (its steps are 3, 6, ... 39,
    42), or one the step raising the failure had already passed. Each line now says which
    step saves in terms that hold for any counter: the first from the periodic step on, past
    the step that raises the failure."""
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 30.0)
    store = CheckpointStore(f"s3://{bucket}/run", s3=S3Options(endpoint_url=proxy.url))
    guard = CheckpointGuard(
        notices=False,
        handle_signals=False,
        flag_file=None,
        store=store,
        background=True,
        every_steps=10,
    )
    # Steps long enough that a refused save fails within a step or two of its own, before
    # its periodic step: the line then names that step (with 5 ms steps a busy machine had
    # the failure come past it, the other form of the line).
    loop = Loop(guard, stride=3, step_seconds=0.1)

    def lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "forewarn.clients" and "failed in a row" in r.getMessage()
        ]

    def answered(count: int) -> bool:
        said = lines()
        if len(said) < count:
            return False
        last = int(said[count - 1].split("checkpoint of step ")[1].split()[0])
        raised = [step for step in loop.raised_at if step > last]
        return bool(raised) and any(step > raised[0] for step in loop.saved_at)

    try:
        with caplog.at_level(logging.INFO, logger="forewarn.clients"):
            loop.until(lambda: answered(3), "three failures in a row and their saves", timeout=60)
    finally:
        guard.close()
        store.close()
    for line in lines()[:3]:
        failed = int(line.split("checkpoint of step ")[1].split()[0])
        raised = min(step for step in loop.raised_at if step > failed)
        saved = min(step for step in loop.saved_at if step > raised)
        assert "saving again at step " not in line, (line, loop.raised_at, loop.saved_at)
        if "the first step from step " in line:
            periodic = int(line.split("the first step from step ")[1].split()[0])
            # The first of the loop's steps from the periodic one on, past the raising one.
            first = min(s for s in range(raised + 3, saved + 1, 3) if s >= periodic)
            assert saved == first, (line, loop.raised_at, loop.saved_at)
        else:
            assert "saving again at the step after the one that raises" in line, line
            assert saved == raised + 3, (line, loop.raised_at, loop.saved_at)
