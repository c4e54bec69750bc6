"""An agent restarted on the same state directory, through the real agent subprocess and the
simulator: an Azure event it had published and that did not change is not sent again as new."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


@pytest.fixture
def imds() -> Iterator[tuple[AzureSimulator, SimServer]]:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10)
    with SimServer(sim) as server:
        yield sim, server


def polls(sim: AzureSimulator) -> int:
    return sim.requests["GET /metadata/scheduledevents"]


def wait_polls(sim: AzureSimulator, count: int) -> None:
    target = polls(sim) + count
    eventually(lambda: polls(sim) >= target, what=f"{count} more polls")


def _azure_env(tmp_path: Path, server: SimServer, approve: str, **extra: str) -> dict[str, str]:
    """An agent of the Azure provider alone on `server`, VM gpu-0, polling every 0.25 s."""
    return agent_env(
        tmp_path,
        FOREWARN_AZURE_URL=server.url,
        FOREWARN_AZURE_VM_NAME="gpu-0",
        FOREWARN_AZURE_INTERVAL="0.25",
        FOREWARN_AZURE_APPROVE=approve,
        **extra,
    )


def published(output: str, notice_id: str) -> list[str]:
    """The agent's log lines of each send of `notice_id` (new, changed, escalated, cleared),
    not its restore."""
    return re.findall(rf"notice \w+ {re.escape(notice_id)} .*seq=\d+", output)


@pytest.mark.parametrize("story", ["unchanged", "neighbour-events", "started"])
def test_an_unchanged_event_is_not_sent_again_after_an_agent_restart(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer], story: str
) -> None:
    """`neighbour-events`: other VMs' events bumped DocumentIncarnation, which the watcher
    keeps out of this VM's notice while its event is unchanged; the restarted watcher, with no
    memory, put the new incarnation in, and the notice went out again as changed. `started`:
    the event has Started (NotBefore is then empty): the restarted watcher took its deadline
    to be the moment of its first poll, and the notice went out again with a new deadline."""
    sim, server = imds
    env = _azure_env(tmp_path, server, "off")
    first = AgentProcess(tmp_path, providers=("azure",), env=env).start()
    try:
        event_id = sim.raise_notice("Preempt", {"not_before_seconds": 600})
        notice_id = f"azure/{event_id}"
        eventually(lambda: published(first.output(), notice_id), what="the notice")
        if story == "neighbour-events":
            sim.raise_notice("Preempt", {"resources": ["gpu-1"]})
            sim.raise_notice("Reboot", {"resources": ["gpu-2"]})
        elif story == "started":
            sim.change_notice(event_id, {"status": "Started"})
            eventually(
                lambda: len(published(first.output(), notice_id)) == 2, what="the Started event"
            )
        wait_polls(sim, 4)
        sent = published(first.output(), notice_id)
    finally:
        assert first.stop() == 0
    with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
        wait_polls(sim, 4)
        eventually(lambda: "restored from" in agent.output() and polls(sim) > 0, what="the restore")
        active = agent.control({"op": "status"})["active"]
        assert [notice["id"] for notice in active] == [notice_id]
        assert published(agent.output(), notice_id) == [], (sent, agent.output())


def test_an_event_approved_before_an_agent_restart_is_not_approved_again(tmp_path: Path) -> None:
    """Approval lets Azure start an event early, but it may wait for other tenants and list
    the event as Scheduled until then. The restarted agent (approve = "immediately") had
    forgotten its approval and POSTed it again at its first document, counted as a second
    approval of the same event. (`after-ack` did not: the restored acks make the restored
    notice flushed already, and a client's ack again is not a new flush.)"""
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10, approval_start_after=600)
    with SimServer(sim) as server:
        env = _azure_env(tmp_path, server, "immediately")
        event_id = sim.raise_notice("Terminate", {"not_before_seconds": 600})
        notice_id = f"azure/{event_id}"
        with AgentProcess(tmp_path, providers=("azure",), env=env) as first:
            eventually(lambda: published(first.output(), notice_id), what="the notice")
            eventually(lambda: sim.approvals, what="the approval")
            eventually(lambda: "approved event" in first.output(), what="its 200 to be read")
        assert sim.events[event_id]["EventStatus"] == "Scheduled"
        with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
            eventually(lambda: "restored from" in agent.output(), what="the restore")
            wait_polls(sim, 4)
            assert [a["EventId"] for a in sim.approvals] == [event_id], agent.output()
            assert "approved before" in agent.output()


# The agent's first Azure watcher crashes before its first poll (supervision builds another).
CRASH_FIRST_WATCHER = """\
import forewarn.providers.azure.watch as watch

_watch = watch.AzureWatcher.watch
_built = []


async def _crash_once(self, emit):
    _built.append(self)
    if len(_built) == 1:
        raise RuntimeError("the first watcher crashed before its first poll")
    await _watch(self, emit)


watch.AzureWatcher.watch = _crash_once
"""


