"""The pure node parser: Node objects and watch lines to reports, with hypothesis."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from forewarn.agent.protocol import Report
from forewarn.protocol.fields import CLOCK_AHEAD
from forewarn.protocol.timefmt import format_time
from forewarn.providers.base import ParseError
from forewarn.providers.httpdate import format_http_date
from forewarn.providers.kubernetes.nodes import (
    CORDON_TAINT,
    HostBoot,
    VmEvent,
    as_restored,
    changes,
    node_reports,
    notice_id,
    parse_event,
    parse_list,
    readded,
    started_deadline,
    taints_set,
    unschedulable_set,
    vm_event,
)
from forewarn.providers.kubernetes.settings import DEFAULT_DRAIN_TAINTS
from forewarn.providers.kubernetes.watch import MARK_KEYS, as_last_seen
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

NODE = "ip-10-0-1-2.ec2.internal"
TAINTS = frozenset(DEFAULT_DRAIN_TAINTS)


def node(
    name: str = NODE,
    unschedulable: bool | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: tuple[str, str, str] = ("True", "KubeletReady", "kubelet is posting ready status"),
    deleting: str | None = None,
) -> dict[str, Any]:
    status, reason, message = ready
    spec: dict[str, Any] = {}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    if taints is not None:
        spec["taints"] = taints
    metadata: dict[str, Any] = {"name": name, "resourceVersion": "42"}
    if deleting:
        metadata["deletionTimestamp"] = deleting
    return {
        "kind": "Node",
        "metadata": metadata,
        "spec": spec,
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": status, "reason": reason, "message": message},
            ]
        },
    }


def ids(reports: list[Report]) -> dict[str, str]:
    return {report.id: report.action for report in reports}


def test_quiet_node_has_no_reports() -> None:
    assert node_reports(node(), NODE, TAINTS) == []


def test_cordon_and_its_taint_are_one_drain() -> None:
    reports = node_reports(
        node(unschedulable=True, taints=[{"key": CORDON_TAINT, "effect": "NoSchedule"}]),
        NODE,
        TAINTS,
    )
    assert ids(reports) == {f"kubernetes/{NODE}/cordon": "drain"}
    assert reports[0].reason == "node-drain"
    assert reports[0].detail["taint"] == {"key": CORDON_TAINT, "effect": "NoSchedule"}


def test_deletion_candidate_is_not_a_drain() -> None:
    taint = {"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}
    assert node_reports(node(taints=[taint]), NODE, TAINTS) == []


def test_cluster_autoscaler_deletion_drains() -> None:
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1732936000", "effect": "NoSchedule"}
    reports = node_reports(node(taints=[taint]), NODE, TAINTS)
    assert ids(reports) == {f"kubernetes/{NODE}/taint/ToBeDeletedByClusterAutoscaler": "drain"}
    assert reports[0].detail == {"node": NODE, "condition": "taint", "taint": taint}


BOOTED = datetime(2026, 12, 2, 2, 0, 0, tzinfo=timezone.utc)  # this host's (or sandbox's)


def shutting_down(boot_id: str | None, posted: datetime | None) -> dict[str, Any]:
    """A Node whose kubelet posted "node is shutting down" at `posted`, for boot `boot_id`."""
    shutting = node(ready=("False", "KubeletNotReady", "node is shutting down"))
    if boot_id is not None:
        shutting["status"]["nodeInfo"] = {"bootID": boot_id}
    if posted is not None:
        ready = shutting["status"]["conditions"][-1]
        ready["lastHeartbeatTime"] = format_time(posted)
        ready["lastTransitionTime"] = format_time(posted - timedelta(minutes=5))
    return shutting


@given(
    reported=st.one_of(st.none(), st.just(""), st.uuids().map(str)),
    host=st.uuids().map(str),
    posted=st.one_of(st.none(), st.integers(-86400, 86400).map(lambda s: BOOTED + timedelta(0, s))),
)
def test_a_shutdown_of_another_boot_is_stale(
    reported: str | None, host: str, posted: datetime | None
) -> None:
    """A shutdown is stale only if the Node's status was reported for another boot than this
    host's AND posted before this host booted; missing either (or both), it stands."""
    shutting = shutting_down(reported, posted)
    shutdown = {f"kubernetes/{NODE}/shutdown": "terminate"}
    assert ids(node_reports(shutting, NODE, TAINTS)) == shutdown  # nothing to compare
    same = ids(node_reports(shutting, NODE, TAINTS, host=HostBoot(reported or host, BOOTED)))
    assert same == shutdown
    other = ids(node_reports(shutting, NODE, TAINTS, host=HostBoot(host, BOOTED)))
    stale = bool(reported) and reported != host and posted is not None and posted < BOOTED
    assert other == ({} if stale else shutdown)
    with pytest.raises(ParseError, match="bootID"):
        shutting["status"]["nodeInfo"] = {"bootID": 7}
        node_reports(shutting, NODE, TAINTS, host=HostBoot(host, BOOTED))


