"""The metadata service's clock (`clock.py`): read from any `Date` without raising, and used
only when the droplet's own clock is far off; a reclaim's times put on the droplet's clock and
back, from any saved skew without raising."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from forewarn.protocol.timefmt import format_time
from forewarn.providers.digitalocean.clock import (
    CLOCK_AHEAD,
    TRUSTED_SKEW,
    ServiceClock,
    clock_ahead,
    judging_clock,
    on_droplet_clock,
    since_boot,
    standing,
    written_deadline,
)
from forewarn.providers.httpdate import format_http_date
from forewarn.providers.report import Report
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


def _reclaim(deadline: datetime | None = NOW, **detail: Any) -> Report:
    return Report(
        id="digitalocean/reclaim/x",
        action="drain",
        reason="reclaim",
        provider="digitalocean",
        deadline=deadline,
        noticed_at=NOW - timedelta(minutes=5),
        detail={"notice_time": format_time(NOW - timedelta(minutes=6)), **detail},
    )


@given(st.integers(-3 * 86400, 3 * 86400))
def test_a_reclaim_goes_onto_the_droplet_clock_and_back_as_written(ahead: int) -> None:
    written = _reclaim()
    moved = on_droplet_clock(written, timedelta(seconds=ahead))
    if abs(ahead) < 60:  # within a minute of as written: left so
        assert moved is written
        return
    shift = timedelta(seconds=ahead)
    assert moved.deadline == NOW + shift and clock_ahead(moved) == shift
    assert moved.noticed_at == written.noticed_at + shift
    assert moved.detail["notice_time"] == format_time(NOW - timedelta(minutes=6) + shift)
    assert written_deadline(moved) == NOW
    assert standing(moved, NOW - timedelta(seconds=1))
    assert standing(moved, NOW + shift - timedelta(seconds=1))
    assert not standing(moved, max(NOW, NOW + shift))
    # The clock set right: back as written, without the key.
    assert on_droplet_clock(moved, timedelta(0)) == written
    assert CLOCK_AHEAD not in on_droplet_clock(moved, timedelta(0)).detail


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=10),
        st.lists(st.integers(), max_size=2),
    ),
    st.one_of(st.none(), st.datetimes(timezones=st.just(timezone.utc))),
    st.integers(-(10**6), 10**6),
)
@example(1e300, NOW, 3600)
@example(-86400.0 * 3000, datetime(1, 1, 2, tzinfo=timezone.utc), 0)
def test_any_saved_skew_reads_without_raising(
    saved: object, deadline: datetime | None, ahead: int
) -> None:
    report = _reclaim(deadline, **{CLOCK_AHEAD: saved})
    assert isinstance(clock_ahead(report), timedelta)
    standing(report, NOW)
    written_deadline(report)
    assert isinstance(on_droplet_clock(report, timedelta(seconds=ahead)), Report)