@pytest.mark.parametrize("crash", [False, True], ids=["watcher-runs", "first-watcher-crashes"])
def test_a_started_event_retired_at_the_restart_is_not_raised_again(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer], crash: bool
) -> None:
    """The Preempt has Started (NotBefore empty) and is still listed when the agent restarts
    past its deadline plus the grace: the restored notice is retired at start-up, before the
    watcher is built. Without the retired notice handed to it, the watcher took the moment of
    its first poll for the deadline (a new terminate); handed it, it raised the event again as
    it was, and again at every grace while Azure listed it. A Started event is under way until
    Azure removes it: it is retired once, as by an agent that never stopped (docs/azure.md).
    With `crash`, the restarted agent's first watcher crashes before it read a document: the
    one built after the crash is told of the retirement too."""
    sim, server = imds
    env = _azure_env(
        tmp_path,
        server,
        "off",
        FOREWARN_NOTICE_GRACE="5s",
    )
    event_id = sim.raise_notice("Preempt", {"status": "Started"})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=env) as first:
        eventually(lambda: published(first.output(), notice_id), what="the notice")
        (before,) = first.control({"op": "status"})["active"]
    deadline = parse_time(before["deadline"])
    sim.raise_notice("Preempt", {"resources": ["gpu-1"]})  # bumps the incarnation
    past = deadline + timedelta(seconds=6)
    eventually(lambda: utcnow() > past, what="the grace to pass", interval=0.1)
    if crash:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(CRASH_FIRST_WATCHER)
        path = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
        env = {**env, "PYTHONPATH": path}
    with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
        eventually(lambda: "expired" in agent.output(), what="the retirement at start-up")
        if crash:
            eventually(lambda: "crashed before its first poll" in agent.output(), what="a crash")
        said = "retired while listed Started before the restart; not raised again"
        eventually(lambda: said in agent.output(), what="the watcher told of it")
        polls = sim.requests["GET /metadata/scheduledevents"]
        eventually(
            lambda: sim.requests["GET /metadata/scheduledevents"] >= polls + 6, what="6 polls"
        )
        assert agent.control({"op": "status"})["active"] == [], agent.output()
        sends = [line.split()[1] for line in published(agent.output(), notice_id)]
        assert sends == ["clear"], agent.output()  # the retirement, and nothing raised again


def test_a_flush_whose_approval_did_not_go_out_is_approved_after_an_agent_restart(
    tmp_path: Path,
) -> None:
    """Under `after-ack`, every client flushed the Terminate, but the approval did not go out
    before the agent stopped (IMDS refused the POST). The restarted agent knows the notice is
    flushed (its clients need not ack again) but only a new flush told the watcher: the
    approval was never sent, and the eviction waited for its NotBefore. Once sent, a further
    restart does not send it again (Azure keeps the approved event Scheduled here)."""
    sim = AzureSimulator(vm_name="gpu-0", removal_after=60, rate_limit=10, approval_start_after=600)
    with SimServer(sim) as server:
        env = _azure_env(tmp_path, server, "after-ack")
        refused = sim.add_fault(
            "status", status=500, method="POST", path="/metadata/scheduledevents"
        )
        event_id = sim.raise_notice("Terminate", {"not_before_seconds": 600})
        notice_id = f"azure/{event_id}"
        with (
            AgentProcess(tmp_path, providers=("azure",), env=env) as first,
            Subscriber(first.events, ("notice", "client/trainer-0")) as client,
        ):
            assert client.notice(timeout=15)["id"] == notice_id
            ack = {"op": "ack", "notice_id": notice_id, "client": "trainer-0", "flush_seconds": 0.1}
            assert first.control(ack)["ok"]
            eventually(lambda: "flushed by every client" in first.output(), what="the flush")
            eventually(lambda: "approving event" in first.output(), what="the refused approval")
        assert sim.approvals == []
        sim.remove_fault(refused)
        with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
            eventually(lambda: sim.approvals, what="the approval after the restart")
            eventually(lambda: "approved event" in agent.output(), what="its 200 to be read")
        with AgentProcess(tmp_path, providers=("azure",), env=env) as again:
            eventually(lambda: "approved before" in again.output(), what="the approval remembered")
            wait_polls(sim, 4)
            assert [a["EventId"] for a in sim.approvals] == [event_id], again.output()


# The agent's first Azure watcher crashes at its first poll after it published a Started event.
CRASH_AFTER_STARTED = """\
import forewarn.providers.azure.watch as watch

_poll = watch.AzureWatcher.poll
_crashed = []


async def _poll_then_crash(self):
    started = [r for r in self.reports.values() if r.detail.get("EventStatus") == "Started"]
    if started and not _crashed:
        _crashed.append(self)
        raise RuntimeError("the watcher crashed after it published the Started event")
    return await _poll(self)


watch.AzureWatcher.poll = _poll_then_crash
"""


