"""When this process started, on the wall clock and on the kernel's boot clock, and the boot
clock itself: what tells a notice raised before the job from one raised during it."""

from __future__ import annotations

import os
import time


def process_started() -> float:
    """When this process started (wall clock), from /proc on Linux; now elsewhere. A notice
    raised while the job loaded its model is the job's own, not an inherited one. /proc counts
    in clock ticks (10 ms), so a notice raised up to a tick before the start may count as the
    job's own too: the job then saves and exits, the side to err on."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        # The kernel's boot clock, the one /proc/self/stat counts from: /proc/uptime may be
        # a container's own (lxcfs), and the start then came out hours in the future.
        up = time.clock_gettime(time.CLOCK_BOOTTIME)
        ticks = os.sysconf("SC_CLK_TCK")
        return time.time() - (up - int(fields[19]) / ticks)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def process_started_boot() -> float | None:
    """When this process started, in seconds on the kernel's boot clock (the one
    /proc/self/stat counts from, and the agent ages its notices on); None where that is not
    known (not Linux)."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def steady_seconds() -> float:
    """Seconds since boot, suspends included (as the agent's clock: forewarn.agent.steadyclock,
    which a client does not import), else the monotonic clock."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return time.monotonic()


def boot_seconds() -> float | None:
    """The kernel's boot clock (CLOCK_BOOTTIME: suspends counted, no step of the wall clock
    moves it), None where there is none (not Linux): unlike `steady_seconds`, never another
    clock, so that it can bound how long ago something happened in this boot."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return None
