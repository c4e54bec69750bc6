"""An exit's final save through a background saver follows the terminate's deadline as it
stands now, as the synchronous path does (tests/agent/test_deadline_earlier.py): the real
agent subprocess, its control `notify` moving the deadline while the final save's write is
held by the storage, and a torch-backed guard with background saves."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.checkpoint import CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.testing import DelegatingBackend
from forewarn.protocol.timefmt import utcnow
from support import AgentProcess, LazyModule, eventually, requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")


class HeldStorage(DelegatingBackend):
    """The first write of a state file runs `held()` before it goes through: the storage
    holds the write for as long as `held` takes (a stall, or a service that stopped
    answering)."""

    def __init__(self, inner: Any, held: Callable[[], None]) -> None:
        super().__init__(inner)
        self._held: Callable[[], None] | None = held

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not key.endswith("state.pt"):
            return inner
        original = inner.write

        def write(data: Any) -> int:
            held, self._held = self._held, None
            if held is not None:
                held()
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def _guard(tmp_path: Path, agent: AgentProcess, held: Callable[[], None]) -> CheckpointGuard:
    inner = CheckpointStore(str(tmp_path / "ckpt")).backend
    store = CheckpointStore(backend=HeldStorage(inner, held))
    notices = Notices(agent.events, agent.control_endpoint)
    return CheckpointGuard(
        notices=notices, flag_file=None, handle_signals=False, store=store, background=True
    )


def test_a_background_exit_save_stalled_past_its_old_deadline_waits_for_the_deadline_moved_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminate's deadline moves later while the final save waits on storage (no byte
    moving): its bound was taken once when `final()` began, so it was given up at the old
    deadline plus the grace, and the job exited unsaved on a machine with minutes left."""
    from forewarn.clients.checkpoint import background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
    request = {"op": "notify", "action": "terminate", "id": "local/later"}
    old = utcnow()
    with AgentProcess(tmp_path) as agent:
        guard: CheckpointGuard | None = None

        def held() -> None:
            assert guard is not None
            began = utcnow()
            agent.control({**request, "deadline": (utcnow() + timedelta(seconds=120)).isoformat()})
            eventually(lambda: (guard._seconds_left() or 0) > 60, 10, "the guard to hear it later")
            # The storage stalls past the old deadline and its grace (and, the terminate heard
            # late on a loaded machine, past the shortest bound a final save has).
            stalled = max(old, began) + timedelta(seconds=3)
            eventually(lambda: utcnow() > stalled, 15, "the old bound")

        guard = _guard(tmp_path, agent, held)
        try:
            eventually(lambda: guard.notices is not None and guard.notices.alive, 10, "heartbeat")
            old = utcnow() + timedelta(seconds=5)
            agent.control({**request, "deadline": old.isoformat()})
            eventually(lambda: guard.due(1) and guard.should_exit, 10, "the terminate")
            result = guard.save_state(1, {"w": torch.arange(16.0)})
            assert result.exit and result.generation is not None, result
            assert guard.exit_code == 143  # saved: 1 says it was not
        finally:
            guard.close()
            assert guard.notices is not None
            guard.notices.close()


def test_a_background_exit_save_hung_when_its_deadline_moves_earlier_times_out_at_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminate's deadline moves earlier while the final save waits on storage that
    stopped answering: its bound was taken when `final()` began (minutes out), so the SIGKILL
    at the new deadline cut it off without the CommitTimeout, ERROR line and exit code 1."""
    from forewarn.clients.checkpoint import CommitTimeout, background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
    request = {"op": "notify", "action": "terminate", "id": "local/earlier"}
    hung = threading.Event()  # the storage answers only once the test is over
    answered = threading.Event()  # or after 45 s: a save given up later missed its deadline
    with AgentProcess(tmp_path) as agent:
        guard: CheckpointGuard | None = None

        def held() -> None:
            assert guard is not None
            agent.control({**request, "deadline": (utcnow() + timedelta(seconds=2)).isoformat()})
            eventually(lambda: (guard._seconds_left() or 99) < 5, 10, "the guard to hear it")
            hung.wait(45)  # the storage stopped answering
            answered.set()

        guard = _guard(tmp_path, agent, held)
        try:
            eventually(lambda: guard.notices is not None and guard.notices.alive, 10, "heartbeat")
            agent.control({**request, "deadline": (utcnow() + timedelta(seconds=120)).isoformat()})
            eventually(lambda: guard.due(1) and guard.should_exit, 10, "the terminate")
            with pytest.raises(CommitTimeout, match="was not committed"):
                guard.save_state(1, {"w": torch.arange(16.0)})
            # Given up while the storage still held it, at the new deadline plus the grace
            # (timing under load varies: the storage's silence bounds it, not a clock).
            assert not answered.is_set()
            assert guard.exit_code == 1
        finally:
            hung.set()
            guard.close()
            assert guard.notices is not None
            guard.notices.close()


def test_final_s_timeout_replaces_the_bound_of_seconds_left_and_waited_keeps_it_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`final(timeout=)` in seconds bounds the final save in place of `seconds_left` plus the
    grace; `waited()` true keeps a save that moves nothing waited for past it."""
    from forewarn.clients.checkpoint import CommitTimeout, background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
    hung = threading.Event()
    answered = threading.Event()

    def held() -> None:
        hung.wait(45)
        answered.set()

    inner = CheckpointStore(str(tmp_path / "ckpt")).backend
    saver = background.BackgroundSaver(CheckpointStore(backend=HeldStorage(inner, held)))
    try:
        with pytest.raises(CommitTimeout, match="was not committed"):
            saver.final(1, {"w": torch.arange(16.0)}, 3600.0, timeout=0.5)
        assert not answered.is_set()  # given up at its 0.5 s, not an hour and a grace out
    finally:
        hung.set()
    eventually(answered.is_set, 10, "the given-up save to end")

    saver.close()
    # The storage holds the next final save 2 s, past its 0.1 s and the grace with no byte
    # moving: `waited()` (the guard's: a deadline moved later, not passed) keeps it waited for.
    release = threading.Timer(2.0, lambda: None)
    release.start()
    saver = background.BackgroundSaver(CheckpointStore(backend=HeldStorage(inner, release.join)))
    final = saver.final(2, {"w": torch.arange(16.0)}, 3600.0, timeout=0.1, waited=lambda: True)
    assert final.generation.step == 2
    saver.close()
