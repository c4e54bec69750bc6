"""The terminate's deadline as `final()` sees it while it waits for the save in flight: as it
stands each time it is asked, when the caller says how to ask (the guard: the agent moves a
notice's deadline, e.g. AWS rewriting the spot `time`, Azure moving NotBefore), else fixed at
the time left given when `final()` began."""

from __future__ import annotations

import time
from collections.abc import Callable

# A move smaller than this is the clock's and the notice's rounding (AWS gives whole
# seconds), not a deadline that moved: the wait's reason does not call it one.
MOVED_SECONDS = 0.5


class FinalDeadline:
    """A deadline on the monotonic clock: `started + seconds_left` (None: unknown), or, with
    `left` (seconds to it from now, negative once passed, None once no longer known), where
    `left()` puts it each time `at()` asks. Read once, a deadline moved later gave the upload
    in flight up at the old one although minutes remained, and one moved earlier kept the
    wait going past the new one, the exit's own save left to the SIGKILL unsaid. One no
    longer known (the notice answered) stays where it was last seen."""

    def __init__(
        self,
        started: float,
        seconds_left: float | None,
        left: Callable[[], float | None] | None = None,
    ) -> None:
        self.started = started
        self.first = None if seconds_left is None else started + seconds_left
        self._left = left
        self._last = self.first

    @property
    def follows(self) -> bool:
        """Whether it is asked again (`left` given), not fixed at its start."""
        return self._left is not None

    def at(self) -> float | None:
        """The deadline on the monotonic clock as it stands now (None: unknown)."""
        if self._left is not None:
            left = self._left()
            if left is not None:
                self._last = time.monotonic() + left
        return self._last

    def moved(self) -> float:
        """How far the deadline has moved since `final()` began, in seconds (later is
        positive; 0 when it did not, or is unknown either way)."""
        at = self.at()
        if at is None or self.first is None:
            return 0.0
        return at - self.first

    def words(self) -> str:
        """The deadline for a reason: where it moved, when it moved, else nothing."""
        shift = self.moved()
        at = self.at()
        if abs(shift) < MOVED_SECONDS or at is None or self.first is None:
            return ""
        return (
            f"the terminate's deadline moved {'later' if shift > 0 else 'earlier'}, to "
            f"{at - self.started:.1f} s after the terminate reached the saver (was "
            f"{self.first - self.started:.1f} s)"
        )


def deadline_words(deadline: float | None) -> str:
    """The time left to `deadline` (monotonic; None: unknown), for a log line."""
    if deadline is None:
        return "the deadline is unknown"
    left = deadline - time.monotonic()
    if left >= 0:
        return f"{left:.1f} s to the deadline"
    return f"the deadline passed {-left:.1f} s ago"


__all__ = ["FinalDeadline", "deadline_words"]
