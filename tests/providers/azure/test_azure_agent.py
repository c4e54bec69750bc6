"""End to end through the real agent subprocess: notices on the socket, approval after the ack."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure_harness import approvals_metric
from forewarn.protocol.timefmt import parse_time
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually, forewarn_cmd, requires

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


@pytest.fixture
def imds() -> Iterator[tuple[AzureSimulator, SimServer]]:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10)
    with SimServer(sim) as server:
        yield sim, server


def azure_agent(tmp_path: Path, server: SimServer, **extra: str) -> AgentProcess:
    env = agent_env(
        tmp_path,
        FOREWARN_AZURE_URL=server.url,
        FOREWARN_AZURE_VM_NAME="gpu-0",
        FOREWARN_AZURE_INTERVAL="0.25",
        **extra,
    )
    return AgentProcess(tmp_path, providers=("azure",), env=env)


def polls(sim: AzureSimulator) -> int:
    return sim.requests["GET /metadata/scheduledevents"]


def wait_polls(sim: AzureSimulator, count: int) -> None:
    target = polls(sim) + count
    eventually(lambda: polls(sim) >= target, what=f"{count} more polls")


def ack(agent: AgentProcess, notice_id: str, client: str) -> float:
    sent = time.monotonic()
    reply = agent.control(
        {"op": "ack", "notice_id": notice_id, "client": client, "flush_seconds": 0.1}
    )
    assert reply["ok"], reply
    return sent


def test_approval_is_sent_once_after_every_client_acked_and_not_before(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    sim, server = imds
    with (
        azure_agent(tmp_path, server) as agent,
        Subscriber(agent.events, ("notice", "client/trainer-0", "client/trainer-1")) as one,
        Subscriber(agent.events, ("notice", "client/trainer-2")) as two,
    ):
        # Answered, not only counted: an agent that read a subscription late replayed the
        # terminate raised meanwhile, and the repeat was read where the clear was expected.
        one.ready()
        two.ready()
        assert agent.control({"op": "status"})["agent"]["subscribers"] == 3
        event_id = sim.raise_notice("Terminate", {"not_before_seconds": 600})
        notice = one.notice(timeout=10)
        assert two.notice(timeout=15)["id"] == notice["id"]
        assert (notice["id"], notice["action"], notice["reason"]) == (
            f"azure/{event_id}",
            "terminate",
            "eviction",
        )
        assert notice["deadline"] is not None

        wait_polls(sim, 3)
        assert sim.approvals == [], "approved before any ack"
        ack(agent, notice["id"], "trainer-0")
        ack(agent, notice["id"], "trainer-1")
        wait_polls(sim, 3)
        assert sim.approvals == [], "approved before the last client acked"

        last_ack = ack(agent, notice["id"], "trainer-2")
        (approval,) = eventually(lambda: sim.approvals, what="the approval")
        assert approval["EventId"] == event_id
        assert approval["monotonic"] >= last_ack

        # The approval starts the event: under way now, so it is re-sent (same id) with the
        # deadline now; a repeated ack approves nothing twice.
        assert sim.events[event_id]["EventStatus"] == "Started"
        started = one.notice(timeout=15)
        assert started["id"] == notice["id"]
        assert parse_time(started["deadline"]) <= parse_time(notice["deadline"])
        ack(agent, notice["id"], "trainer-2")
        wait_polls(sim, 3)
        assert len(sim.approvals) == 1
        assert "approved event" in agent.output()

        sim.withdraw(event_id)
        cleared = one.notice(timeout=15)
        assert (cleared["id"], cleared["action"]) == (notice["id"], "clear")


def test_preempt_is_a_terminate_and_no_client_means_no_approval(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    sim, server = imds
    with azure_agent(tmp_path, server) as agent, agent.subscriber() as sub:
        other = sim.raise_notice("Preempt", {"resources": ["gpu-1"]})
        event_id = sim.raise_notice("Preempt", {"not_before_seconds": 30})
        notice = sub.notice(timeout=10)
        assert (notice["id"], notice["action"], notice["reason"]) == (
            f"azure/{event_id}",
            "terminate",
            "eviction",
        )
        wait_polls(sim, 4)
        assert sub.drain(0.3) == []  # the other VM's eviction is not ours
        assert sim.approvals == []  # nobody registered to ack: nothing is approved
        assert other not in {n["id"] for n in agent.control({"op": "status"})["active"]}


def test_approve_immediately_through_the_agent(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    sim, server = imds
    with azure_agent(tmp_path, server, FOREWARN_AZURE_APPROVE="immediately"):
        redeploy = sim.raise_notice("Redeploy", {})
        event_id = sim.raise_notice("Preempt", {})
        (approval,) = eventually(lambda: sim.approvals, what="the approval")
        assert approval["EventId"] == event_id
        wait_polls(sim, 3)
        # A Redeploy is not in azure.approve_types: it waits for its NotBefore.
        assert [a["EventId"] for a in sim.approvals] == [event_id]
        assert sim.events[redeploy]["EventStatus"] == "Scheduled"


@pytest.mark.slow(10)
def test_drill_local_with_the_azure_simulator(tmp_path: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--provider", "azure", "--dir", str(tmp_path / "drill")),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "azure Reboot" in done.stdout and "azure Preempt" in done.stdout
    assert "steps lost: 0" in done.stdout


def test_an_event_started_early_is_republished_with_the_deadline_now(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    # A neighbour VM approves a shared Reboot 15 minutes before its NotBefore: the reboot is
    # under way, so the notice's deadline must become now (before: 15 minutes out, kept).
    sim, server = imds
    with (
        azure_agent(tmp_path, server, FOREWARN_AZURE_APPROVE="off") as agent,
        agent.subscriber() as sub,
    ):
        event_id = sim.raise_notice(
            "Reboot", {"resources": ["gpu-0", "gpu-1"], "not_before_seconds": 900}
        )
        first = sub.notice(timeout=10)
        assert first["id"] == f"azure/{event_id}" and first["action"] == "drain"
        assert parse_time(first["deadline"]).timestamp() > time.time() + 800
        started = time.time()
        sim.change_notice(event_id, {"status": "Started"})
        again = sub.notice(timeout=10)
        assert again["id"] == first["id"]
        assert again["detail"]["EventStatus"] == "Started"
        assert started - 1 <= parse_time(again["deadline"]).timestamp() <= time.time() + 1


def test_an_event_started_early_is_a_terminate(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    # Issue 16 item 3: Started means now, and the action follows the deadline: terminate.
    sim, server = imds
    with (
        azure_agent(tmp_path, server, FOREWARN_AZURE_APPROVE="off") as agent,
        agent.subscriber() as sub,
    ):
        event_id = sim.raise_notice("Reboot", {"not_before_seconds": 900})
        first = sub.notice(timeout=10)
        assert (first["id"], first["action"]) == (f"azure/{event_id}", "drain")
        sim.change_notice(event_id, {"status": "Started"})
        again = sub.notice(timeout=10)
        assert (again["id"], again["action"]) == (first["id"], "terminate")


def test_an_escalated_event_moved_out_is_a_drain_again(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    # Issue 16 item 1 for Azure: a Reboot inside the exit margin goes out as terminate; when
    # Azure moves its NotBefore a day out, the same id is a drain again.
    sim, server = imds
    with (
        azure_agent(
            tmp_path, server, FOREWARN_AZURE_APPROVE="off", FOREWARN_EXIT_MARGIN="60"
        ) as agent,
        agent.subscriber() as sub,
    ):
        event_id = sim.raise_notice("Reboot", {"not_before_seconds": 30})
        first = sub.notice(timeout=10)
        assert (first["id"], first["action"]) == (f"azure/{event_id}", "terminate")
        sim.change_notice(event_id, {"not_before_seconds": 86400})
        again = sub.notice(timeout=10)
        assert (again["id"], again["action"]) == (first["id"], "drain")
        assert parse_time(again["deadline"]).timestamp() > time.time() + 86000
        (active,) = agent.control({"op": "status"})["active"]
        assert (active["id"], active["action"]) == (first["id"], "drain")


@pytest.mark.parametrize(
    ("kind", "lead", "action"), [("Reboot", 900, "drain"), ("Preempt", 30, "terminate")]
)
def test_not_before_in_iso_8601_gives_a_deadline(
    tmp_path: Path, kind: str, lead: int, action: str
) -> None:
    # Issue 16 item 4: NotBefore as Microsoft's mock server writes it (RFC 3339) is a deadline.
    sim = AzureSimulator(vm_name="gpu-0", rate_limit=10, not_before_format="iso8601")
    with (
        SimServer(sim) as server,
        azure_agent(tmp_path, server, FOREWARN_AZURE_APPROVE="off") as agent,
        agent.subscriber() as sub,
    ):
        event_id = sim.raise_notice(kind, {"not_before_seconds": lead})
        assert sim.events[event_id]["NotBefore"].endswith("Z")
        notice = sub.notice(timeout=10)
        assert (notice["id"], notice["action"]) == (f"azure/{event_id}", action)
        assert notice["deadline"] is not None
        assert abs(parse_time(notice["deadline"]).timestamp() - (time.time() + lead)) < 15


def test_a_neighbours_events_do_not_republish_this_vms_notice(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    # Events go to the whole availability set: each neighbour's event bumps the document's
    # DocumentIncarnation. Before, every bump re-sent this VM's escalated Reboot (a webhook
    # call, a Kubernetes Event and an escalation counted each time) though it had not changed.
    sim, server = imds
    with (
        azure_agent(
            tmp_path, server, FOREWARN_AZURE_APPROVE="off", FOREWARN_EXIT_MARGIN="60"
        ) as agent,
        agent.subscriber() as sub,
    ):
        event_id = sim.raise_notice("Reboot", {"not_before_seconds": 50})
        first = sub.notice(timeout=10)
        assert (first["id"], first["action"]) == (f"azure/{event_id}", "terminate")
        for neighbour in ("gpu-1", "gpu-2", "gpu-3"):
            sim.raise_notice("Preempt", {"resources": [neighbour]})
        wait_polls(sim, 4)
        assert sub.drain(0.3) == []
        # A change of the event itself is still sent.
        sim.change_notice(event_id, {"resources": ["gpu-0", "gpu-1"]})
        again = sub.notice(timeout=10)
        assert again["id"] == first["id"] and again["detail"]["Resources"] == ["gpu-0", "gpu-1"]


@requires("prometheus_client")
def test_approvals_are_exported_as_a_counter_by_outcome(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """docs/azure.md said the approval counts were "for metrics", but no metric had them:
    an operator could not see that approvals failed, or were never sent."""
    sim, server = imds
    agent = azure_agent(tmp_path, server, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        # At 0 from the start, so increase() sees the first approval.
        zero = {"sent": 0, "failed": 0, "skipped": 0}
        eventually(lambda: approvals_metric(agent) == zero, what="the series at 0")
        eventually(
            lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1, what="client"
        )
        mine = sim.raise_notice("Terminate", {"not_before_seconds": 600})
        notice = sub.notice(timeout=10)
        assert notice["id"] == f"azure/{mine}"
        ack(agent, notice["id"], "trainer-0")
        eventually(lambda: sim.approvals, what="the approval")
        eventually(lambda: approvals_metric(agent)["sent"] == 1, what="the approval counted")
        # Shared with another VM: not approved by default, and counted as skipped.
        shared = sim.raise_notice("Preempt", {"resources": ["gpu-0", "gpu-1"]})
        notice = eventually(lambda: _next_about(sub, f"azure/{shared}"), what="the Preempt")
        ack(agent, notice["id"], "trainer-0")
        eventually(lambda: approvals_metric(agent)["skipped"] == 1, what="the skip counted")
        assert approvals_metric(agent) == {"sent": 1, "failed": 0, "skipped": 1}
        assert len(sim.approvals) == 1


def _next_about(sub: Subscriber, notice_id: str) -> dict[str, object] | None:
    notice = sub.notice(timeout=10)
    return notice if notice["id"] == notice_id else None


def test_a_reboot_escalated_to_terminate_is_approved_after_the_terminates_flush(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """A Reboot (listed in azure.approve_types) is a drain: its flush approves nothing, the
    clients train on. Re-sent as terminate before NotBefore (same id), its clients save to
    exit: once every one has acked that, the VM is ready and the event is approved. The
    notice, flushed as a drain already, was never flushed as a terminate: no approval, and
    the VM idled until NotBefore."""
    sim, server = imds
    env = agent_env(
        tmp_path,
        FOREWARN_AZURE_URL=server.url,
        FOREWARN_AZURE_VM_NAME="gpu-0",
        FOREWARN_AZURE_INTERVAL="0.25",
        FOREWARN_AZURE_APPROVE_TYPES="Preempt,Terminate,Reboot",
    )
    with (
        AgentProcess(tmp_path, ("azure",), ("--exit-margin", "4s"), env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        event_id = sim.raise_notice("Reboot", {"not_before_seconds": 8})
        drain = trainer.notice(timeout=10)
        assert (drain["id"], drain["action"]) == (f"azure/{event_id}", "drain")
        ack(agent, drain["id"], "trainer")
        wait_polls(sim, 3)
        assert sim.approvals == [], "approved at the drain's flush"

        terminate = trainer.notice(timeout=15)
        assert (terminate["id"], terminate["action"]) == (drain["id"], "terminate")
        wait_polls(sim, 2)
        assert sim.approvals == [], "approved before the terminate's ack"
        last_ack = ack(agent, drain["id"], "trainer")
        (approval,) = eventually(lambda: sim.approvals, what="the approval")
        assert approval["EventId"] == event_id
        assert approval["monotonic"] >= last_ack


def test_requests_held_by_a_hang_do_not_use_up_the_rate_limit_when_let_go(
    tmp_path: Path,
) -> None:
    """IMDS holds every request for 3 s, then answers again. The watcher (4 polls a second,
    under the 5 a second of IMDS's limit) gives up on each held request at its timeout and
    asks again, one request at a time. The simulator counted its rate limit when it answered,
    so the held requests, answered all at once as the hang ended, filled the second's five and
    the watcher's next poll got a 429 of that limit. A rate limit counts requests as they
    come, and these came spread over the 3 s: the watcher sent no more than its four a
    second."""
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30)
    with (
        SimServer(sim) as server,
        azure_agent(tmp_path, server, FOREWARN_AZURE_REQUEST_TIMEOUT="0.5") as agent,
    ):
        wait_polls(sim, 2)
        sim.add_fault("hang", path="/metadata/scheduledevents", duration=3.0)
        eventually(lambda: sim.faults()[0]["answered"] >= 3, what="three held requests")
        eventually(lambda: not sim.faults(), timeout=10, what="the hang to end")
        wait_polls(sim, 8)
        assert sim.rate_limited == 0, agent.output()
        # Not in the log either; read without its timestamps, whose milliseconds may be 429
        # (check 45a: `04:39:10,429 INFO ...` failed this line).
        said = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", agent.output(), flags=re.M)
        assert not re.search(r"(?<![\w/.:,])429(?![\w/.])", said), said