def test_a_shutdown_posted_since_a_sandbox_started_is_not_stale() -> None:
    """Under gVisor or Kata the pod's boot id is the sandbox's, never the node's: a real
    shutdown, posted after the sandbox started, must still terminate."""
    sandbox = HostBoot("5a4d0b0x-sandbox-own-boot-id", BOOTED)
    now = BOOTED + timedelta(hours=3)
    shutting = shutting_down("9c1f2e3d-the-nodes-boot-id", now)
    assert ids(node_reports(shutting, NODE, TAINTS, host=sandbox)) == {
        f"kubernetes/{NODE}/shutdown": "terminate"
    }
    before = shutting_down("9c1f2e3d-the-nodes-boot-id", BOOTED - timedelta(minutes=2))
    assert node_reports(before, NODE, TAINTS, host=sandbox) == []  # from before the reboot
    # The transition time is not what counts: Ready=False (runtime down) since before the
    # sandbox started, then shutting down, keeps the old transition with a new heartbeat.
    before["status"]["conditions"][-1]["lastHeartbeatTime"] = format_time(now)
    assert len(node_reports(before, NODE, TAINTS, host=sandbox)) == 1
    for doubt in (None, "", "yesterday"):
        before["status"]["conditions"][-1]["lastHeartbeatTime"] = doubt
        assert len(node_reports(before, NODE, TAINTS, host=sandbox)) == 1


def test_shutdown_matches_the_message_not_the_reason() -> None:
    shutting = node(ready=("False", "KubeletNotReady", "node is shutting down"))
    assert ids(node_reports(shutting, NODE, TAINTS)) == {f"kubernetes/{NODE}/shutdown": "terminate"}
    by_reason = node(ready=("False", "node is shutting down", "PLEG is not healthy"))
    assert node_reports(by_reason, NODE, TAINTS) == []
    unknown = node(ready=("Unknown", "NodeStatusUnknown", "node is shutting down"))
    assert node_reports(unknown, NODE, TAINTS) == []
    # Kubelets phrase it inside a longer message too.
    long = node(ready=("False", "KubeletNotReady", "[container runtime ok, Node is shutting down]"))
    assert ids(node_reports(long, NODE, TAINTS)) == {f"kubernetes/{NODE}/shutdown": "terminate"}


