"""The AKS VM event that ended this node's previous boot (`kubernetes-boot.json`): through the
real agent subprocess on the node API simulator, and the record on its own, on any file."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import utcnow
from forewarn.providers.httpdate import format_http_date
from forewarn.providers.kubernetes.boots import BOOT_ENDING, BOOT_FILE, VmEventBoots
from forewarn.providers.kubernetes.nodes import VmEvent
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, examples
from test_kubernetes_agent import (
    _kubernetes_env,
    control,
    expect,
    published,
    settled,
    wait_for_watch,
)

NODE = "agent-node"
REBOOT = f"kubernetes/{NODE}/vm-event/Reboot"


def _boot(tmp_path: Path, boot: str, booted: float) -> dict[str, str]:
    """This host's boot as the watcher reads it (its boot id and `btime`), in files."""
    (tmp_path / "boot_id").write_text(boot + "\n")
    (tmp_path / "stat").write_text(f"cpu 1 2 3\nbtime {int(booted)}\n")
    return {
        "FOREWARN_KUBERNETES_BOOT_ID_FILE": str(tmp_path / "boot_id"),
        "FOREWARN_KUBERNETES_BOOT_TIME_FILE": str(tmp_path / "stat"),
    }


def _watches(sim: KubernetesSimulator) -> int:
    with sim.lock:
        return sim.counts["watches"]


@pytest.mark.usefixtures("forked_agents")  # its agents fork (tests/conftest.py)
def test_the_reboot_that_ended_the_last_boot_is_not_a_terminate_after_it(
    tmp_path: Path,
) -> None:
    """AKS's node-problem-detector shows `Reboot Started` on the Node; the agent sends its
    terminate, and the node reboots. Azure lists the event Started for minutes after the
    reboot, so the condition still shows it when the node is back: the agent started then
    sent a terminate for it at once, and the job resumed after the reboot exited, again at
    each restart while it was shown. Now it is held back while shown Started; a Reboot
    Scheduled in the new boot is published as usual."""
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = _kubernetes_env(tmp_path, server)
        before = {**env, **_boot(tmp_path, "boot-a", time.time() - 600)}
        first = AgentProcess(tmp_path, providers=("kubernetes",), env=before)
        with first, first.subscriber() as sub:
            wait_for_watch(server)
            soon = format_http_date((utcnow() + timedelta(minutes=10)).replace(microsecond=0))
            control(server, "vm-event", event="Reboot", not_before=soon)
            expect(sub, "drain", REBOOT)
            control(server, "vm-event", event="Reboot", status="Started")
            expect(sub, "terminate", REBOOT)
        record = json.loads((tmp_path / "state" / BOOT_FILE).read_text())
        assert record["seen"] == ["Reboot"], record
        # The reboot. The agent drops its own provider notices of the boot before by the
        # kernel's boot id, which did not change on this machine: they go as they would.
        (tmp_path / "state" / "state.json").unlink()
        after = {**env, **_boot(tmp_path, "boot-b", time.time())}
        watches = _watches(sim)
        second = AgentProcess(tmp_path, providers=("kubernetes",), env=after)
        with second, second.subscriber() as sub:
            # A watch opens once the listed Node has been applied.
            eventually(lambda: _watches(sim) > watches, what="the new agent's watch")
            assert sub.drain(1.0) == [], "the reboot of the boot before was published"
            soon = format_http_date((utcnow() + timedelta(minutes=10)).replace(microsecond=0))
            control(server, "vm-event", event="Reboot", not_before=soon)
            expect(sub, "drain", REBOOT)
    assert "what ended the last one" in second.output(), second.output()


