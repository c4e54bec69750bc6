"""Which boot of this machine it is: notices a provider gave in another boot are not this
boot's."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

from forewarn.protocol.timefmt import parse_time, utcnow

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
# Two boot times (now less the clock since boot) this close are one boot, read twice: they
# differ by the time the clock was stepped since. A reboot puts the boot before's whole uptime
# and the reboot itself between them.
BOOT_TIME_SLACK = 10.0


def boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """This boot of the machine (Linux: a random id the kernel draws at each boot, which a
    container shares), or None where the kernel does not say. Unlike `machine_started`, no
    clock enters it: a clock stepped after boot (NTP's first sync on a VM whose RTC was
    wrong) moves the start that clocks give, not the id. Lower-cased: Azure's boot records
    were written so."""
    try:
        return path.read_text().strip().lower() or None
    except (OSError, UnicodeDecodeError):
        return None


def machine_started() -> datetime | None:
    """When this machine started (the kernel's boot time, which a container shares), or None
    where the clock since boot cannot be read. It is now less the time since boot, so a
    clock stepped since a moment was taken moves it against that moment: prefer `boot_id`
    to tell a moment of this boot from one of an earlier boot where it was recorded."""
    try:
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return None
    return utcnow() - timedelta(seconds=since_boot)


def since_boot() -> float | None:
    """Seconds since this machine booted, suspend included (Linux's `CLOCK_BOOTTIME`, which
    no step of the wall clock moves); None where it cannot be read."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return None


def one_boot(saved: datetime, booted: datetime) -> bool:
    """Whether two boot times (`machine_started` read at two moments) are one boot: where
    the boot id cannot be read (a container without /proc/sys/kernel/random/boot_id), what
    tells a record of this boot from one of the boot before."""
    return abs((saved - booted).total_seconds()) <= BOOT_TIME_SLACK


def saved_boot_time(value: object) -> datetime | None:
    """A boot time as a record saved it (`"booted"`); None when absent or not a time."""
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except (ValueError, OverflowError):
        return None


def same_boot(
    payload: dict[str, object], this_boot: str | None, booted: datetime | None
) -> bool | None:
    """Whether a record (`boot_id`, `booted`) was written in this boot: by the boot id, or,
    where it cannot be read, by the boot time; None when neither tells."""
    if this_boot is not None:
        return payload.get("boot_id") == this_boot
    saved = saved_boot_time(payload.get("booted"))
    if saved is None or booted is None:
        return None
    return one_boot(saved, booted)


__all__ = [
    "BOOT_ID_PATH",
    "BOOT_TIME_SLACK",
    "boot_id",
    "machine_started",
    "one_boot",
    "same_boot",
    "saved_boot_time",
    "since_boot",
]
