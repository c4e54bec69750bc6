"""The maintenance stop kept on the boot clock: its deadline follows a step of the wall clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from forewarn.providers.gcp import stopclock
from forewarn.providers.gcp.stopclock import StopClock

T0 = datetime(2026, 12, 5, 18, 0, tzinfo=timezone.utc)


def test_a_step_moves_the_deadline_and_slew_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    boot = {"now": 1000.0}
    monkeypatch.setattr(stopclock, "since_boot", lambda: boot["now"])
    clock = StopClock()
    deadline = T0 + timedelta(hours=1)
    assert clock.follow(deadline, T0) is None  # set: the stop from now on
    boot["now"] += 60
    assert clock.follow(deadline, T0 + timedelta(seconds=62)) is None  # 2 s: slew, no step
    boot["now"] += 60
    stepped_back = T0 + timedelta(seconds=120) - timedelta(minutes=30)
    moved = clock.follow(deadline, stepped_back)
    assert moved == deadline - timedelta(minutes=30)
    assert clock.follow(moved, stepped_back) is None  # the moved one is now the stop's
    later = moved + timedelta(minutes=5)  # a new stop given by the notice: taken as it is
    assert clock.follow(later, stepped_back) is None and clock.deadline == later
    assert clock.follow(None, stepped_back) is None and clock.at is None
