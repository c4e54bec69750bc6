"""End to end: the real agent subprocess watching the node API simulator over HTTP."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.httpdate import format_http_date
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from k8s_support import recordon
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

NODE = "agent-node"


@pytest.fixture
def server() -> Iterator[SimServer]:
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    with SimServer(sim) as running:
        yield running


def control(server: SimServer, kind: str, **fields: object) -> None:
    response = httpx.post(
        f"{server.url}/_sim/notices", json={"kind": kind, **fields}, trust_env=False, timeout=5
    )
    assert response.status_code == 201, response.text


def withdraw(server: SimServer, notice_id: str) -> None:
    response = httpx.delete(f"{server.url}/_sim/notices/{notice_id}", trust_env=False, timeout=5)
    assert response.status_code == 200, response.text


def expect(sub: Subscriber, action: str, notice_id: str) -> dict[str, object]:
    notice = sub.notice(timeout=10)
    assert (notice["action"], notice["id"]) == (action, notice_id), notice
    return notice


def until_seen(
    sub: Subscriber, wanted: set[tuple[str, str]], allowed: set[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The notices received until each of `wanted` (action, id) came; any other must be one
    of `allowed` (a replay's repeat)."""
    seen: list[tuple[str, str]] = []
    while not wanted <= set(seen):
        notice = sub.notice(timeout=10)
        seen.append((notice["action"], notice["id"]))
        assert seen[-1] in wanted | allowed, seen
    return seen


def wait_for_watch(server: SimServer, count: int = 1) -> None:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)

    def open_watches() -> bool:
        with sim.lock:
            return sim.open_watches >= count

    eventually(open_watches, what="the agent's watch")


def _kubernetes_env(tmp_path: Path, server: SimServer) -> dict[str, str]:
    """An agent's environment for the simulator, with a token file and the node's name."""
    token = tmp_path / "token"
    token.write_text("t1")
    return agent_env(
        tmp_path,
        FOREWARN_KUBERNETES_URL=server.url,
        FOREWARN_KUBERNETES_TOKEN_FILE=str(token),
        NODE_NAME=NODE,  # as the downward API sets it
    )


def test_agent_turns_node_changes_into_notices(tmp_path: Path, server: SimServer) -> None:
    env = _kubernetes_env(tmp_path, server)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        with agent.subscriber() as sub:
            wait_for_watch(server)
            control(server, "cordon")
            drain = expect(sub, "drain", f"kubernetes/{NODE}/cordon")
            assert drain["reason"] == "node-drain" and drain["provider"] == "kubernetes"

            # A rotated token and a compaction (410) in between lose nothing. The token turns
            # while the watch is open (no request in flight to race it); the open watch then
            # gets its 410 at once: otherwise a BOOKMARK sent after the compaction (one a
            # second here) may move the watcher past it, and it would never list again.
            Path(env["FOREWARN_KUBERNETES_TOKEN_FILE"]).write_text("t2")
            control(server, "rotate-token", token="t2")
            control(server, "compact", expire_watches=True)
            control(server, "timeout")
            control(server, "shutdown")
            expect(sub, "terminate", f"kubernetes/{NODE}/shutdown")

            status = agent.control({"op": "status"})
            assert sorted(n["id"] for n in status["active"]) == [
                f"kubernetes/{NODE}/cordon",
                f"kubernetes/{NODE}/shutdown",
            ]
            withdraw(server, "cordon")
            expect(sub, "clear", f"kubernetes/{NODE}/cordon")
        sim = server.sim
        assert isinstance(sim, KubernetesSimulator)
        assert sim.counts["lists"] >= 2  # the 410 made it list again
        assert sim.counts["unauthorized"] == 0
    assert "Traceback" not in agent.output()


def test_a_deleted_node_stays_terminated_across_an_agent_restart(
    tmp_path: Path, server: SimServer
) -> None:
    """An agent restarted after its Node was deleted lists no node: the terminate it had
    raised is not withdrawn by that list (the node is still gone), only once the node is
    listed again."""
    env = _kubernetes_env(tmp_path, server)
    deleted = f"kubernetes/{NODE}/deleted"
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    first = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with first as agent, agent.subscriber() as sub:
        wait_for_watch(server)
        control(server, "delete")
        expect(sub, "terminate", deleted)
    lists = sim.counts["lists"]
    second = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with second as agent, agent.subscriber(topics=("notice", "heartbeat")) as sub:
        # The list without the node: the restored notices name it, so it is that node's
        # deletion (their terminate reported again), not a node that does not exist yet.
        eventually(
            lambda: f"kubernetes: terminate {deleted}" in agent.output(),
            what="the restarted agent's list, without the node",
        )
        assert sim.counts["lists"] > lists
        # Restored notices are settled just before each heartbeat: two beats sent after the
        # list was answered mean the agent has settled them with that answer in hand.
        listed = utcnow()
        beats = 0
        while beats < 2:
            topic, message = sub.recv(timeout=10)
            if topic != "heartbeat":
                assert message["action"] != "clear", message
            elif parse_time(message["sent_at"]) > listed:
                beats += 1
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {deleted: "terminate"}
        withdraw(server, "node")  # created again: the node is back
        expect(sub, "clear", deleted)
    assert "Traceback" not in agent.output()


