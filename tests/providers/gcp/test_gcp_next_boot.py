"""A Spot VM stopped by its preemption (STOP action, persistent disk) and started again: the
real agent subprocess against the simulator, across a SIGKILL (the machine stopped) and a
restart in a new boot. The state directory survives; the runtime directory (a tmpfs) does
not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.gcp.active import ACTIVE_FILE
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

PREEMPTED = "GET /computeMetadata/v1/instance/preempted"
FAST_ENV = {"FOREWARN_GCP_RETRY_DELAY": "0.2", "FOREWARN_GCP_TIMEOUT_SEC": "5"}


def _another_boot(value: Any) -> Any:
    """`value` with every saved boot id another boot's: the kernel's boot id cannot be
    changed under a test, so the files are made to say they were written in the boot
    before, as a VM started again finds them."""
    if isinstance(value, dict):
        return {
            key: "the-boot-before"
            if key == "boot_id" and isinstance(item, str)
            else _another_boot(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_another_boot(item) for item in value]
    return value


def _as_if_started_again(tmp_path: Path) -> None:
    for path in (tmp_path / "state").glob("*.json"):
        path.write_text(json.dumps(_another_boot(json.loads(path.read_text()))))
    runtime = tmp_path / "run"  # a tmpfs: empty at the next boot
    shutil.rmtree(runtime)
    runtime.mkdir()


def _subscribed(agent: AgentProcess) -> Subscriber:
    sub = agent.subscriber(topics=("notice", "heartbeat"))
    while sub.recv(10)[0] != "heartbeat":
        pass
    return sub


def test_a_preemption_that_stopped_the_vm_is_not_in_force_at_its_next_boot(
    tmp_path: Path,
) -> None:
    """Boot 1: the preemption is a terminate, a client saves for it, the machine stops
    (SIGKILL, the notice saved in state.json and gcp-notices.json). Boot 2, the metadata
    server fresh: `status` lists nothing active, a job's subscriber hears no terminate and its
    heartbeats name no notice, and a preemption in this boot is a terminate that the client
    which saved for the old one does not count as saved for. (Walked with a torch job under
    torchrun too: saved at step 108 in boot 1, resumed at 108 in boot 2, trained on.)"""
    with SimServer(GcpSimulator()) as server:
        env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
        agent = AgentProcess(tmp_path, providers=("gcp",), env=env).start()
        try:
            with _subscribed(agent) as sub:
                server.sim.raise_notice("preempt", {})
                old = sub.notice(10)
                assert (old["action"], old["reason"]) == ("terminate", "preemption")
                reply = agent.control(
                    {
                        "op": "ack",
                        "notice_id": old["id"],
                        "client": "job-1",
                        "step": 108,
                        "flush_seconds": 0.1,
                    }
                )
                assert reply.get("ok"), reply
            assert old["id"] in (tmp_path / "state" / ACTIVE_FILE).read_text()
        finally:
            agent.kill()
    _as_if_started_again(tmp_path)
    with SimServer(GcpSimulator()) as server:
        env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
        with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent:
            with _subscribed(agent) as sub:
                # Past the watcher's first answers: what it reports of this boot is in.
                eventually(lambda: server.sim.requests[PREEMPTED] >= 2, what="two reads")
                assert agent.control({"op": "status"})["active"] == []
                topic, heartbeat = sub.recv(10)
                assert topic == "heartbeat", heartbeat
                assert old["id"] not in json.dumps(heartbeat), heartbeat
                server.sim.raise_notice("preempt", {})
                new = sub.notice(10)
            assert (new["action"], new["reason"]) == ("terminate", "preemption")
            # The same id: it hashes the kernel's boot id, which the test cannot change (a real
            # next boot gives another). Still a notice of this boot: the client that saved
            # for the old one in the boot before does not count for it.
            active = agent.control({"op": "status"})["active"]
            assert [n["id"] for n in active] == [new["id"]]
            assert "job-1" not in json.dumps(active), active
            assert "from before a reboot; not restored" in agent.output()
