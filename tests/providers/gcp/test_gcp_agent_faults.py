"""The metadata server misbehaving during a maintenance event, through the real agent
subprocess: 503s (which the server gives for under a second during host maintenance, and
which a hung or restarted server may give for longer), a long-poll held past any change, and
`preempted` turning TRUE while `maintenance-event` changes. The job must get its terminate
with the right deadline, and the end of the fault must send nothing twice and clear nothing
that was not withdrawn."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


KEYS = "/computeMetadata/v1/instance/"
FAST = {
    "FOREWARN_GCP_RETRY_DELAY": "0.2",
    "FOREWARN_GCP_UPCOMING_INTERVAL": "0",
    "FOREWARN_GCP_TIMEOUT_SEC": "3",
    "FOREWARN_GCP_READ_TIMEOUT_MARGIN": "1",
    "FOREWARN_GCP_MAINTENANCE_NOTICE": "3600",
}


def gcp_agent(tmp_path: Path, server: SimServer) -> AgentProcess:
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST)
    return AgentProcess(tmp_path, providers=("gcp",), env=env)


def subscribed(agent: AgentProcess) -> Subscriber:
    return agent.subscriber()  # ready: it has had its join replay


def test_503s_while_preempted_turns_true_under_a_maintenance_drain(tmp_path: Path) -> None:
    sim = GcpSimulator()
    with (
        SimServer(sim) as server,
        gcp_agent(tmp_path, server) as agent,
        subscribed(agent) as sub,
    ):
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(timeout=10)
        assert drain["action"] == "drain"
        # The host's maintenance begins: the server answers 503 for a while, and in it
        # the Spot VM is preempted and the maintenance value moves on.
        fault = sim.add_fault("status", path=KEYS, status=503)
        eventually(lambda: sim.faults()[0]["answered"] >= 4, what="503s")
        sim.raise_notice("preempt", {})
        sim.raise_notice("maintenance", {"type": "MIGRATE"})
        assert sub.drain(0.5) == []  # nothing read, nothing said
        sim.remove_fault(fault)
        healed = utcnow()
        got = {n["action"]: n for n in [sub.notice(timeout=10), sub.notice(timeout=10)]}
        assert set(got) == {"terminate", "drain"}, got
        terminate = got["terminate"]
        assert terminate["reason"] == "preemption" and terminate["id"] != drain["id"]
        lead = parse_time(terminate["deadline"]) - healed
        assert timedelta(seconds=25) < lead <= timedelta(seconds=31), lead
        # The maintenance drain changed (MIGRATE: no deadline), under its own id.
        assert got["drain"]["id"] == drain["id"] and got["drain"]["deadline"] is None
        assert sub.drain(0.5) == []
        # Maintenance over: only its drain is cleared; the preemption stands.
        sim.withdraw("maintenance-event")
        cleared = sub.notice(timeout=10)
        assert (cleared["id"], cleared["action"]) == (drain["id"], "clear")
        active = agent.control({"op": "status"})["active"]
        assert [n["id"] for n in active] == [terminate["id"]]


def test_a_long_poll_held_past_a_preemption_is_abandoned_in_the_window(tmp_path: Path) -> None:
    """The preempted long-poll is held (no answer, no end) while the value turns TRUE: the
    watcher gives it up after timeout_sec plus the margin and reads TRUE, well inside the
    30 s before the VM stops; the maintenance key, not held, goes on meanwhile."""
    sim = GcpSimulator()
    with (
        SimServer(sim) as server,
        gcp_agent(tmp_path, server) as agent,
        subscribed(agent) as sub,
    ):
        polls = sim.requests[f"GET {KEYS}preempted"]
        eventually(lambda: sim.requests[f"GET {KEYS}preempted"] > polls, what="a long-poll")
        # Taken by the next long-poll to answer (one ending its wait takes it too).
        sim.add_fault("hang", path=f"{KEYS}preempted", seconds=60, count=1)
        eventually(lambda: sim.faults() == [], timeout=6, what="a held long-poll")
        raised = utcnow()
        sim.raise_notice("preempt", {})
        sim.raise_notice("maintenance", {"type": "MIGRATE"})
        assert sub.notice(timeout=5)["action"] == "drain"
        terminate = sub.notice(timeout=10)
        assert terminate["action"] == "terminate"
        assert parse_time(terminate["noticed_at"]) - raised < timedelta(seconds=6)
        assert sub.drain(0.5) == []


@contextmanager
def upcoming_window(tmp_path: Path) -> Iterator[tuple[GcpSimulator, Subscriber, dict[str, Any]]]:
    """An agent watching a simulator that announced maintenance in an hour, and the drain
    the subscriber got for it; the upcoming-maintenance read every 0.1 s."""
    sim = GcpSimulator()
    with SimServer(sim) as server:
        fast = {**FAST, "FOREWARN_GCP_UPCOMING_INTERVAL": "0.1"}
        env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **fast)
        with (
            AgentProcess(tmp_path, providers=("gcp",), env=env) as agent,
            subscribed(agent) as sub,
        ):
            sim.raise_notice("upcoming", {"start_in": 3600})
            drain = sub.notice(timeout=10)
            assert (drain["action"], drain["reason"]) == ("drain", "scheduled-maintenance")
            yield sim, sub, drain


def test_a_server_back_as_the_503_tries_end_keeps_an_upcoming_window_under_its_id(
    tmp_path: Path,
) -> None:
    """The server came back just as the upcoming-maintenance read's three tries ended (seen in
    a clean-clone run of the test below, the outage lifted between the last try and the plain
    read of another key): that read answered 200, so the three 503s were taken for "nothing
    scheduled", and the job got a clear of its window and a drain under a new id. The 503s
    are exactly the three tries here, so the race is taken every time."""
    with upcoming_window(tmp_path) as (sim, sub, _):
        reads = "GET /computeMetadata/v1/instance/upcoming-maintenance"
        sim.add_fault(
            "status",
            status=503,
            path="/computeMetadata/v1/instance/upcoming-maintenance",
            count=3,
        )
        eventually(lambda: not sim.faults(), 10, "the three tries (the fault used up)")
        before = sim.requests[reads]
        eventually(lambda: sim.requests[reads] >= before + 3, 10, "reads after them")
        assert sub.drain(0.3) == []  # nothing was withdrawn: nothing said


def test_a_server_wide_503_keeps_an_upcoming_window_under_its_id(tmp_path: Path) -> None:
    """The whole metadata server answers 503 for longer than the upcoming-maintenance read's
    three tries (a server restarting, or under host maintenance for a few seconds). Some VMs
    answer 503 when nothing is scheduled, so the read took it for that: the job got a clear
    of its window and a new drain under another id at the next good read, and saved again."""
    with upcoming_window(tmp_path) as (sim, sub, drain):
        reads = "GET /computeMetadata/v1/instance/upcoming-maintenance"
        fault = sim.add_fault("status", status=503)
        # Past the three tries (0.2 s apart) of two reads: 503 all along.
        eventually(lambda: sim.faults()[0]["answered"] >= 7, 10, "reads in the outage")
        sim.remove_fault(fault)
        before = sim.requests[reads]
        eventually(lambda: sim.requests[reads] >= before + 3, 10, "reads after it")
        assert sub.drain(0.3) == []  # nothing was withdrawn: nothing said
        # A real withdrawal still clears, under the window's id.
        sim.withdraw("upcoming-maintenance")
        cleared = sub.notice(timeout=10)
        assert (cleared["action"], cleared["id"]) == ("clear", drain["id"])