types = st.sampled_from(["Reboot", "Redeploy", "Preempt", "Terminate", "Freeze"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
files = st.fixed_dictionaries(
    {
        "boot_id": st.sampled_from(["this-boot", "the-boot-before"]) | json_values,
        "seen": st.lists(types | json_values, max_size=4) | json_values,
        "ended": st.lists(types | json_values, max_size=4) | json_values,
    }
)
events = st.none() | st.builds(
    lambda kind, status: VmEvent(kind, status, None),
    types,
    st.sampled_from(["Scheduled", "Started"]),
)
BOOTED = datetime(2026, 12, 6, 11, 0, tzinfo=timezone.utc)


@settings(max_examples=examples(200), deadline=None)
@given(payload=files | json_values, shown=st.lists(events, min_size=1, max_size=4))
def test_any_file_gives_a_record_that_holds_back_only_a_started_event_of_the_boot_before(
    tmp_path_factory: pytest.TempPathFactory, payload: object, shown: list[VmEvent | None]
) -> None:
    """Whatever the file holds, the record starts, and holds back only an event shown
    Started, of a boot-ending type a file of another boot says was published there, from
    the first read on and only while it stays so shown; what it writes is this boot's."""
    path = tmp_path_factory.mktemp("boots") / BOOT_FILE
    path.write_text(json.dumps(payload))
    boots = VmEventBoots(path, "this-boot", BOOTED)
    before: set[object] = set()
    if isinstance(payload, dict) and payload.get("boot_id") != "this-boot":
        for key in ("seen", "ended"):
            listed = payload.get(key)
            before |= (
                {t for t in listed if isinstance(t, str)} if isinstance(listed, list) else set()
            )
    holding = True
    for index, event in enumerate(shown):
        held = boots.held_back(event)
        if held:
            assert event is not None and event.status == "Started", event
            assert event.type in before and event.type in BOOT_ENDING, (event, payload)
            assert holding and (index == 0 or shown[index - 1] == event), shown
        else:
            holding = False
        boots.published(None if held else event)
    written = json.loads(path.read_text())
    if written != payload:  # nothing to keep leaves the file as it was
        assert written["boot_id"] == "this-boot", written
        assert set(written["seen"]) <= BOOT_ENDING, written


@pytest.mark.usefixtures("forked_agents")  # its agents fork (tests/conftest.py)
def test_a_started_vm_event_retired_before_a_restart_is_not_raised_anew(tmp_path: Path) -> None:
    """AKS shows a Reboot Started on the Node for minutes after it began. The agent raised
    its terminate and retired it past its deadline plus the grace while the Node still
    showed it (a running watcher raises it no more). An agent restarted then, in the same
    boot, raised it again as new, with the moment it listed the Node for a deadline: a
    second terminate to a job resumed after it, again at each restart while it was shown."""
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as server:
        env = {
            **_kubernetes_env(tmp_path, server),
            **_boot(tmp_path, "boot-a", time.time() - 600),
            "FOREWARN_NOTICE_GRACE": "2s",
        }
        with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
            wait_for_watch(server)
            control(server, "vm-event", event="Reboot", status="Started")
            eventually(lambda: published(agent.output(), REBOOT), what="the terminate")
            eventually(lambda: "notice clear " + REBOOT in agent.output(), what="its retirement")
            assert agent.control({"op": "status"})["active"] == []
        again = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with again, again.subscriber(topics=("notice", "heartbeat")) as sub:
            wait_for_watch(server)
            settled(again, sub)
            assert published(again.output(), REBOOT) == [], again.output()
            assert again.control({"op": "status"})["active"] == [], again.output()
            # Once the Node no longer shows it, a new Reboot is raised as usual.
            control(server, "vm-event", event="Reboot", not_before="Sat, 01 Jan 2100 00:00:00 GMT")
            expect(sub, "drain", REBOOT)


@settings(max_examples=examples(200), deadline=None)
@given(
    retired=st.lists(types | json_values, max_size=4) | json_values,
    boot=st.sampled_from(["this-boot", "the-boot-before"]),
    shown=st.lists(events, min_size=1, max_size=4),
)
def test_any_retired_list_holds_back_only_a_started_event_of_this_boot_while_shown(
    tmp_path_factory: pytest.TempPathFactory,
    retired: object,
    boot: str,
    shown: list[VmEvent | None],
) -> None:
    """Whatever `retired` holds, only a boot-ending type it lists, written in this boot, is
    held back, and only while it is shown Started from the first read on; once not, it is
    forgotten (and written so)."""
    path = tmp_path_factory.mktemp("boots") / BOOT_FILE
    path.write_text(json.dumps({"boot_id": boot, "seen": [], "ended": [], "retired": retired}))
    boots = VmEventBoots(path, "this-boot", BOOTED)
    listed = (
        {t for t in retired if isinstance(t, str) and t in BOOT_ENDING}
        if isinstance(retired, list) and boot == "this-boot"
        else set()
    )
    holding = True
    for event in shown:
        held = boots.retired_shown(event)
        if held:
            assert holding and event is not None and event.status == "Started", event
            assert event.type in listed, (event, retired)
        else:
            holding = False
        boots.published(None if held else event)
    assert boots.retired <= listed
    written = json.loads(path.read_text())
    if written.get("boot_id") == "this-boot" and written.get("retired") != retired:
        assert set(written["retired"]) == boots.retired, written  # rewritten: this boot's