def test_deletion_timestamp_drains() -> None:
    reports = node_reports(node(deleting="2026-11-30T03:00:00Z"), NODE, TAINTS)
    assert ids(reports) == {f"kubernetes/{NODE}/deleting": "drain"}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "node is not a JSON object"),
        ({"metadata": {}}, "no name"),
        ({"metadata": {"name": "other"}}, "watching"),
        ({"metadata": {"name": NODE}, "spec": {"unschedulable": "yes"}}, "not a boolean"),
        ({"metadata": {"name": NODE}, "spec": {"taints": {}}}, "spec.taints is not a list"),
        ({"metadata": {"name": NODE}, "spec": {"taints": [{"effect": "NoSchedule"}]}}, "no key"),
        ({"metadata": {"name": NODE}, "status": {"conditions": "Ready"}}, "not a list"),
    ],
)
def test_bad_nodes_raise_parse_errors(payload: Any, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        node_reports(payload, NODE, TAINTS)


def test_parse_list() -> None:
    listed = parse_list(
        {"kind": "NodeList", "metadata": {"resourceVersion": "77"}, "items": [node()]}
    )
    assert listed.resource_version == "77"
    assert listed.node is not None
    empty = parse_list({"kind": "NodeList", "metadata": {"resourceVersion": "78"}, "items": []})
    assert empty.node is None
    with pytest.raises(ParseError, match="resourceVersion"):
        parse_list({"kind": "NodeList", "metadata": {}, "items": []})
    with pytest.raises(ParseError, match="matched 2 nodes"):
        parse_list({"metadata": {"resourceVersion": "1"}, "items": [node(), node()]})


def test_parse_event() -> None:
    event = parse_event(json.dumps({"type": "MODIFIED", "object": node()}))
    assert event.type == "MODIFIED"
    assert event.resource_version == "42"
    bookmark = parse_event(
        b'{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"99"}}}'
    )
    assert bookmark.resource_version == "99"
    error = parse_event(
        '{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old"}}'
    )
    assert (error.status_code, error.message, error.resource_version) == (410, "too old", None)
    for bad, message in [
        ("{", "not JSON"),
        ('{"type":"SYNC","object":{}}', "unknown watch event type"),
        ('{"type":"ADDED","object":{"metadata":{}}}', "no metadata.resourceVersion"),
        ('{"type":"ADDED"}', "not a JSON object"),
    ]:
        with pytest.raises(ParseError, match=message):
            parse_event(bad)


def test_ids_stay_within_the_protocol_limit() -> None:
    long_name = "n" * 253
    long_key = "example.com/" + "k" * 240
    first = notice_id(long_name, "taint", long_key)
    assert len(first) <= 200
    assert first == notice_id(long_name, "taint", long_key)
    assert first != notice_id(long_name, "taint", long_key + "x")


# Property tests.

names = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?", fullmatch=True) | st.builds(
    lambda head, n: head + "x" * n, st.sampled_from(["gpu-", "ip-10-0-0-1."]), st.integers(0, 250)
)
keys = st.one_of(
    st.sampled_from([*DEFAULT_DRAIN_TAINTS, "DeletionCandidateOfClusterAutoscaler", "x/y"]),
    st.from_regex(r"[a-z]{1,20}(\.[a-z]{1,10})?/[A-Za-z0-9-]{1,60}", fullmatch=True),
)
taint_lists = st.lists(
    st.fixed_dictionaries(
        {"key": keys, "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])},
        optional={"value": st.text(max_size=20), "timeAdded": st.just("2026-11-30T03:00:00Z")},
    ),
    max_size=6,
)
ready_states = st.tuples(
    st.sampled_from(["True", "False", "Unknown"]),
    st.sampled_from(["KubeletReady", "KubeletNotReady", "node is shutting down"]),
    st.sampled_from(["node is shutting down", "Node is shutting down now", "PLEG", ""]),
)
configured = st.frozensets(keys, max_size=8) | st.just(TAINTS)


@st.composite
def nodes(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    name = draw(names)
    payload = node(
        name=name,
        unschedulable=draw(st.none() | st.booleans()),
        taints=draw(st.none() | taint_lists),
        ready=draw(ready_states),
        deleting=draw(st.none() | st.just("2026-11-30T03:00:00Z")),
    )
    return name, payload


@given(nodes(), configured, configured)
@settings(max_examples=examples(120), deadline=None)
def test_reports_follow_the_node(
    sample: tuple[str, dict[str, Any]], taints: frozenset[str], terminating: frozenset[str]
) -> None:
    name, payload = sample
    reports = node_reports(payload, name, taints, terminate_taints=terminating)
    got = ids(reports)
    spec = payload["spec"]
    present = {t["key"] for t in spec.get("taints") or []}
    expected: dict[str, str] = {}
    if spec.get("unschedulable") or (CORDON_TAINT in present and CORDON_TAINT in taints):
        expected[notice_id(name, "cordon")] = "drain"
    for key in present & taints - {CORDON_TAINT}:
        expected[notice_id(name, "taint", key)] = "terminate" if key in terminating else "drain"
    if payload["metadata"].get("deletionTimestamp"):
        expected[notice_id(name, "deleting")] = "drain"
    ready = payload["status"]["conditions"][1]
    if ready["status"] == "False" and "node is shutting down" in ready["message"].lower():
        expected[notice_id(name, "shutdown")] = "terminate"
    assert got == expected
    assert len(got) == len(reports)  # one report per id
    for report in reports:
        assert report.provider == "kubernetes"
        assert report.reason == "node-drain"
        assert len(report.id) <= 200
        assert report.detail["node"] == name
    # The same node gives the same ids again (stable over repeated events).
    assert ids(node_reports(payload, name, taints, terminate_taints=terminating)) == got


@given(st.lists(nodes().map(lambda s: s[1]), min_size=1, max_size=6), configured)
@settings(max_examples=examples(60), deadline=None)
def test_changes_replay_to_the_current_state(
    payloads: list[dict[str, Any]], taints: frozenset[str]
) -> None:
    """Feeding successive node states through `changes` leaves exactly the current notices
    active, with a clear for everything that went away, and nothing sent twice."""
    board: dict[str, str] = {}
    active: dict[str, Report] = {}
    for payload in payloads:
        payload = {**payload, "metadata": {**payload["metadata"], "name": NODE}}
        current = node_reports(payload, NODE, taints)
        for report in changes(active, current):
            if report.action == "clear":
                assert report.id in board
                del board[report.id]
            else:
                assert board.get(report.id) != report.action  # a real change only
                board[report.id] = report.action
        active = {report.id: report for report in current}
        assert board == ids(current)


added_times = st.none() | st.sampled_from(["2026-12-05T10:00:00Z", "2026-12-05T10:00:07Z"])


@given(
    st.sampled_from([CORDON_TAINT, "karpenter.sh/disrupted"]),
    added_times,
    added_times,
    st.booleans(),
)
@settings(max_examples=examples(60), deadline=None)
def test_a_taint_added_again_is_cleared_on_a_relist(
    key: str, before: str | None, after: str | None, unschedulable: bool
) -> None:
    """A relist owes a clear for a drain whose taint's `timeAdded` changed (removed and added
    again in the gap), and only then: a `timeAdded` missing on either side tells nothing."""

    def taint(added: str | None) -> list[dict[str, Any]]:
        fields = {"key": key, "effect": "NoSchedule"}
        return [{**fields, "timeAdded": added} if added else fields]

    previous = node_reports(node(unschedulable=unschedulable, taints=taint(before)), NODE, TAINTS)
    current = node_reports(node(unschedulable=unschedulable, taints=taint(after)), NODE, TAINTS)
    clears = readded({r.id: r for r in previous}, current)
    again = before is not None and after is not None and before != after
    (tainted,) = [r for r in previous if r.detail.get("taint", {}).get("key") == key]
    assert [(c.action, c.id) for c in clears] == ([("clear", tainted.id)] if again else [])
    if again:
        assert clears[0].detail == tainted.detail  # the first taint's notice is cleared
    assert readded({}, current) == []


def cordoned(managed: Any) -> dict[str, Any]:
    """A node cordoned as a real cluster shows it: the taint with no `timeAdded`."""
    cordon = node(unschedulable=True, taints=[{"key": CORDON_TAINT, "effect": "NoSchedule"}])
    if managed is not None:
        cordon["metadata"]["managedFields"] = managed
    return cordon


def entry(manager: str, time: str, field: str = "f:unschedulable") -> dict[str, Any]:
    fields = {"f:spec": {field: {}}}
    return {"manager": manager, "operation": "Update", "time": time, "fieldsV1": fields}


set_times = st.sampled_from(["2026-12-05T10:00:00Z", "2026-12-05T10:00:07Z"])
managers = st.sampled_from(["kubectl-cordon", "node-termination-handler"])
managed_fields = st.none() | st.lists(
    st.builds(entry, managers, set_times, st.sampled_from(["f:unschedulable", "f:taints"])),
    max_size=3,
)


@given(managed_fields, managed_fields)
@settings(max_examples=examples(80), deadline=None)
def test_a_cordon_set_again_is_told_by_its_managed_fields(before: Any, after: Any) -> None:
    """On a real cluster the cordon's taint has no `timeAdded`: a cordon lifted and applied
    again in a watch gap is told only by the managedFields entry that set
    `spec.unschedulable` (another manager or a later `time`). Found: with the simulator
    writing taints as the API server does, the relist sent nothing for the second cordon.
    An entry missing on either side tells nothing."""
    previous = node_reports(cordoned(before), NODE, TAINTS)
    current = node_reports(cordoned(after), NODE, TAINTS)
    clears = readded({r.id: r for r in previous}, current)
    was = unschedulable_set(cordoned(before)["metadata"])
    now = unschedulable_set(cordoned(after)["metadata"])
    again = was is not None and now is not None and was != now
    assert [(c.action, c.id) for c in clears] == ([("clear", previous[0].id)] if again else [])


@given(
    st.recursive(
        st.none() | st.booleans() | st.text(max_size=5),
        lambda c: (
            st.lists(c)
            | st.dictionaries(
                st.sampled_from(["manager", "time", "fieldsV1", "f:spec", "f:unschedulable"]), c
            )
        ),
        max_leaves=12,
    )
)
@settings(max_examples=examples(150), deadline=None)
def test_managed_fields_of_any_shape_tell_nothing_rather_than_fail(managed: Any) -> None:
    """managedFields is housekeeping: in a shape not known here it tells nothing (None) and
    the Node is still read."""
    found = unschedulable_set({"managedFields": managed})
    assert found is None or set(found) == {"manager", "time"}
    assert [r.id for r in node_reports(cordoned(managed), NODE, TAINTS)] == [
        notice_id(NODE, "cordon")
    ]


def test_the_cordon_names_who_set_it() -> None:
    managed = [entry("kubelet", "2026-12-05T09:00:00Z", "f:podCIDR")]
    managed.append(entry("kubectl-cordon", "2026-12-05T10:00:00Z"))
    (drain,) = node_reports(cordoned(managed), NODE, TAINTS)
    set_by = {"manager": "kubectl-cordon", "time": "2026-12-05T10:00:00Z"}
    assert drain.detail["unschedulableSet"] == set_by
    # Lifted (only the taint left, the controller not caught up yet): no mark.
    lifted = cordoned(managed)
    lifted["spec"]["unschedulable"] = False
    (drain,) = node_reports(lifted, NODE, TAINTS)
    assert "unschedulableSet" not in drain.detail


@given(nodes().map(lambda s: s[1]), nodes().map(lambda s: s[1]), configured, st.booleans())
@settings(max_examples=examples(60), deadline=None)
def test_restored_notices_keep_their_detail_and_nothing_else(
    before: dict[str, Any], after: dict[str, Any], taints: frozenset[str], again: bool
) -> None:
    """After a restart the agent is given, for each notice it restored with the same action
    and deadline, that notice as it was (its detail included: a detail alone is no reason to
    send it again); every other report as listed, those raised again too."""
    before = {**before, "metadata": {**before["metadata"], "name": NODE}}
    after = {**after, "metadata": {**after["metadata"], "name": NODE}}
    restored = {r.id: r for r in node_reports(before, NODE, taints)}
    current = node_reports(after, NODE, taints)
    raised_again = {r.id for r in current} if again else set()
    kept = as_restored(restored, current, raised_again)
    assert [(r.id, r.action, r.deadline) for r in kept] == [
        (r.id, r.action, r.deadline) for r in current
    ]
    for listed, given_to_agent in zip(current, kept, strict=True):
        was = restored.get(listed.id)
        same = was is not None and (was.action, was.deadline) == (listed.action, listed.deadline)
        expected = restored[listed.id] if same and listed.id not in raised_again else listed
        assert given_to_agent is expected


@given(st.lists(nodes().map(lambda s: s[1]), min_size=1, max_size=8), configured)
@settings(max_examples=examples(80), deadline=None)
def test_a_shutdown_outlasts_ready_unknown(
    payloads: list[dict[str, Any]], taints: frozenset[str]
) -> None:
    """Fed its previous reports, the shutdown follows the last Ready that was not Unknown (the
    node lifecycle controller's "stopped posting" says nothing of a node coming back); every
    other notice is the same as without them."""
    shutdown = notice_id(NODE, "shutdown")
    active: dict[str, Report] = {}
    shutting_down = False
    for payload in payloads:
        payload = {**payload, "metadata": {**payload["metadata"], "name": NODE}}
        ready = payload["status"]["conditions"][1]
        if ready["status"] != "Unknown":
            shutting_down = (
                ready["status"] == "False" and "node is shutting down" in ready["message"].lower()
            )
        current = node_reports(payload, NODE, taints, active)
        got = ids(current)
        plain = ids(node_reports(payload, NODE, taints))
        assert (got.pop(shutdown, None) == "terminate") == shutting_down
        plain.pop(shutdown, None)
        assert got == plain
        active = {report.id: report for report in current}


@given(
    st.lists(
        st.tuples(st.sampled_from(["uid-a", "uid-b"]), nodes().map(lambda s: s[1])),
        min_size=1,
        max_size=8,
    ),
    configured,
)
@settings(max_examples=examples(80), deadline=None)
def test_a_shutdown_stays_with_its_node_object(
    payloads: list[tuple[str, dict[str, Any]]], taints: frozenset[str]
) -> None:
    """A shutdown outlasts Ready=Unknown only on the object that shut down: a Node deleted and
    created again under the name (another `metadata.uid`) does not inherit it."""
    shutdown = notice_id(NODE, "shutdown")
    active: dict[str, Report] = {}
    shutting_down = False
    last_uid = None
    for uid, payload in payloads:
        payload = {**payload, "metadata": {**payload["metadata"], "name": NODE, "uid": uid}}
        ready = payload["status"]["conditions"][1]
        if ready["status"] != "Unknown":
            shutting_down = (
                ready["status"] == "False" and "node is shutting down" in ready["message"].lower()
            )
        elif uid != last_uid:
            shutting_down = False
        current = node_reports(payload, NODE, taints, active)
        assert (ids(current).get(shutdown) == "terminate") == shutting_down
        assert all(report.detail["uid"] == uid for report in current)
        active = {report.id: report for report in current}
        last_uid = uid


@given(st.binary(max_size=200) | st.text(max_size=200))
def test_garbage_lines_raise_only_parse_errors(line: bytes | str) -> None:
    with contextlib.suppress(ParseError):
        parse_event(line)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "metadata",
                        "name",
                        "spec",
                        "status",
                        "taints",
                        "key",
                        "conditions",
                        "type",
                        "message",
                        "unschedulable",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_garbage_nodes_raise_only_parse_errors(payload: Any) -> None:
    with contextlib.suppress(ParseError):
        node_reports(payload, NODE, TAINTS)


_NESTED = b"[" * 100_000 + b"]" * 100_000


def test_a_watch_line_nested_past_json_recursion_is_a_parse_error() -> None:
    """json.loads raises RecursionError, not ValueError, for a line nested a few thousand
    deep: it escaped parse_event, and the watch ended in a crash, not a named bad line."""
    with pytest.raises(ParseError, match="not JSON"):
        parse_event(_NESTED)
    with pytest.raises(ParseError, match="not JSON"):
        parse_event(b'{"type": "ADDED", "object": ' + _NESTED + b"}")


def test_a_status_or_list_body_nested_past_json_recursion_is_a_named_error() -> None:
    """The same for a Status body (an error answer's message) and a node list."""
    import asyncio

    import httpx
    from forewarn.providers.kubernetes.api import ApiError, NodeApi, status_message
    from forewarn.providers.kubernetes.config import Cluster

    assert status_message(_NESTED).startswith("[[[")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=_NESTED, headers={"Content-Type": "application/json"})

    async def list_it() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        api = NodeApi(Cluster("http://127.0.0.1:9", lambda: None, False, "test"), "n", client)
        try:
            with pytest.raises(ApiError, match="not JSON"):
                await api.list_node()
        finally:
            await client.aclose()

    asyncio.run(list_it())


def vm_condition(message: str, status: str = "True") -> dict[str, Any]:
    return {"type": "VMEventScheduled", "status": status, "reason": "VMEventScheduled",
            "message": message}  # fmt: skip


def test_aks_scheduled_events_on_the_node() -> None:
    """AKS's node-problem-detector writes the Scheduled Event into the message of its
    `VMEventScheduled` condition; NotBefore is RFC 1123, `Started` has none."""
    at = datetime(2026, 3, 2, 19, 1, 45, tzinfo=timezone.utc)
    link = " For more information, see https://aka.ms/aks/scheduledevents. EventId: 40B7BD88"
    seen = vm_event(vm_condition(f"Preempt Scheduled: Mon, 02 Mar 2026 19:01:45 GMT.{link}"))
    assert seen == VmEvent("Preempt", "Scheduled", at)
    assert vm_event(vm_condition("Preempt  Scheduled:  Mon, 2 Mar 2026 19:01:45 GMT")) == seen
    assert vm_event(vm_condition("Redeploy Started." + link)) == VmEvent(
        "Redeploy", "Started", None
    )
    assert vm_event(vm_condition("Reboot Scheduled: soon.")) == VmEvent("Reboot", "Scheduled", None)
    for quiet in (
        vm_condition("VM has no scheduled event", "False"),
        vm_condition("Preempt Scheduled: Mon, 02 Mar 2026 19:01:45 GMT", "False"),
        vm_condition("IMDS unavailable"),
        {"type": "Ready", "status": "True", "message": "Preempt Scheduled"},
    ):
        assert vm_event(quiet) is None

    def reports(message: str) -> dict[str, tuple[str, datetime | None]]:
        payload = node()
        payload["status"]["conditions"].append(vm_condition(message))
        return {r.id: (r.action, r.deadline) for r in node_reports(payload, NODE, TAINTS)}

    vm = f"kubernetes/{NODE}/vm-event"
    assert reports("Preempt Scheduled: Mon, 02 Mar 2026 19:01:45 GMT") == {
        f"{vm}/Preempt": ("terminate", at)
    }
    assert reports("Terminate Scheduled: Mon, 02 Mar 2026 19:01:45 GMT") == {
        f"{vm}/Terminate": ("terminate", at)
    }
    assert reports("Redeploy Scheduled: Mon, 02 Mar 2026 19:01:45 GMT") == {
        f"{vm}/Redeploy": ("drain", at)
    }
    assert reports("Freeze Scheduled: Mon, 02 Mar 2026 19:01:45 GMT") == {}


def _with_vm_event(message: str) -> dict[str, Any]:
    payload = node()
    payload["status"]["conditions"].append(vm_condition(message))
    return payload


def test_a_started_vm_event_is_a_terminate_by_when_it_started() -> None:
    """`Started` shows no NotBefore: the terminate went out with no deadline, so the board
    could never name the clients that did not ack it (Azure's Started is due now). It is due
    when first seen Started, or by the NotBefore published before if that came first, and
    stays so on every later read of the Node (the same deadline sends nothing again)."""
    reboot = notice_id(NODE, "vm-event", "Reboot")
    before = datetime.now(timezone.utc)
    (started,) = node_reports(_with_vm_event("Reboot Started"), NODE, TAINTS)
    assert (started.id, started.action) == (reboot, "terminate")
    assert started.deadline is not None
    assert before <= started.deadline <= datetime.now(timezone.utc)
    (again,) = node_reports(_with_vm_event("Reboot Started"), NODE, TAINTS, {reboot: started})
    assert again.deadline == started.deadline
    assert changes({reboot: started}, [again]) == []

    # Scheduled 10 min out, then Started (approved early): due now, not in 10 min.
    later = format_http_date(before + timedelta(minutes=10))
    (scheduled,) = node_reports(_with_vm_event(f"Reboot Scheduled: {later}"), NODE, TAINTS)
    (now,) = node_reports(_with_vm_event("Reboot Started"), NODE, TAINTS, {reboot: scheduled})
    assert now.deadline is not None and now.deadline <= datetime.now(timezone.utc)
    # Overdue (its NotBefore passed before it started): the NotBefore stands.
    past = (before - timedelta(minutes=3)).replace(microsecond=0)
    (overdue,) = node_reports(
        _with_vm_event(f"Reboot Scheduled: {format_http_date(past)}"), NODE, TAINTS
    )
    (late,) = node_reports(_with_vm_event("Reboot Started"), NODE, TAINTS, {reboot: overdue})
    assert late.deadline == past


@given(
    published=st.none() | st.integers(-3 * 86400, 3 * 86400),
    sent_ahead=st.none() | st.integers(-86400, 86400),
    ahead=st.integers(-86400, 86400),
    elapsed=st.integers(0, 3600),
)
def test_a_started_deadline_is_kept_across_reads_on_any_clock(
    published: int | None, sent_ahead: int | None, ahead: int, elapsed: int
) -> None:
    """Any deadline published before (on this node's clock, moved by any skew) and any skew
    now: the Started deadline is never after the cluster's now nor the one published, and read
    again later, on the node's clock it went out on, it is the same."""
    cluster_now = datetime(2026, 3, 2, 19, 0, tzinfo=timezone.utc)
    before = None
    if published is not None:
        detail = {} if sent_ahead is None else {CLOCK_AHEAD: sent_ahead}
        before = Report(
            id="kubernetes/n/vm-event/Reboot", action="drain", reason="node-drain",
            provider="kubernetes",
            deadline=cluster_now + timedelta(seconds=published + (sent_ahead or 0)),
            detail=detail,
        )  # fmt: skip
    first = started_deadline(before, cluster_now)
    assert first <= cluster_now
    if published is not None:
        assert first <= cluster_now + timedelta(seconds=published)
    sent = Report(
        id="kubernetes/n/vm-event/Reboot", action="terminate", reason="node-drain",
        provider="kubernetes", deadline=first + timedelta(seconds=ahead),
        detail={CLOCK_AHEAD: ahead},
    )  # fmt: skip
    assert started_deadline(sent, cluster_now + timedelta(seconds=elapsed)) == first


_EVENT_TYPES = st.sampled_from(["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"])


@given(
    kind=_EVENT_TYPES,
    started=st.booleans(),
    when=st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(9999, 1, 1),
        timezones=st.just(timezone.utc),
    ).map(lambda moment: moment.replace(microsecond=0)),
    tail=st.text(max_size=40),
)
def test_a_scheduled_event_message_reads_back(
    kind: str, started: bool, when: datetime, tail: str
) -> None:
    from email.utils import format_datetime

    status = "Started" if started else "Scheduled"
    head = (
        f"{kind} {status}" if started else f"{kind} {status}: {format_datetime(when, usegmt=True)}"
    )
    assert vm_event(vm_condition(f"{head}.{tail}")) == VmEvent(
        kind, status, None if started else when
    )


