"""A GCP notice across a real agent restart, against the metadata simulator: what the
restarted agent sends before its watcher's first answer is what clients were last told."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
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
