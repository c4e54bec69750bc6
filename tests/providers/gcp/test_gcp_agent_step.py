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
    back into a drain. Judged on the boot clock, the deadline is still an hour away."""
    behind = timedelta(minutes=-90)
    with _agent(tmp_path, server, behind) as first, first.subscriber() as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(timeout=10)
    assert drain["action"] == "drain"
    # The watcher's first answer after the restart is held: what a job reconnecting meanwhile
    # is sent comes from the restored notice alone.
    held = sim.add_fault("hang", path=f"{KEYS}maintenance-event")
    with _agent(tmp_path, server, timedelta(0)) as second, second.subscriber() as rejoined:
        replayed = rejoined.notice(timeout=10)
        assert (replayed["id"], replayed["action"]) == (drain["id"], "drain"), replayed
        [active] = second.control({"op": "status"})["active"]
        assert active["action"] == "drain", active
        sim.remove_fault(held)
        moved = rejoined.notice(timeout=15)
        assert (moved["id"], moved["action"]) == (drain["id"], "drain"), moved
        left = parse_time(moved["deadline"]) - utcnow()
        assert abs(left - timedelta(hours=1)) < timedelta(minutes=1), moved
        assert rejoined.drain(0.5) == []
        eventually(
            lambda: second.control({"op": "status"})["active"][0]["deadline"] == moved["deadline"],
            what="the moved deadline in the status",
        )
    assert "escalat" not in second.output().lower(), second.output()
