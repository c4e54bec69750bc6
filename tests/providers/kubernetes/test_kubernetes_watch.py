"""The node watcher over real HTTP against the node API simulator."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.kubernetes import api
from forewarn.providers.kubernetes.nodes import CORDON_TAINT
from forewarn.providers.kubernetes.settings import DEFAULT_DRAIN_TAINTS, DEFAULT_TERMINATE_TAINTS
from hypothesis import given
from hypothesis import strategies as st
from k8s_support import NODE, TOKEN, Cluster, Running, recordon, retaint, watch_gap
from support import RotatingTls, refused_port, self_signed_ca

CORDON = f"kubernetes/{NODE}/cordon"
SHUTDOWN = f"kubernetes/{NODE}/shutdown"


async def test_cordon_drains_and_uncordon_clears(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("cordon")
    drain = await watching.report("drain", CORDON)
    assert drain.reason == "node-drain"
    assert drain.provider == "kubernetes"
    assert drain.detail["unschedulable"] is True
    assert drain.detail["taint"]["key"] == "node.kubernetes.io/unschedulable"
    cluster.withdraw("cordon")
    await watching.report("clear", CORDON)
    # spec.unschedulable and the mirrored taint are one notice, not two.
    assert watching.summary() == [("drain", CORDON), ("clear", CORDON)]
    assert watching.watcher.lists == 1


# Every default but the cordon's own taint (a cordon notice, not a taint one): AKS's two
# `remediator.../unschedulable` taints were left out with it by a match on the word.
@pytest.mark.parametrize("key", [k for k in DEFAULT_DRAIN_TAINTS if k != CORDON_TAINT])
async def test_each_deletion_taint_drains(cluster: Cluster, watching: Running, key: str) -> None:
    """Each default taint raises its notice: a terminate for those that mean the machine goes
    within minutes (`DEFAULT_TERMINATE_TAINTS`), a drain for the rest."""
    effect = "NoExecute" if key == "node.kubernetes.io/out-of-service" else "NoSchedule"
    action = "terminate" if key in DEFAULT_TERMINATE_TAINTS else "drain"
    notice = cluster.raise_("taint", key=key, value="1700000000", effect=effect)
    report = await watching.report(action, f"kubernetes/{NODE}/taint/{key}")
    # The API server writes `timeAdded` only for NoExecute taints.
    added = {"timeAdded": report.detail["taint"]["timeAdded"]} if effect == "NoExecute" else {}
    assert report.detail["taint"] == {"key": key, "value": "1700000000", "effect": effect, **added}
    cluster.withdraw(notice)
    await watching.report("clear", f"kubernetes/{NODE}/taint/{key}")


async def test_the_out_of_service_taint_terminates(cluster: Cluster, watching: Running) -> None:
    """`node.kubernetes.io/out-of-service` (NoExecute) has the pods on the node deleted at once,
    forcefully, with no grace (non-graceful node shutdown; cloud-provider-azure and NTH set it
    on an instance that is shut down or terminated): it was a drain, and the job saved and
    trained on while its pod was being force-deleted."""
    key = "node.kubernetes.io/out-of-service"
    cluster.raise_("taint", key=key, value="nodeshutdown", effect="NoExecute")
    await watching.report("terminate", f"kubernetes/{NODE}/taint/{key}")
    assert watching.summary() == [("terminate", f"kubernetes/{NODE}/taint/{key}")]


async def test_a_taint_whose_value_or_effect_changes_is_the_same_notice(
    cluster: Cluster, watching: Running
) -> None:
    """The autoscaler rewrites its timestamp value; NTH its event id: one id, one clear."""
    key = "ToBeDeletedByClusterAutoscaler"
    taint = f"kubernetes/{NODE}/taint/{key}"
    notice = cluster.raise_("taint", key=key, value="1700000000")
    await watching.report("drain", taint)
    for fields in ({"value": "1700000099"}, {"effect": "NoExecute"}):
        response = cluster.http.patch(f"/_sim/notices/{notice}", json=fields)
        assert response.status_code == 200, response.text
    cluster.withdraw(notice)
    await watching.report("clear", taint)
    cluster.raise_("cordon")  # a marker: everything before it was seen
    await watching.report("drain", CORDON)
    assert watching.summary() == [("drain", taint), ("clear", taint), ("drain", CORDON)]


async def test_a_node_recreated_under_its_name_clears_once(
    cluster: Cluster, watching: Running
) -> None:
    deleted = f"kubernetes/{NODE}/deleted"
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    cluster.raise_("delete")
    await watching.report("terminate", deleted)
    cluster.withdraw("node")  # the same name, a fresh object (ADDED)
    await watching.report("clear", deleted)
    await watching.report("clear", CORDON)
    cluster.raise_("shutdown")  # a marker
    await watching.report("terminate", SHUTDOWN)
    assert sorted(watching.summary()) == sorted(
        [
            ("drain", CORDON),
            ("terminate", deleted),
            ("clear", deleted),
            ("clear", CORDON),
            ("terminate", SHUTDOWN),
        ]
    )


def _recreate_while_the_watch_is_broken(
    cluster: Cluster, *then: tuple[str, dict[str, Any]]
) -> None:
    """Delete the node and create it again under its name, change the new one, and push the
    watch out of the history (410): the relist is the first the watcher sees of any of it."""
    with watch_gap(cluster.sim) as sim:
        sim.raise_notice("delete", {})
        sim.withdraw("node")
        for kind, fields in then:
            sim.raise_notice(kind, fields)


async def test_a_shutdown_is_not_carried_onto_a_node_recreated_in_a_watch_gap(
    cluster: Cluster, watching: Running
) -> None:
    """The old node's shutdown stood on the new one whose Ready was Unknown: a terminate that
    never cleared, replayed to every job started on the node afterwards."""
    cluster.raise_("shutdown")
    old = await watching.report("terminate", SHUTDOWN)
    _recreate_while_the_watch_is_broken(cluster, ("unreachable", {}))
    await watching.report("clear", SHUTDOWN)
    assert watching.watcher.lists == 2
    assert watching.watcher.node_uid == cluster.state()["node"]["metadata"]["uid"]
    assert watching.watcher.node_uid != old.detail["uid"]


async def test_a_node_recreated_in_a_watch_gap_raises_its_own_notices(
    cluster: Cluster, watching: Running
) -> None:
    """The new node's cordon has the old one's id: the old one's is cleared, then the new
    one's raised, with the new uid. Sent only again, without the clear, it was a repeat to a
    job's guard, which had saved for that id already: no save for the new node's cordon."""
    cluster.raise_("cordon")
    old = await watching.report("drain", CORDON)
    _recreate_while_the_watch_is_broken(cluster, ("cordon", {}))
    await watching.drained_cleared_and_drained(CORDON, "the new node's cordon")
    assert watching.reports[1].detail["uid"] == old.detail["uid"]
    new_uid = cluster.state()["node"]["metadata"]["uid"]
    assert old.detail["uid"] != new_uid
    assert watching.reports[-1].detail["uid"] == new_uid


def _recordon_while_the_watch_is_broken(cluster: Cluster) -> None:
    """Lift the cordon and cordon again (as a real API server shows it: see `recordon`), then
    push the watch out of the history (410): the relist is the first the watcher sees of it."""
    with watch_gap(cluster.sim) as sim:  # no watch sees the steps between
        recordon(sim)


async def test_a_cordon_lifted_and_applied_again_in_a_watch_gap_is_cleared_and_raised(
    cluster: Cluster, watching: Running
) -> None:
    """A running watcher sends drain, clear, drain; the relist after a 410 saw the same id with
    the same action and sent nothing: the job's guard, which had saved for the first cordon,
    was given no chance to save for the second."""
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    _recordon_while_the_watch_is_broken(cluster)
    await watching.drained_cleared_and_drained(CORDON, "the second cordon cleared and raised")
    assert watching.watcher.lists == 2


@pytest.mark.parametrize("value", [None, "i-0abc-spot-itn"])
async def test_a_no_schedule_taint_removed_and_set_again_in_a_watch_gap_is_cleared_and_raised(
    cluster: Cluster, watching: Running, value: str | None
) -> None:
    """found: Karpenter's `karpenter.sh/disrupted` (NoSchedule, no value) removed (a disruption
    given up) and set again (a new one) while the watch was broken: the relist saw the same
    taint, no `timeAdded` (NoExecute only) and the same value, and sent nothing. The job's
    guard, which had saved for the first, heard nothing of the second. The managedFields
    entry that owns `spec.taints` (an atomic list) has a later `time`: drain, clear, drain,
    as a running watcher sends it."""
    key = "karpenter.sh/disrupted"
    taint = f"kubernetes/{NODE}/taint/{key}"
    cluster.raise_("taint", key=key, manager="karpenter", **({"value": value} if value else {}))
    await watching.report("drain", taint)
    with cluster.sim.lock:  # no watch sees the steps between
        retaint(cluster.sim, key)
        cluster.sim.raise_notice("compact", {"expire_watches": True})
    await watching.until(
        lambda: watching.summary() == [("drain", taint), ("clear", taint), ("drain", taint)],
        what="the second taint cleared and raised",
    )
    assert watching.watcher.lists == 2


async def test_a_relist_of_an_unchanged_taint_sends_nothing(
    cluster: Cluster, watching: Running
) -> None:
    """The same NoSchedule taint (its list's managedFields entry unchanged) listed again is
    not sent again."""
    taint = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
    cluster.raise_("taint", key="karpenter.sh/disrupted", manager="karpenter")
    await watching.report("drain", taint)
    cluster.raise_("compact", expire_watches=True)
    await watching.until(lambda: watching.watcher.lists == 2, what="the relist")
    cluster.raise_("shutdown")  # a marker: the relist was handled before it
    await watching.report("terminate", SHUTDOWN)
    assert watching.summary() == [("drain", taint), ("terminate", SHUTDOWN)]


async def test_a_relist_of_an_unchanged_cordon_sends_nothing(
    cluster: Cluster, watching: Running
) -> None:
    """The same cordon (its taint's `timeAdded` unchanged) listed again is not sent again."""
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    cluster.raise_("compact", expire_watches=True)
    await watching.until(lambda: watching.watcher.lists == 2, what="the relist")
    cluster.raise_("shutdown")  # a marker: the relist was handled before it
    await watching.report("terminate", SHUTDOWN)
    assert watching.summary() == [("drain", CORDON), ("terminate", SHUTDOWN)]


async def test_cordon_taint_alone_drains(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("taint", key="node.kubernetes.io/unschedulable")
    report = await watching.report("drain", CORDON)
    assert report.detail["unschedulable"] is False


async def test_candidate_and_unlisted_taints_do_nothing(
    cluster: Cluster, watching: Running
) -> None:
    cluster.raise_("taint", key="DeletionCandidateOfClusterAutoscaler", effect="PreferNoSchedule")
    cluster.raise_("taint", key="nvidia.com/gpu", effect="NoSchedule")
    cluster.raise_("cordon")  # a marker: once it is seen, the earlier taints were seen too
    await watching.report("drain", CORDON)
    assert watching.summary() == [("drain", CORDON)]


async def test_configured_taint_list(cluster: Cluster, start_watcher: Any) -> None:
    running = await start_watcher(
        url=cluster.url, node_name=NODE, token_file=cluster.token_file, taints=["example.com/bye"]
    )
    cluster.raise_("taint", key="karpenter.sh/disrupted")
    cluster.raise_("taint", key="example.com/bye")
    await running.report("drain", f"kubernetes/{NODE}/taint/example.com/bye")
    assert running.summary() == [("drain", f"kubernetes/{NODE}/taint/example.com/bye")]


async def test_extra_taints_add_to_the_defaults(cluster: Cluster, start_watcher: Any) -> None:
    """Setting `taints` to add one key dropped every default: an autoscaler deletion then
    raised nothing. `extra_taints` adds to them."""
    running = await start_watcher(
        url=cluster.url,
        node_name=NODE,
        token_file=cluster.token_file,
        extra_taints=["example.com/bye"],
    )
    cluster.raise_("taint", key="example.com/bye")
    await running.report("drain", f"kubernetes/{NODE}/taint/example.com/bye")
    cluster.raise_("taint", key="ToBeDeletedByClusterAutoscaler")
    await running.report("drain", f"kubernetes/{NODE}/taint/ToBeDeletedByClusterAutoscaler")


async def test_shutdown_condition_terminates(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("shutdown")
    report = await watching.report("terminate", SHUTDOWN)
    assert report.detail["reason"] == "KubeletNotReady"
    assert report.detail["message"] == "node is shutting down"
    cluster.withdraw("shutdown")  # a cancelled shutdown: Ready again
    await watching.report("clear", SHUTDOWN)


async def test_shutdown_stands_while_ready_is_unknown(cluster: Cluster, watching: Running) -> None:
    """Once the kubelet has shut down it stops posting, and the node lifecycle controller turns
    Ready=False into Unknown: the node is not back, yet the terminate used to be cleared."""
    cluster.raise_("shutdown")
    await watching.report("terminate", SHUTDOWN)
    cluster.raise_("unreachable")
    cluster.raise_("cordon")  # a marker: once it is seen, Ready=Unknown was seen too
    await watching.report("drain", CORDON)
    # A relist (410) sees the same node and must not clear it either.
    cluster.raise_("compact")
    cluster.raise_("timeout")
    await watching.until(lambda: watching.watcher.lists == 2, what="a relist")
    cluster.withdraw("cordon")
    await watching.report("clear", CORDON)
    assert watching.summary() == [("terminate", SHUTDOWN), ("drain", CORDON), ("clear", CORDON)]
    cluster.withdraw("unreachable")  # the node came back: Ready=True
    await watching.report("clear", SHUTDOWN)


async def test_not_ready_for_another_reason_is_not_a_shutdown(
    cluster: Cluster, watching: Running
) -> None:
    cluster.raise_("shutdown", message="container runtime is down", reason="KubeletNotReady")
    # Matching is on the message: a reason that says shutdown does not count either.
    cluster.raise_("shutdown", message="PLEG is not healthy", reason="node is shutting down")
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    assert watching.summary() == [("drain", CORDON)]


def this_boot(tmp_path: Path, boot_id: str, booted_at: float) -> dict[str, Path]:
    """Settings that make `boot_id` this host's, booted at `booted_at` (epoch seconds)."""
    (tmp_path / "boot_id").write_text(boot_id + "\n")
    (tmp_path / "stat").write_text(f"cpu  1 2 3 4\nbtime {int(booted_at)}\nprocesses 7\n")
    return {"boot_id_file": tmp_path / "boot_id", "boot_time_file": tmp_path / "stat"}


async def test_a_shutdown_reported_before_a_reboot_is_stale(
    cluster: Cluster, start_watcher: Any, tmp_path: Path
) -> None:
    """After a reboot that keeps the Node object, the status still says "node is shutting
    down" until the kubelet posts again; an agent started meanwhile published a terminate,
    and the job started after the reboot exited at once."""
    cluster.raise_("shutdown")  # the previous boot's last report
    running = await start_watcher(
        url=cluster.url,
        node_name=NODE,
        token_file=cluster.token_file,
        **this_boot(tmp_path, "6f1e0c9a-0000-4000-8000-000000000001", time.time() + 60),
    )
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    cluster.raise_("cordon")  # a marker: once it is seen, the node was seen too
    await running.report("drain", CORDON)
    assert running.summary() == [("drain", CORDON)]


async def test_a_shutdown_seen_from_a_sandbox_terminates(
    cluster: Cluster, start_watcher: Any, tmp_path: Path
) -> None:
    """Under gVisor or Kata the pod's boot id is the sandbox's, never the Node's bootID: a
    shutdown posted after the sandbox started is current, and must terminate."""
    cluster.raise_("shutdown")  # posted now, while the agent is down (a restart)
    running = await start_watcher(
        url=cluster.url,
        node_name=NODE,
        token_file=cluster.token_file,
        **this_boot(tmp_path, "5a4d0b0c-0000-4000-8000-00000000sand", time.time() - 3600),
    )
    await running.report("terminate", SHUTDOWN)


async def test_a_shutdown_reported_for_this_boot_terminates(
    cluster: Cluster, start_watcher: Any, tmp_path: Path
) -> None:
    boot_id = tmp_path / "boot_id"
    reported = cluster.state()["node"]["status"]["nodeInfo"]["bootID"]
    boot_id.write_text(reported.upper() + "\n")
    running = await start_watcher(
        url=cluster.url, node_name=NODE, token_file=cluster.token_file, boot_id_file=boot_id
    )
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    cluster.raise_("shutdown")
    await running.report("terminate", SHUTDOWN)


async def test_an_unreadable_boot_id_file_is_one_clear_error(
    cluster: Cluster, start_watcher: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_watcher(
        url=cluster.url,
        node_name=NODE,
        token_file=cluster.token_file,
        boot_id_file=tmp_path / "missing",
    )
    await running.until(lambda: running.health.errors_by_kind.get("config", 0) >= 1)
    assert any("boot_id_file" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("status", "retry_after", "retry_max", "low", "high"),
    [
        (429, 2, 10.0, 1.9, 6.0),  # honoured: the backoff alone would retry after 0.2 s
        (503, 2, 10.0, 1.9, 6.0),
        (503, 600, 0.5, 0.0, 3.0),  # bounded by retry_max
    ],
)
async def test_retry_after_is_honoured_up_to_retry_max(
    cluster: Cluster,
    start_watcher: Any,
    status: int,
    retry_after: int,
    retry_max: float,
    low: float,
    high: float,
) -> None:
    """An API server shedding load answers 429 (or 503) with Retry-After; the watcher came
    back after 0.2 s, 0.4 s, ... regardless, adding to the load it was asked to spare."""
    cluster.sim.add_fault(
        "status", status=status, retry_after=retry_after, count=1, path="/api/v1/nodes"
    )
    running = await start_watcher(
        url=cluster.url, node_name=NODE, token_file=cluster.token_file, retry_max=retry_max
    )
    await running.until(lambda: running.health.errors_by_kind.get(f"http-{status}", 0) >= 1)
    refused = time.monotonic()
    await running.until(lambda: running.watcher.lists >= 1, timeout=high + 5, what="a list")
    assert low <= time.monotonic() - refused <= high


@given(st.text(max_size=40))
def test_retry_after_header_is_a_wait_or_none(text: str) -> None:
    wait = api.retry_after(text)
    assert wait is None or (wait >= 0 and wait < float("inf"))


@given(st.integers(min_value=0, max_value=10**6))
def test_retry_after_header_in_seconds(seconds: int) -> None:
    assert api.retry_after(f" {seconds} ") == seconds


def test_retry_after_header_as_a_date() -> None:
    assert api.retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # past: at once
    assert (api.retry_after("Fri, 01 Jan 2100 00:00:00 GMT") or 0) >= 50
    assert api.retry_after("soon") is None
    assert api.retry_after(None) is None


async def test_410_as_http_status_relists(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("compact", **{"as": "status"})
    cluster.raise_("timeout")  # the watch ends and resumes from an rv that is now too old
    await watching.until(lambda: watching.watcher.lists == 2, what="a relist")
    assert any(entry["outcome"] == "gone-status" for entry in cluster.state()["watch_log"])
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    assert watching.health.errors == 0


async def test_410_in_stream_relists(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("compact", **{"as": "stream"})
    cluster.raise_("timeout")
    await watching.until(lambda: watching.watcher.lists == 2, what="a relist")
    assert any(entry["outcome"] == "gone-stream" for entry in cluster.state()["watch_log"])
    cluster.raise_("shutdown")
    await watching.report("terminate", SHUTDOWN)


async def test_410_on_an_open_watch_relists_and_catches_up(
    cluster: Cluster, watching: Running
) -> None:
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    # The watch falls out of the history while the node changes: the relist must find out.
    with watch_gap(cluster.sim) as sim:
        sim.raise_notice("shutdown", {})
        sim.withdraw("cordon")
    await watching.report("terminate", SHUTDOWN)
    await watching.report("clear", CORDON)
    assert watching.watcher.lists == 2


async def test_server_side_timeout_resumes_from_last_version(watch_sim: Any) -> None:
    from forewarn.providers.kubernetes.simulate import KubernetesSimulator

    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=0.3, bookmark_interval=30)
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.watches >= 4, what="several watches")
    sim.raise_notice("cordon", {})
    await running.report("drain", CORDON)
    with sim.lock:
        versions = [entry["resourceVersion"] for entry in sim.watch_log]
        lists = sim.counts["lists"]
    assert lists == 1  # a timeout is resumed, never relisted
    assert all(version not in ("", "0") for version in versions)
    # Watches that end within a second with nothing in them are counted as such (see
    # test_a_watch_that_ends_at_once_with_nothing_is_no_progress), and nothing else.
    assert set(running.health.errors_by_kind) <= {"watch-closed"}


async def test_bookmarks_move_the_resume_point(watch_sim: Any) -> None:
    from forewarn.providers.kubernetes.simulate import KubernetesSimulator

    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30, bookmark_interval=0.1)
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.watches >= 1)
    # Other objects move the cluster's resourceVersion on; only a bookmark says so.
    sim.raise_notice("compact", {"as": "status"})
    target = str(sim.rv)
    await running.until(lambda: running.watcher.resource_version == target, what="a bookmark")
    assert running.watcher.bookmarks >= 1
    sim.raise_notice("timeout", {})
    await running.until(lambda: running.watcher.watches >= 2, what="a resumed watch")
    assert sim.watch_log[-1] == {"resourceVersion": target, "outcome": "ok"}
    assert running.watcher.lists == 1  # thanks to the bookmark, no 410


async def test_token_rotation_is_picked_up(cluster: Cluster, watching: Running) -> None:
    # The API server stops accepting the old token before the kubelet rewrites the file.
    cluster.raise_("rotate-token", token="token-two")
    cluster.raise_("timeout")
    await watching.until(lambda: watching.health.errors_by_kind.get("unauthorized", 0) >= 1)
    cluster.token_file.write_text("token-two\n")
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    assert cluster.state()["unauthorized"] >= 1
    assert watching.health.last_error is None  # recovered


async def test_rotated_file_is_read_on_reconnect(cluster: Cluster, watching: Running) -> None:
    cluster.token_file.write_text("token-three\n")
    cluster.raise_("rotate-token", token="token-three")
    cluster.raise_("timeout")
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    assert cluster.state()["unauthorized"] == 0


async def test_node_deleted_terminates(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("delete")
    await watching.report("terminate", f"kubernetes/{NODE}/deleted")
    cluster.withdraw("node")
    await watching.report("clear", f"kubernetes/{NODE}/deleted")


async def test_active_notices_on_start_are_reported(cluster: Cluster, start_watcher: Any) -> None:
    cluster.raise_("cordon")
    cluster.raise_("shutdown")
    running = await start_watcher(url=cluster.url, node_name=NODE, token_file=cluster.token_file)
    await running.report("drain", CORDON)
    await running.report("terminate", SHUTDOWN)


async def test_node_name_from_env(cluster: Cluster, start_watcher: Any) -> None:
    running = await start_watcher(
        env={"NODE_NAME": NODE}, url=cluster.url, token_file=cluster.token_file
    )
    cluster.raise_("cordon")
    await running.report("drain", CORDON)


async def test_no_node_name_is_one_clear_error(
    cluster: Cluster, start_watcher: Any, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_watcher(url=cluster.url, token_file=cluster.token_file)
    await running.until(lambda: running.health.errors >= 1)
    assert running.health.errors_by_kind == {"config": 1}
    assert not running.task.done()  # waits for a fix instead of crashing
    lines = [r.getMessage() for r in caplog.records if "NODE_NAME" in r.getMessage()]
    assert len(lines) == 1
    assert "downward API" in lines[0]
    assert cluster.state()["requests"] == {}


async def test_unreadable_token_is_one_clear_error(
    start_watcher: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-dir" / "token"
    running = await start_watcher(
        env={"KUBERNETES_SERVICE_HOST": "127.0.0.1"}, node_name=NODE, token_file=missing
    )
    await running.until(lambda: running.health.errors >= 1)
    assert running.health.errors_by_kind == {"config": 1}
    assert not running.task.done()
    lines = [r.getMessage() for r in caplog.records if "token" in r.getMessage()]
    assert len(lines) == 1
    assert f"service-account token {missing} is unreadable" in lines[0]


async def test_wrong_node_name_says_so(cluster: Cluster, start_watcher: Any) -> None:
    running = await start_watcher(
        url=cluster.url, node_name="not-this-one", token_file=cluster.token_file
    )
    await running.until(lambda: running.watcher.watches >= 1)
    assert running.health.errors_by_kind == {"node-not-found": 1}
    assert not running.health.ready  # a watch on a node that is not there is no success


async def test_restored_notices_of_another_node_do_not_make_a_deletion(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Notices restored for another node (NODE_NAME changed across the restart) say nothing
    of this one: a list without it is a node that does not exist (yet), not a deletion."""
    from forewarn.providers.base import PollHealth, WatcherContext
    from forewarn.providers.kubernetes.nodes import deleted_report
    from forewarn.providers.kubernetes.settings import Settings
    from forewarn.providers.kubernetes.watch import KubernetesWatcher
    from support import running_watcher

    settings = Settings(
        url=cluster.url, node_name="not-this-one", token_file=cluster.token_file, retry_max=0.3
    )
    watcher = KubernetesWatcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth("k")))
    watcher.restored([deleted_report(NODE, "some-uid")])
    async with running_watcher(Running(watcher)) as running:
        await running.until(lambda: running.watcher.watches >= 1)
        assert running.reports == []
        assert running.health.errors_by_kind == {"node-not-found": 1}
        assert not running.watcher.answered


async def test_detect(tmp_path: Path) -> None:
    from forewarn.providers.base import PollHealth, WatcherContext
    from forewarn.providers.kubernetes.settings import Settings
    from forewarn.providers.kubernetes.watch import KubernetesWatcher

    token = tmp_path / "token"
    context = WatcherContext(tmp_path, tmp_path, PollHealth("kubernetes"))
    settings = Settings(token_file=token)
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert not await KubernetesWatcher(settings, context, env=in_pod).detect()
    token.write_text("x")
    assert await KubernetesWatcher(settings, context, env=in_pod).detect()
    assert not await KubernetesWatcher(settings, context, env={}).detect()


async def test_unreachable_server_is_a_transport_error_and_retried(start_watcher: Any) -> None:
    with refused_port() as port:
        running = await start_watcher(url=f"http://127.0.0.1:{port}", node_name=NODE)
        await running.until(lambda: running.health.errors_by_kind.get("transport", 0) >= 2)
        assert not running.task.done()


async def test_garbage_in_the_stream_is_a_parse_error_then_a_relist(start_watcher: Any) -> None:
    import httpx
    import respx

    base = "http://127.0.0.1:6443"
    listed = {
        "kind": "NodeList",
        "metadata": {"resourceVersion": "10"},
        "items": [{"kind": "Node", "metadata": {"name": NODE, "resourceVersion": "10"}}],
    }
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.get(f"{base}/api/v1/nodes")
        route.side_effect = lambda request: (
            httpx.Response(200, content=b'{"type":"MODIFIED","object":\n')
            if request.url.params.get("watch")
            else httpx.Response(200, json=listed)
        )
        running = await start_watcher(url=base, node_name=NODE)
        await running.until(lambda: running.watcher.lists >= 2, what="a relist after garbage")
        assert running.health.errors_by_kind.get("parse", 0) >= 1
        assert not running.task.done()


def test_keepalive_gives_up_on_a_silent_connection_within_a_minute() -> None:
    assert api.KEEPALIVE_IDLE + api.KEEPALIVE_INTERVAL * api.KEEPALIVE_COUNT <= 60
    assert api.KEEPALIVE_DEAD_AFTER <= 60
    # Far above a healthy peer's answer to a probe (its kernel's ACK, milliseconds away).
    assert api.KEEPALIVE_INTERVAL >= 10 and api.KEEPALIVE_COUNT >= 3


def test_keepalive_options_take_on_a_real_socket() -> None:
    options = api.keepalive_options()
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    with socket.socket() as sock:
        for level, name, value in options:
            sock.setsockopt(level, name, value)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        if sys.platform.startswith("linux"):
            tcp = socket.IPPROTO_TCP
            assert sock.getsockopt(tcp, socket.TCP_KEEPIDLE) == 30
            assert sock.getsockopt(tcp, socket.TCP_KEEPINTVL) == 10
            assert sock.getsockopt(tcp, socket.TCP_KEEPCNT) == 3
            assert sock.getsockopt(tcp, socket.TCP_USER_TIMEOUT) == 60_000


async def test_a_rotated_cluster_ca_is_read_again(tmp_path: Path, start_watcher: Any) -> None:
    """The cluster CA rotates: kube-root-ca.crt (the ca.crt file) gets the new CA, then the
    API server serves a certificate of the new CA. The watcher kept the CA it read at start
    and failed every TLS handshake from then on, hearing of no cordon until it restarted."""
    from forewarn.providers.kubernetes.simulate import KubernetesSimulator
    from forewarn.providers.simulator import SimServer

    old_cert, old_key = self_signed_ca(tmp_path, "old-ca")
    new_cert, new_key = self_signed_ca(tmp_path, "new-ca")
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(old_cert.read_bytes())
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30, bookmark_interval=30)
    with SimServer(sim) as server:
        tls = RotatingTls(server, old_cert, old_key)
        running: Running = await start_watcher(
            url=tls.url, node_name=NODE, token_file=token_file, ca_file=ca_file
        )
        await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
        ca_file.write_bytes(new_cert.read_bytes())
        tls.rotate(new_cert, new_key)  # the API server restarts with its new certificate
        await running.until(
            lambda: running.health.errors_by_kind.get("transport", 0) >= 1,
            what="a failed reconnection",
        )
        sim.raise_notice("cordon", {})
        await running.report("drain", CORDON, timeout=15)


async def test_a_kubeconfig_tls_server_name_is_the_name_verified(
    tmp_path: Path, start_watcher: Any
) -> None:
    """A kubeconfig reaching the API server by another address than its certificate's name
    (an SSH tunnel, a bastion's port) says which name to verify with `tls-server-name`, as
    kubectl honours: the watcher checked the address instead and never connected."""
    import json

    from forewarn.providers.kubernetes.simulate import KubernetesSimulator
    from forewarn.providers.simulator import SimServer

    cert, key = self_signed_ca(tmp_path, "cluster-ca", dns="kubernetes.default.svc")
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30, bookmark_interval=30)
    with SimServer(sim) as server:
        tls = RotatingTls(server, cert, key)
        cluster = {
            "server": tls.url,
            "certificate-authority": str(cert),
            "tls-server-name": "kubernetes.default.svc",
        }
        config = tmp_path / "kubeconfig"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "tunnel",
                    "contexts": [{"name": "tunnel", "context": {"cluster": "c", "user": "u"}}],
                    "clusters": [{"name": "c", "cluster": cluster}],
                    "users": [{"name": "u", "user": {"token": TOKEN}}],
                }
            )
        )
        running: Running = await start_watcher(kubeconfig=config, node_name=NODE)
        # The first kubeconfig a worker reads imports the Kubernetes library (~0.6 CPU-s,
        # seconds under CPU hogs), and a first request lost is tried again REQUEST_TIMEOUT
        # later: 10 s, as long as this wait was, timed out once.
        await running.until(
            lambda: running.watcher.watches >= 1,
            timeout=api.REQUEST_TIMEOUT + 10,
            what="the first watch",
        )
        sim.raise_notice("cordon", {})
        await running.report("drain", CORDON, timeout=15)


async def test_a_watch_ahead_of_a_restored_server_relists(
    cluster: Cluster, watching: Running
) -> None:
    """After an etcd restore the server's resourceVersion is behind the watcher's: the watch
    cache answers "Too large resource version" (504) at every watch, and the watcher retried
    from the same position for good, blind to the node (an uncordon here) until the server
    passed its old version again."""
    cluster.sim.too_large_wait = 0.2
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    cluster.raise_("restore", back=100)
    await watching.until(lambda: cluster.state()["too_large"] >= 1, what="a watch ahead")
    cluster.withdraw("cordon")
    await watching.report("clear", CORDON)
    assert watching.watcher.lists == 2
    cluster.raise_("shutdown")  # the watch from the relist follows the node
    await watching.report("terminate", SHUTDOWN)
    assert any(entry["outcome"] == "ahead" for entry in cluster.state()["watch_log"])
    assert watching.health.errors == 0  # one restore: a relist, not a fault


async def test_a_watch_cache_that_never_catches_up_is_a_fault(watch_sim: Any) -> None:
    """A server whose watch cache stays behind its lists answers every watch "Too large
    resource version": the watcher lists again each time, spaced out, and says so in its
    health instead of looking healthy while it sees nothing."""
    from forewarn.providers.kubernetes import simulate
    from forewarn.providers.simulator import SimResponse

    class LaggingCache(simulate.KubernetesSimulator):
        def _watch(self, request: Any, matches: bool) -> Any:
            # The cache one version behind the list, for good.
            asked = int(request.param("resourceVersion") or self.rv)
            status = simulate._too_large(asked, self.rv - 1)
            line = simulate._line("ERROR", status)
            headers = dict(simulate.STREAM_HEADERS)
            return SimResponse(
                200, content_type="application/json", headers=headers, stream=iter([line])
            )

    sim = LaggingCache(node=NODE, token=TOKEN, max_watch_seconds=30)
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.lists >= 3, what="lists again")
    kind = "resource-version-too-large"
    await running.until(lambda: running.health.errors_by_kind.get(kind, 0) >= 1)
    # The lists in between are no recovery: `status` keeps the fault (it said healthy
    # again after each list, a moment after saying so).
    lists = running.watcher.lists
    await running.until(lambda: running.watcher.lists >= lists + 2, what="more lists")
    assert running.health.last_error == kind, running.health


_CAUSE = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    code=st.one_of(st.just(504), st.integers(min_value=100, max_value=599)),
    message=st.text(max_size=60),
    cause=st.booleans(),
    extra=st.dictionaries(st.sampled_from(["reason", "status", "kind", "details"]), _JSON),
    as_status=st.booleans(),
)
def test_too_large_is_a_504_with_its_cause_or_message_in_either_form(
    code: int, message: str, cause: bool, extra: dict[str, Any], as_status: bool
) -> None:
    """Whatever else a Status holds: a relist exactly for a 504 that names a version ahead
    of the server, as an in-stream ERROR or as the HTTP answer; no other Status is taken
    for one, and no Status raises anything else than an ApiError."""
    status: dict[str, Any] = {**extra, "kind": "Status", "code": code, "message": message}
    if cause:
        status["details"] = {"causes": [_CAUSE]}
    expected = code == 504 and (cause or "too large resource version" in message.lower())
    assert api.too_large(status) is expected
    if as_status:
        error = api.error_for(code, json.dumps(status).encode(), "watch", "test")
        assert isinstance(error, api.TooLarge) is expected
        assert isinstance(error, api.ApiError)


@given(st.binary(max_size=200))
def test_a_504_whose_body_is_not_a_status_is_an_ordinary_error(body: bytes) -> None:
    error = api.error_for(504, body, "watch", "test")
    assert isinstance(error, api.ApiError)
    assert isinstance(error, api.TooLarge) is api.too_large(api._status_object(body))


async def test_a_watch_that_ends_at_once_with_nothing_is_no_progress(
    cluster: Cluster, watching: Running
) -> None:
    """A server (or a proxy in front of it) that ends every watch as soon as it opens: the
    watcher backs off up to `retry_max` between them, so a taint is seen that much late
    (30 s by default). Each open counted as a good answer: `status` said healthy all along."""
    watches = cluster.sim.counts["watches"]
    cluster.sim.max_watch_seconds = 0.0
    cluster.http.post("/_sim/notices", json={"kind": "timeout"})  # ends the one open now
    await watching.until(
        lambda: cluster.sim.counts["watches"] >= watches + 4, 5, "watches ended at once"
    )
    assert watching.health.last_error == "watch-closed"
    assert watching.health.errors_by_kind["watch-closed"] >= 3
    cluster.sim.max_watch_seconds = 30.0
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)
    await watching.until(lambda: watching.health.last_error is None, 3, "healthy again")


async def test_a_restored_cordon_applied_again_in_a_later_watch_gap_is_cleared_and_raised(
    cluster: Cluster, tmp_path: Path
) -> None:
    """After a restart the agent is given its cordon as it restored it (first seen before the
    control plane's taint, so without it), while the watcher keeps the Node as listed: a
    cordon lifted and applied again in a later watch gap is then told by the taint's later
    `timeAdded`, as for a watcher that never stopped."""
    from forewarn.providers.base import PollHealth, WatcherContext
    from forewarn.providers.kubernetes.settings import Settings
    from forewarn.providers.kubernetes.watch import KubernetesWatcher
    from forewarn.providers.report import Report
    from support import running_watcher

    cluster.raise_("cordon")
    uid = cluster.state()["node"]["metadata"]["uid"]
    detail = {"node": NODE, "uid": uid, "condition": "cordon", "unschedulable": True}
    restored = Report(
        id=CORDON, action="drain", reason="node-drain", provider="kubernetes", detail=detail
    )
    settings = Settings(url=cluster.url, node_name=NODE, token_file=cluster.token_file)
    watcher = KubernetesWatcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth("k")))
    watcher.restored([restored])
    async with running_watcher(Running(watcher)) as running:
        await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
        assert [r.detail for r in running.reports] == [detail]  # as the agent holds it
        _recordon_while_the_watch_is_broken(cluster)
        await running.drained_cleared_and_drained(CORDON, "the second cordon cleared and raised")


async def test_a_watch_history_that_never_holds_the_listed_version_is_a_fault(
    watch_sim: Any,
) -> None:
    """A server whose watches refuse every version its lists hand out (410: a list from an
    API server replica whose cache lags behind another's watch window): the watcher lists
    again each time, spaced out. Found: each list counted as a success, so `status` said
    healthy while no watch ever opened and the node's changes came only with the lists, up to
    `retry_max` late."""
    from forewarn.providers.kubernetes import simulate
    from forewarn.providers.kubernetes.simstatus import api_status
    from forewarn.providers.simulator import SimResponse

    class ShortHistory(simulate.KubernetesSimulator):
        def _watch(self, request: Any, matches: bool) -> Any:
            with self.lock:
                self.counts["gone"] += 1
            status = api_status(410, "Expired", "too old resource version: 1 (2)")
            headers = dict(simulate.STREAM_HEADERS)
            line = simulate._line("ERROR", status)
            return SimResponse(
                200, content_type="application/json", headers=headers, stream=iter([line])
            )

    sim = ShortHistory(node=NODE, token=TOKEN, max_watch_seconds=30)
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.lists >= 4, what="lists again")
    await running.until(
        lambda: running.health.errors_by_kind.get("gone", 0) >= 1, what="a gone fault"
    )
    # The lists in between are no recovery: `status` keeps the fault.
    lists = running.watcher.lists
    await running.until(lambda: running.watcher.lists >= lists + 2, what="more lists")
    assert running.health.last_error == "gone", running.health


async def test_a_410_after_a_watch_that_held_is_no_fault(
    cluster: Cluster, watching: Running
) -> None:
    """A quiet node, no bookmarks: each watch holds until the history has moved past its
    version, and the next one gets a 410, again and again. That is the history's window,
    not a server refusing every watch: a relist each time, and `status` stays healthy."""
    for expire in (False, True, False):
        lists = watching.watcher.lists
        successes = watching.health.successes
        # The watch from the last list holds (SHORT_STREAM) before the history moves on.
        await watching.until(lambda s=successes: watching.health.successes > s, what="a held watch")
        cluster.raise_("compact", expire_watches=expire)
        if not expire:
            cluster.raise_("timeout")  # the watch ends and resumes from a version now too old
        await watching.until(lambda n=lists: watching.watcher.lists == n + 1, what="a relist")
    assert watching.health.errors == 0, watching.health
    cluster.raise_("cordon")
    await watching.report("drain", CORDON)


async def test_an_event_over_the_line_cap_is_passed_by_a_relist(
    watch_sim: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One version of the Node is over the 4 MiB line cap (an annotation of `<` the API
    server writes as `\\u003c`, six bytes each): a watch from before it meets that line at
    every resume. Found: the watcher resumed from the same version each time, met the same
    line, and a cordon made after it raised nothing until the history dropped that version
    (410, minutes later). Past a line it could not read, it lists the node as it is now."""
    from forewarn.providers.kubernetes import simulate
    from forewarn.providers.simulator import SimResponse

    class OneHugeVersion(simulate.KubernetesSimulator):
        huge_after: str | None = None  # the version whose next event is over the cap

        def _watch(self, request: Any, matches: bool) -> Any:
            if request.param("resourceVersion") == self.huge_after:
                with self.lock:
                    self.counts["huge"] = self.counts.get("huge", 0) + 1
                line = b'{"type":"MODIFIED","object":{"metadata":{"annotations":{"a":"'
                body = iter([line, b"\\u003c" * ((api.MAX_EVENT_LINE // 6) + 1), b'"}}}}\n'])
                headers = dict(simulate.STREAM_HEADERS)
                return SimResponse(
                    200, content_type="application/json", headers=headers, stream=body
                )
            return super()._watch(request, matches)

    sim = OneHugeVersion(node=NODE, token=TOKEN, max_watch_seconds=30)
    running = await watch_sim(sim)
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    with sim.lock:
        sim.huge_after = str(sim.rv)
        sim.raise_notice("timeout", {})  # the watch resumes from before the huge version
    # The cordon only once a resume met the huge line: raised with the timeout, the open watch
    # could carry it first (check 49d), and no resume needed to pass the line.
    await running.until(lambda: sim.counts.get("huge", 0) >= 1, what="the huge line")
    with sim.lock:
        sim.raise_notice("cordon", {})  # after the huge version
    await running.report("drain", CORDON, timeout=15)
    # Said as what it was: the watch's event, its size and that the node is listed again
    # (it read "AnswerTooLarge: a streamed line longer than 4194304 bytes").
    said = [r.getMessage() for r in caplog.records if "AnswerTooLarge" in r.getMessage()]
    assert said, caplog.text
    assert "AnswerTooLarge: watch: an event line longer than 4 MiB" in said[0], said
    assert "listing the node again" in said[0], said


async def test_a_node_recreated_while_the_agent_was_down_raises_its_own_notices(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The agent restarts with a cordon of the Node object it saw before (its uid), and the
    list shows another object under the name (deleted and created again while the agent was
    down), cordoned too. Found: the restored cordon stood for the new node's, nothing sent
    (the restart's first list compared no uid: a watcher that never stopped clears the old
    one's and raises the new one's); a job's guard that had saved for the old cordon saved
    nothing for the new node's disruption."""
    from forewarn.providers.base import PollHealth, WatcherContext
    from forewarn.providers.kubernetes.settings import Settings
    from forewarn.providers.kubernetes.watch import KubernetesWatcher
    from forewarn.providers.report import Report
    from support import running_watcher

    cluster.raise_("cordon")
    new_uid = cluster.state()["node"]["metadata"]["uid"]
    detail = {"node": NODE, "uid": "uid-of-the-deleted-node", "condition": "cordon"}
    restored = Report(
        id=CORDON, action="drain", reason="node-drain", provider="kubernetes", detail=detail
    )
    settings = Settings(url=cluster.url, node_name=NODE, token_file=cluster.token_file)
    watcher = KubernetesWatcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth("k")))
    watcher.restored([restored])
    async with running_watcher(Running(watcher)) as running:
        await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
        assert running.summary() == [("clear", CORDON), ("drain", CORDON)], running.reports
        assert running.reports[0].detail["uid"] == "uid-of-the-deleted-node"
        assert running.reports[1].detail["uid"] == new_uid


PROXY_403 = (
    b"<html><body><h1>403 Forbidden</h1>Request forbidden by administrative rules.</body></html>"
)


def test_a_proxys_403_is_not_called_a_missing_role() -> None:
    """found: the agent against the simulator with a `status` fault of 403 and a proxy's HTML
    page on the node API (as a proxy or gateway in front of the API server answers): the log
    and `forewarn status` said `the identity needs list and watch on nodes
    (packaging/kubernetes/base/clusterrole.yaml)`, sending the operator to a role the
    identity had. The API server refuses with a Status naming the user and the verb; an
    answer without one was not the API server's."""
    for what in ("list", "watch"):
        error = api.error_for(403, PROXY_403, what, "test")
        assert error.status == 403 and error.kind == "forbidden"
        assert "list and watch on nodes" not in str(error), str(error)
        assert "not the API server's" in str(error) and "Request forbidden" in str(error)


@given(
    st.binary(max_size=300)
    | st.dictionaries(
        st.sampled_from(["kind", "message", "reason", "code"]), st.text(max_size=20)
    ).map(lambda d: json.dumps(d).encode())
)
def test_a_403_names_the_role_exactly_when_the_api_server_refused(body: bytes) -> None:
    """The RBAC hint for a Kubernetes Status (what the API server sends); for any other answer,
    one that says it was not the API server's. Never anything but an ApiError."""
    error = api.error_for(403, body, "watch", "test")
    assert isinstance(error, api.ApiError) and error.status == 403
    status = api._status_object(body)
    from_server = isinstance(status, dict) and status.get("kind") == "Status"
    assert ("list and watch on nodes" in str(error)) is from_server
    assert ("not the API server's" in str(error)) is not from_server


def test_the_api_servers_403_keeps_naming_the_role() -> None:
    message = (
        'nodes is forbidden: User "system:serviceaccount:forewarn:forewarn" cannot watch '
        'resource "nodes" in API group "" at the cluster scope'
    )
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    error = api.error_for(403, json.dumps({**body, "reason": "Forbidden"}).encode(), "watch", "x")
    assert message in str(error) and "list and watch on nodes" in str(error)
