"""A provider's deadline moved EARLIER after its notice was sent, end to end: the real agent
subprocess against each provider's simulator on loopback, a raw subscriber, and a
CheckpointGuard (or `forewarn wait`) in front of it.

The agent re-sends the notice (same id) with the earlier deadline and escalates the drain on
the new deadline's schedule; the client acts on the new deadline, not on the old one. The
reverse move (a terminate moved out of the margin is a drain again, DESIGN "a notice's life")
is covered per provider in test_notice_life, test_gcp_agent and test_azure_agent."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually, forewarn_cmd

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

MARGIN = 4.0  # the agent's exit margin, seconds
FAR = 3600  # where the deadline starts: its terminate would be an hour away
NEAR = 10  # where it moves: outside the margin, so a drain first and a terminate in 6 s


@dataclass
class Provider:
    """How to raise a drain with a deadline on one provider's simulator, and move it."""

    name: str
    sim: Callable[[], Any]
    env: Callable[[str], dict[str, str]]
    raise_drain: Callable[[Any, int], str]  # (sim, seconds ahead) -> the sim's notice id
    move: Callable[[Any, str, int], None]  # (sim, notice id, seconds ahead)


PROVIDERS = [
    Provider(
        "aws",
        ImdsSimulator,
        lambda url: {"FOREWARN_AWS_URL": url, "FOREWARN_AWS_SCHEDULED_INTERVAL": "0.2"},
        lambda sim, ahead: sim.raise_notice(
            "scheduled", {"code": "system-reboot", "not_before": ahead}
        ),
        lambda sim, notice_id, ahead: sim.change_notice(notice_id, {"not_before": ahead}),
    ),
    Provider(
        "gcp",
        GcpSimulator,
        lambda url: {
            "FOREWARN_GCP_URL": url,
            "FOREWARN_GCP_RETRY_DELAY": "0.2",
            "FOREWARN_GCP_UPCOMING_INTERVAL": "0.2",
            "FOREWARN_GCP_TIMEOUT_SEC": "5",
        },
        lambda sim, ahead: sim.raise_notice("upcoming", {"start_in": ahead}),
        lambda sim, _id, ahead: sim.change_notice("upcoming-maintenance", {"start_in": ahead}),
    ),
    Provider(
        "azure",
        lambda: AzureSimulator(vm_name="gpu-0", rate_limit=10),
        lambda url: {
            "FOREWARN_AZURE_URL": url,
            "FOREWARN_AZURE_VM_NAME": "gpu-0",
            "FOREWARN_AZURE_INTERVAL": "0.25",
            "FOREWARN_AZURE_APPROVE": "off",
        },
        lambda sim, ahead: sim.raise_notice("Reboot", {"not_before_seconds": ahead}),
        # Each change bumps the DocumentIncarnation, as Azure does.
        lambda sim, notice_id, ahead: sim.change_notice(notice_id, {"not_before_seconds": ahead}),
    ),
]


@contextmanager
def running(tmp_path: Path, provider: Provider) -> Iterator[tuple[Any, AgentProcess]]:
    sim = provider.sim()
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN=f"{MARGIN:g}", **provider.env(server.url))
        with AgentProcess(tmp_path, providers=(provider.name,), env=env) as agent:
            yield sim, agent


def next_change(sub: Subscriber, last: dict[str, Any], timeout: float = 15) -> dict[str, Any]:
    """The next notice with the id of `last` whose action or deadline differs from it: others,
    and replays of `last` for a new subscriber (every subscriber gets them), are skipped."""
    end = time.monotonic() + timeout
    while True:
        notice = sub.notice(timeout=max(0.01, end - time.monotonic()))
        same = (notice["action"], notice["deadline"]) == (last["action"], last["deadline"])
        if notice["id"] == last["id"] and not same:
            return notice


