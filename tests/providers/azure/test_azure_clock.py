"""A VM whose clock is hours off Azure's: NotBefore goes out as this VM's clock reads it, read
against the `Date` of the Scheduled Events answer that carried it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from azure_harness import running
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.azure import watch as azure_watch
from forewarn.providers.azure.settings import Settings
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import AzureWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from forewarn.providers.skew import CLOCK_AHEAD
from support import WatcherRun, eventually_async, running_watcher


class SteppedClock:
    """The wall clock as the watcher sees it: the true time plus `ahead`, which a test steps."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


@pytest.mark.parametrize("hours", [2, -2])
async def test_a_reboot_is_timed_on_a_vm_clock_hours_off_as_on_a_right_one(
    monkeypatch: pytest.MonkeyPatch, hours: int
) -> None:
    # The board and the job time NotBefore by this VM's clock. 2 h behind, a Reboot 15 min
    # away was 2 h 15 min away: one drain, and its terminate came 2 h after the reboot (the
    # job trained on unsaved into it, and no approval was ever sent); 2 h ahead, it was 1 h 45
    # min past, a terminate at once. The answer's `Date` says how far off the clock is.
    clock = SteppedClock(timedelta(hours=hours))
    monkeypatch.setattr(azure_watch, "utcnow", clock)
    async with running() as h:
        before = utcnow()
        event_id = h.sim.raise_notice("Reboot", {"not_before_seconds": 900})
        [drain] = await eventually_async(lambda: h.reports, what="the reboot")
        assert drain.deadline is not None
        written = before + timedelta(seconds=900)
        # The skew is read from a Date of whole seconds.
        shifted = (drain.deadline - written).total_seconds()
        assert shifted == pytest.approx(hours * 3600, abs=3)
        assert drain.detail[CLOCK_AHEAD] == pytest.approx(hours * 3600, abs=3)
        notice = NoticeBoard(Sequencer(0), 30.0, now=clock).report(drain)
        assert notice is not None and notice.action == "drain"
        assert "clock" in h.health.conditions
        clock.ahead = timedelta(0)  # NTP's step
        await eventually_async(lambda: len(h.reports) >= 2, what="the reboot again")
        moved = h.reports[1]
        assert (moved.id, moved.action) == (f"azure/{event_id}", "drain")
        assert moved.deadline is not None
        assert abs((moved.deadline - written).total_seconds()) < 3
        assert CLOCK_AHEAD not in moved.detail
        assert "clock" not in h.health.conditions


@pytest.mark.parametrize("drift", [0, 30])
async def test_a_restart_on_a_clock_hours_off_sends_notbefore_as_restored(
    monkeypatch: pytest.MonkeyPatch, drift: int
) -> None:
    # After an agent restart the watcher is given the agent's notice as restored, on this
    # VM's clock. The first answer's skew, read afresh from 0, is a second (a `Date` has whole
    # seconds) or a few (an unset clock drifts: `drift`) off the one the notice was sent
    # with: the notice went out again with its deadline moved by that much, a changed notice
    # to every job, though nothing changed.
    clock = SteppedClock(timedelta(hours=-2))
    monkeypatch.setattr(azure_watch, "utcnow", clock)
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10)
    with SimServer(sim) as server:
        settings = Settings(url=server.url, interval=0.25)
        sim.raise_notice("Reboot", {"not_before_seconds": 900})
        first = AzureWatcher(settings, PollHealth("azure"))
        async with running_watcher(WatcherRun(first)) as run:
            [drain] = await eventually_async(lambda: run.reports, what="the reboot")
        clock.ahead += timedelta(seconds=drift)
        again = AzureWatcher(settings, PollHealth("azure"))
        again.restored([drain])
        assert "clock" in again.health.conditions  # before the first answer
        async with running_watcher(WatcherRun(again)) as run:
            await eventually_async(lambda: again.documents >= 3, what="three answers")
            assert [(r.id, r.deadline) for r in run.reports] == [(drain.id, drain.deadline)]
            assert "clock" in again.health.conditions
