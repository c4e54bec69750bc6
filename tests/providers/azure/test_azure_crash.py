"""What changes while no Azure watcher runs (between a watcher's crash and the one supervision
builds next), through the real agent subprocess and the simulator: the rebuilt watcher must
end up where one that never crashed would be."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure_harness import approvals_metric
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually, requires

CRASHED = "the watcher crashed on the test's trigger"
# Crashes every Azure watcher the agent builds, at its first poll, while the trigger file
# exists: what the test does meanwhile happens while no watcher runs.
CRASH_ON_TRIGGER = """\
import pathlib

import forewarn.providers.azure.watch as watch

_poll = watch.AzureWatcher.poll
_trigger = pathlib.Path({trigger!r})


async def _poll_or_crash(self):
    if _trigger.exists():
        raise RuntimeError({crashed!r})
    return await _poll(self)


watch.AzureWatcher.poll = _poll_or_crash
"""


class Crasher:
    """An Azure agent environment whose watchers crash while `crashing()` holds."""

    def __init__(self, tmp_path: Path, server: SimServer, **extra: str) -> None:
        site = tmp_path / "site"
        site.mkdir()
        self.trigger = tmp_path / "crash-trigger"
        (site / "sitecustomize.py").write_text(
            CRASH_ON_TRIGGER.format(trigger=str(self.trigger), crashed=CRASHED)
        )
        self.env = agent_env(
            tmp_path,
            FOREWARN_AZURE_URL=server.url,
            FOREWARN_AZURE_VM_NAME="gpu-0",
            FOREWARN_AZURE_INTERVAL="0.25",
            PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
            **extra,
        )

    @contextlib.contextmanager
    def crashing(self, agent: AgentProcess) -> Iterator[None]:
        """From the first crash until the body is done, no watcher runs; then wait for the one
        built next to answer."""
        recovered = agent.output().count("polling recovered")
        crashes = agent.output().count(CRASHED)
        self.trigger.touch()
        eventually(lambda: agent.output().count(CRASHED) > crashes, what="a crash")
        try:
            yield
        finally:
            self.trigger.unlink()
        eventually(
            lambda: agent.output().count("polling recovered") > recovered,
            what="the rebuilt watcher's answer",
            timeout=40,
        )


@pytest.fixture
def imds() -> Iterator[tuple[AzureSimulator, SimServer]]:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10)
    with SimServer(sim) as server:
        yield sim, server


def wait_polls(sim: AzureSimulator, count: int) -> None:
    target = sim.requests["GET /metadata/scheduledevents"] + count
    eventually(
        lambda: sim.requests["GET /metadata/scheduledevents"] >= target, what=f"{count} polls"
    )


def published(output: str, notice_id: str) -> list[str]:
    """The agent's log lines of each send of `notice_id` (new, changed, escalated, cleared)."""
    return re.findall(rf"notice \w+ {re.escape(notice_id)} .*seq=\d+", output)


@pytest.mark.parametrize("gap", ["watcher-crash", "agent-restart"])
def test_an_event_withdrawn_while_no_watcher_runs_is_cleared(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer], gap: str
) -> None:
    """A Reboot (a drain with NotBefore as deadline) is cancelled while no watcher runs. The
    watcher built again after a crash was handed the notice as its predecessor reported it,
    but took it for restored and left the clear to the agent, which withdrew only notices
    restored after a restart: the cancelled drain stayed active, escalated to terminate before
    NotBefore and stopped the job. After a restart it was withdrawn; both are now one path."""
    sim, server = imds
    crasher = Crasher(tmp_path, server, FOREWARN_AZURE_APPROVE="off")
    event_id = sim.raise_notice("Reboot", {"not_before_seconds": 600})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=crasher.env) as agent:
        eventually(lambda: published(agent.output(), notice_id), what="the notice")
        if gap == "watcher-crash":
            with Subscriber(agent.events, ("notice",)) as sub:
                assert sub.notice(timeout=10)["id"] == notice_id  # the replay
                with crasher.crashing(agent):
                    assert sim.withdraw(event_id)
                cleared = sub.notice(timeout=10)
            assert (cleared["id"], cleared["action"]) == (notice_id, "clear"), agent.output()
            assert "crashed" in cleared["detail"]["withdrawn"]
            assert agent.control({"op": "status"})["active"] == []
            return
    assert sim.withdraw(event_id)
    crasher.trigger.touch()  # the restarted agent's watchers wait for the subscriber
    with (
        AgentProcess(tmp_path, providers=("azure",), env=crasher.env) as agent,
        Subscriber(agent.events, ("notice",)) as sub,
    ):
        assert sub.notice(timeout=10)["id"] == notice_id  # the restored notice, replayed
        crasher.trigger.unlink()
        cleared = sub.notice(timeout=20)
        assert (cleared["id"], cleared["action"]) == (notice_id, "clear"), agent.output()
        assert "since the agent restarted" in cleared["detail"]["withdrawn"]
        assert agent.control({"op": "status"})["active"] == []


def test_a_started_event_retired_while_no_watcher_ran_is_not_raised_again(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """A Started Preempt (NotBefore empty) still listed past its deadline plus the grace is
    retired once: under way, it stays listed until it is over (docs/azure.md). When the
    watcher crashed and the retirement came before the next one's first poll, that one was
    handed only the active notices and took the event for new, with its first poll as deadline;
    handed the retired one too, it raised it again as it was. It is told of the retirement, as
    a running watcher is, and raises nothing."""
    sim, server = imds
    crasher = Crasher(tmp_path, server, FOREWARN_AZURE_APPROVE="off", FOREWARN_NOTICE_GRACE="2s")
    event_id = sim.raise_notice("Preempt", {"status": "Started"})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=crasher.env) as agent:
        eventually(lambda: published(agent.output(), notice_id), what="the notice")
        sim.raise_notice("Preempt", {"resources": ["gpu-1"]})  # bumps the incarnation
        with crasher.crashing(agent):
            eventually(lambda: "expired" in agent.output(), what="the retirement", timeout=20)
        polls = sim.requests["GET /metadata/scheduledevents"]
        eventually(
            lambda: sim.requests["GET /metadata/scheduledevents"] >= polls + 6, what="6 polls"
        )
        assert agent.control({"op": "status"})["active"] == [], agent.output()
        sends = [line.split()[1] for line in published(agent.output(), notice_id)]
        assert sends == ["terminate", "clear"], agent.output()


@requires("prometheus_client")
def test_a_skipped_approval_counts_once_across_watcher_crashes(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """Under `after-ack`, the flushed Reboot is a drain, not approved: one skip. Each watcher
    built again after a crash is told of the flushed notices of its provider and skipped the
    approval anew, so forewarn_approvals_total{outcome="skipped"} grew with every crash."""
    sim, server = imds
    crasher = Crasher(
        tmp_path, server, FOREWARN_AZURE_APPROVE="after-ack", FOREWARN_METRICS_ADDRESS="127.0.0.1:0"
    )
    event_id = sim.raise_notice("Reboot", {"not_before_seconds": 600})
    notice_id = f"azure/{event_id}"
    with (
        AgentProcess(tmp_path, providers=("azure",), env=crasher.env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer-0")) as client,
    ):
        assert client.notice(timeout=10)["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "trainer-0", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        eventually(lambda: approvals_metric(agent)["skipped"] == 1, what="the skip counted")
        for _ in range(2):
            with crasher.crashing(agent):
                pass
        wait_polls(sim, 4)
        assert approvals_metric(agent) == {"sent": 0, "failed": 0, "skipped": 1}, agent.output()
        assert sim.approvals == []