def near(moment: str, expected: datetime) -> bool:
    return abs(parse_time(moment) - expected) < timedelta(seconds=2)


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_drain_moved_earlier_is_resent_and_escalates_on_the_new_deadline(
    tmp_path: Path, provider: Provider
) -> None:
    """The drain an hour out is flushed for once; moved to 10 s out, it is re-sent (same id,
    the new deadline), and its terminate comes at the new deadline minus the margin, not the
    old one's; the guard that had flushed for the drain exits for it, with the new deadline
    as what its final save has left."""
    with running(tmp_path, provider) as (sim, agent), agent.subscriber() as sub:
        notices = Notices(agent.events, agent.control_endpoint)
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            sim_id = provider.raise_drain(sim, FAR)
            drain = sub.notice(timeout=15)
            assert drain["action"] == "drain", drain
            assert near(drain["deadline"], utcnow() + timedelta(seconds=FAR)), drain
            eventually(lambda: guard.due(1), 10, "the guard to see the drain")
            assert not guard.saved(1, 0.1).exit

            provider.move(sim, sim_id, NEAR)
            moved_at = utcnow()
            new_deadline = moved_at + timedelta(seconds=NEAR)
            moved = next_change(sub, drain)
            assert moved["action"] == "drain" and moved["seq"] > drain["seq"], moved
            assert near(moved["deadline"], new_deadline), (moved, new_deadline)

            # Escalated on the new deadline's schedule: NEAR - MARGIN seconds after the move,
            # where the old deadline's would be an hour away.
            terminate = next_change(sub, moved, timeout=NEAR + 5)
            assert terminate["action"] == "terminate", terminate
            assert terminate["deadline"] == moved["deadline"], terminate
            sent = parse_time(terminate["sent_at"])
            escalate_at = parse_time(moved["deadline"]) - timedelta(seconds=MARGIN)
            assert sent >= escalate_at - timedelta(seconds=0.5), (sent, escalate_at)

            eventually(lambda: guard.due(2), 10, "the guard to see the terminate")
            assert guard.should_exit
            left = guard._seconds_left()
            assert left is not None and left <= MARGIN + 1, left
            assert guard.saved(2, 0.1).exit
        finally:
            guard.close()
            notices.close()


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_drain_moved_inside_the_margin_is_a_terminate_at_once_and_wait_returns(
    tmp_path: Path, provider: Provider
) -> None:
    """Moved from an hour out to 2 s out (inside the 4 s margin): the re-send itself is the
    terminate, with the new deadline, and a `forewarn wait --for terminate` started while it
    was an hour away returns with it."""
    with running(tmp_path, provider) as (sim, agent), agent.subscriber() as sub:
        sim_id = provider.raise_drain(sim, FAR)
        drain = sub.notice(timeout=15)
        assert drain["action"] == "drain", drain
        wait = subprocess.Popen(
            forewarn_cmd("wait", "--for", "terminate", "--timeout", "60s", "--json"),
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # Subscribed before the move or not (a late joiner is sent the active notices),
            # `wait` returns with the terminate only; the drain did not end it.
            assert wait.poll() is None, wait.communicate()
            provider.move(sim, sim_id, 2)
            new_deadline = utcnow() + timedelta(seconds=2)
            terminate = next_change(sub, drain)
            assert terminate["action"] == "terminate", terminate
            assert near(terminate["deadline"], new_deadline), (terminate, new_deadline)
            out, err = wait.communicate(timeout=15)
        finally:
            if wait.poll() is None:
                wait.kill()
                wait.communicate()
        assert wait.returncode == 0, err
        assert '"terminate"' in out and drain["id"] in out, out


def test_a_spot_time_moved_earlier_is_resent_and_the_guard_s_exit_save_follows_it(
    tmp_path: Path,
) -> None:
    """AWS moves the spot interruption's `time` from 2 min to 30 s out while the guard's exit
    save is pending: the terminate is re-sent (same id, the new deadline), and what the guard
    has left for its final save is measured to the new deadline, not the old one."""
    aws = PROVIDERS[0]
    spot_env = {"FOREWARN_AWS_SPOT_INTERVAL": "0.2"}
    provider = Provider(
        aws.name, aws.sim, lambda url: {**aws.env(url), **spot_env}, aws.raise_drain, aws.move
    )
    with running(tmp_path, provider) as (sim, agent), agent.subscriber() as sub:
        notices = Notices(agent.events, agent.control_endpoint)
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
        try:
            sim.raise_notice("spot", {"lead": 120})
            first = sub.notice(timeout=15)
            assert first["action"] == "terminate", first
            eventually(lambda: guard.due(1), 10, "the guard to see the terminate")
            assert guard.should_exit
            left = guard._seconds_left()
            assert left is not None and left > 100, left

            sim.change_notice("spot", {"lead": 30})
            moved = next_change(sub, first)
            assert moved["action"] == "terminate" and moved["seq"] > first["seq"], moved
            assert near(moved["deadline"], utcnow() + timedelta(seconds=30)), moved
            eventually(
                lambda: notices.active[first["id"]].deadline == parse_time(moved["deadline"]),
                10,
                "the client to hear the new deadline",
            )
            left = guard._seconds_left()
            assert left is not None and left <= 31, left
            assert guard.saved(1, 0.1).exit
        finally:
            guard.close()
            notices.close()


def test_a_gcp_window_ongoing_before_its_start_is_a_terminate_now(tmp_path: Path) -> None:
    """The metadata server says a window an hour out is ONGOING (maintenance began early): it
    has started, so the same id is re-sent as terminate with the deadline now, not a drain
    until an hour minus the margin."""
    gcp = PROVIDERS[1]
    with running(tmp_path, gcp) as (sim, agent), agent.subscriber() as sub:
        gcp.raise_drain(sim, FAR)
        drain = sub.notice(timeout=15)
        assert drain["action"] == "drain", drain
        sim.change_notice("upcoming-maintenance", {"maintenance_status": "ONGOING"})
        told_at = utcnow()
        started = next_change(sub, drain)
        assert started["action"] == "terminate", started
        assert parse_time(started["deadline"]) <= utcnow(), started
        assert near(started["deadline"], told_at), (started, told_at)


def test_an_exit_save_stalled_past_its_old_deadline_waits_for_the_deadline_moved_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminate's deadline moves later while the exit's save waits on storage (no byte
    moving): the save's bound was taken at its start, so it was given up at the old deadline
    plus the grace, and the job exited with nothing saved on a machine that had minutes
    left. The bound follows the deadline the job holds now."""
    from forewarn.clients.checkpoint import CheckpointStore, background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
    with AgentProcess(tmp_path) as agent:
        notices = Notices(agent.events, agent.control_endpoint)
        store = CheckpointStore(str(tmp_path / "ckpt"))
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False, store=store)
        request = {"op": "notify", "action": "terminate", "id": "local/later"}
        try:
            old = utcnow() + timedelta(seconds=2)
            agent.control({**request, "deadline": old.isoformat()})
            eventually(lambda: guard.due(1) and guard.should_exit, 10, "the terminate")

            def write(gen: Any) -> None:
                agent.control(
                    {**request, "deadline": (utcnow() + timedelta(seconds=120)).isoformat()}
                )
                eventually(
                    lambda: (guard._seconds_left() or 0) > 60, 10, "the guard to hear it later"
                )
                # The storage stalls past the old deadline and its grace.
                eventually(lambda: utcnow() > old + timedelta(seconds=1.5), 10, "the old bound")
                gen.write_bytes("w", b"x")

            result = guard.save(1, write)
            assert result.exit and result.generation is not None
        finally:
            guard.close()
            notices.close()


def test_an_exit_save_hung_when_its_deadline_moves_earlier_times_out_at_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The terminate's deadline moves earlier while the exit's save waits on storage that
    stopped answering: the save's bound was taken at its start (minutes out), so the SIGKILL
    at the new deadline cut it off without the CommitTimeout and ERROR line a timed-out save
    gives. The bound follows the deadline the job holds now."""
    from forewarn.clients.checkpoint import CheckpointStore, CommitTimeout, background

    monkeypatch.setattr(background, "FINAL_SAVE_GRACE_SECONDS", 0.5)
    hung = threading.Event()  # the storage answers only once the test is over
    with AgentProcess(tmp_path) as agent:
        notices = Notices(agent.events, agent.control_endpoint)
        store = CheckpointStore(str(tmp_path / "ckpt"))
        guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False, store=store)
        request = {"op": "notify", "action": "terminate", "id": "local/earlier"}
        try:
            agent.control({**request, "deadline": (utcnow() + timedelta(seconds=120)).isoformat()})
            eventually(lambda: guard.due(1) and guard.should_exit, 10, "the terminate")

            def write(gen: Any) -> None:
                agent.control(
                    {**request, "deadline": (utcnow() + timedelta(seconds=2)).isoformat()}
                )
                eventually(
                    lambda: (guard._seconds_left() or 99) < 5, 10, "the guard to hear it earlier"
                )
                hung.wait(60)  # the storage stopped answering
                gen.write_bytes("w", b"x")

            started = time.monotonic()
            with pytest.raises(CommitTimeout, match="was not committed"):
                guard.save(1, write)
            assert time.monotonic() - started < 20
            assert guard.exit_code == 1
        finally:
            hung.set()
            guard.close()
            notices.close()