@given(message=st.text(max_size=200), status=st.sampled_from(["True", "False", "Unknown"]))
@example(message="Preempt Scheduled: Mon, 99 Mar 2026 19:01:45 GMT", status="True")
@example(message="Terminate Scheduled: Fri, 31 Dec 9999 23:59:59 -0100", status="True")
def test_any_vm_event_message_is_read_without_raising(message: str, status: str) -> None:
    event = vm_event(vm_condition(message, status))
    assert event is None or (status == "True" and event.type in message)
    payload = node()
    payload["status"]["conditions"].append(vm_condition(message, status))
    node_reports(payload, NODE, TAINTS)  # a ParseError or nothing, never a crash


def preemption_condition(message: str, status: str = "True") -> dict[str, Any]:
    return {"type": "PreemptionScheduled", "status": status, "reason": "SpotEvictionIncoming",
            "message": message}  # fmt: skip


def test_aks_spot_preemption_condition_terminates_by_its_not_before() -> None:
    """Newer AKS node-problem-detectors report a Spot eviction in a condition of its own,
    `PreemptionScheduled` (reason `SpotEvictionIncoming`), with the `VMEventScheduled`
    message shape (karpenter-provider-azure drains by it): a node showing only that one
    raised nothing, and the ~30 s of a spot preemption went unused."""
    at = datetime(2026, 8, 1, 5, 41, 2, tzinfo=timezone.utc)
    message = (
        "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. For more information, see "
        "https://aka.ms/aks/scheduledevents. EventId: 40B7BD88-C56E-44E4-93F6-75CEDACE2869"
    )
    payload = node()
    payload["status"]["conditions"].append(preemption_condition(message))
    reports = {r.id: (r.action, r.deadline) for r in node_reports(payload, NODE, TAINTS)}
    assert reports == {f"kubernetes/{NODE}/vm-event/Preempt": ("terminate", at)}
    # With VMEventScheduled reporting the same event: one notice, not two.
    payload["status"]["conditions"].append(vm_condition(message))
    assert len(node_reports(payload, NODE, TAINTS)) == 1
    # Withdrawn (False), or a VMEventScheduled that says nothing while it stands.
    quiet = node()
    quiet["status"]["conditions"].append(preemption_condition(message, "False"))
    assert node_reports(quiet, NODE, TAINTS) == []
    both = node()
    both["status"]["conditions"] += [
        vm_condition("VM has no scheduled event", "False"),
        preemption_condition(message),
    ]
    assert ids(node_reports(both, NODE, TAINTS)) == {
        f"kubernetes/{NODE}/vm-event/Preempt": "terminate"
    }


