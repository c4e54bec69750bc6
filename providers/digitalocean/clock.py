"""The droplet metadata service's clock: what a mail's age and this droplet's start are judged
by when the droplet's own clock is far off.

A droplet whose clock is a day or more ahead (no NTP, a wrong RTC) took today's reclaim mail
for one "older than max_age" (24 h), and one a few hours ahead put its own start after the
reclaim's time ("due before this machine started"): either way the mail was dropped and the
job had no notice. The mailbox cannot say what time it is (an IMAP greeting carries no time;
a mail's INTERNALDATE is when the server received it, which for a mail sitting in the folder
at the start is any time before now, and a mail filed in by hand keeps its old one). The
metadata service answers every request with a `Date` (RFC 9110 asks it of every origin
server with a clock); read once with the droplet's id, and carried on the boot clock, which
no step of the wall clock moves, it tells the time for the rest of the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..httpdate import parse_http_date

# How far the droplet's clock may be from the service's before mail is judged by the
# service's: `Date` has whole seconds and comes after a request's round trip, and within a
# few minutes the droplet's own clock, finer and read with the mail, is the better one.
TRUSTED_SKEW = timedelta(minutes=5)


def since_boot() -> float | None:
    """Seconds since this machine booted, suspend included; None where it cannot be read."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # not Linux
        return None


@dataclass(frozen=True)
class ServiceClock:
    """The metadata service's `Date`, and the boot clock when it was read."""

    date: datetime
    read_at: float  # `since_boot()` when the answer came

    @classmethod
    def read(cls, header: str | None) -> ServiceClock | None:
        """From an answer's `Date` header; None without one, or one that is not a date."""
        at = since_boot()
        if header is None or at is None:
            return None
        try:
            return cls(parse_http_date(header), at)
        except ValueError:
            return None

    def now(self) -> datetime | None:
        """The service's time now; None where the boot clock cannot be read."""
        at = since_boot()
        return None if at is None else self.date + timedelta(seconds=at - self.read_at)

    def started(self) -> datetime:
        """When this machine booted, by the service's clock."""
        return self.date - timedelta(seconds=self.read_at)


def judging_clock(
    service: ServiceClock | None, local: datetime
) -> tuple[datetime, timedelta] | None:
    """The service's time now and how far the droplet's clock (`local`) is ahead of it, when
    that is more than TRUSTED_SKEW either way; None when the droplet's clock is to be used."""
    now = service.now() if service is not None else None
    if now is None:
        return None
    ahead = local - now
    return (now, ahead) if abs(ahead) > TRUSTED_SKEW else None


__all__ = ["TRUSTED_SKEW", "ServiceClock", "judging_clock", "since_boot"]
