"""When this machine started: notices a provider gave before it are not this boot's."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from forewarn.protocol.timefmt import utcnow


def machine_started() -> datetime | None:
    """When this machine started (the kernel's boot time, which a container shares), or None
    where the clock since boot cannot be read."""
    try:
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return None
    return utcnow() - timedelta(seconds=since_boot)


__all__ = ["machine_started"]
