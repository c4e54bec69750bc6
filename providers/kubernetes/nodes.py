"""The node API, parsed: pure functions from Kubernetes payloads to forewarn reports.

A Node object stands for a set of active conditions, each with a stable id:

- `kubernetes/<node>/cordon`: `spec.unschedulable` or the `node.kubernetes.io/unschedulable`
  taint (a cordon shows up as both; one notice, not two) → drain;
- `kubernetes/<node>/taint/<key>`: any other configured deletion taint → drain, or terminate
  for one of `terminate_taints` (the machine itself goes within minutes);
- `kubernetes/<node>/deleting`: `metadata.deletionTimestamp` set → drain;
- `kubernetes/<node>/shutdown`: `Ready=False` whose *message* says "node is shutting down"
  (kubelet graceful shutdown; the reason is `KubeletNotReady`) → terminate, kept while
  Ready then turns `Unknown` (the kubelet stopped posting: the node is not back); not when
  `status.nodeInfo.bootID` names another boot than this host's *and* the condition was
  posted before this host booted (a stale status from before a reboot);
- `kubernetes/<node>/deleted`: the Node object was deleted → terminate;
- `kubernetes/<node>/vm-event/<type>`: AKS's node-problem-detector condition
  `VMEventScheduled=True` (or, for a Spot eviction, `PreemptionScheduled=True`), whose
  message carries the Azure Scheduled Event (`Preempt Scheduled: <NotBefore>. ...`): Preempt
  or Terminate → terminate, Reboot or Redeploy → drain, by NotBefore; Started → terminate
  by the moment it was first seen Started (or the NotBefore published before it, if
  earlier), kept while shown; Freeze (seconds of pause) → nothing.

`changes` compares two such sets: what appeared or changed is sent, what vanished is cleared
under the same id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from forewarn.protocol.fields import Reason
from forewarn.protocol.oneline import quoted
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.httpdate import parse_http_date
from forewarn.providers.report import Report

from ..base import ParseError
from ..skew import sent_skew
from .karpenter import KARPENTER_TAINTS

PROVIDER = "kubernetes"
CORDON_TAINT = "node.kubernetes.io/unschedulable"
SHUTDOWN_MESSAGE = "node is shutting down"
REASON: Reason = "node-drain"
MAX_ID = 200

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
EVENT_TYPES: tuple[str, ...] = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")


@dataclass(frozen=True)
class HostBoot:
    """This host's boot, to tell a shutdown reported before a reboot from a current one."""

    boot_id: str
    booted_at: datetime  # aware, UTC


@dataclass(frozen=True)
class NodeList:
    """The answer to a LIST of this node: where to start watching, and the node if it exists."""

    resource_version: str
    node: dict[str, Any] | None


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    object: dict[str, Any] = field(default_factory=dict)

    @property
    def resource_version(self) -> str | None:
        """The object's resourceVersion (for ERROR events, None)."""
        if self.type == "ERROR":
            return None
        metadata = self.object.get("metadata")
        if isinstance(metadata, dict):
            value = metadata.get("resourceVersion")
            if isinstance(value, str) and value:
                return value
        return None

    @property
    def status_code(self) -> int | None:
        """For an ERROR event, the HTTP-like code of its Status (410 means relist)."""
        code = self.object.get("code")
        return code if isinstance(code, int) and not isinstance(code, bool) else None

    @property
    def message(self) -> str:
        text = self.object.get("message")
        return text if isinstance(text, str) else json.dumps(self.object)[:300]


def _short(text: str, keep: int) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return text if len(text) <= keep else f"{text[:keep]}~{digest}"


def notice_id(node_name: str, *parts: str) -> str:
    """`kubernetes/<node>/<parts...>`, shortened (with a hash, so still unique and stable)
    when a long node name or taint key would exceed the protocol's 200 characters."""
    full = "/".join((PROVIDER, node_name, *parts))
    if len(full) <= MAX_ID:
        return full
    return "/".join((PROVIDER, _short(node_name, 60), *(_short(part, 60) for part in parts)))


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ParseError(f"{what} is not a JSON object (got {type(value).__name__})")
    return value