def test_a_started_event_keeps_its_deadline_across_a_watcher_crash(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """The watcher built again after a crash knew nothing of what its predecessor reported: a
    Started event (NotBefore empty) got the new watcher's first poll as its deadline, and the
    document's newer DocumentIncarnation, and went out again as changed."""
    sim, server = imds
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CRASH_AFTER_STARTED)
    env = _azure_env(
        tmp_path,
        server,
        "off",
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    )
    event_id = sim.raise_notice("Preempt", {"status": "Started"})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
        eventually(lambda: published(agent.output(), notice_id), what="the notice")
        (before,) = agent.control({"op": "status"})["active"]
        sim.raise_notice("Preempt", {"resources": ["gpu-1"]})  # bumps the incarnation
        eventually(lambda: "crashed after it published" in agent.output(), what="the crash")
        eventually(lambda: "polling recovered" in agent.output(), what="the new watcher")
        wait_polls(sim, 4)
        (after,) = agent.control({"op": "status"})["active"]
        assert parse_time(after["deadline"]) == parse_time(before["deadline"]), agent.output()
        assert after["detail"]["DocumentIncarnation"] == before["detail"]["DocumentIncarnation"]
        assert len(published(agent.output(), notice_id)) == 1, agent.output()


def _as_if_rebooted(tmp_path: Path) -> None:
    """The state files as a machine that stopped and started again finds them: written in a
    boot that is not this one."""
    for name in ("state.json", "azure-boot.json"):
        path = tmp_path / "state" / name
        if not path.exists():
            continue
        saved = json.loads(path.read_text())
        path.write_text(json.dumps({**saved, "boot_id": "the-boot-before"}))


@pytest.mark.parametrize(("kind", "status"), [("Reboot", "Started"), ("Redeploy", "Scheduled")])
def test_the_event_that_ended_the_last_boot_is_not_published_after_it(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer], kind: str, status: str
) -> None:
    """Azure lists a Started event for about ten minutes after it started, and a Reboot takes
    the VM down for a minute or two: after the reboot it caused, it is still listed, Started.
    The agent read it as an event started at its first poll and sent a terminate (deadline
    now), and the job resumed after the reboot exited, at each restart, until Azure removed it.
    One still Scheduled after the reboot (the VM restarted for another cause) is this boot's."""
    sim, server = imds
    env = _azure_env(tmp_path, server, "off")
    event_id = sim.raise_notice(kind, {"not_before_seconds": 600})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=env) as first:
        # The watcher records the event in its file before it publishes it.
        eventually(lambda: published(first.output(), notice_id), what="the drain")
    if status == "Started":
        sim.change_notice(event_id, {"status": "Started"})  # it started: the VM rebooted
    _as_if_rebooted(tmp_path)
    with (
        AgentProcess(tmp_path, providers=("azure",), env=env) as agent,
        agent.subscriber(topics=("notice", "heartbeat")) as sub,
    ):
        wait_polls(sim, 4)
        now, beats, notices = utcnow(), 0, []
        while beats < 2:  # heartbeats sent after those polls: the agent has acted on them
            topic, message = sub.recv(timeout=10)
            if topic == "notice":
                notices.append(message)
            elif parse_time(message["sent_at"]) > now:
                beats += 1
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        if status == "Scheduled":
            assert active == {notice_id: "drain"}
            return
        assert notices == [] and active == {}, (notices, agent.output())
        assert f"event {event_id} ({kind}) was Started before this boot began" in agent.output()
        preempt = f"azure/{sim.raise_notice('Preempt', {})}"  # the watcher still reads the rest
        assert (sub.notice(timeout=10)["id"]) == preempt
    # Restarted again in this boot: the event stays held back while it is listed.
    with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
        wait_polls(sim, 4)
        eventually(lambda: "restored from" in agent.output(), what="the restore")
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {preempt: "terminate"}
        assert published(agent.output(), notice_id) == [], agent.output()


def test_a_stray_first_document_after_a_restart_does_not_withdraw_a_restored_event(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """The agent restarted while a Reboot was listed, and IMDS answered its first poll with
    an empty document (a host update restarting it): the drain restored from before the
    restart was withdrawn (a clear) as soon as the watcher had answered, and raised again at
    the next poll, so the job saved its drain again. One document without it is no
    withdrawal, as in the watcher's own run."""
    sim, server = imds
    # Heartbeats (where the agent settles restored notices) between two polls.
    env = _azure_env(tmp_path, server, "off", FOREWARN_HEARTBEAT_INTERVAL="0.1")
    env["FOREWARN_AZURE_INTERVAL"] = "1"
    event_id = sim.raise_notice("Reboot", {"not_before_seconds": 600})
    notice_id = f"azure/{event_id}"
    with AgentProcess(tmp_path, providers=("azure",), env=env) as first:
        eventually(lambda: published(first.output(), notice_id), what="the drain")
    empty = json.dumps({"DocumentIncarnation": 1, "Events": []})
    sim.add_fault("status", path="/metadata/scheduledevents", status=200, body=empty, count=1)
    with AgentProcess(tmp_path, providers=("azure",), env=env) as agent:
        wait_polls(sim, 3)
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {notice_id: "drain"}
        assert published(agent.output(), notice_id) == [], agent.output()
