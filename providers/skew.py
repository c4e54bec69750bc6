"""How far this machine's clock is off a metadata service's (or the Kubernetes API server's),
read from the `Date` of its answer.

A notice that carries a time of its own (Azure's NotBefore, a DigitalOcean reclaim mail's
deadline, Karpenter's termination timestamp) gives it by the provider's clock, while the
agent's board and the job time it by this machine's: on a VM whose clock is 2 h behind (no
NTP, a wrong RTC), a reboot 15 min away was 2 h 15 min away, and its terminate came 2 h after
the reboot. Such a time goes out as this machine's clock reads it, when the two clocks are
more than TRUSTED_SKEW apart, with the skew in the notice's detail (CLOCK_AHEAD). RFC 9110
asks a `Date` of every origin server with a clock; within a few minutes this machine's own
clock, finer, is the better one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from forewarn.protocol.fields import CLOCK_AHEAD
from forewarn.protocol.timefmt import format_time, parse_time

from .boot import since_boot
from .health import PollHealth
from .httpdate import parse_http_date

if TYPE_CHECKING:
    # Types only: the Azure simulator loads this module through the events' formatting.
    from forewarn.providers.report import Report

# How far this machine's clock may be from the service's before times are moved onto it:
# `Date` has whole seconds and comes after a request's round trip.
TRUSTED_SKEW = timedelta(minutes=5)
# The detail key of a notice whose times were moved onto this machine's clock: by how many
# seconds that clock was ahead of the service's (negative: behind). In the protocol, where a
# client reads it too.
# How much the skew must change (NTP setting the clock right) before the times are moved
# again: a deadline a minute off is within the board's margins.
CLOCK_MOVED = timedelta(minutes=1)
# A skew past this in a restored notice is no skew this code wrote.
MOST_AHEAD = timedelta(days=3650)


def clock_ahead(date_header: str | None, local: datetime) -> timedelta | None:
    """How far `local` (this machine's clock as the answer came) is ahead of the answer's
    `Date`, in whole seconds; zero within TRUSTED_SKEW; None without a `Date` that reads."""
    if date_header is None:
        return None
    try:
        ahead = local - parse_http_date(date_header)
    except (ValueError, OverflowError):
        return None
    if abs(ahead) <= TRUSTED_SKEW:
        return timedelta(0)
    return timedelta(seconds=round(ahead.total_seconds()))


def skew_message(ahead: timedelta, service: str) -> str:
    """What `status` says of a clock `ahead` of `service`'s."""
    hours = ahead.total_seconds() / 3600
    side = "ahead of" if hours > 0 else "behind"
    return (
        f"this machine's clock is {abs(hours):.1f} h {side} {service}'s Date; notice times go "
        f"out as this clock reads them (`{CLOCK_AHEAD}` in their detail); set the clock right"
    )


def report_on_clock(report: Report, ahead: timedelta) -> Report:
    """`report` with the provider's times (deadline, `until`, detail's `notice_time`) as a
    clock `ahead` of the provider's reads them, and the skew in its detail; `report` itself
    when `ahead` is zero or it is a clear. A time past what a datetime holds leaves it as it
    is."""
    if not ahead or report.action == "clear":
        return report
    detail = {**report.detail, CLOCK_AHEAD: ahead.total_seconds()}
    try:
        deadline = report.deadline + ahead if report.deadline is not None else None
        until = report.until + ahead if report.until is not None else None
        notice_time = detail.get("notice_time")
        if isinstance(notice_time, str):
            detail["notice_time"] = format_time(parse_time(notice_time) + ahead)
    except (OverflowError, ValueError):
        return report
    return report.model_copy(update={"deadline": deadline, "until": until, "detail": detail})


@dataclass(frozen=True)
class ServiceClock:
    """A service's `Date`, and the boot clock when it was read: the service's time later,
    carried on a clock no step of the wall clock moves, so a step (NTP's first sync) shows
    against it without asking the service again."""

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
        except (ValueError, OverflowError):
            return None

    def now(self) -> datetime | None:
        """The service's time now; None where the boot clock cannot be read."""
        at = since_boot()
        return None if at is None else self.date + timedelta(seconds=at - self.read_at)

    def started(self) -> datetime:
        """When this machine booted, by the service's clock."""
        return self.date - timedelta(seconds=self.read_at)


def sent_skew(report: Report) -> timedelta | None:
    """The skew `report`'s times were moved by (its CLOCK_AHEAD), None when it has none that
    this code could have written (restored from a state file: any value)."""
    seconds = report.detail.get(CLOCK_AHEAD)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    if not math.isfinite(seconds) or abs(seconds) > MOST_AHEAD.total_seconds():
        return None
    return timedelta(seconds=seconds)


def resume_skew(reports: Iterable[Report], health: PollHealth, service: str) -> timedelta:
    """The skew known before an agent restart: the one the latest of its restored `reports`
    was sent with, held as `health`'s `clock` condition; zero when none carries one. The
    watcher starts from it, so that the first `Date`, a second or a few off it (a `Date` has
    whole seconds, an unset clock drifts), does not send each restored notice again with its
    deadline moved by that much, a change to every job (`take_skew` moves it by CLOCK_MOVED
    or more only)."""
    skews = [
        (report.noticed_at, skew)
        for report in reports
        if report.action != "clear" and (skew := sent_skew(report)) is not None
    ]
    if not skews:
        return timedelta(0)
    ahead = max(skews, key=lambda pair: pair[0])[1]
    if ahead:
        health.condition("clock", skew_message(ahead, service))
    return ahead


def take_skew(
    known: timedelta,
    date: str | None,
    now: datetime,
    health: PollHealth,
    provider: str,
    service: str,
) -> timedelta | None:
    """The skew of this machine's clock (`now`, as the answer came) read from an answer's
    `Date` (`clock_ahead`) where it moved from `known` by CLOCK_MOVED or more (a `Date` has
    whole seconds), said in the log and held as `health`'s `clock` condition while the clocks
    are apart; None where `known` stands (no `Date` that reads, or little moved). The
    watcher's notices then go out again on the clock as it is. One for the watchers that read
    a `Date` (AWS, Azure, GCP, Kubernetes). A `Date` that reads marks `health.dated`."""
    ahead = clock_ahead(date, now)
    if ahead is not None:
        health.dated = True
    if ahead is None:
        return None
    if abs(ahead - known) < CLOCK_MOVED:
        health.ahead = known.total_seconds()
        return None
    health.ahead = ahead.total_seconds()
    log = logging.getLogger(f"forewarn.providers.{provider}")
    if not ahead:
        health.condition("clock", None)
        log.info(
            "%s: this machine's clock is within a few minutes of %s's Date again", provider, service
        )
        return ahead
    message = skew_message(ahead, service)
    log.warning("%s: %s", provider, message)
    health.condition("clock", message)
    return ahead


__all__ = [
    "CLOCK_AHEAD",
    "CLOCK_MOVED",
    "MOST_AHEAD",
    "TRUSTED_SKEW",
    "ServiceClock",
    "clock_ahead",
    "report_on_clock",
    "resume_skew",
    "sent_skew",
    "skew_message",
    "take_skew",
]
