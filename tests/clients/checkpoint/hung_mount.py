"""A local store on a hung mount, for the background-save tests: every write of a state file
(under `only`, when set) blocks until `recover` is set, as on a hung NFS mount, and the saves
left stuck in such a write are the saver's threads still running."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from forewarn.clients.checkpoint import ObjectWriter
from forewarn.clients.checkpoint.background import BackgroundSaveError
from forewarn.clients.checkpoint.testing import DelegatingBackend


class HungMount(DelegatingBackend):
    """Every write of a state file (under `only`, when set) blocks until `recover` is set, as
    on a hung NFS mount."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.recover = threading.Event()
        self.only = ""

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not key.endswith("state.pt") or not key.startswith(self.only):
            return inner
        original, recover = inner.write, self.recover

        def write(data: Any) -> int:
            if not recover.wait(60):
                raise TimeoutError("the test never let the mount recover")
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def stuck_saves() -> list[threading.Thread]:
    """The background saves' threads still running (each holds a copy of the state)."""
    return [t for t in threading.enumerate() if t.name.startswith("forewarn-background-save-")]


def two_saves_stuck(guard: Any, state: Any) -> None:
    """Two background saves left stuck in their writes on the hung mount, each given up as
    stalled by the save after it (the third is refused while they hold their copies)."""
    guard.save_state(1, state)
    with pytest.raises(BackgroundSaveError):
        guard.save_state(2, state)
    guard.save_state(2, state)
    with pytest.raises(BackgroundSaveError):
        guard.save_state(3, state)
