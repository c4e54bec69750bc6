"""How long a save's bytes have not moved, as a watcher that looks at them now and then sees
it: the judgement of whether a save's last parts still move when `final()` waits for them."""

from __future__ import annotations


class QuietTime:
    """Seconds without progress, counted by a watcher that looks every `tick` seconds. A look
    that comes late (the process was not scheduled: a loaded machine) counts one tick and its
    slack, not the whole gap: counted on the wall clock, a pause of the whole process, its
    upload threads with it, read as a stall of the link, and parts whose bytes flowed were
    cancelled as stopped."""

    def __init__(self, last_moved: float, tick: float, now: float) -> None:
        self._tick = tick
        self._seen = last_moved
        self._looked = now
        self._quiet = min(max(now - last_moved, 0.0), tick)

    def look(self, last_moved: float, now: float) -> float:
        """The quiet seconds so far, given when the bytes last moved and the time now."""
        if last_moved != self._seen:
            self._seen = last_moved
            self._quiet = min(max(now - last_moved, 0.0), self._tick)
        else:
            self._quiet += min(max(now - self._looked, 0.0), 2 * self._tick)
        self._looked = now
        return self._quiet


__all__ = ["QuietTime"]