@given(message=st.text(max_size=200), status=st.sampled_from(["True", "False", "Unknown"]))
def test_any_preemption_message_is_read_without_raising(message: str, status: str) -> None:
    event = vm_event(preemption_condition(message, status))
    assert event is None or (status == "True" and event.type == "Preempt")
    payload = node()
    payload["status"]["conditions"].append(preemption_condition(message, status))
    node_reports(payload, NODE, TAINTS)  # a ParseError or nothing, never a crash


def test_aks_auto_drains_older_taint_name_drains_too() -> None:
    """AKS's node auto-drain (auto-repair) tainted `remediator.aks.microsoft.com/unschedulable`
    before it moved to `remediator.kubernetes.azure.com/unschedulable` (AKS release notes);
    only the new name was a default, so a cluster whose remediator still writes the old one
    raised nothing for the taint."""
    key = "remediator.aks.microsoft.com/unschedulable"
    reports = node_reports(node(taints=[{"key": key, "effect": "NoSchedule"}]), NODE, TAINTS)
    assert ids(reports) == {f"kubernetes/{NODE}/taint/{key}": "drain"}


scale_down_times = st.none() | st.sampled_from(["1764928800", "1764929400"])


@given(scale_down_times, scale_down_times)
@settings(max_examples=30, deadline=None)
def test_a_cluster_autoscaler_taint_set_again_is_cleared_on_a_relist(
    before: str | None, after: str | None
) -> None:
    """Cluster Autoscaler's `ToBeDeletedByClusterAutoscaler` has no `timeAdded`, only its value
    (the Unix time the scale-down began). Removed and set again while the agent or its watch
    was down, the new scale-down was taken for the old one: no clear, no new drain, and the
    job that resumed after the first was not told of the second."""
    key = "ToBeDeletedByClusterAutoscaler"

    def taint(value: str | None) -> list[dict[str, Any]]:
        fields = {"key": key, "effect": "NoSchedule"}
        return [{**fields, "value": value} if value else fields]

    previous = node_reports(node(taints=taint(before)), NODE, TAINTS)
    current = node_reports(node(taints=taint(after)), NODE, TAINTS)
    clears = readded({r.id: r for r in previous}, current)
    again = before is not None and after is not None and before != after
    (tainted,) = previous
    assert [(c.action, c.id) for c in clears] == ([("clear", tainted.id)] if again else [])


