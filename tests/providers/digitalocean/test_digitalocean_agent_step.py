"""A step of the droplet's wall clock while the agent runs, through the real agent subprocess
with a real Dovecot and the droplet metadata simulator: the agent runs on a wall clock moved
by a sitecustomize (`shifted_wall_clock`: `datetime.now` and `time.time`, as a droplet's clock
is before NTP's first sync); the simulator's `Date` is the machine's own clock."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from forewarn.agent.protocol import parse_time, utcnow
from forewarn.providers.digitalocean.simulate import DropletMetadataSimulator
from forewarn.providers.simulator import SimServer
from forewarn.testing.dovecot import Dovecot, MailUser
from support import AgentProcess, eventually, shifted_wall_clock
from test_digitalocean_agent import DROPLET_ID, do_env, reclaim_mail


def _clock_off(agent: AgentProcess) -> bool:
    [health] = agent.control({"op": "status"})["health"]
    return "behind the metadata service" in str(health["conditions"])


def test_a_reclaim_follows_ntps_step_with_no_clear(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path
) -> None:
    """The droplet's clock 3 h behind the metadata service's; a reclaim 90 min out goes out
    with its deadline 90 min from the droplet's now. NTP then steps the clock 3 h forward.
    The board held the deadline as a moment, 90 min past by the stepped clock: it retired the
    reclaim with a `clear` (a job trains on) before the watcher's next look at the clock (5 s)
    raised it again. Held on the boot clock, it follows the step at once: the drain goes out
    again with its deadline where the step puts it. No clear, no terminate."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-3).total_seconds())
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        env = do_env(tmp_path, dovecot, mail_user, mail_user.password)
        del env["FOREWARN_DIGITALOCEAN_DROPLET_ID"]  # read from metadata, with its `Date`
        env.update(FOREWARN_DIGITALOCEAN_URL=metadata.url, **shifted)
        agent = AgentProcess(tmp_path, ("digitalocean",), env=env)
        with agent, agent.subscriber() as sub:
            deadline = (utcnow() + timedelta(minutes=90)).replace(microsecond=0)
            dovecot.append(mail_user, reclaim_mail(f"at {deadline:%Y-%m-%dT%H:%M:%SZ}"))
            first = sub.notice(timeout=15)
            assert first["action"] == "drain", first
            left = parse_time(first["deadline"]) - utcnow()
            assert abs(left - timedelta(hours=-1, minutes=-30)) < timedelta(minutes=1), first
            eventually(lambda: _clock_off(agent), what="the clock condition")
            offset.write_text("0")  # NTP's step: the agent's wall clock is 3 h on
            stepped = time.monotonic()
            eventually(lambda: not _clock_off(agent), timeout=20, what="the watcher's new skew")
            # The watcher looks at the clock every 5 s: past its next look, what it moved
            # has reached the board.
            after = sub.drain(max(0.5, 6.0 - (time.monotonic() - stepped)))
            after += sub.drain(1.0)
            [active] = agent.control({"op": "status"})["active"]
        sent = [(n["action"], n["id"]) for n in after]
        assert sent and set(sent) == {("drain", first["id"])}, sent
        assert (active["id"], active["action"]) == (first["id"], "drain"), active
        assert abs(parse_time(active["deadline"]) - deadline) < timedelta(seconds=3), active
    assert "expired" not in agent.output(), agent.output()


def _clock_ahead(agent: AgentProcess) -> bool:
    [health] = agent.control({"op": "status"})["health"]
    return "ahead of the metadata service" in str(health["conditions"])