def published(output: str, notice_id: str) -> list[str]:
    """The agent's log lines of each send of `notice_id`, not its restore."""
    return re.findall(rf"notice \w+ {re.escape(notice_id)} .*seq=\d+", output)


def settled(agent: AgentProcess, sub: Subscriber) -> None:
    """Restored notices are settled just before each heartbeat: two beats sent after now
    mean the agent has settled them with the watcher's answers so far in hand."""
    now, beats = utcnow(), 0
    while beats < 2:
        topic, message = sub.recv(timeout=10)
        if topic == "heartbeat" and parse_time(message["sent_at"]) > now:
            beats += 1


@contextmanager
def restarted(
    tmp_path: Path, env: dict[str, str], *listed: str, args: tuple[str, ...] = ()
) -> Iterator[AgentProcess]:
    """The agent started again on the same directories, once its watcher's first list has
    told one of `listed` (`drain ID`, `terminate ID`) and it has settled the notices it
    restored with that list in hand: what it sent from then on is what the restart sent."""
    with (
        AgentProcess(tmp_path, providers=("kubernetes",), env=env, args=args) as agent,
        agent.subscriber(topics=("notice", "heartbeat")) as sub,
    ):
        eventually(
            lambda: any(f"kubernetes: {line}" in agent.output() for line in listed),
            what="the restarted watcher's list",
        )
        settled(agent, sub)
        yield agent


@contextmanager
def cleared_and_raised_across_a_restart(
    tmp_path: Path,
    server: SimServer,
    notice_id: str,
    raise_it: Callable[[], None],
    while_down: Callable[[], None],
) -> Iterator[AgentProcess]:
    """An agent told the drain `raise_it()` raised, then stopped; `while_down()` done to the
    node; the agent started again (`restarted`), which has sent a clear, then the drain again,
    for `notice_id`. The block runs with the restarted agent; no traceback in its log after."""
    env = _kubernetes_env(tmp_path, server)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        raise_it()
        eventually(lambda: published(agent.output(), notice_id), what=f"the drain of {notice_id}")
    while_down()
    with restarted(tmp_path, env, f"drain {notice_id}") as agent:
        sends = [line.split()[1] for line in published(agent.output(), notice_id)]
        assert sends == ["clear", "drain"], agent.output()
        yield agent
    assert "Traceback" not in agent.output()


def test_node_notices_across_an_agent_restart_are_neither_repeated_nor_lost(
    tmp_path: Path, server: SimServer
) -> None:
    """The watcher keeps no memory of the watch events it acted on: a restarted agent lists
    the node again. What it lists unchanged matches the restored notices (not sent again);
    what changed while it was down is sent (a new taint) or cleared (a lifted cordon)."""
    env = _kubernetes_env(tmp_path, server)
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    cordon, shutdown = f"kubernetes/{NODE}/cordon", f"kubernetes/{NODE}/shutdown"
    taint = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        control(server, "cordon")
        control(server, "shutdown")
        eventually(
            lambda: published(agent.output(), cordon) and published(agent.output(), shutdown),
            what="the drain and the terminate",
        )
    with restarted(tmp_path, env, f"terminate {shutdown}") as agent:
        assert published(agent.output(), cordon) == [], agent.output()
        assert published(agent.output(), shutdown) == [], agent.output()
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {cordon: "drain", shutdown: "terminate"}
    withdraw(server, "cordon")
    control(server, "taint", key="karpenter.sh/disrupted")
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        eventually(
            lambda: published(agent.output(), taint) and published(agent.output(), cordon),
            what="the new taint's drain and the lifted cordon's clear",
        )
        assert "notice clear " + cordon in agent.output()
        assert published(agent.output(), shutdown) == [], agent.output()
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {shutdown: "terminate", taint: "drain"}
    assert "Traceback" not in agent.output()


def test_a_cordon_applied_again_while_the_agent_was_down_is_cleared_and_raised(
    tmp_path: Path, server: SimServer
) -> None:
    """The cordon was lifted and applied again while the agent was down (as a real cluster shows it:
    no `timeAdded` on the controller's NoSchedule taint, only the managedFields entry that set
    `spec.unschedulable` is later). The restarted agent sent the drain again under the same id, with
    no clear between: a repeat to the job's guard, which had saved for the first cordon and so saved
    nothing for the second. A running watcher sends drain, clear, drain."""
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    cordon = f"kubernetes/{NODE}/cordon"
    with cleared_and_raised_across_a_restart(
        tmp_path, server, cordon, lambda: control(server, "cordon"), lambda: recordon(sim)
    ) as agent:
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {cordon: "drain"}