def tainted(key: str, written: Any, value: str | None = None) -> dict[str, Any]:
    """A node with the NoSchedule taint `key` (no `timeAdded`, as the API server writes it), and
    `written` as its managedFields (None: stripped)."""
    taint = {"key": key, "effect": "NoSchedule", **({"value": value} if value else {})}
    payload = node(taints=[taint])
    if written is not None:
        payload["metadata"]["managedFields"] = written
    return payload


taint_managers = st.sampled_from(["karpenter", "kube-controller-manager"])
taints_fields = st.none() | st.lists(
    st.builds(entry, taint_managers, set_times, st.just("f:taints")), max_size=2
)


@given(taints_fields, taints_fields, st.sampled_from([None, "i-0abc"]))
@settings(max_examples=examples(80), deadline=None)
def test_a_no_schedule_taint_set_again_is_told_by_the_taints_managed_fields(
    before: Any, after: Any, value: str | None
) -> None:
    """found: Karpenter's `karpenter.sh/disrupted` (NoSchedule, no value) or a handler's taint
    with the same value, removed and set again in a watch gap, has no `timeAdded` and the same
    value: the relist sent nothing. The managedFields entry that last wrote `spec.taints` (an
    atomic list) has another manager or a later `time`. Missing on either side: nothing."""
    key = "karpenter.sh/disrupted"
    previous = node_reports(tainted(key, before, value), NODE, TAINTS)
    current = node_reports(tainted(key, after, value), NODE, TAINTS)
    clears = readded({r.id: r for r in previous}, current)
    was = taints_set(tainted(key, before)["metadata"])
    now = taints_set(tainted(key, after)["metadata"])
    again = was is not None and now is not None and was != now
    assert [(c.action, c.id) for c in clears] == ([("clear", previous[0].id)] if again else [])
    if now is not None:
        assert current[0].detail["taintsSet"] == now


