"""Azure when this VM's name cannot be looked up (no compute endpoint, a proxy, a mock): the
watcher's health says so until it can, and `--provider auto` says why Azure was not picked."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from faultproxy import FaultProxy
from forewarn.providers.azure.settings import Settings
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.azure.watch import AzureWatcher
from forewarn.providers.base import PollHealth
from forewarn.providers.simulator import SimServer
from support import DEAD_LOOPBACK, AgentProcess, agent_env, eventually


def _no_instance(path: str) -> bytes | None:
    # Like Microsoft's mock server: Scheduled Events answers, instance metadata is useless.
    return b'{"not": "compute"}' if path.startswith("/metadata/instance") else None


async def test_a_failed_name_lookup_is_a_standing_condition_until_it_works() -> None:
    sim = AzureSimulator(vm_name="gpu-0", rate_limit=20)
    with SimServer(sim) as server:
        proxy = FaultProxy(("127.0.0.1", server.port), _no_instance)
        proxy.set("bad-dates")  # the per-path substitute above
        health = PollHealth("azure")
        watcher = AzureWatcher(Settings(url=proxy.url, interval=0.25), health)
        reports: list[object] = []
        task = asyncio.create_task(watcher.watch(reports.append))
        try:
            end = time.monotonic() + 10
            while "vm-name" not in health.conditions:
                assert time.monotonic() < end, health
                await asyncio.sleep(0.02)
            assert "azure.vm_name" in health.conditions["vm-name"]
            assert not health.ready
            proxy.set(None)  # the lookup works again: the condition clears
            end = time.monotonic() + 10
            while "vm-name" in health.conditions or not health.ready:
                assert time.monotonic() < end, health
                await asyncio.sleep(0.02)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await watcher.aclose()
            proxy.stop()


@pytest.mark.usefixtures("forked_agents")  # its agents fork (tests/conftest.py)
def test_auto_says_why_azure_was_not_picked(tmp_path: Path) -> None:
    sim = AzureSimulator(vm_name="gpu-0")
    with SimServer(sim) as server:
        proxy = FaultProxy(("127.0.0.1", server.port), _no_instance)
        proxy.set("bad-dates")
        dead = f"http://{DEAD_LOOPBACK}"
        env = agent_env(
            tmp_path,
            FOREWARN_AZURE_URL=proxy.url,
            FOREWARN_AWS_URL=dead,
            FOREWARN_GCP_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
        )
        try:
            with AgentProcess(tmp_path, providers=("auto",), env=env) as agent:
                status = agent.control({"op": "status"})
                assert "azure" not in status["agent"]["providers"]
                output = agent.output()
        finally:
            proxy.stop()
    lines = [line for line in output.splitlines() if "auto: azure not picked" in line]
    assert len(lines) == 1, output
    if "TimeoutError" not in lines[0]:  # a machine so loaded that detection ran out of time
        assert "without a compute object" in lines[0]
        assert "/metadata/scheduledevents does answer" in lines[0] and "azure.vm_name" in lines[0]


@pytest.mark.usefixtures("forked_agents")  # its agents fork (tests/conftest.py)
def test_a_configured_name_that_is_not_this_vms_says_so_with_both_names(tmp_path: Path) -> None:
    """`azure.vm_name` set to the node's host name (`s000003`, as AKS names a scale-set
    node) where events name `<vmss>_<id>` (`s_3`): every event was silently ignored, the
    watcher healthy. The configured name still wins (nothing is published for `s_3`), but
    once events are listed and none names it while instance metadata's name would, the agent
    warns once naming both, and `status` holds the condition `vm-name` until one matches."""
    sim = AzureSimulator(vmss_name="s", instance_id="3", rate_limit=20)
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AZURE_URL=server.url,
            FOREWARN_AZURE_VM_NAME="s000003",
            FOREWARN_AZURE_INTERVAL="0.25",
        )
        with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:

            def conditions() -> dict[str, str]:
                [health] = agent.control({"op": "status"})["health"]
                return dict(health["conditions"])

            sim.raise_notice("Preempt", {"resources": ["s_3"]})
            eventually(lambda: "vm-name" in conditions(), 10, "the condition vm-name")
            why = conditions()["vm-name"]
            assert "s000003" in why and "s_3" in why and "azure.vm_name" in why, why
            assert agent.control({"op": "status"})["active"] == []
            target = sim.requests["GET /metadata/scheduledevents"] + 3
            eventually(lambda: sim.requests["GET /metadata/scheduledevents"] >= target, 10)
            lines = [line for line in agent.output().splitlines() if "s000003" in line]
            assert len(lines) == 1, lines  # said once, not at every poll
            assert sim.requests["GET /metadata/instance/compute"] == 1
            # An event naming the configured name: it is this VM's name after all.
            sim.raise_notice("Reboot", {"resources": ["s000003"]})
            eventually(lambda: "vm-name" not in conditions(), 10, "the condition cleared")
