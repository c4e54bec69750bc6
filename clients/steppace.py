"""How long the training loop runs between two `due` calls, as the guard's ticker sees it.

An exit planned `margin` seconds before a deadline is only answered at the loop's next `due`:
a step in progress eats into the margin meant for the save. The guard counts the longest
recent step into that margin. `due` only stores its step (one attribute write: the README's
per-step cost holds); the ticker reads it every tick and times the changes, so each
measurement is good to about one tick.
"""

from __future__ import annotations

from collections import deque

# A step this long ago no longer counts: a first step's compile, an evaluation pass that has
# ended, forgotten after this many seconds.
RECENT_SECONDS = 300.0


class StepPace:
    """The seconds per `due` call over the last RECENT_SECONDS, fed by the ticker."""

    def __init__(self) -> None:
        self._mark: tuple[int, int] | None = None  # (last step seen, evaluation checks seen)
        self._since = 0.0  # monotonic time the ticker first saw `_mark`
        self._gaps: deque[tuple[float, float]] = deque()  # (when seen, seconds per call)

    def observe(self, step: int | None, eval_checks: int, now: float) -> None:
        """One tick's reading: the step `due` last stored (None before the first `due`) and
        the number of `due_in_eval` calls so far, at monotonic time `now`."""
        if step is None:
            return
        mark = (step, eval_checks)
        last = self._mark
        if mark == last:
            return
        if last is not None:
            # Several calls between two ticks (fast steps): the gap is shared between them.
            calls = max(1, abs(step - last[0]) + (eval_checks - last[1]))
            self._gaps.append((now, (now - self._since) / calls))
        self._mark = mark
        self._since = now
        while self._gaps and self._gaps[0][0] < now - RECENT_SECONDS:
            self._gaps.popleft()

    def running(self, now: float) -> float | None:
        """Seconds since the loop's last `due` or `due_in_eval` call as the ticker saw it;
        None before the first `due`."""
        return None if self._mark is None else now - self._since

    def stepped(self) -> bool:
        """Whether a step has ended since the first `due`: until then the loop is in its first
        step (a compile, a data loader's warm-up), however it began."""
        return bool(self._gaps)

    def longest_done(self) -> float:
        """The longest recent step that has ended (0 before one has)."""
        return max((gap for _, gap in self._gaps), default=0.0)

    def longest(self, now: float) -> float | None:
        """The longest recent step, or the one running now if it is longer already; None
        before the first `due` (the guard saves nothing before it anyway)."""
        if self._mark is None:
            return None
        return max([now - self._since, *(gap for _, gap in self._gaps)])
