"""A GCP notice across a real agent restart, against the metadata simulator: what the
restarted agent sends before its watcher's first answer is what clients were last told."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from slow_state_disk import slow_state_disk
from support import AgentProcess, Subscriber, agent_env, eventually

FAST_ENV = {
    "FOREWARN_GCP_RETRY_DELAY": "0.2",
    "FOREWARN_GCP_UPCOMING_INTERVAL": "0.2",
    "FOREWARN_GCP_TIMEOUT_SEC": "5",
}


def _next_notice(sub: Subscriber, within: float = 15.0) -> dict[str, Any]:
    ends = time.monotonic() + within
    while True:
        topic, message = sub.recv(max(0.05, ends - time.monotonic()))
        if topic == "notice":
            return message


@pytest.mark.usefixtures("forked_agents")
def test_a_terminate_back_to_a_drain_is_on_disk_before_clients_hear_it(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """Seen before: a maintenance window 2 min out, inside the 5 min exit margin, went out as
    terminate; moved 2 h out it went out as a drain again, and the state was written after
    that publish. An agent SIGKILLed between the two (0.5 s on a state disk busy with a
    checkpoint) came back with the terminate and replayed it to every client before its
    watcher's first answer: a job that had been told to go on exited for nothing."""
    slow, trigger = slow_state_disk(tmp_path)
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV, **slow)
    state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    args = ("--exit-margin", "300s")
    first = AgentProcess(tmp_path, providers=("gcp",), args=args, env=env).start()
    try:
        with Subscriber(first.events).ready() as sub:
            sim.raise_notice("upcoming", {"start_in": 120})
            terminate = _next_notice(sub)
            assert terminate["action"] == "terminate", terminate
            eventually(
                lambda: state.exists() and terminate["id"] in state.read_text(),
                10,
                "the terminate saved",
            )
            trigger.touch()
            sim.change_notice("upcoming-maintenance", {"start_in": 7200})
            drain = _next_notice(sub)
            first.kill()  # at once on the subscriber's receipt
            assert (drain["id"], drain["action"]) == (terminate["id"], "drain"), drain
        trigger.unlink()
        # No answer from the metadata server at the restart: what goes out is the state file's.
        fault = sim.add_fault("status", status=503)
        with (
            AgentProcess(tmp_path, providers=("gcp",), args=args, env=env) as second,
            Subscriber(second.events).ready() as sub,
        ):
            replayed = _next_notice(sub)
            assert (replayed["id"], replayed["action"]) == (drain["id"], "drain"), (
                replayed,
                second.output(),
            )
            sim.remove_fault(fault)
            eventually(
                lambda: second.control({"op": "status"})["health"][0]["state"] == "healthy",
                15,
                "the watcher's first answer",
            )
            assert sub.drain(0.5) == []  # the watcher confirms the drain: nothing new
    finally:
        first.kill()


def _terminate_past_while_down(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> tuple[dict[str, str], dict[str, Any]]:
    """A TERMINATE_ON_HOST_MAINTENANCE with a 2 s notice, published and saved; the agent is
    SIGKILLed and the deadline passes while it is down. Its environment and the notice."""
    env = agent_env(
        tmp_path, FOREWARN_GCP_URL=server.url, FOREWARN_GCP_MAINTENANCE_NOTICE="2", **FAST_ENV
    )
    state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    first = AgentProcess(tmp_path, providers=("gcp",), env=env).start()
    try:
        with Subscriber(first.events).ready() as sub:
            sim.raise_notice("maintenance", {"type": "TERMINATE"})
            notice = _next_notice(sub)
            assert notice["action"] == "terminate", notice
            eventually(
                lambda: state.exists() and notice["id"] in state.read_text(), 10, "the state"
            )
    finally:
        first.kill()
    deadline = parse_time(notice["deadline"])
    eventually(lambda: utcnow() > deadline, 10, "the deadline passed, the agent down")
    return env, notice


def _guard(agent: AgentProcess) -> CheckpointGuard:
    guard = CheckpointGuard(
        events=agent.events, control=agent.control_endpoint, flag_file=None, handle_signals=False
    )
    eventually(lambda: guard.notices is not None and guard.notices.alive, 10, "the guard")
    return guard


@pytest.mark.usefixtures("forked_agents")
def test_a_restored_terminate_past_its_deadline_and_still_in_force_stops_the_job_at_once(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """The machine may go at any moment: the restarted agent sends the terminate it restored
    before its watcher's first answer (the metadata server answers 503 here), and the job
    saves and exits. Held until the watcher confirms it (an IMAP login, a Kubernetes list, a
    slow metadata server), the job trained on unsaved into the stop."""
    env, notice = _terminate_past_while_down(tmp_path, server, sim)
    fault = sim.add_fault("status", status=503)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent:
        guard = _guard(agent)
        try:
            eventually(lambda: guard.due(7), 10, "the restored terminate")
            assert agent.control({"op": "status"})["health"][0]["state"] != "healthy"
            result = guard.saved(7, 0.1)
            assert result.exit and result.notices == (notice["id"],), result
            assert guard.exit_code == 143
        finally:
            guard.close()
            sim.remove_fault(fault)


@pytest.mark.usefixtures("forked_agents")
def test_a_restored_terminate_withdrawn_while_the_agent_was_down_lets_the_job_go_on(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """The maintenance ended while the agent was down: the restored terminate still goes out
    first (nothing tells it from one in force before the watcher answers), the job begins
    its save, and the watcher's first answer clears it: the save ends the job only if it
    ended before that clear. Here the clear comes during the save: the job goes on."""
    env, notice = _terminate_past_while_down(tmp_path, server, sim)
    sim.withdraw("maintenance-event")
    fault = sim.add_fault("status", status=503)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent:
        guard = _guard(agent)
        try:
            eventually(lambda: guard.due(7), 10, "the restored terminate")
            # The save: meanwhile the metadata server answers again, and the watcher's first
            # answer withdraws the terminate.
            sim.remove_fault(fault)
            eventually(
                lambda: notice["id"] in agent.control({"op": "status"})["ended"],
                15,
                "the clear at the watcher's first answer",
            )
            eventually(
                lambda: guard.notices is not None and notice["id"] not in guard.notices.active,
                10,
                "the guard's clear",
            )
            result = guard.saved(7, 0.1)
            assert not result.exit, result
            assert not guard.due(8)
        finally:
            guard.close()