def _optional_object(parent: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    value = parent.get(key)
    return {} if value is None else _object(value, what)


def _optional_list(parent: dict[str, Any], key: str, what: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ParseError(f"{what} is not a list (got {type(value).__name__})")
    return value


def _optional_str(parent: dict[str, Any], key: str, what: str) -> str | None:
    value = parent.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParseError(f"{what} is not a string (got {quoted(value)})")
    return value


def node_name_of(node: Any) -> str:
    metadata = _object(_object(node, "node").get("metadata"), "node metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("node metadata has no name")
    return name


def node_uid(node: Any) -> str | None:
    """`metadata.uid`: a Node deleted and created again under its name has a new one."""
    metadata = _object(_object(node, "node").get("metadata"), "node metadata")
    return _optional_str(metadata, "uid", "metadata.uid") or None


def _taints(spec: dict[str, Any]) -> list[dict[str, Any]]:
    taints = []
    for index, raw in enumerate(_optional_list(spec, "taints", "spec.taints")):
        taint = _object(raw, f"spec.taints[{index}]")
        key = taint.get("key")
        if not isinstance(key, str) or not key:
            raise ParseError(f"spec.taints[{index}] has no key")
        for name in ("value", "effect", "timeAdded"):
            _optional_str(taint, name, f"spec.taints[{index}].{name}")
        taints.append(
            {
                name: taint[name]
                for name in ("key", "value", "effect", "timeAdded")
                if taint.get(name) is not None
            }
        )
    return taints


def unschedulable_set(metadata: Mapping[str, Any]) -> dict[str, str] | None:
    """Who set `spec.unschedulable` and when, as the API server keeps it: the
    `metadata.managedFields` entry whose `fieldsV1` holds `f:spec.f:unschedulable` (its
    `manager` and `time`, whole seconds; the latest if several share it). A cordon lifted
    and applied again has a later one (the field leaves the entry when lifted), which is all
    a real cluster shows of it: the control plane's `node.kubernetes.io/unschedulable`
    taint is NoSchedule, with no value and no `timeAdded` (written only for NoExecute).
    None when no entry says (managedFields stripped, or in a shape not known here: it is
    housekeeping, so it tells nothing rather than failing the Node)."""
    return _field_set(metadata, "f:unschedulable")


def taints_set(metadata: Mapping[str, Any]) -> dict[str, str] | None:
    """Who last wrote `spec.taints` and when, as `unschedulable_set` reads it: the list is
    atomic, so managedFields records it as one field (`f:spec.f:taints`) owned by the manager
    that wrote it last, whose entry's `time` moves with each write. A NoSchedule taint removed
    and set again with the same value shows nothing else (no `timeAdded`); any other write of
    the list (another taint added or removed) moves it too."""
    return _field_set(metadata, "f:taints")


def _field_set(metadata: Mapping[str, Any], field: str) -> dict[str, str] | None:
    entries = metadata.get("managedFields")
    found: dict[str, str] | None = None
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        fields = entry.get("fieldsV1")
        spec = fields.get("f:spec") if isinstance(fields, dict) else None
        manager, when = entry.get("manager"), entry.get("time")
        if (
            isinstance(spec, dict)
            and field in spec
            and isinstance(manager, str)
            and isinstance(when, str)
            and when
            and (found is None or when > found["time"])
        ):
            found = {"manager": manager, "time": when}
    return found


def _ready_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    ready = None
    for index, raw in enumerate(_optional_list(status, "conditions", "status.conditions")):
        condition = _object(raw, f"status.conditions[{index}]")
        if condition.get("type") == "Ready" and ready is None:
            _optional_str(condition, "message", f"status.conditions[{index}].message")
            ready = condition
    return ready


def _shutdown_condition(ready: dict[str, Any] | None) -> dict[str, Any] | None:
    if ready is None:
        return None
    # The docs call "node is shutting down" the reason; kubelets put it in the message
    # (reason KubeletNotReady). Match the message.
    if ready.get("status") == "False" and SHUTDOWN_MESSAGE in (ready.get("message") or "").lower():
        keys = ("type", "status", "reason", "message", "lastTransitionTime")
        return {key: ready[key] for key in keys if ready.get(key) is not None}
    return None


def stale_boot(status: dict[str, Any], ready: dict[str, Any], host: HostBoot) -> bool:
    """Whether the Ready condition was posted in an earlier boot than the host's: both the
    Node's `status.nodeInfo.bootID` is another and the condition's `lastHeartbeatTime` is
    before the host's boot time. Anything missing or unreadable: not stale (a terminate
    kept by mistake costs a save and a restart, one dropped by mistake costs the work)."""
    node_info = _optional_object(status, "nodeInfo", "status.nodeInfo")
    reported = _optional_str(node_info, "bootID", "status.nodeInfo.bootID")
    if not reported or reported.strip().lower() == host.boot_id.strip().lower():
        return False
    # Under gVisor or Kata the pod's boot id is the sandbox's, never the node's, so the ids
    # always differ there; the time tells. lastHeartbeatTime, not lastTransitionTime: the
    # kubelet sets the heartbeat on every post of the condition, so it says when this status
    # was reported, whereas it keeps the transition time of an earlier Ready=False (runtime
    # down, then shutting down), which can predate a sandbox started since. The transition
    # is never later than the heartbeat, so on its own it could never show a post is recent.
    heartbeat = _optional_str(ready, "lastHeartbeatTime", "Ready lastHeartbeatTime")
    if not heartbeat:
        return False
    try:
        posted = parse_time(heartbeat)
    except ValueError:
        return False
    return posted < host.booted_at


def node_reports(
    node: Any,
    node_name: str,
    drain_taints: Collection[str],
    previous: Mapping[str, Report] | None = None,
    host: HostBoot | None = None,
    terminate_taints: Collection[str] = (),
    karpenter_deadline: datetime | None = None,
    clock_ahead: timedelta = timedelta(0),
) -> list[Report]:
    """The reports a Node object stands for (drains and terminates only; no clears).

    `previous` are the reports active before this object: a shutdown among them stays while
    the Ready condition is `Unknown`, if it was raised for this same object (its `uid`): a
    Node deleted and created again under the name is not the one that shut down. With
    `host` (this host's boot), a shutdown is stale when `status.nodeInfo.bootID` names
    another boot and it was posted before the host booted (see `stale_boot`). Raises
    ParseError when the object is not a Node of that name or a field has a wrong type.
    A taint among `drain_taints` is a drain, or a terminate when it is in `terminate_taints`.
    `karpenter_deadline` (the NodeClaim's termination timestamp, see `karpenter`) is the
    deadline of Karpenter's taint and of the Node's deletion. Deadlines are on the cluster's
    clock, which this node's is `clock_ahead` of (`started_deadline`).
    """
    node = _object(node, "node")
    name = node_name_of(node)
    if name != node_name:
        raise ParseError(f"got node {quoted(name)}, watching {node_name!r}")
    metadata = _object(node["metadata"], "node metadata")
    uid = node_uid(node)
    spec = _optional_object(node, "spec", "node spec")
    status = _optional_object(node, "status", "node status")
    unschedulable = spec.get("unschedulable", False)
    if unschedulable is None:
        unschedulable = False
    if not isinstance(unschedulable, bool):
        raise ParseError(f"spec.unschedulable is not a boolean (got {quoted(unschedulable)})")
    taints = _taints(spec)
    now = utcnow()

    def report(
        action: Literal["drain", "terminate"], parts: tuple[str, ...], detail: dict[str, Any]
    ) -> Report:
        return Report(
            id=notice_id(node_name, *parts),
            action=action,
            reason=REASON,
            provider=PROVIDER,
            noticed_at=now,
            detail={"node": node_name, **({"uid": uid} if uid else {}), **detail},
        )

    reports = []
    cordon_taint = next((t for t in taints if t["key"] == CORDON_TAINT), None)
    cordon_counts = CORDON_TAINT in drain_taints and cordon_taint is not None
    if unschedulable or cordon_counts:
        detail: dict[str, Any] = {"condition": "cordon", "unschedulable": unschedulable}
        if cordon_taint is not None:
            detail["taint"] = cordon_taint
        set_by = unschedulable_set(metadata) if unschedulable else None
        if set_by is not None:
            detail["unschedulableSet"] = set_by
        reports.append(report("drain", ("cordon",), detail))
    seen = set()
    written = taints_set(metadata)
    for taint in taints:
        key = taint["key"]
        if key == CORDON_TAINT or key not in drain_taints or key in seen:
            continue
        seen.add(key)
        action: Literal["drain", "terminate"] = "terminate" if key in terminate_taints else "drain"
        marked = {"taintsSet": written} if written is not None else {}
        tainted = report(action, ("taint", key), {"condition": "taint", "taint": taint, **marked})
        if key in KARPENTER_TAINTS and karpenter_deadline is not None:
            tainted = tainted.model_copy(update={"deadline": karpenter_deadline})
        reports.append(tainted)
    deleting = _optional_str(metadata, "deletionTimestamp", "metadata.deletionTimestamp")
    if deleting:
        deletion = report(
            "drain", ("deleting",), {"condition": "deleting", "deletionTimestamp": deleting}
        )
        reports.append(deletion.model_copy(update={"deadline": karpenter_deadline}))
    ready = _ready_condition(status)
    shutdown = _shutdown_condition(ready)
    if shutdown is not None and ready is not None and host and stale_boot(status, ready, host):
        shutdown = None
    if shutdown is not None:
        reports.append(report("terminate", ("shutdown",), {"condition": "shutdown", **shutdown}))
    elif ready is not None and ready.get("status") == "Unknown" and previous:
        # Once the kubelet has shut down it stops posting, and the node lifecycle controller
        # turns Ready=False into Unknown ("Kubelet stopped posting node status"): the node is
        # not back, so the shutdown stands until Ready is True (or False for another cause).
        kept = previous.get(notice_id(node_name, "shutdown"))
        if kept is not None and kept.detail.get("uid") == uid:
            reports.append(kept)
    condition = _vm_event_condition(status)
    event = vm_event(condition) if condition is not None else None
    if condition is not None and event is not None and event.type in _VM_EVENT_ACTIONS:
        # Started: the event is under way, whatever its type; its NotBefore is gone.
        action = "terminate" if event.status == "Started" else _VM_EVENT_ACTIONS[event.type]
        keys = ("type", "status", "reason", "message", "lastTransitionTime")
        detail = {key: condition[key] for key in keys if condition.get(key) is not None}
        vm = report(action, ("vm-event", event.type), {"condition": "vm-event", **detail})
        deadline = event.not_before
        if event.status == "Started":
            before = (previous or {}).get(vm.id)
            deadline = started_deadline(before, now - clock_ahead)
        reports.append(vm.model_copy(update={"deadline": deadline}))
    return reports


def started_deadline(before: Report | None, cluster_now: datetime) -> datetime:
    """The deadline of a VM event shown Started, on the cluster's clock: the event is under
    way, so it is the earliest of `cluster_now` and the deadline published before for the same
    notice (the Scheduled NotBefore, or the moment it was first seen Started), which `before`
    carries on this node's clock, moved by the skew in its detail. Without one (no NotBefore
    reads once Started) the terminate had no deadline, and the board could not name the
    clients that never acked it; taken as `cluster_now` on every read, it would move, and go
    out again, at each change of the Node."""
    if before is None or before.action == "clear" or before.deadline is None:
        return cluster_now
    try:
        published = before.deadline - (sent_skew(before) or timedelta(0))
    except OverflowError:
        return cluster_now
    return min(published, cluster_now)


VM_EVENT_CONDITION = "VMEventScheduled"
# Newer AKS node-problem-detectors report a Spot eviction in a condition of its own too (reason
# `SpotEvictionIncoming`), its message shaped as VMEventScheduled's: `Preempt Scheduled:
# <NotBefore>. ...`. karpenter-provider-azure drains by it. Only a Preempt counts there.
PREEMPTION_CONDITION = "PreemptionScheduled"
# `<EventType> <EventStatus>[: <NotBefore>]. <more>`, as AKS's node-problem-detector writes the
# Scheduled Event into the condition's message; NotBefore is RFC 1123 (Azure's own field).
_VM_EVENT = re.compile(
    r"(Freeze|Reboot|Redeploy|Preempt|Terminate) (Scheduled|Started)(?:: *([^.]*))?(?:\.|$)"
)
# What each event means for a job, as the azure provider maps the same events.
_VM_EVENT_ACTIONS: dict[str, Literal["drain", "terminate"]] = {
    "Preempt": "terminate",
    "Terminate": "terminate",
    "Reboot": "drain",
    "Redeploy": "drain",
}


@dataclass(frozen=True)
class VmEvent:
    """An Azure Scheduled Event as AKS's node-problem-detector reports it on the Node."""

    type: str
    status: str
    not_before: datetime | None


def vm_event(condition: Mapping[str, Any]) -> VmEvent | None:
    """The Scheduled Event of a `VMEventScheduled` condition, None when it is not True or its
    message names no event. A NotBefore that is not an RFC 1123 date is None (no deadline:
    the event is still acted on)."""
    kind = condition.get("type")
    if kind not in (VM_EVENT_CONDITION, PREEMPTION_CONDITION) or condition.get("status") != "True":
        return None
    message = " ".join(str(condition.get("message") or "").split())
    match = _VM_EVENT.match(message)
    if match is None or (kind == PREEMPTION_CONDITION and match.group(1) != "Preempt"):
        return None
    when = (match.group(3) or "").strip()
    try:
        not_before = parse_http_date(when) if when and match.group(2) == "Scheduled" else None
    except ValueError:
        not_before = None
    return VmEvent(match.group(1), match.group(2), not_before)


def _vm_event_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    """The first VMEventScheduled or PreemptionScheduled condition that names an event to act
    on (both may report the same Preempt: one notice, same id)."""
    for index, raw in enumerate(_optional_list(status, "conditions", "status.conditions")):
        condition = _object(raw, f"status.conditions[{index}]")
        if condition.get("type") in (VM_EVENT_CONDITION, PREEMPTION_CONDITION):
            _optional_str(condition, "message", f"status.conditions[{index}].message")
            event = vm_event(condition)
            if event is not None and event.type in _VM_EVENT_ACTIONS:
                return condition
    return None


def node_vm_event(node: Any) -> VmEvent | None:
    """The Scheduled Event a Node's condition shows (the one `node_reports` acts on), None
    when it shows none. Raises ParseError where `node_reports` does."""
    status = _optional_object(_object(node, "node"), "status", "node status")
    condition = _vm_event_condition(status)
    return vm_event(condition) if condition is not None else None


def deleted_report(node_name: str, uid: str | None = None) -> Report:
    """The Node object is gone: pods bound to it are being deleted too."""
    return Report(
        id=notice_id(node_name, "deleted"),
        action="terminate",
        reason=REASON,
        provider=PROVIDER,
        detail={"node": node_name, **({"uid": uid} if uid else {}), "condition": "deleted"},
    )


def changes(previous: Mapping[str, Report], current: Iterable[Report]) -> list[Report]:
    """What to emit to go from `previous` to `current` (both active reports): new ones, ones
    whose action or deadline changed, and a clear (same id) for each that vanished."""
    out = []
    current_ids = set()
    for report in current:
        current_ids.add(report.id)
        before = previous.get(report.id)
        if before is None or (before.action, before.deadline) != (report.action, report.deadline):
            out.append(report)
    for notice_id_, before in previous.items():
        if notice_id_ not in current_ids:
            out.append(before.model_copy(update={"action": "clear", "noticed_at": utcnow()}))
    return out


# How much later than a notice was noticed (on the cluster's clock) a mark's time must be to
# say its condition was set again since: the mark has whole seconds, and the skew is read from
# a `Date` of whole seconds.
SET_MARGIN = timedelta(seconds=2)


def _marks(report: Report) -> dict[str, tuple[str, str | None]]:
    """What tells when the condition a report was raised for was set, by field, each with the
    time it holds (None: not a time). A cordon: the managedFields entry that set
    `spec.unschedulable` (`unschedulable_set`: a real cluster's cordon taint has no
    `timeAdded`); without one, what its taint has. A taint: its `timeAdded` (NoExecute only),
    its value (Cluster Autoscaler's `ToBeDeletedByClusterAutoscaler` has no `timeAdded` and the
    Unix time the scale-down began as its value), and the managedFields entry that last wrote
    the taints (`taints_set`: all a NoSchedule taint set again with the same value shows)."""
    set_by = report.detail.get("unschedulableSet")
    if isinstance(set_by, dict):
        when = set_by.get("time")
        text = f"{set_by.get('manager')} {when}"
        return {"unschedulableSet": (text, when if isinstance(when, str) else None)}
    marks: dict[str, tuple[str, str | None]] = {}
    taint = report.detail.get("taint")
    if isinstance(taint, dict):
        for name in ("timeAdded", "value"):
            mark = taint.get(name)
            if isinstance(mark, str) and mark:
                marks[name] = (mark, mark if name == "timeAdded" else None)
    written = report.detail.get("taintsSet")
    if isinstance(written, dict):
        when = written.get("time")
        text = f"{written.get('manager')} {when}"
        marks["taintsSet"] = (text, when if isinstance(when, str) else None)
    return marks


def _set_since(before: Report, now: Mapping[str, tuple[str, str | None]], ahead: timedelta) -> bool:
    """Whether a time among `now`'s marks is later than `before` was noticed (on the cluster's
    clock: this node's is `ahead` of it), by more than SET_MARGIN: the condition was set again
    after the notice was raised. For a notice that has no mark to compare (saved by an agent
    from before the marks, or seen before its mark was written)."""
    try:
        noticed = before.noticed_at - ahead
    except OverflowError:
        return False
    for _, when in now.values():
        if when is None:
            continue
        try:
            if parse_time(when) > noticed + SET_MARGIN:
                return True
        except (ValueError, OverflowError):
            continue
    return False


def readded(
    previous: Mapping[str, Report], current: Iterable[Report], ahead: timedelta = timedelta(0)
) -> list[Report]:
    """The clears owed, on a relist, for the reports of `previous` whose condition was removed
    and set again since (`_marks`: one both sides have differs): under the same id and action,
    a report sent again without a clear is a repeat to a job's guard, which had saved for the
    first one. A watch sees the removal; a relist (after a 410, or by a restarted agent) does
    not. Where `previous` has no mark the current one has (a notice saved by an agent from
    before the marks), a time among the current marks later than it was noticed tells it
    (`_set_since`; `ahead`: how far this node's clock is ahead of the cluster's). A mark
    missing on the current side (managedFields stripped) tells nothing."""
    out = []
    for report in current:
        before = previous.get(report.id)
        if before is None or before.action == "clear":
            continue
        was, now = _marks(before), _marks(report)
        common = was.keys() & now.keys()
        if common:
            again = any(was[name][0] != now[name][0] for name in common)
        else:
            again = _set_since(before, now, ahead)
        if again:
            out.append(before.model_copy(update={"action": "clear", "noticed_at": utcnow()}))
    return out


def as_restored(
    restored: Mapping[str, Report], current: Iterable[Report], raised_again: Collection[str] = ()
) -> list[Report]:
    """`current`, each report the agent restored with the same action and deadline replaced
    by the restored one: a running watcher sends a notice again only when its action or
    deadline changes, so the agent holds it with the detail it was first sent with. Its detail
    as listed after a restart (a cordon's `spec.unschedulable` is set first, the control
    plane's taint a moment later) differed from that, and the agent sent the drain again,
    another Event and webhook delivery, another save for a job that waits for drains. Not
    those of `raised_again` (a taint added again: raised afresh, with what it is now)."""
    out = []
    for report in current:
        before = restored.get(report.id)
        if (
            before is not None
            and report.id not in raised_again
            and (before.action, before.deadline) == (report.action, report.deadline)
        ):
            report = before
        out.append(report)
    return out


def parse_list(payload: Any) -> NodeList:
    """A NodeList (filtered to one node by the field selector)."""
    payload = _object(payload, "node list")
    if payload.get("kind") not in (None, "NodeList"):
        raise ParseError(f"expected a NodeList, got kind {quoted(payload.get('kind'))}")
    metadata = _object(payload.get("metadata"), "node list metadata")
    version = metadata.get("resourceVersion")
    if not isinstance(version, str) or not version:
        raise ParseError("node list has no metadata.resourceVersion")
    items = _optional_list(payload, "items", "node list items")
    if len(items) > 1:
        raise ParseError(f"the field selector matched {len(items)} nodes, expected at most one")
    return NodeList(version, _object(items[0], "node list item") if items else None)


def parse_event(line: str | bytes) -> WatchEvent:
    """One line of a watch stream: `{"type": ..., "object": {...}}`."""
    try:
        payload = json.loads(line)
    # RecursionError: a line nested a few thousand deep, which escaped as a crash.
    except (ValueError, RecursionError) as error:
        text = line if isinstance(line, str) else line.decode(errors="replace")
        raise ParseError(f"watch line is not JSON ({error}): {text[:200]!r}") from None
    payload = _object(payload, "watch event")
    kind = payload.get("type")
    if kind not in EVENT_TYPES:
        raise ParseError(f"unknown watch event type {quoted(kind)}")
    event = WatchEvent(kind, _object(payload.get("object"), f"{kind} event object"))
    if kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") and event.resource_version is None:
        raise ParseError(f"{kind} event object has no metadata.resourceVersion")
    return event


__all__ = [
    "CORDON_TAINT",
    "PREEMPTION_CONDITION",
    "PROVIDER",
    "REASON",
    "SHUTDOWN_MESSAGE",
    "VM_EVENT_CONDITION",
    "HostBoot",
    "NodeList",
    "VmEvent",
    "WatchEvent",
    "as_restored",
    "changes",
    "deleted_report",
    "node_name_of",
    "node_reports",
    "node_uid",
    "node_vm_event",
    "notice_id",
    "parse_event",
    "parse_list",
    "readded",
    "stale_boot",
    "started_deadline",
    "taints_set",
    "unschedulable_set",
    "vm_event",
]
