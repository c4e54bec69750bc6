"""Saves given up as stalled (a hung mount) keep their snapshot while their write stays stuck:
the saver holds at most two copies of the state then, not one more per retry."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import forewarn.clients.checkpoint.background as background_module
import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import BackgroundSaveError, BackgroundSaver
from hung_mount import HungMount, stuck_saves
from support import LazyModule, eventually, requires

pytestmark = requires("torch")
torch = LazyModule("torch")

# The stall bound (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL_BOUND = 0.3


def test_saves_given_up_on_a_hung_mount_hold_two_copies_of_the_state_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    store = CheckpointStore(backend=backend)
    saver = BackgroundSaver(store)
    state = {"w": torch.zeros(64, 64)}
    try:
        saver.save(1, state)  # stuck in its first write
        with pytest.raises(BackgroundSaveError) as first:
            saver.save(2, state)  # gives step 1 up, raised as its failure
        assert first.value.step == 1
        saver.save(2, state)  # a second copy: step 1's write is still stuck
        with pytest.raises(BackgroundSaveError) as second:
            saver.save(3, state)
        assert second.value.step == 2
        assert len(stuck_saves()) == 2
        # A third copy is not taken while both given-up saves still hold theirs: on a mount
        # that stayed hung, each retry of the guard's took one more, until the OOM killer.
        with pytest.raises(BackgroundSaveError) as refused:
            saver.save(3, state)
        assert refused.value.step == 3
        assert "steps 1 and 2" in str(refused.value), refused.value
        assert saver.in_flight is None and len(stuck_saves()) == 2
    finally:
        backend.recover.set()
    # The mount recovers: the given-up saves end (never committing), their copies go, and
    # the next save is taken and committed.
    eventually(lambda: not stuck_saves(), timeout=30)
    assert store.latest() is None
    saver.save(4, state)
    generation = saver.wait()
    assert generation is not None and generation.step == 4
    saver.close()
    store.close()


def test_a_guard_retrying_on_a_hung_mount_keeps_two_copies_at_most_and_saves_once_it_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard retries a failed background save (backing off); each retry on a mount that
    stayed hung was given up in turn, and every one kept its copy of the state."""
    from forewarn.clients import CheckpointGuard, guard_background

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    monkeypatch.setattr(guard_background, "RETRY_FIRST_SECONDS", 0.05)
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    store = CheckpointStore(backend=backend)
    guard = CheckpointGuard(
        store=store,
        background=True,
        handle_signals=False,
        notices=False,
        flag_file=None,
        every_steps=1,
    )
    state = {"w": torch.zeros(64, 64)}
    failures: list[BackgroundSaveError] = []
    most = 0
    step = 0
    try:
        while len(failures) < 5:
            step += 1
            assert step < 2000, f"only {len(failures)} failures by step {step}"
            try:
                if guard.due(step):
                    guard.save_state(step, state)
            except BackgroundSaveError as error:
                failures.append(error)
            most = max(most, len(stuck_saves()))
            state["w"].add_(1.0)  # the training step
            threading.Event().wait(0.01)
    finally:
        backend.recover.set()
    assert most <= 2, f"{most} stuck saves held a copy of the state each"
    assert any("still stuck in their writes" in str(error) for error in failures), failures
    eventually(lambda: not stuck_saves(), timeout=30)
    # Recovered: the next retry the guard asks for commits.
    while guard.durable_step is None:
        step += 1
        assert step < 5000, "no save committed after the mount recovered"
        with contextlib.suppress(BackgroundSaveError):
            if guard.due(step):
                guard.save_state(step, state)
                guard.saver.wait()
        threading.Event().wait(0.01)
    assert store.latest_hint() == guard.durable_step
    guard.close()
    store.close()
