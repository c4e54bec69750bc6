"""The stop announced by TERMINATE_ON_HOST_MAINTENANCE or `preempted=TRUE`, kept on the boot
clock.

The metadata server gives the stop no time: the watcher makes its deadline from the moment it
read the value (an hour on a VM with GPUs; a preemption's 30 s, or its notice duration). On
the wall clock alone, NTP stepping the clock after that (a VM whose clock ran ahead, set right)
left the deadline where the wrong clock had put it: stepped back 30 minutes, the drain was
escalated to terminate half an hour after the stop, and the job's exit save was never made.
The boot clock (`CLOCK_BOOTTIME`, suspend included) is moved by no step, so the stop is kept
on it and the deadline follows the wall clock as it is stepped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ..boot import since_boot

# A wall clock this far from the boot clock's reckoning has been stepped; less is NTP's slew
# (at most 500 ppm: under two seconds in the hour) and the reading's own delay.
STEP_SEEN = timedelta(seconds=5)


@dataclass
class StopClock:
    """The deadline last given to the stop, and the boot clock's reading of the stop."""

    deadline: datetime | None = None
    at: float | None = None  # `since_boot()` at the stop

    def follow(self, deadline: datetime | None, now: datetime) -> datetime | None:
        """`deadline`, the stop's as the notice in force has it (None: no stop in force),
        read at wall time `now`: the deadline the boot clock gives where the wall clock was
        stepped since it was set, else None. A deadline not set by this clock (a new stop, a
        restored one) is taken as the stop from now on."""
        booted = since_boot()
        if deadline is None or booted is None:
            self.deadline = self.at = None
            return None
        if self.at is None or deadline != self.deadline:
            self.deadline, self.at = deadline, booted + (deadline - now).total_seconds()
            return None
        moved = now + timedelta(seconds=self.at - booted)
        if abs(moved - deadline) <= STEP_SEEN:
            return None
        self.deadline = moved
        return moved


__all__ = ["STEP_SEEN", "StopClock"]
