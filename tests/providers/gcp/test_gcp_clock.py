"""A VM whose clock is hours off Google's: an upcoming-maintenance window goes out as this VM's
clock reads it, read against the `Date` of the answer that carried it. Preemption and
maintenance-event carry no time: their deadlines are counted from this VM's clock already."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp import watch as gcp_watch
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from forewarn.providers.skew import CLOCK_AHEAD
from gcp_support import watching


class SteppedClock:
    """The wall clock as the watcher sees it: the true time plus `ahead`, which a test steps."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


@pytest.mark.parametrize("hours", [3, -3])
async def test_a_window_is_timed_on_a_vm_clock_hours_off_as_on_a_right_one(
    server: SimServer, sim: GcpSimulator, monkeypatch: pytest.MonkeyPatch, hours: int
) -> None:
    # The board and the job time the window's start by this VM's clock. 3 h ahead, a window
    # starting in 2 h was an hour past: a terminate at once, standing to the window's end (a
    # job started meanwhile exited at once); 3 h behind, its terminate came 3 h late.
    clock = SteppedClock(timedelta(hours=hours))
    monkeypatch.setattr(gcp_watch, "utcnow", clock)
    async with watching(server.url) as run:
        await run.until_polling()
        sim.raise_notice("upcoming", {"start_in": 7200, "window": 3600})
        [drain] = await run.count(1)
        assert sim.upcoming is not None
        start = parse_time(sim.upcoming["window_start_time"])
        end = parse_time(sim.upcoming["window_end_time"])
        assert drain.deadline is not None and drain.until is not None
        # The skew is read from a Date of whole seconds.
        assert (drain.deadline - start).total_seconds() == pytest.approx(hours * 3600, abs=3)
        assert (drain.until - end).total_seconds() == pytest.approx(hours * 3600, abs=3)
        assert drain.detail[CLOCK_AHEAD] == pytest.approx(hours * 3600, abs=3)
        assert drain.detail["window_start_time"] == sim.upcoming["window_start_time"]
        notice = NoticeBoard(Sequencer(0), 30.0, now=clock).report(drain)
        assert notice is not None and notice.action == "drain"
        assert "clock" in run.health.conditions
        clock.ahead = timedelta(0)  # NTP's step
        _, moved = await run.count(2)
        assert (moved.id, moved.action, moved.deadline, moved.until) == (
            drain.id,
            "drain",
            start,
            end,
        )
        assert CLOCK_AHEAD not in moved.detail
        assert "clock" not in run.health.conditions


@pytest.mark.parametrize("drift", [0, 30])
async def test_a_restart_on_a_clock_hours_off_sends_the_saved_window_as_it_was(
    server: SimServer,
    sim: GcpSimulator,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    drift: int,
) -> None:
    # The window saved before an agent restart was sent on this VM's clock. The first answer
    # after it, its skew read afresh from 0, is a second (a `Date` has whole seconds) or a
    # few (an unset clock drifts: `drift`) off the saved one: the window was taken for one
    # changed while the agent was down and went out again with its deadline moved by that
    # much, a changed notice to every job, though nothing changed.
    clock = SteppedClock(timedelta(hours=-3))
    monkeypatch.setattr(gcp_watch, "utcnow", clock)
    sim.raise_notice("upcoming", {"start_in": 7200, "window": 3600})
    async with watching(server.url, tmp_path) as run:
        [drain] = await run.count(1)
    clock.ahead += timedelta(seconds=drift)
    async with watching(server.url, tmp_path) as again:
        await again.until_polling(4)
        assert [(r.id, r.deadline, r.until) for r in again.reports] == [
            (drain.id, drain.deadline, drain.until)
        ]
        assert "clock" in again.health.conditions
