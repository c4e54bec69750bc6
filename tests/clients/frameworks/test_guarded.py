"""The guard a framework callback holds: the exit code it keeps is the closed guard's."""

from __future__ import annotations

from typing import cast

from forewarn.clients import CheckpointGuard
from forewarn.clients.frameworks._guarded import GuardHolder


class _ExitSaveFailsOnClose:
    """A guard after a terminate's save: 143, until close() waits for the background save in
    flight and it fails (CheckpointGuard sets 1 then: the state of the exit is not saved)."""

    def __init__(self) -> None:
        self.exit_code = 143
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.exit_code = 1


def test_the_exit_code_kept_is_read_after_the_guard_is_closed() -> None:
    holder = GuardHolder()
    guard = _ExitSaveFailsOnClose()
    holder._hold_guard(cast(CheckpointGuard, guard), {})
    assert holder.exit_code == 143
    holder._close_guard()
    assert guard.closed
    assert holder.exit_code == 1  # 143 before: read before close() waited
