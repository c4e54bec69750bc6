"""The guard both framework callbacks hold: made on first use inside the trainer, and its
exit code kept once the trainer has returned and the guard is closed."""

from __future__ import annotations

from typing import Any

from ..guard import CheckpointGuard


class GuardHolder:
    _guard: CheckpointGuard | None
    _guard_options: dict[str, Any]
    _exit_code: int

    def _hold_guard(self, guard: CheckpointGuard | None, options: dict[str, Any]) -> None:
        self._guard = guard
        self._guard_options = options
        self._exit_code = 0  # the closed guard's (see exit_code)

    @property
    def guard(self) -> CheckpointGuard:
        # Made on first use, inside the trainer: torch.distributed is initialised by then,
        # so the guard's rank agreement sees it.
        if self._guard is None:
            self._guard = CheckpointGuard(**self._guard_options)
        return self._guard

    @property
    def exit_code(self) -> int:
        """`CheckpointGuard.exit_code` of this callback's guard, kept after `fit()` or
        `train()` returns (the guard is closed then): 0 when training ended by itself, 143
        (130 for SIGINT) when it stopped after a terminate's or a signal's save. End the
        process with it, `sys.exit(callback.exit_code)`: the trainer returns normally either
        way, and a clean 0 after a reclaim marks a Kubernetes Job complete, so it never
        resumes."""
        if self._guard is not None:
            return self._guard.exit_code
        return self._exit_code

    def _close_guard(self) -> None:
        if self._guard is not None:
            # After close(): it waits for a background save in flight, whose failure turns an
            # exit's 143 into 1 (the state of the exit is not saved). Read before, 143 was kept.
            try:
                self._guard.close()
            finally:
                self._exit_code = self._guard.exit_code
                self._guard = None
