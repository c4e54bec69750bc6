"""The metadata service's clock (`clock.py`): read from any `Date` without raising, and used
only when the droplet's own clock is far off."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from forewarn.providers.digitalocean.clock import (
    TRUSTED_SKEW,
    ServiceClock,
    judging_clock,
    since_boot,
)
from forewarn.providers.httpdate import format_http_date
from hypothesis import example, given
from hypothesis import strategies as st

NOW = datetime(2026, 12, 5, 15, 0, tzinfo=timezone.utc)


@given(st.one_of(st.none(), st.text(max_size=60)))
@example("Sat, 05 Dec 2026 15:00:00 GMT")
@example("Sat, 05 Dec 99999 15:00:00 GMT")
@example("")
def test_any_date_header_gives_a_clock_or_none(header: str | None) -> None:
    clock = ServiceClock.read(header)
    assert clock is None or clock.date.tzinfo is not None


def test_the_clock_runs_on_from_its_date() -> None:
    clock = ServiceClock.read(format_http_date(NOW))
    assert clock is not None
    now = clock.now()
    assert now is not None and timedelta(0) <= now - NOW < timedelta(seconds=5)
    at = since_boot()
    assert at is not None
    assert abs((clock.started() - (NOW - timedelta(seconds=at))).total_seconds()) < 5


@given(st.integers(-3 * 86400, 3 * 86400))
def test_the_service_clock_is_used_only_beyond_the_trusted_skew(ahead: int) -> None:
    clock = ServiceClock.read(format_http_date(NOW))
    assert clock is not None
    service_now = clock.now()
    assert service_now is not None
    judged = judging_clock(clock, service_now + timedelta(seconds=ahead))
    # A second of slack: the service's clock runs on between the two reads.
    if abs(ahead) <= TRUSTED_SKEW.total_seconds() - 1:
        assert judged is None
    elif abs(ahead) > TRUSTED_SKEW.total_seconds() + 1:
        assert judged is not None
        now, skew = judged
        assert abs((now - service_now).total_seconds()) < 1
        assert abs(skew.total_seconds() - ahead) < 1
    assert judging_clock(None, NOW) is None
