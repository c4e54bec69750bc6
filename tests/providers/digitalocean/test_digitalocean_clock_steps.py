"""The mailbox watcher against a real Dovecot (see conftest.py) on a droplet whose wall clock
is stepped while the agent runs: NTP's first sync on a VM whose clock was wrong."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from forewarn.agent.board import NoticeBoard, Sequencer
from forewarn.agent.protocol import utcnow
from forewarn.providers import boot
from forewarn.providers.digitalocean import watch as do_watch
from forewarn.providers.digitalocean.clock import written_deadline
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
    # As written; it goes out on the droplet's clock (see the test below).
    assert (drain.action, written_deadline(drain)) == ("drain", deadline)


@pytest.mark.parametrize("hours", [3, -3])
async def test_a_reclaim_is_timed_on_a_droplet_clock_hours_off_as_on_a_right_one(
    dovecot: Dovecot,
    mail_user: MailUser,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hours: int,
) -> None:
    # The agent's board and the job time a deadline by the droplet's clock. 3 h ahead, a
    # reclaim due in 90 min was 90 min past: a terminate at once (the job gave up 90 min of
    # training), and retired past the grace, so a job started after it heard nothing. 3 h
    # behind, it was 4.5 h away: one drain, and the terminate came 3 h after the reclaim (the
    # job trained on unsaved into it). The deadline goes out as the droplet's clock reads
    # it; once the clock is set right (NTP), it goes out again as written.
    clock = SteppedClock(timedelta(hours=hours))
    monkeypatch.setattr(do_watch, "utcnow", clock)
    monkeypatch.setattr(do_watch, "CLOCK_CHECK", 0.05)
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
            # The skew is read from a Date of whole seconds.
            shifted = (drain.deadline - deadline).total_seconds()
            assert shifted == pytest.approx(hours * 3600, abs=2)
            assert drain.detail["clock_ahead_seconds"] == shifted
            board = NoticeBoard(Sequencer(0), 30.0, now=clock)
            notice = board.report(drain)
            assert notice is not None and notice.action == "drain"
            left = (notice.deadline - clock()).total_seconds()
            assert left == pytest.approx((deadline - utcnow()).total_seconds(), abs=5)
        # After an agent restart, the reclaim saved still stands, as the droplet's clock reads it.
        async with running(settings, tmp_path / "state") as again:
            [kept] = await again.count(1)
            assert (kept.id, kept.deadline) == (drain.id, drain.deadline)
            clock.ahead = timedelta(0)  # NTP's step
            [_, moved] = await again.count(2)
            assert (moved.id, moved.action, moved.deadline) == (drain.id, "drain", deadline)
            assert "clock_ahead_seconds" not in moved.detail


async def test_a_first_reclaim_made_before_a_step_and_taken_after_it_sends_no_terminate(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path
) -> None:
    """The droplet's clock right (read against the metadata service's `Date`); a reclaim mail
    30 min out is judged, and the wall clock is stepped 2 h forward before the board takes the
    report (a report queued as the step landed). The board tells such a report by the skew
    its watcher held before the step (`PollHealth.ahead`, as `take_skew` keeps it for AWS,
    Azure, GCP and Kubernetes), which this watcher never kept: the first reclaim, 90 min past
    by the stepped clock, went out as terminate at once, the job out 30 min early. Judged on
    the clock it was made on until the watcher re-times it, it is a drain."""
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        settings = settings_for(dovecot, mail_user, tmp_path, url=metadata.url, droplet_id=None)
        async with running(settings, tmp_path / "state") as run:
            await run.idling()
            assert run.health.ahead == 0.0  # the clock looked at as the watch began
            step = [0.0]
            board = NoticeBoard(
                Sequencer(0),
                30.0,
                now=lambda: utcnow() + timedelta(seconds=step[0]),
                clock_vouched=lambda provider: run.health.dated,
                clock_skews=lambda: (
                    {"digitalocean": run.health.ahead or 0.0}
                    if run.health.ahead is not None
                    else {}
                ),
            )
            assert board.due() == ([], [])
            deadline = (utcnow() + timedelta(minutes=30)).replace(second=0, microsecond=0)
            dovecot.append(
                mail_user,
                reclaim(
                    f"Spot GPU Droplet gpu-spot-1 (ID {DROPLET_ID}) will be reclaimed at "
                    f"{deadline:%H:%M} UTC on {deadline:%Y-%m-%d}."
                ),
            )
            [made] = await run.count(1)
            step[0] = timedelta(hours=2).total_seconds()  # the step, before the board takes it
            notice = board.report(made)
            assert notice is not None and notice.action == "drain", notice
            assert board.due() == ([], [])
