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

The agent's board and the job time a deadline by the droplet's clock, so a reclaim goes out
with its deadline as that clock reads it (`on_droplet_clock`): 3 h ahead, a reclaim due in
90 min was 90 min past, a terminate at once, retired past the grace before a job started
later could hear of it; 3 h behind, its terminate came 3 h after the reclaim.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.report import Report

from ..boot import since_boot

# TRUSTED_SKEW: how far the droplet's clock may be from the service's before mail is judged
# by the service's (within a few minutes the droplet's own clock, finer and read with the
# mail, is the better one). CLOCK_AHEAD and CLOCK_MOVED: as every provider moves times.
from ..skew import CLOCK_AHEAD, CLOCK_MOVED, TRUSTED_SKEW, ServiceClock


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


def clock_ahead(report: Report) -> timedelta:
    """How far ahead the droplet's clock was taken to be when `report`'s times were put on
    it; zero for one whose times are as written."""
    seconds = report.detail.get(CLOCK_AHEAD)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return timedelta(0)
    if not math.isfinite(seconds) or abs(seconds) > _MOST_AHEAD.total_seconds():
        return timedelta(0)
    return timedelta(seconds=seconds)


def on_droplet_clock(report: Report, ahead: timedelta) -> Report:
    """`report` with its times (deadline, noticed_at, detail's notice_time) as a droplet
    clock `ahead` of the service's reads them, from where they stand now (`clock_ahead`);
    `report` itself when that moves them by less than CLOCK_MOVED. `ahead` zero puts them
    back as written."""
    was = clock_ahead(report)
    move = timedelta(seconds=round(ahead.total_seconds())) - was
    if abs(move) < CLOCK_MOVED:
        return report
    now_ahead = was + move
    detail = {key: value for key, value in report.detail.items() if key != CLOCK_AHEAD}
    if now_ahead:
        detail[CLOCK_AHEAD] = now_ahead.total_seconds()
    try:
        deadline = report.deadline + move if report.deadline is not None else None
        noticed_at = report.noticed_at + move
        notice_time = detail.get("notice_time")
        if isinstance(notice_time, str):
            detail["notice_time"] = format_time(parse_time(notice_time) + move)
    except (OverflowError, ValueError):  # a clock off by centuries: left as written
        return report
    # Moved by a skew, the deadline is one the watcher moves with a step of the droplet's
    # clock (within CLOCK_CHECK, `_follow_clock`): the board holds it on the boot clock until
    # then. Taken for a moment, NTP's step 3 h forward put a reclaim 90 min out 90 min past,
    # and the board retired it with a `clear` (a job trains on) before the watcher moved it.
    on_boot_clock = bool(now_ahead) and deadline is not None
    return report.model_copy(
        update={
            "deadline": deadline,
            "noticed_at": noticed_at,
            "detail": detail,
            "deadline_on_boot_clock": on_boot_clock,
        }
    )


def written_deadline(report: Report) -> datetime | None:
    """`report`'s deadline as the mail wrote it (not on the droplet's clock)."""
    if report.deadline is None:
        return None
    try:
        return report.deadline - clock_ahead(report)
    except OverflowError:
        return report.deadline


def standing(report: Report, now: datetime) -> bool:
    """Whether `report` is not past its deadline at `now` (the droplet's clock): on that
    clock as it was when the reclaim went out, or as written (the clock set right since: a
    reclaim put 3 h earlier on a clock 3 h behind was otherwise dropped at a restart)."""
    if report.deadline is None or report.deadline > now:
        return True
    written = written_deadline(report)
    return written is not None and written > now


# A skew past this in a saved file is no skew this code wrote (a datetime spans 10,000 years).
_MOST_AHEAD = timedelta(days=3650)


__all__ = [
    "CLOCK_AHEAD",
    "CLOCK_MOVED",
    "TRUSTED_SKEW",
    "ServiceClock",
    "clock_ahead",
    "judging_clock",
    "on_droplet_clock",
    "since_boot",
    "standing",
    "written_deadline",
]
