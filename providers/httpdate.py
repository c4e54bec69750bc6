"""HTTP dates (RFC 1123, as IMDS writes them), parsed and written without the C locale.

`email.utils` reads and writes English day and month names whatever `LC_TIME` says, which is
why it is used here instead of `strptime("%b")`. AWS writes scheduled-event dates without the
weekday and with an unpadded day (`21 Jan 2019 09:00:43 GMT`); Azure writes full RFC 1123
(`Mon, 19 Sep 2016 18:29:47 GMT`) and does not always name the right weekday. Both parse here.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime, parsedate_tz

from forewarn.protocol.timefmt import civil_time

# A four-digit year standing alone (not the digits of a `+0100` offset). email.utils turns
# years under 100 into 19xx/20xx, which would move year 0001 to 2001; the year written
# wins, and two-digit years (RFC 850) are not accepted at all.
_YEAR = re.compile(r"(?<![\d+-])(\d{4})(?!\d)")
_CLOCK = re.compile(r"\d{1,2}:\d{2}")


def parse_http_date(text: str) -> datetime:
    """An RFC 1123 date (weekday optional, not checked) as an aware UTC time; ValueError
    naming the text otherwise. A date without a zone is taken as UTC, as IMDS means it."""
    year = _YEAR.search(text)
    parts = parsedate_tz(text) if year and _CLOCK.search(text) else None
    if year is None or parts is None:
        raise ValueError(f"not an HTTP date: {text[:80]!r}")
    _, month, day, hour, minute, second = parts[:6]
    offset = parts[9] or 0
    try:
        moment = civil_time(int(year.group(1)), month, day, hour, minute, second, 0, timezone.utc)
        return moment - timedelta(seconds=offset)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"not a valid HTTP date: {text[:80]!r} ({error})") from None


def format_http_date(moment: datetime) -> str:
    """RFC 1123 in GMT: `Mon, 19 Sep 2016 18:29:47 GMT`."""
    return format_datetime(moment.astimezone(timezone.utc), usegmt=True)


def format_short_http_date(moment: datetime) -> str:
    """The form of AWS scheduled events: no weekday, unpadded day (`3 May 2019 09:00:43 GMT`)."""
    return format_http_date(moment).split(", ", 1)[1].lstrip("0")


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP date), None when
    absent or unreadable; never negative or infinite."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            seconds = (parse_http_date(value.strip()) - datetime.now(timezone.utc)).total_seconds()
        except ValueError:
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


__all__ = ["format_http_date", "format_short_http_date", "parse_http_date", "retry_after_seconds"]
