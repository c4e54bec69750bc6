"""Helpers for tests of the flag file a guard takes itself (no agent with the local provider
runs): one look of its ticker waited for, a save for the flag made."""

from __future__ import annotations

import threading

from forewarn.clients import CheckpointGuard
from support import eventually


def looked(guard: CheckpointGuard) -> None:
    """Wait for the guard's ticker to make a whole look at the flag (its next one)."""
    done = threading.Event()
    look = guard._check_flag

    def counted() -> None:
        look()
        done.set()

    setattr(guard, "_check_flag", counted)  # noqa: B010 - the ticker looks it up on the guard
    assert done.wait(timeout=5), "the guard's ticker made no look at the flag"


def save_for_flag(guard: CheckpointGuard, step: int = 1) -> None:
    eventually(lambda: guard.due(step), timeout=5, what="the flag's save")
    assert not guard.saved(step, 0.01).exit
