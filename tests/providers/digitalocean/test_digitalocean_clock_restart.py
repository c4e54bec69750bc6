"""A droplet whose clock is stepped while the agent is down, or while no reclaim stands: a
reclaim saved on the old clock goes out on the clock as it is the first time, and the `clock`
condition follows the clock without waiting for the next mailbox pass."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.agent.protocol import utcnow
from forewarn.providers import boot
from forewarn.providers.digitalocean import watch as do_watch
from forewarn.providers.digitalocean.clock import CLOCK_AHEAD
from forewarn.providers.digitalocean.simulate import DropletMetadataSimulator
from forewarn.providers.simulator import SimServer
from forewarn.testing.dovecot import Dovecot, MailUser
from test_digitalocean_mailbox import DROPLET_ID, reclaim, running, settings_for


class SteppedClock:
    """The wall clock as a module sees it: the true time plus `ahead`, which a test steps."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def __call__(self) -> datetime:
        return utcnow() + self.ahead


@pytest.mark.parametrize(("before", "after"), [(3, 0), (0, 3), (3, -3)])
async def test_a_reclaim_saved_before_a_step_goes_out_on_the_new_clock_the_first_time(
    dovecot: Dovecot,
    mail_user: MailUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    before: int,
    after: int,
) -> None:
    # The agent stopped (an upgrade, a crash), NTP stepped the clock meanwhile, the agent
    # started again. The saved reclaim went out first with the old clock's shift (3 h ahead:
    # a terminate at once, the job gave up 90 min of training) and a few milliseconds later
    # again as the clock read it: a job that heard the first acted on the wrong deadline.
    clock = SteppedClock(timedelta(hours=before))
    monkeypatch.setattr(do_watch, "utcnow", clock)
    monkeypatch.setattr(boot, "utcnow", clock)
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        settings = settings_for(dovecot, mail_user, tmp_path, url=metadata.url, droplet_id=None)
        async with running(settings, tmp_path / "state") as run:
            await run.idling()
            deadline = (utcnow() + timedelta(minutes=90)).replace(second=0, microsecond=0)
            dovecot.append(
                mail_user,
                reclaim(
                    f"Spot GPU Droplet gpu-spot-1 (ID {DROPLET_ID}) will be reclaimed at "
                    f"{deadline:%H:%M} UTC on {deadline:%Y-%m-%d}."
                ),
            )
            [drain] = await run.count(1)
            assert drain.deadline is not None
            shifted = (drain.deadline - deadline).total_seconds()
            assert shifted == pytest.approx(before * 3600, abs=2)
        clock.ahead = timedelta(hours=after)  # NTP's step (or a wrong RTC) while it was down
        async with running(settings, tmp_path / "state") as again:
            await again.idling()
            assert [r.id for r in again.reports] == [drain.id]  # once, and right
            [kept] = again.reports
            assert kept.deadline is not None
            shifted = (kept.deadline - deadline).total_seconds()
            assert shifted == pytest.approx(after * 3600, abs=2)
            assert kept.detail.get(CLOCK_AHEAD, 0) == pytest.approx(after * 3600, abs=2)
            assert ("clock" in again.health.conditions) == bool(after)


async def test_the_clock_condition_follows_the_clock_with_no_reclaim_standing(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The condition was looked at only as a mailbox pass judged mail: with no reclaim
    # standing, `forewarn status` said the clock was 3 h off for up to the IDLE renewal (29
    # min) after NTP had set it right, and said nothing of a clock stepped 3 h off as long.
    clock = SteppedClock(timedelta(hours=3))
    monkeypatch.setattr(do_watch, "utcnow", clock)
    monkeypatch.setattr(do_watch, "CLOCK_CHECK", 0.05)
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        settings = settings_for(dovecot, mail_user, tmp_path, url=metadata.url, droplet_id=None)
        async with running(settings, tmp_path / "state") as run:
            await run.idling()
            assert "3.0 h ahead of" in run.health.conditions["clock"]
            clock.ahead = timedelta(0)  # NTP's step
            await run.until(lambda: "clock" not in run.health.conditions, 3, "the clock right")
            clock.ahead = timedelta(hours=-2)
            await run.until(
                lambda: "2.0 h behind" in run.health.conditions.get("clock", ""),
                3,
                "the clock 2 h behind",
            )
            assert run.reports == []
            assert run.watcher._session is not None and run.watcher._session.idling