def _as_an_older_agent_saved_it(state: Path, mark: str) -> None:
    """Drop `mark` from every notice's detail in the agent's state file, as an agent from
    before that mark saved them, and the watcher's marks file."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != mark}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    saved = json.loads(state.read_text())
    assert mark in json.dumps(saved)
    state.write_text(json.dumps(strip(saved)))
    (state.parent / "kubernetes-marks.json").unlink()  # which it did not write either


def test_a_cordon_applied_again_while_an_older_agent_was_upgraded_is_cleared_and_raised(
    tmp_path: Path, server: SimServer
) -> None:
    """found: the cordon an agent from before `unschedulableSet` saved, lifted and applied
    again while it was upgraded: the upgraded agent had no mark to compare (one side without
    one told nothing) and took the second cordon for the first, no clear, no drain, so the
    job saved nothing for it. The cordon's managedFields `time`, later than the saved notice
    was noticed, tells it: clear, drain."""
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    cordon = f"kubernetes/{NODE}/cordon"

    def upgraded() -> None:
        _as_an_older_agent_saved_it(tmp_path / "state" / "state.json", "unschedulableSet")
        recordon(sim, later=30)  # the upgrade took half a minute

    with cleared_and_raised_across_a_restart(
        tmp_path, server, cordon, lambda: control(server, "cordon"), upgraded
    ):
        pass


def test_a_taint_written_over_by_a_cordon_is_not_sent_again_by_a_restarted_agent(
    tmp_path: Path, server: SimServer
) -> None:
    """found: Karpenter's taint, then a cordon (whose taint the controller writes into the
    same atomic list, moving the managedFields entry that last wrote it), then an agent
    restart: the restarted agent compared the list's entry as the taint's drain was first
    sent (the state file holds that) with the one listed now, and sent the drain again
    (`clear ... (set again since it was raised)`, drain): a save for nothing. The watcher
    keeps the marks as it last saw them (`kubernetes-marks.json`)."""
    env = _kubernetes_env(tmp_path, server)
    taint = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
    cordon = f"kubernetes/{NODE}/cordon"
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        control(server, "taint", key="karpenter.sh/disrupted", manager="karpenter")
        eventually(lambda: published(agent.output(), taint), what="the taint's drain")
        sim = server.sim
        assert isinstance(sim, KubernetesSimulator)
        with sim.lock:  # the controller's write a second later, as on a real cluster
            node = sim._edit()
            node["spec"]["unschedulable"] = True
            sim._own_unschedulable(node, "kubectl-cordon")
            sim._sync_cordon_taint(node)
            for entry in node["metadata"]["managedFields"]:
                if "f:taints" in entry["fieldsV1"]["f:spec"]:
                    moved = parse_time(entry["time"]) + timedelta(seconds=1)
                    entry["time"] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
            sim._commit("MODIFIED", node)
        eventually(lambda: published(agent.output(), cordon), what="the cordon's drain")
    with restarted(tmp_path, env, f"drain {taint}") as agent:
        assert published(agent.output(), taint) == [], agent.output()
        assert published(agent.output(), cordon) == [], agent.output()
    assert "Traceback" not in agent.output()


def test_a_scale_down_begun_again_while_the_agent_was_down_is_cleared_and_raised(
    tmp_path: Path, server: SimServer
) -> None:
    """Cluster Autoscaler's taint has no `timeAdded`, only its value (the Unix time the
    scale-down began). Removed (the scale-down given up) and set again while the agent was
    down, the restarted agent took the new scale-down for the old one and said nothing: the
    job, which had resumed after the first, was not told of the second."""
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    key = "ToBeDeletedByClusterAutoscaler"
    notice_id = f"kubernetes/{NODE}/taint/{key}"

    def scale_down(began: str) -> None:
        with sim.lock:
            node = sim._edit()
            taints = [t for t in node["spec"].get("taints", []) if t["key"] != key]
            # As Cluster Autoscaler writes it: no timeAdded.
            node["spec"]["taints"] = [*taints, {"key": key, "value": began, "effect": "NoSchedule"}]
            sim._commit("MODIFIED", node)

    with cleared_and_raised_across_a_restart(
        tmp_path,
        server,
        notice_id,
        lambda: scale_down("1764928800"),
        lambda: scale_down("1764929400"),
    ):
        pass


def test_a_shutdown_whose_ready_turned_unknown_stands_across_an_agent_restart(
    tmp_path: Path, server: SimServer
) -> None:
    """The kubelet shut down and stopped posting: Ready=False ("node is shutting down") turned
    Unknown. A running watcher keeps the terminate; a restarted agent lists Ready=Unknown
    with no shutdown of its own to keep, and cleared the terminate: the job, told the
    machine was not going away, saved and trained on into the stop."""
    env = _kubernetes_env(tmp_path, server)
    shutdown = f"kubernetes/{NODE}/shutdown"
    marker = f"kubernetes/{NODE}/cordon"
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        control(server, "shutdown")
        control(server, "unreachable")
        control(server, "cordon")  # seen once the Ready=Unknown before it is seen
        eventually(lambda: published(agent.output(), marker), what="the cordon's drain")
        assert len(published(agent.output(), shutdown)) == 1, agent.output()
    with restarted(tmp_path, env, f"drain {marker}") as agent:
        assert published(agent.output(), shutdown) == [], agent.output()
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {marker: "drain", shutdown: "terminate"}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({}, "NODE_NAME"),
        ({"NODE_NAME": NODE, "FOREWARN_KUBERNETES_TOKEN_FILE": "/nonexistent/token"}, "unreadable"),
    ],
    ids=["no-node-name", "unreadable-token"],
)
def test_bad_configuration_is_one_error_and_the_agent_keeps_working(
    tmp_path: Path, extra: dict[str, str], needle: str
) -> None:
    env = agent_env(tmp_path, KUBERNETES_SERVICE_HOST="127.0.0.1", **extra)
    if "NODE_NAME" not in extra:
        env.pop("NODE_NAME", None)
    with AgentProcess(tmp_path, providers=("local", "kubernetes"), env=env) as agent:
        with agent.subscriber() as sub:
            reply = agent.control({"op": "notify", "action": "drain"})
            assert reply["ok"], reply
            assert sub.notice(timeout=5)["action"] == "drain"  # the local watcher still works
        assert agent.control({"op": "status"})["ok"], "the agent answers after the error"
        assert agent.proc is not None and agent.proc.poll() is None
    output = agent.output()
    errors = [line for line in output.splitlines() if "kubernetes: config" in line]
    assert len(errors) == 1, output
    assert needle in errors[0]
    assert "watcher-failed" not in output and "Traceback" not in output


ESTABLISHED = 1  # the `st` column of /proc/net/tcp
KEEPALIVE_TIMER = 2  # the timer kind in its `tr` column


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds open (/proc/<pid>/fd -> socket:[inode])."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def tcp_timers(pid: int, remote_port: int) -> list[tuple[int, int]]:
    """(state, timer kind) of each TCP connection of `pid` to `remote_port`, as the kernel
    lists it in /proc/net/tcp{,6}."""
    inodes = socket_inodes(pid)
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote, state, timer, inode = fields[2], fields[3], fields[5], int(fields[9])
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                rows.append((int(state, 16), int(timer.split(":")[0], 16)))
    return rows


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the kernel's /proc/net/tcp")
def test_the_watch_connection_has_tcp_keepalive(tmp_path: Path, server: SimServer) -> None:
    # A connection that dies without a FIN or RST is noticed by keepalive within a minute;
    # without it only the watch's read timeout (330 s by default) would notice.
    env = _kubernetes_env(tmp_path, server)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        assert agent.proc is not None
        pid = agent.proc.pid

        seen: list[list[tuple[int, int]]] = [[]]

        def keepalive() -> bool:
            # Timer kind 2 (keepalive) shows whenever no sent data awaits its ACK, the usual
            # state of a watch; without SO_KEEPALIVE it is 0 (no timer).
            seen[0] = [row for row in tcp_timers(pid, server.port) if row[0] == ESTABLISHED]
            return bool(seen[0]) and all(timer == KEEPALIVE_TIMER for _, timer in seen[0])

        try:
            eventually(keepalive, timeout=10, what="a keepalive timer on the watch connection")
        except AssertionError as error:
            raise AssertionError(f"{error}; (state, timer) seen: {seen[0]}") from None
    assert "Traceback" not in agent.output()


def beats_past(sub: Subscriber, moment: datetime, seconds: float) -> list[dict[str, Any]]:
    """The notices received until a heartbeat sent more than `seconds` after `moment`."""
    notices = []
    while True:
        topic, message = sub.recv(timeout=10)
        if topic != "heartbeat":
            notices.append(message)
        elif (parse_time(message["sent_at"]) - moment).total_seconds() > seconds:
            return notices


def test_a_deleted_nodes_terminate_outlasts_the_grace_after_an_agent_restart(
    tmp_path: Path, server: SimServer
) -> None:
    """Restored notices the watcher does not report again are retired after `notice_grace`;
    the list that shows the node still gone reports the terminate again, so it stands."""
    # 5 s, not less: the grace counts from the restore, and on a loaded machine (check 29a)
    # the watcher's build and first list took longer than 2 s.
    env = {**_kubernetes_env(tmp_path, server), "FOREWARN_NOTICE_GRACE": "5s"}
    deleted = f"kubernetes/{NODE}/deleted"
    first = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with first as agent, agent.subscriber() as sub:
        wait_for_watch(server)
        control(server, "delete")
        expect(sub, "terminate", deleted)
    with (
        AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent,
        agent.subscriber(topics=("notice", "heartbeat")) as sub,
    ):
        wait_for_watch(server)
        started = utcnow()
        notices = beats_past(sub, started, 6.0)  # past the grace, counted from before `started`
        assert [n for n in notices if n["action"] == "clear"] == [], notices
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {deleted: "terminate"}
        assert published(agent.output(), deleted) == [], agent.output()
    assert "Traceback" not in agent.output()


def test_a_node_deleted_while_the_agent_was_down_is_a_terminate(
    tmp_path: Path, server: SimServer
) -> None:
    """The notices restored after a restart say which node the agent had seen: a list that
    no longer shows it is that node's deletion, as a watcher that never stopped would have
    seen it, not a node that does not exist yet."""
    env = _kubernetes_env(tmp_path, server)
    cordon, deleted = f"kubernetes/{NODE}/cordon", f"kubernetes/{NODE}/deleted"
    first = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with first as agent, agent.subscriber() as sub:
        wait_for_watch(server)
        control(server, "cordon")
        expect(sub, "drain", cordon)
    control(server, "delete")
    second = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with second as agent, agent.subscriber() as sub:
        # The restored drain comes by the replay to this subscriber, and the replay can come
        # after the terminate (the agent reads the subscription late on a loaded node), so
        # it repeats the terminate: every notice is one of the two until both were seen, and
        # after that a repeat of either is the replay, not news.
        raised = {("drain", cordon), ("terminate", deleted)}
        until_seen(sub, raised, allowed=raised)
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {cordon: "drain", deleted: "terminate"}
        withdraw(server, "node")  # created again: another node
        until_seen(sub, {("clear", cordon), ("clear", deleted)}, allowed=raised)
    assert "notice drain " + cordon not in agent.output()  # restored, not sent again
    assert "Traceback" not in agent.output()


def test_a_shutdown_after_an_etcd_restore_reaches_the_job(
    tmp_path: Path, server: SimServer
) -> None:
    """After an etcd restore the agent's watch position is ahead of the server's: retried as
    it was, the watch stayed blind, and a node shutdown then killed the job without a
    terminate. It lists again and the job hears the shutdown."""
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    sim.too_large_wait = 0.2
    env = _kubernetes_env(tmp_path, server)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        with agent.subscriber() as sub:
            wait_for_watch(server)
            control(server, "cordon")
            expect(sub, "drain", f"kubernetes/{NODE}/cordon")
            control(server, "restore", back=50)
            eventually(lambda: sim.counts["too_large"] >= 1, what="a watch ahead")
            control(server, "shutdown")
            expect(sub, "terminate", f"kubernetes/{NODE}/shutdown")
        assert sim.counts["lists"] >= 2
    assert "Too large resource version" in agent.output()


def test_the_shipped_cluster_role_grants_exactly_the_verbs_the_agent_uses(tmp_path: Path) -> None:
    """The agent given only what `packaging/kubernetes` grants it (the simulator answering
    like RBAC) raises and clears its notices, and uses every verb granted: a verb it never
    calls (the `get` the role once held) is privilege without a use."""
    from kustomize_render import render

    (role,) = [doc for doc in render("daemonset") if doc["kind"] == "ClusterRole"]
    granted = {
        f"{verb}:{resource}"
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    sim = KubernetesSimulator(node=NODE, token="t1", grants=frozenset(granted))
    with SimServer(sim) as server:
        env = _kubernetes_env(tmp_path, server)
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            control(server, "taint", key="ToBeDeletedByClusterAutoscaler")
            expect(sub, "drain", f"kubernetes/{NODE}/taint/ToBeDeletedByClusterAutoscaler")
            withdraw(server, "taint/ToBeDeletedByClusterAutoscaler")
            expect(sub, "clear", f"kubernetes/{NODE}/taint/ToBeDeletedByClusterAutoscaler")
        with sim.lock:
            used = set(sim.verbs_used)
            forbidden = sim.counts["forbidden"]
    assert forbidden == 0
    assert used == granted, f"granted but never used: {sorted(granted - used)}"
    assert "Traceback" not in agent.output()


def test_a_role_without_watch_still_raises_and_clears_by_listing(tmp_path: Path) -> None:
    """A role that grants `list` on nodes and not `watch` (a hand-written one, an RBAC
    change half applied): each watch is a 403. The agent retried the watch alone, from the
    list's version, for as long as the role lacked it: a cordon made meanwhile raised
    nothing, though a list showed it (1 list, 8 refused watches, no notice). It lists again
    before each retry now, so the notice comes within the backoff (`retry_max`), and the
    watcher stays degraded, naming the verb, until the role is fixed."""
    sim = KubernetesSimulator(node=NODE, token="t1", grants=frozenset({"list:nodes"}))
    with SimServer(sim) as server:
        env = {**_kubernetes_env(tmp_path, server), "FOREWARN_KUBERNETES_RETRY_MAX": "1"}
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            eventually(lambda: sim.counts["forbidden"] >= 1, what="a refused watch")
            control(server, "cordon")
            expect(sub, "drain", f"kubernetes/{NODE}/cordon")
            withdraw(server, "cordon")
            expect(sub, "clear", f"kubernetes/{NODE}/cordon")
            (health,) = agent.control({"op": "status"})["health"]
        with sim.lock:
            used = set(sim.verbs_used)
    assert used == {"list:nodes"}
    # The lists that stand in for the watch are no recovery: the 403 stays in `status`.
    assert (health["state"], health["last_error"]) == ("degraded", "forbidden"), health
    assert health["last_error_message"].startswith("watch: 403 "), health
    assert 'cannot watch resource "nodes"' in agent.output()
    assert "Traceback" not in agent.output()


def test_the_components_grant_exactly_the_verbs_their_features_use(tmp_path: Path) -> None:
    """Every component on (Events, cordon, Karpenter's NodeClaim), the simulator answering as
    RBAC would with what the rendered roles grant: a Karpenter drain with its deadline and a
    spot terminate meet no 403, and every verb granted is used."""
    from kustomize_render import render

    components = ("notifications", "cordon", "karpenter")
    rendered = render("daemonset", components, tmp_path / "kustomize")
    granted = {
        f"{verb}:{resource}"
        for doc in rendered
        if doc["kind"] == "ClusterRole"
        for rule in doc["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    sim = KubernetesSimulator(node=NODE, token="t1", grants=frozenset(granted))
    with SimServer(sim) as server:
        env = _kubernetes_env(tmp_path, server)
        env.update(FOREWARN_KUBERNETES_EVENTS="true", FOREWARN_KUBERNETES_CORDON="true")
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            termination = (utcnow() + timedelta(minutes=20)).replace(microsecond=0)
            control(server, "karpenter", termination=termination.isoformat())
            deadlines: dict[str, object] = {}
            while len(deadlines) < 2 or not all(deadlines.values()):
                notice = sub.notice(timeout=10)
                deadlines[str(notice["id"])] = notice.get("deadline")
            assert {parse_time(str(d)) for d in deadlines.values()} == {termination}
            control(server, "taint", key="aws-node-termination-handler/spot-itn")
            taint = "aws-node-termination-handler/spot-itn"
            while sub.notice(timeout=10)["id"] != f"kubernetes/{NODE}/taint/{taint}":
                pass

            def done() -> bool:
                with sim.lock:
                    return bool(sim.node and sim.node["spec"].get("unschedulable")) and any(
                        e["action"] == "Terminate" for e in sim.events
                    )

            eventually(done, what="the cordon and the terminate's Event")
        with sim.lock:
            used = set(sim.verbs_used)
            forbidden = sim.counts["forbidden"]
    assert forbidden == 0
    assert used == granted, f"granted but never used: {sorted(granted - used)}"


def test_a_node_name_written_in_capitals_finds_the_node(tmp_path: Path, server: SimServer) -> None:
    """Outside a pod the node name is written by hand, often as `$(hostname)` prints it
    (`Agent-Node`); the kubelet registers the hostname in lower case, and a Node's name can
    only be lower case, so the watch looks for `agent-node`, not for a node that cannot exist
    (before: `node-not-found` every minute, and no notice ever)."""
    env = _kubernetes_env(tmp_path, server)
    env["FOREWARN_KUBERNETES_NODE_NAME"] = "Agent-Node"
    agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with agent, agent.subscriber() as sub:
        wait_for_watch(server)
        control(server, "cordon")
        expect(sub, "drain", f"kubernetes/{NODE}/cordon")
    assert "node-not-found" not in agent.output()


def test_a_taint_that_means_the_machine_is_going_is_a_terminate(
    tmp_path: Path, server: SimServer
) -> None:
    """With the default settings, AWS NTH's `spot-itn` taint (the instance goes in two minutes,
    whether or not NTH evicts: `cordonOnly` does not) is a terminate, as the AWS provider
    makes of the same notice; Karpenter's `disrupted` (its eviction follows) stays a drain.
    Each is cleared when its taint goes."""
    env = _kubernetes_env(tmp_path, server)
    itn = "aws-node-termination-handler/spot-itn"
    agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with agent, agent.subscriber() as sub:
        wait_for_watch(server)
        control(server, "taint", key="karpenter.sh/disrupted")
        expect(sub, "drain", f"kubernetes/{NODE}/taint/karpenter.sh/disrupted")
        control(server, "taint", key=itn, value="spot-itn-3a1f")
        terminate = expect(sub, "terminate", f"kubernetes/{NODE}/taint/{itn}")
        assert terminate["detail"]["taint"]["key"] == itn  # type: ignore[index]
        withdraw(server, f"taint/{itn}")
        expect(sub, "clear", f"kubernetes/{NODE}/taint/{itn}")
    assert "Traceback" not in agent.output()


def test_an_aks_preempt_scheduled_condition_is_a_terminate_with_its_not_before(
    tmp_path: Path, server: SimServer
) -> None:
    """AKS's node-problem-detector sets `VMEventScheduled=True` with the Scheduled Event in
    the message (`Preempt Scheduled: Mon, 02 Mar 2026 19:01:45 GMT. ...`): the one node
    signal with a deadline. A Preempt is a terminate by that NotBefore, a Redeploy a drain by
    it (escalated as its time nears); back to `NoVMEventScheduled` clears it."""
    env = _kubernetes_env(tmp_path, server)
    soon = (utcnow() + timedelta(seconds=40)).replace(microsecond=0)
    not_before = format_http_date(soon)
    agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
    with agent, agent.subscriber() as sub:
        wait_for_watch(server)
        event = f"kubernetes/{NODE}/vm-event/Preempt"
        control(server, "vm-event", event="Preempt", not_before=not_before)
        terminate = expect(sub, "terminate", event)
        assert parse_time(str(terminate["deadline"])) == soon
        withdraw(server, "vm-event")
        expect(sub, "clear", event)
        control(server, "vm-event", event="Redeploy", not_before="Sat, 01 Jan 2100 00:00:00 GMT")
        drain = expect(sub, "drain", f"kubernetes/{NODE}/vm-event/Redeploy")
        assert drain["deadline"] == "2100-01-01T00:00:00Z"
    assert "Traceback" not in agent.output()


def test_karpenters_deadline_stands_across_an_agent_restart(
    tmp_path: Path, server: SimServer
) -> None:
    """Karpenter's deadline is on the NodeClaim, read after the Node is listed: a restarted
    agent's first list reported its taint's and the deletion's notices without it, and the
    terminates they had become (the deadline within the exit margin) went out as drains again
    (the job's guard withdrew its exit: "the machine is not going away"), until the NodeClaim
    answered. The deadline restored stands for the same NodeClaim until it is read."""
    env = _kubernetes_env(tmp_path, server)
    taint = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
    deleting = f"kubernetes/{NODE}/deleting"
    termination = (utcnow() + timedelta(seconds=20)).replace(microsecond=0)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        control(server, "karpenter", termination=termination.strftime("%Y-%m-%dT%H:%M:%SZ"))
        eventually(
            lambda: (
                re.search(rf"notice terminate {re.escape(taint)} ", agent.output())
                and re.search(rf"notice terminate {re.escape(deleting)} ", agent.output())
            ),
            what="both terminates, by Karpenter's deadline",
        )
    # The NodeClaim does not answer the restarted agent for now (an API server under load).
    hold = {"kind": "hang", "path": "/apis/karpenter.sh/", "seconds": 8}
    httpx.post(f"{server.url}/_sim/faults", json=hold, trust_env=False, timeout=5)
    with restarted(tmp_path, env, f"terminate {deleting}", f"drain {deleting}") as agent:
        assert published(agent.output(), taint) == [], agent.output()
        assert published(agent.output(), deleting) == [], agent.output()
        active = {
            n["id"]: (n["action"], n["deadline"]) for n in agent.control({"op": "status"})["active"]
        }
        assert {taint, deleting} <= active.keys()
        for notice_id in (taint, deleting):
            action, deadline = active[notice_id]
            assert action == "terminate"
            assert deadline is not None and parse_time(deadline) == termination
    assert "Traceback" not in agent.output()


def test_a_cordon_whose_taint_came_after_it_is_not_sent_again_after_a_restart(
    tmp_path: Path, server: SimServer
) -> None:
    """`kubectl cordon` sets `spec.unschedulable`; the node lifecycle controller adds its
    taint a moment later. A running watcher sends the drain once (the taint changes only its
    detail), and the agent keeps the notice with the detail it was sent with; the agent
    SIGKILLed and started again listed the cordon with the taint, and sent the drain again as
    changed: another webhook delivery and Event, another save for a job waiting for drains.
    The shutdown standing beside it is not sent again either."""
    env = _kubernetes_env(tmp_path, server)
    cordon, shutdown = f"kubernetes/{NODE}/cordon", f"kubernetes/{NODE}/shutdown"
    state = tmp_path / "state" / "state.json"
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        control(server, "cordon", taint=False)
        eventually(lambda: published(agent.output(), cordon), what="the cordon's drain")
        control(server, "taint", key="node.kubernetes.io/unschedulable")
        control(server, "shutdown")
        eventually(lambda: published(agent.output(), shutdown), what="the terminate")
        eventually(lambda: state.is_file() and shutdown in state.read_text(), what="the state")
        assert len(published(agent.output(), cordon)) == 1, agent.output()
        agent.kill()
    with restarted(tmp_path, env, f"terminate {shutdown}") as agent:
        assert published(agent.output(), cordon) == [], agent.output()
        assert published(agent.output(), shutdown) == [], agent.output()
        active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
        assert active == {cordon: "drain", shutdown: "terminate"}
        withdraw(server, "cordon")  # uncordoned: both go, and the clear is sent
        eventually(lambda: published(agent.output(), cordon), what="the cordon's clear")
        assert [line.split()[1] for line in published(agent.output(), cordon)] == ["clear"]
    assert "Traceback" not in agent.output()


def test_karpenters_deadline_reaches_a_job_on_the_nodes_clock_when_it_is_hours_off(
    tmp_path: Path,
) -> None:
    """This node's clock 2 h behind the cluster's (the simulator's `Date` 2 h ahead): Karpenter
    stamps the NodeClaim by the cluster's clock, 30 min from its now. The job must hear a
    deadline 30 min from the node's now, not 2 h 30 min (its terminate 2 h after the machine
    was gone), and `status` must say why."""
    sim = KubernetesSimulator(node=NODE, token="t1", max_watch_seconds=30, bookmark_interval=1)
    sim.date_ahead = 7200.0
    with SimServer(sim) as server:
        env = _kubernetes_env(tmp_path, server)
        agent = AgentProcess(tmp_path, providers=("kubernetes",), env=env)
        with agent, agent.subscriber() as sub:
            wait_for_watch(server)
            termination = (utcnow() + timedelta(hours=2, minutes=30)).replace(microsecond=0)
            control(server, "karpenter", termination=termination.isoformat())
            notices: dict[str, dict[str, Any]] = {}
            while len(notices) < 2 or not all(n.get("deadline") for n in notices.values()):
                notice = sub.notice(timeout=10)
                notices[str(notice["id"])] = notice
            for notice in notices.values():
                deadline = parse_time(str(notice["deadline"]))
                left = (deadline - utcnow()).total_seconds()
                # Up to a second late: the skew is read from a `Date` of whole seconds
                # (check 35a saw 1800.14 s left).
                assert 30 * 60 - 15 < left <= 30 * 60 + 1.5, notice
                assert notice["detail"]["clock_ahead_seconds"] == pytest.approx(-7200, abs=3)
            [health] = agent.control({"op": "status"})["health"]
            assert "2.0 h behind the Kubernetes API server" in str(health["conditions"]), health


def test_a_started_vm_event_names_the_clients_that_did_not_ack_its_terminate(
    tmp_path: Path, server: SimServer
) -> None:
    """AKS's condition shows `Reboot Started` with no NotBefore (the reboot is under way):
    the terminate went out with no deadline, so when the node rebooted the agent never said
    which job had not acked it (Azure's Started is due now, and is said). It is due when it
    was seen Started, the earlier NotBefore dropped; the warning names the client that did
    not ack; a later change of the Node (a cordon) and an agent restart send it no more."""
    env = _kubernetes_env(tmp_path, server)
    args = ("--exit-margin", "1s", "--set", "notice_grace=60")
    reboot = f"kubernetes/{NODE}/vm-event/Reboot"
    later = format_http_date((utcnow() + timedelta(minutes=10)).replace(microsecond=0))
    with (
        AgentProcess(tmp_path, providers=("kubernetes",), env=env, args=args) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        wait_for_watch(server)
        control(server, "vm-event", event="Reboot", not_before=later)
        assert expect(trainer, "drain", reboot)["deadline"] is not None
        before = utcnow()
        control(server, "vm-event", event="Reboot", status="Started")
        terminate = expect(trainer, "terminate", reboot)
        assert terminate["deadline"] is not None, terminate
        deadline = parse_time(str(terminate["deadline"]))
        assert before - timedelta(seconds=1) <= deadline <= utcnow(), terminate
        warned = eventually(
            lambda: re.search(rf"notice {re.escape(reboot)}: .*passed without an ack from.*",
                              agent.output()),
            10,
            "the warning at the deadline",
        )  # fmt: skip
        assert "trainer" in warned.group(0), warned.group(0)
        control(server, "cordon")
        expect(trainer, "drain", f"kubernetes/{NODE}/cordon")
        assert trainer.drain(1.0) == []
        assert len(published(agent.output(), reboot)) == 2, agent.output()
    with restarted(tmp_path, env, f"terminate {reboot}", args=args) as again:
        assert published(again.output(), reboot) == [], again.output()
        (active,) = [n for n in again.control({"op": "status"})["active"] if n["id"] == reboot]
        assert parse_time(active["deadline"]) == deadline, active
    assert "Traceback" not in agent.output() + again.output()


def test_the_log_says_the_api_server_came_from_the_url(tmp_path: Path, server: SimServer) -> None:
    """An agent given `kubernetes.url` outside a pod (no KUBERNETES_SERVICE_HOST) logged
    "watching node ... via in-cluster": the server came from the setting, not the pod."""
    env = _kubernetes_env(tmp_path, server)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        eventually(lambda: "watching node" in agent.output(), what="the watch's log line")
    line = next(li for li in agent.output().splitlines() if "watching node" in li)
    assert "in-cluster" not in line, line
    assert f"kubernetes.url {server.url}" in line, line
    assert env["FOREWARN_KUBERNETES_TOKEN_FILE"] in line, line
    # Once: "via kubernetes.url URL (token from FILE) at URL" said it twice.
    assert line.count(server.url) == 1, line


def test_the_log_names_a_url_given_over_a_kubeconfig_once_and_the_kubeconfig(
    tmp_path: Path, server: SimServer
) -> None:
    """`kubernetes.url` over a kubeconfig (its token, another cluster's server): the agent
    watched the URL and logged "via kubeconfig FILE (context ops) at URL", which read as the
    kubeconfig's cluster."""
    config = tmp_path / "kubeconfig.json"
    cluster = {"server": "https://127.0.0.2:1"}  # not where the agent is to go (closed)
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "ops",
                "contexts": [{"name": "ops", "context": {"cluster": "c1", "user": "u1"}}],
                "clusters": [{"name": "c1", "cluster": cluster}],
                "users": [{"name": "u1", "user": {"token": "t1"}}],
            }
        )
    )
    env = _kubernetes_env(tmp_path, server)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env["FOREWARN_KUBERNETES_KUBECONFIG"] = str(config)
    with AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent:
        wait_for_watch(server)
        eventually(lambda: "watching node" in agent.output(), what="the watch's log line")
    line = next(li for li in agent.output().splitlines() if "watching node" in li)
    assert f"via kubernetes.url {server.url} (credentials from kubeconfig {config}" in line
    assert line.count(server.url) == 1, line
    assert "127.0.0.2" not in line, line
