"""Karpenter's deadline: the node's NodeClaim holds it, and the watcher reads it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.base import ParseError
from forewarn.providers.kubernetes.karpenter import (
    being_disrupted,
    nodeclaim_name,
    termination_deadline,
)
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.kubernetes.watch import restored_deadline
from forewarn.providers.report import Report
from forewarn.providers.simulator import SimServer
from hypothesis import given
from hypothesis import strategies as st
from k8s_support import NODE, TOKEN, Cluster, Running

TAINT = f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"
DELETING = f"kubernetes/{NODE}/deleting"


def _in(minutes: int) -> str:
    return format_time(
        datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=minutes)
    )


async def test_karpenters_drain_carries_the_nodeclaims_termination_timestamp(
    cluster: Cluster, watching: Running
) -> None:
    """Karpenter taints the node, then deletes its NodeClaim (stamping the time it will force
    the machine down, `spec.terminationGracePeriod` on) and the Node. The drains had no
    deadline: the job could not know it had until then, and no more."""
    cluster.raise_("karpenter")
    first = await watching.report("drain", TAINT)
    assert first.deadline is None  # not stamped yet: the NodeClaim is not deleted
    termination = _in(30)
    cluster.raise_("karpenter", termination=termination)

    def with_deadline(notice_id: str) -> bool:
        return any(
            r.id == notice_id and r.deadline == parse_time(termination) for r in watching.reports
        )

    await watching.until(lambda: with_deadline(DELETING), 8, "the deletion's drain, by it")
    await watching.until(lambda: with_deadline(TAINT), 8, "the taint's drain again, by it")
    gets = watching.watcher.nodeclaim_gets
    cluster.raise_("taint", key="example.com/other")  # another change of the node
    cluster.raise_("cordon")
    await watching.report("drain", f"kubernetes/{NODE}/cordon")
    assert watching.watcher.nodeclaim_gets == gets  # read once it was there


async def test_node_repairs_termination_timestamp_already_past_is_the_drains_deadline(
    cluster: Cluster, watching: Running
) -> None:
    """Karpenter's node repair (kubernetes-sigs/karpenter pkg/controllers/node/health/
    controller.go, annotateTerminationGracePeriod) stamps the NodeClaim with the moment it
    acts, with or without a `terminationGracePeriod`, then deletes it: the machine is forced
    down at once. The deadline is read as stamped, already past when the Node shows it."""
    stamped = _in(-1)
    cluster.raise_("karpenter", termination=stamped)

    def by_stamp(notice_id: str) -> bool:
        return any(
            r.id == notice_id and r.deadline == parse_time(stamped) for r in watching.reports
        )

    await watching.until(lambda: by_stamp(DELETING), 8, "the deletion's drain, by the stamp")
    await watching.until(lambda: by_stamp(TAINT), 8, "the taint's drain, by the stamp")


async def test_a_node_no_nodeclaim_owns_asks_for_none(cluster: Cluster, watching: Running) -> None:
    cluster.raise_("taint", key="karpenter.sh/disrupted")
    report = await watching.report("drain", TAINT)
    assert report.deadline is None
    assert watching.watcher.nodeclaim_gets == 0


@pytest.fixture
def reader_only(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster whose RBAC grants the base role only: no get on nodeclaims."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    sim = KubernetesSimulator(
        node=NODE,
        token=TOKEN,
        max_watch_seconds=30,
        grants=frozenset({"list:nodes", "watch:nodes"}),
    )
    with SimServer(sim) as server:
        handle = Cluster(sim, server, token_file)
        yield handle
        handle.http.close()


async def test_a_refused_nodeclaim_leaves_the_drain_without_a_deadline_and_is_said_once(
    reader_only: Cluster, start_watcher: Any, caplog: pytest.LogCaptureFixture
) -> None:
    running: Running = await start_watcher(
        url=reader_only.url, node_name=NODE, token_file=reader_only.token_file
    )
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    reader_only.raise_("karpenter")
    await running.report("drain", TAINT)
    reader_only.raise_("karpenter", termination=_in(30))
    deleting = await running.report("drain", DELETING)
    assert deleting.deadline is None
    # Read again with a backoff (the RBAC may come), and said once all the same.
    await running.until(lambda: running.watcher.nodeclaim_gets >= 3, 5, "two more reads")
    warnings = [r.getMessage() for r in caplog.records if "NodeClaim" in r.getMessage()]
    assert len(warnings) == 1 and "components/karpenter" in warnings[0], warnings
    assert running.watcher.health.last_error is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_object_is_read_without_raising(value: Any) -> None:
    assert nodeclaim_name(value) is None or isinstance(nodeclaim_name(value), str)
    assert being_disrupted(value) in (True, False)
    assert termination_deadline(value) is None or isinstance(termination_deadline(value), datetime)


_RESTORED = Report(
    id=TAINT,
    action="terminate",
    reason="node-drain",
    provider="kubernetes",
    deadline=datetime(2030, 1, 1, tzinfo=timezone.utc),
    detail={"node": NODE, "uid": "u1"},
)


@given(json_values, st.sampled_from(["u1", "u2"]))
def test_a_restored_deadline_is_read_from_any_node_or_refused_as_a_parse_error(
    metadata: Any, uid: str
) -> None:
    """Any listed object gives the restored deadline of its NodeClaim, none, or a ParseError
    (the list's own error for a Node it cannot read); only the Node it was raised for gets it."""
    owned = {
        "metadata": {
            "uid": uid,
            "ownerReferences": [
                {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "c"}
            ],
        },
        "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
    }
    for node in (owned, {"metadata": metadata}, metadata):
        try:
            found = restored_deadline(node, NODE, {TAINT: _RESTORED})
        except ParseError:
            continue
        assert found is None or found == ("c", _RESTORED.deadline)
    assert restored_deadline(owned, NODE, {TAINT: _RESTORED}) == (
        ("c", _RESTORED.deadline) if uid == "u1" else None
    )


@given(st.text(max_size=40))
def test_any_annotation_text_is_a_time_or_none(text: str) -> None:
    claim = {"metadata": {"annotations": {"karpenter.sh/nodeclaim-termination-timestamp": text}}}
    deadline = termination_deadline(claim)
    assert deadline is None or deadline.tzinfo is not None


async def test_a_nodeclaim_that_does_not_answer_does_not_hold_the_drain(
    cluster: Cluster, watching: Running
) -> None:
    """The NodeClaim is read after the Node's notices are out: a GET held by the API server
    (a CRD conversion webhook that hangs) delayed the drain of the Node event behind it by
    the request's whole timeout."""
    hold = {"kind": "hang", "path": "/apis/karpenter.sh/", "method": "GET", "count": 1}
    assert cluster.http.post("/_sim/faults", json=hold).status_code < 300
    cluster.raise_("karpenter", termination=_in(30))
    await watching.report("drain", TAINT, timeout=3)
    await watching.report("drain", DELETING, timeout=3)


async def test_a_nodeclaim_that_does_not_answer_does_not_hold_the_node_events_after_it(
    cluster: Cluster, watching: Running
) -> None:
    """The NodeClaim was read inline, between one watch event and the next: with its GET held
    by the API server (a NodeClaim conversion webhook down, as in a Karpenter upgrade), the
    node's shutdown that came next was reported as a terminate only at the GET's timeout,
    10 s late, a third of a kubelet's 30 s shutdown grace. It is read in the background."""
    hold = {"kind": "hang", "path": "/apis/karpenter.sh/", "method": "GET", "count": 1}
    assert cluster.http.post("/_sim/faults", json=hold).status_code < 300
    cluster.raise_("karpenter")
    await watching.report("drain", TAINT, timeout=3)
    await watching.until(lambda: watching.watcher.nodeclaim_gets == 1, 3, "the held GET")
    cluster.raise_("shutdown")
    await watching.report("terminate", f"kubernetes/{NODE}/shutdown", timeout=3)


async def test_a_nodeclaim_read_without_a_token_for_a_moment_is_read_again(
    cluster: Cluster, watching: Running
) -> None:
    """The token file being replaced as the NodeClaim is read (no token: a ConfigError, not
    an answer): read in the background, that ended the reader, and the drain never got its
    deadline."""
    await watching.until(lambda: watching.watcher.watches >= 1, what="the first watch")
    token = cluster.token_file.read_text()
    cluster.token_file.unlink()
    termination = _in(30)
    cluster.raise_("karpenter", termination=termination)
    await watching.report("drain", DELETING)
    await watching.until(lambda: watching.watcher.nodeclaim_gets >= 1, 3, "the read")
    cluster.token_file.write_text(token)

    def with_deadline() -> bool:
        return any(
            r.id == DELETING and r.deadline == parse_time(termination) for r in watching.reports
        )

    await watching.until(with_deadline, 4, "the deletion's drain, by the termination timestamp")


async def test_a_nodeclaim_refused_then_granted_gets_its_deadline_without_a_restart(
    reader_only: Cluster, start_watcher: Any
) -> None:
    """The operator reads the 403 warning and applies `components/karpenter` while the node
    drains. The refusal was kept for the watcher's life: the drain never got its deadline
    until the agent restarted, and `status` never said what was missing."""
    running: Running = await start_watcher(
        url=reader_only.url, node_name=NODE, token_file=reader_only.token_file
    )
    await running.until(lambda: running.watcher.watches >= 1, what="the first watch")
    termination = _in(30)
    reader_only.raise_("karpenter", termination=termination)
    await running.report("drain", DELETING)
    await running.until(lambda: running.health.conditions, 3, "the refusal in status")
    (said,) = running.health.conditions.values()
    assert "components/karpenter" in said and "nodeclaims" in said, said
    reader_only.sim.grants = frozenset({"list:nodes", "watch:nodes", "get:nodeclaims"})

    def with_deadline() -> bool:
        return any(
            r.id == DELETING and r.deadline == parse_time(termination) for r in running.reports
        )

    await running.until(with_deadline, 4, "the deletion's drain, by the termination timestamp")
    assert running.health.conditions == {}


async def test_a_nodeclaim_read_that_failed_is_read_again_though_the_node_does_not_change(
    cluster: Cluster, watching: Running
) -> None:
    """The API server failed the one read (a 503 from a conversion webhook restarting); the
    Node being deleted does not change again for as long as its drain lasts, so the drain
    never got its deadline."""
    fail = {"kind": "status", "status": 503, "path": "/apis/karpenter.sh/", "count": 1}
    assert cluster.http.post("/_sim/faults", json=fail).status_code < 300
    termination = _in(30)
    cluster.raise_("karpenter", termination=termination)

    def with_deadline() -> bool:
        return any(
            r.id == DELETING and r.deadline == parse_time(termination) for r in watching.reports
        )

    await watching.until(with_deadline, 4, "the deletion's drain, by the termination timestamp")
    assert watching.watcher.nodeclaim_gets >= 2
