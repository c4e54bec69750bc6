"""A step of the wall clock between two agents of the same boot, through the real agent
subprocess on the GCP simulator: the first agent runs on a wall clock moved by a
sitecustomize (`shifted_wall_clock`: `datetime.now` and `time.time`, as a VM's clock is
before NTP's first sync), the second on the right one. The boot clock both read is the
machine's own."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.boot import boot_id
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually, shifted_wall_clock

KEYS = "/computeMetadata/v1/instance/"
FAST = {
    "FOREWARN_GCP_RETRY_DELAY": "0.2",
    "FOREWARN_GCP_UPCOMING_INTERVAL": "0",
    "FOREWARN_GCP_TIMEOUT_SEC": "3",
    "FOREWARN_GCP_READ_TIMEOUT_MARGIN": "1",
    "FOREWARN_GCP_MAINTENANCE_NOTICE": "3600",
}


def _agent(tmp_path: Path, server: SimServer, offset: timedelta) -> AgentProcess:
    shifted, _ = shifted_wall_clock(tmp_path, offset.total_seconds())
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **shifted, **FAST)
    return AgentProcess(tmp_path, providers=("gcp",), env=env)


@pytest.mark.skipif(boot_id() is None, reason="the kernel gives no boot id here")
def test_a_restored_drain_is_no_terminate_on_a_deadline_a_forward_step_made_stale(
    tmp_path: Path, sim: GcpSimulator, server: SimServer
) -> None:
    """TERMINATE_ON_HOST_MAINTENANCE (an hour) read while the VM's clock was 90 minutes
    behind; the agent restarted (an upgrade) after NTP's step forward, in the same boot.
    The restored drain's wall-clock deadline was half an hour past by the stepped clock:
    it went out as terminate from the start, and a job reconnecting meanwhile exited an hour
    before the stop; the watcher's next answer (the stop kept on the boot clock) turned it
    back into a drain. Judged on the boot clock, the deadline is still an hour away: the
    stop, held there by the agent as by its watcher (`deadline_clock` in the state), comes
    back with its deadline moved, and the watcher's answer finds it so: nothing more is sent."""
    behind = timedelta(minutes=-90)
    with _agent(tmp_path, server, behind) as first, first.subscriber() as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(timeout=10)
    assert drain["action"] == "drain"
    # The watcher's first answer after the restart is held: what a job reconnecting meanwhile
    # is sent comes from the restored notice alone.
    key = f"{KEYS}maintenance-event"
    held = sim.add_fault("hang", path=key)
    with _agent(tmp_path, server, timedelta(0)) as second, second.subscriber() as rejoined:
        replayed = rejoined.notice(timeout=10)
        assert (replayed["id"], replayed["action"]) == (drain["id"], "drain"), replayed
        left = parse_time(replayed["deadline"]) - utcnow()
        assert abs(left - timedelta(hours=1)) < timedelta(minutes=1), replayed
        [active] = second.control({"op": "status"})["active"]
        assert active["action"] == "drain", active
        asked = sim.requests[f"GET {key}"]
        sim.remove_fault(held)
        eventually(lambda: sim.requests[f"GET {key}"] >= asked + 2, timeout=15, what="answers")
        assert rejoined.drain(0.5) == []
        [active] = second.control({"op": "status"})["active"]
        assert (active["action"], active["deadline"]) == ("drain", replayed["deadline"]), active
    assert "escalat" not in second.output().lower(), second.output()


def test_a_maintenance_drain_follows_a_forward_step_while_the_agent_runs(
    tmp_path: Path, sim: GcpSimulator, server: SimServer
) -> None:
    """TERMINATE_ON_HOST_MAINTENANCE (an hour) read while the VM's clock was 90 minutes
    behind, then NTP's step forward while the agent ran. The board took the stop for a
    moment: 30 minutes past it plus the grace, it sent `clear` at once, and the watcher
    raised the drain again 15 s later (its long-poll) with the deadline moved; 59 to 65
    minutes forward, a terminate an hour before the stop. Now the drain is sent again with
    the deadline the boot clock gives, and nothing else: no clear, no terminate."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(minutes=-90).total_seconds())
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **shifted, **FAST)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent, agent.subscriber() as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(timeout=10)
        assert drain["action"] == "drain", drain
        offset.write_text("0")  # NTP's step: the agent's wall clock is 90 minutes on
        moved = sub.notice(timeout=10)
        assert (moved["id"], moved["action"]) == (drain["id"], "drain"), moved
        left = parse_time(moved["deadline"]) - utcnow()
        assert abs(left - timedelta(hours=1)) < timedelta(minutes=1), moved
        # Two long-polls asked since: the watcher has answered after the step and moved the
        # stop itself, to the same deadline.
        key = f"GET {KEYS}maintenance-event"
        asked = sim.requests[key]
        eventually(lambda: sim.requests[key] >= asked + 2, timeout=15, what="two more answers")
        assert sub.drain(0.5) == []
        [active] = agent.control({"op": "status"})["active"]
        assert (active["action"], active["deadline"]) == ("drain", moved["deadline"]), active
    assert "retired" not in agent.output().lower(), agent.output()
