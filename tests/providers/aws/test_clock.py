"""An instance whose clock is hours off AWS's: a scheduled event's NotBefore (and NotAfter)
and a spot interruption's time go out as this instance's clock reads them, read against the
`Date` of the IMDS answer that carried them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from aws_support import watching
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.aws import watch as aws_watch
from forewarn.providers.aws.settings import Settings
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.aws.watch import AwsWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from forewarn.providers.skew import CLOCK_AHEAD
from support import WatcherRun, running_watcher

FAST = {"scheduled_interval": 0.2, "asg_interval": 0.5}


class SteppedClock:
    """The wall clock as the watcher sees it: the true time plus `ahead`, which a test steps."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


@pytest.mark.parametrize("hours", [2, -2])
async def test_a_scheduled_event_is_timed_on_a_clock_hours_off_as_on_a_right_one(
    sim: ImdsSimulator, server: SimServer, monkeypatch: pytest.MonkeyPatch, hours: int
) -> None:
    # The board and the job time NotBefore by this instance's clock. 2 h behind, a reboot
    # 30 min away was 2 h 30 min away: its terminate came 2 h after the reboot (the job
    # trained on unsaved into it); 2 h ahead, 1 h 30 min past: a terminate at once, standing
    # to NotAfter (a job started meanwhile exited at once). Each IMDS answer has a `Date`.
    clock = SteppedClock(timedelta(hours=hours))
    monkeypatch.setattr(aws_watch, "utcnow", clock)
    not_before = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=30)
    async with watching(server.url, **FAST) as run:
        event_id = sim.raise_notice(
            "scheduled", {"code": "system-reboot", "not_before": not_before.isoformat()}
        )
        drain, _ = await run.report_at(action="drain")
        assert drain.deadline is not None and drain.until is not None
        # The skew is read from a Date of whole seconds.
        shifted = (drain.deadline - not_before).total_seconds()
        assert shifted == pytest.approx(hours * 3600, abs=3)
        assert drain.until - drain.deadline == timedelta(hours=2)  # the simulator's window
        assert drain.detail[CLOCK_AHEAD] == shifted
        assert drain.detail["NotBefore"] == sim.scheduled[event_id]["NotBefore"]  # as written
        notice = NoticeBoard(Sequencer(0), 30.0, now=clock).report(drain)
        assert notice is not None and notice.action == "drain"
        assert "clock" in run.health.conditions
        # A hibernation begins when announced: at once on this clock, not moved by the skew.
        sim.raise_notice("spot", {"action": "hibernate"})
        hibernate, _ = await run.report_at(action="terminate")
        assert hibernate.deadline is not None
        assert abs((hibernate.deadline - clock()).total_seconds()) < 3
        clock.ahead = timedelta(0)  # NTP's step
        moved, _ = await run.report_at(action="drain", id=drain.id)
        assert (moved.deadline, moved.until) == (not_before, not_before + timedelta(hours=2))
        assert CLOCK_AHEAD not in moved.detail
        assert "clock" not in run.health.conditions


@pytest.mark.parametrize("drift", [0, 30])
async def test_a_restart_on_a_clock_hours_off_sends_a_scheduled_event_as_restored(
    sim: ImdsSimulator, server: SimServer, monkeypatch: pytest.MonkeyPatch, drift: int
) -> None:
    # After an agent restart the scheduled event is reported again. Its skew, read afresh
    # from 0, is a second (a `Date` has whole seconds) or a few (an unset clock drifts:
    # `drift`) off the one the agent's notice was sent with: a deadline moved by that much,
    # a changed notice to every job, though nothing changed.
    clock = SteppedClock(timedelta(hours=-2))
    monkeypatch.setattr(aws_watch, "utcnow", clock)
    not_before = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=30)
    sim.raise_notice("scheduled", {"code": "system-reboot", "not_before": not_before.isoformat()})
    async with watching(server.url, **FAST) as run:
        drain, _ = await run.report_at(action="drain")
    clock.ahead += timedelta(seconds=drift)
    watcher = AwsWatcher(Settings(url=server.url, **FAST), PollHealth("aws"))
    watcher.restored([drain])
    assert "clock" in watcher.health.conditions  # before the first answer
    async with running_watcher(WatcherRun(watcher)) as again:
        kept, _ = await again.report_at(id=drain.id)
        assert (kept.action, kept.deadline, kept.until) == ("drain", drain.deadline, drain.until)
        assert kept.detail[CLOCK_AHEAD] == drain.detail[CLOCK_AHEAD]
        assert "clock" in watcher.health.conditions
