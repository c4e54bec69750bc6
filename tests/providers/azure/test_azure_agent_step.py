"""A step of this VM's wall clock while the agent runs, through the real agent subprocess on
the IMDS simulator: the agent runs on a wall clock moved by a sitecustomize
(`shifted_wall_clock`: `datetime.now` and `time.time`, as a VM's clock is before NTP's first
sync); the simulator's `Date` is the machine's own clock, as Azure's is right."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually, shifted_wall_clock

# How long the agent is watched after the step: some polls (a quarter second apart) and
# some looks of the board (one a second) past the watcher's first answer after it.
AFTER_STEP = 3.0


def _clock_off(agent: AgentProcess) -> bool:
    [health] = agent.control({"op": "status"})["health"]
    return "behind Azure's instance metadata" in str(health["conditions"])


def test_a_started_event_follows_ntps_step_as_a_scheduled_one_does(tmp_path: Path) -> None:
    """This VM's clock 2 h behind Azure's; a Preempt already Started (its deadline now, by the
    VM's clock) and a Reboot scheduled 30 min out. NTP then steps the clock 2 h forward. The
    Reboot's NotBefore, put on the VM's clock by the skew, followed the step; the Started
    event kept the deadline it was published with, 2 h past by the stepped clock: the board
    retired the terminate with a `clear` while Azure still listed the event, and the watcher
    raised it again at its next poll. Both follow the step now: no clear, and the Reboot
    stays a drain 30 min out."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = AzureSimulator(vm_name="gpu-0", removal_after=600, rate_limit=10)
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AZURE_URL=server.url,
            FOREWARN_AZURE_VM_NAME="gpu-0",
            FOREWARN_AZURE_INTERVAL="0.25",
            FOREWARN_AZURE_APPROVE="off",
            **shifted,
        )
        agent = AgentProcess(tmp_path, providers=("azure",), env=env)
        with agent, agent.subscriber() as sub:
            preempt = "azure/" + sim.raise_notice("Preempt", {"status": "Started"})
            reboot = "azure/" + sim.raise_notice("Reboot", {"not_before_seconds": 1800})
            before = {}
            while len(before) < 2:
                notice = sub.notice(timeout=10)
                before[notice["id"]] = notice
            assert (before[preempt]["action"], before[reboot]["action"]) == ("terminate", "drain")
            preempt_left = parse_time(before[preempt]["deadline"]) - utcnow()
            assert abs(preempt_left - timedelta(hours=-2)) < timedelta(minutes=1), before
            eventually(lambda: _clock_off(agent), what="the clock condition")
            offset.write_text("0")  # NTP's step: the agent's wall clock is 2 h on
            stepped = time.monotonic()
            eventually(lambda: not _clock_off(agent), timeout=10, what="the watcher's new skew")
            after = sub.drain(max(0.5, AFTER_STEP - (time.monotonic() - stepped)))
            active = {n["id"]: n for n in agent.control({"op": "status"})["active"]}
        sent = [(n["action"], n["id"]) for n in after]
        assert ("clear", preempt) not in sent and ("clear", reboot) not in sent, sent
        assert {(action, notice_id) for action, notice_id in sent} <= {
            ("terminate", preempt),
            ("drain", reboot),
        }, sent
        assert active.keys() == {preempt, reboot}, active
        assert active[reboot]["action"] == "drain", active
        reboot_left = parse_time(active[reboot]["deadline"]) - utcnow()
        assert abs(reboot_left - timedelta(minutes=30)) < timedelta(minutes=1), active
        # Started when it was first seen, by the clock as it is now: not 2 h before.
        preempt_left = parse_time(active[preempt]["deadline"]) - utcnow()
        assert timedelta(minutes=-2) < preempt_left <= timedelta(0), active
    assert "expired" not in agent.output(), agent.output()