NOTICED = datetime(2026, 12, 5, 10, 0, 0, 400000, tzinfo=timezone.utc)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")  # whole seconds, as the API server writes


@pytest.mark.parametrize(
    ("later", "ahead", "again"),
    [
        (10, 0, True),  # set again 10 s after the old agent noticed it
        (-60, 0, False),  # the cordon the old agent saw
        (0, 0, False),
        (1, 0, False),  # within SET_MARGIN: whole seconds, a skew read from a `Date`
        (3, 0, True),
        (-60, 120, True),  # this node's clock 2 min ahead: 60 s after, on the cluster's
        (10, -120, False),  # 2 min behind: 10 s on this clock is 110 s before
    ],
)
@pytest.mark.parametrize("kind", ["cordon", "taint"])
def test_a_notice_an_older_agent_saved_without_a_mark_is_told_by_when_it_was_noticed(
    later: int, ahead: int, again: bool, kind: str
) -> None:
    """found: a notice saved by an agent from before the marks (no `unschedulableSet`, no
    `taintsSet` in its detail) restored by the upgraded one: one side without a mark told
    nothing, and a cordon (or a NoSchedule taint) lifted and set again while the agent was
    being upgraded was taken for the old one. The current mark's time, later than the old
    notice was noticed (on the cluster's clock), tells it."""
    key = CORDON_TAINT if kind == "cordon" else "karpenter.sh/disrupted"
    field = "f:unschedulable" if kind == "cordon" else "f:taints"
    when = _stamp(NOTICED + timedelta(seconds=later))
    payload = cordoned(None) if kind == "cordon" else tainted(key, None)
    (old,) = node_reports(payload, NODE, TAINTS)
    old = old.model_copy(update={"noticed_at": NOTICED})
    assert "unschedulableSet" not in old.detail and "taintsSet" not in old.detail
    written = [entry("kubectl-cordon" if kind == "cordon" else "karpenter", when, field)]
    payload = cordoned(written) if kind == "cordon" else tainted(key, written)
    current = node_reports(payload, NODE, TAINTS)
    clears = readded({old.id: old}, current, timedelta(seconds=ahead))
    assert [(c.action, c.id) for c in clears] == ([("clear", old.id)] if again else [])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
