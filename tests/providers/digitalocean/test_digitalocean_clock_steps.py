"""The mailbox watcher against a real Dovecot (see conftest.py) on a droplet whose wall clock
is stepped while the agent runs: NTP's first sync on a VM whose clock was wrong."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.agent.protocol import utcnow
from forewarn.providers import boot
from forewarn.providers.digitalocean import watch as do_watch
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


async def test_a_clock_ahead_at_the_start_and_corrected_later_does_not_drop_a_reclaim(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The clock was 3 h ahead when the agent started with the droplet: the boot time read
    # then (now less the clock since boot) was 3 h late. Once NTP set the clock right, a
    # reclaim mail naming the droplet by name, due 2 h after it came, within the first hour
    # was due "before this machine started" and dropped. (This machine booted hours ago:
    # that much more ahead puts the boot time read where the droplet's would be.)
    uptime = timedelta(seconds=time.clock_gettime(time.CLOCK_BOOTTIME))
    clock = SteppedClock(uptime + timedelta(hours=3))
    monkeypatch.setattr(boot, "utcnow", clock)
    settings = settings_for(dovecot, mail_user, tmp_path, droplet_id=None)
    async with running(settings, tmp_path / "state") as run:
        await run.idling()
        clock.ahead = timedelta(0)  # NTP's step back
        dovecot.append(mail_user, reclaim("Your Spot GPU Droplet gpu-spot-1 will be reclaimed."))
        reports = await run.count(1)
        assert reports[0].action == "drain"


@pytest.mark.parametrize("ahead", [timedelta(hours=25), timedelta(days=3), None])
async def test_a_clock_ahead_by_more_than_max_age_keeps_todays_reclaim(
    dovecot: Dovecot,
    mail_user: MailUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ahead: timedelta | None,
) -> None:
    # A droplet whose clock is a day or more ahead (no NTP, a wrong RTC): a reclaim mail of
    # today was "older than max_age" (24 h) and dropped; three days ahead, the mailbox search
    # (SINCE the day max_age back) did not even list it. The job had no notice at all. The
    # droplet metadata service answers with its own Date: the mail is judged by that clock.
    # None: 3 h ahead on a droplet booted just now (this machine's uptime more ahead): its
    # start (now less the boot clock) came after the reclaim's time, "due before this
    # machine started".
    if ahead is None:
        ahead = timedelta(seconds=time.clock_gettime(time.CLOCK_BOOTTIME), hours=3)
    clock = SteppedClock(ahead)
    monkeypatch.setattr(boot, "utcnow", clock)
    monkeypatch.setattr(do_watch, "utcnow", clock)
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        settings = settings_for(
            dovecot, mail_user, tmp_path, url=metadata.url, droplet_id=None, droplet_name=None
        )
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
    assert (drain.action, drain.deadline) == ("drain", deadline)