def test_a_step_that_makes_a_right_clock_wrong_sends_the_reclaim_once_and_no_clear(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path
) -> None:
    """The droplet's clock right; a reclaim 90 min out goes out with its deadline as the mail
    wrote it. A step then puts the clock 3 h ahead (a bad time source). The board held the
    deadline as a moment, 90 min past by the stepped clock: it retired the reclaim with a
    `clear` at once (a job trains on, and flushes again for the re-raise), and the watcher
    raised it again up to 5 s later (its look at the clock), moved by the new skew. Judged on
    the boot clock until the watcher speaks, the drain goes out again once, its deadline
    where the step puts it. No clear, no terminate."""
    shifted, offset = shifted_wall_clock(tmp_path, 0.0)
    with SimServer(DropletMetadataSimulator(droplet_id=int(DROPLET_ID))) as metadata:
        env = do_env(tmp_path, dovecot, mail_user, mail_user.password)
        del env["FOREWARN_DIGITALOCEAN_DROPLET_ID"]  # read from metadata, with its `Date`
        env.update(FOREWARN_DIGITALOCEAN_URL=metadata.url, **shifted)
        agent = AgentProcess(tmp_path, ("digitalocean",), env=env)
        with agent, agent.subscriber() as sub:
            deadline = (utcnow() + timedelta(minutes=90)).replace(microsecond=0)
            dovecot.append(mail_user, reclaim_mail(f"at {deadline:%Y-%m-%dT%H:%M:%SZ}"))
            first = sub.notice(timeout=15)
            assert first["action"] == "drain", first
            assert abs(parse_time(first["deadline"]) - deadline) < timedelta(seconds=3), first
            offset.write_text(str(timedelta(hours=3).total_seconds()))  # the bad step
            stepped = time.monotonic()
            eventually(lambda: _clock_ahead(agent), timeout=20, what="the watcher's new skew")
            after = sub.drain(max(0.5, 6.0 - (time.monotonic() - stepped)))
            after += sub.drain(1.0)
            [active] = agent.control({"op": "status"})["active"]
        sent = [(n["action"], n["id"]) for n in after]
        assert sent == [("drain", first["id"])], (sent, active, agent.output())
        assert (active["id"], active["action"]) == (first["id"], "drain"), active
        moved = parse_time(active["deadline"]) - timedelta(hours=3)
        assert abs(moved - deadline) < timedelta(seconds=3), active
    assert "expired" not in agent.output(), agent.output()


def test_a_terminate_due_just_after_ntps_first_sync_is_on_time_without_droplet_metadata(
    dovecot: Dovecot, mail_user: MailUser, tmp_path: Path
) -> None:
    """The droplet's clock 3 h behind (before NTP's first sync), no droplet metadata (its id
    configured, the service unreachable): the reclaim's deadline, 75 s out, is read from the
    mail, and no provider `Date` vouches for the clock it was read on. NTP then steps the
    clock 3 h forward: the deadline less the exit margin (30 s) is 45 s after the mail. The
    board held it on the boot clock for the settle (70 s) as for a watcher that re-times it,
    which this one never does: the terminate came some 25 s after the reclaim's deadline.
    Judged on the wall clock at once, it comes at the deadline less the margin."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-3).total_seconds())
    env = do_env(tmp_path, dovecot, mail_user, mail_user.password)
    env.update(shifted)
    agent = AgentProcess(tmp_path, ("digitalocean",), env=env)
    with agent, agent.subscriber() as sub:
        deadline = (utcnow() + timedelta(seconds=75)).replace(microsecond=0)
        dovecot.append(mail_user, reclaim_mail(f"at {deadline:%Y-%m-%dT%H:%M:%SZ}"))
        first = sub.notice(timeout=15)
        assert first["action"] == "drain", first
        offset.write_text("0")  # NTP's first sync: the agent's wall clock is 3 h on
        due = deadline - timedelta(seconds=30)
        left = (due - utcnow()).total_seconds()
        assert left > 10, "the drain came too late for the step to be before the terminate"
        terminate = sub.notice(timeout=left + 5)
        came = utcnow()
    assert (terminate["action"], terminate["id"]) == ("terminate", first["id"]), terminate
    assert parse_time(terminate["deadline"]) == deadline, terminate
    assert due - timedelta(seconds=2) <= came <= due + timedelta(seconds=3), (came, due)