marks_files = st.binary(max_size=100) | st.builds(
    lambda uid, marks: json.dumps({"uid": uid, "marks": marks}).encode(),
    st.sampled_from(["uid-1", "uid-2", 7, None]),
    st.dictionaries(
        st.sampled_from(
            [f"kubernetes/{NODE}/cordon", f"kubernetes/{NODE}/taint/karpenter.sh/disrupted"]
        ),
        st.dictionaries(
            st.sampled_from(["taintsSet", "unschedulableSet", "taint", "action"]), json_values
        ),
        max_size=2,
    )
    | json_values,
)


@given(marks_files)
@settings(max_examples=examples(150), deadline=None)
def test_the_marks_file_changes_only_marks_whatever_it_holds(content: bytes) -> None:
    """The watcher's `kubernetes-marks.json` as read back after a restart (`as_last_seen`):
    whatever it holds, it never raises, and changes nothing of a restored notice but its
    marks, only for the Node object (uid) it was kept for."""
    payload = node(
        unschedulable=True, taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    )
    payload["metadata"]["uid"] = "uid-1"
    restored = {r.id: r for r in node_reports(payload, NODE, TAINTS)}
    out = as_last_seen(content, restored)
    assert out.keys() == restored.keys()
    for notice, report in out.items():
        before = restored[notice]
        assert (report.action, report.deadline, report.id) == (
            before.action,
            before.deadline,
            before.id,
        )
        changed = {
            k
            for k in {*report.detail, *before.detail}
            if report.detail.get(k) != before.detail.get(k)
        }
        assert changed <= set(MARK_KEYS)
        try:
            saved = json.loads(content)
        except ValueError:
            saved = None
        if not (isinstance(saved, dict) and saved.get("uid") == "uid-1"):
            assert report == before
