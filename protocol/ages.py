"""The ages a status reply gives: seconds since each active notice was noticed, on the boot
clock, which no step of the wall clock moves. Read by the client library (a terminate that looks
older than the job) and by `forewarn wait` (a notice that looks older than the wait)."""

from __future__ import annotations

import math

from .timefmt import time_or_none


def status_ages(reply: object) -> dict[str, float] | None:
    """The ages (seconds on the boot clock since each notice was noticed) a status reply
    gives, or None when it gives none (an older agent, an error reply). The agent ages a
    notice from its raise: one raised again after it expired (listed in `raised`) gains the
    time from its `noticed_at` to that raise, and one whose raise cannot be placed is left
    out. Whatever the reply holds, nothing is raised."""
    if not isinstance(reply, dict) or reply.get("ok") is not True:
        return None
    ages = reply.get("ages")
    if not isinstance(ages, dict):
        return None
    raised = reply.get("raised")
    raised = raised if isinstance(raised, dict) else {}
    active = reply.get("active")
    noticed = {
        notice.get("id"): time_or_none(notice.get("noticed_at"))
        for notice in (active if isinstance(active, list) else ())
        if isinstance(notice, dict) and isinstance(notice.get("id"), str)
    }
    found: dict[str, float] = {}
    for notice_id, age in ages.items():
        if isinstance(age, bool) or not isinstance(age, (int, float)):
            continue
        if not 0 <= age < math.inf:
            continue
        if notice_id in raised:
            at, first = time_or_none(raised[notice_id]), noticed.get(notice_id)
            if at is None or first is None:
                continue  # aged from a raise it cannot place: not known
            age += max(0.0, (at - first).total_seconds())
        found[str(notice_id)] = float(age)
    return found


__all__ = ["status_ages"]
