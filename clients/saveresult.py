"""`SaveResult`: what a save of the guard answered (whether to exit, what it answered, how long
it took)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SaveResult:
    """What a save answered: `exit` is true when the process should stop now."""

    exit: bool
    step: int
    reasons: tuple[str, ...]
    notices: tuple[str, ...]
    flush_seconds: float | None
    # The committed generation, when the guard saved through a CheckpointStore (None for a
    # background save until it commits: see CheckpointGuard.save_state).
    generation: Any = None
    # For a final save with background saves on: "waited", "cancelled" or "nothing in
    # flight" about the background save it found, and why.
    choice: str | None = None
    choice_reason: str | None = None


__all__ = ["SaveResult"]
