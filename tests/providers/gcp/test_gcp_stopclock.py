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


def test_a_stop_goes_to_the_agent_marked_as_kept_on_the_boot_clock() -> None:
    """The agent holds the watcher's stop on its own boot clock between two reports only when
    told: a stop with a deadline is marked (and is no flag file's duration, even handed back
    after a restart as one), a clear or a drain without a deadline is left as it is."""
    from forewarn.providers.gcp.settings import Settings
    from forewarn.providers.gcp.watch import maintenance_report, on_boot_clock, preemption_report

    stop = maintenance_report("TERMINATE_ON_HOST_MAINTENANCE", Settings(), T0, 3600)
    preempted = preemption_report(True, 30, T0)
    for report in (stop, preempted):
        assert report is not None and report.deadline_on_boot_clock
        handed = report.model_copy(
            update={"deadline_is_duration": True, "deadline_on_boot_clock": False}
        )
        marked = on_boot_clock(handed)
        assert marked is not None and marked.deadline_on_boot_clock
        assert not marked.deadline_is_duration and marked.deadline == report.deadline
    unknown = maintenance_report("SOMETHING_NEW", Settings(), T0)
    assert unknown is not None and unknown.deadline is None
    assert on_boot_clock(unknown) == unknown
    cleared = stop.model_copy(update={"action": "clear", "deadline": None})  # type: ignore[union-attr]
    assert on_boot_clock(cleared) == cleared and on_boot_clock(None) is None
