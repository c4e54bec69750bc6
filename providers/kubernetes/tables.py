"""The simulator's server-side tables: what `kubectl get` prints for a Node, an Event and a
PodDisruptionBudget.

kubectl asks every `get` for a `meta.k8s.io` Table (`Accept: application/json;as=Table;
v=v1;g=meta.k8s.io,...,application/json`) and prints the server's columns; given the plain
object instead it prints only NAME and AGE, so an operator checking a cordon by
`kubectl get nodes` never saw `Ready,SchedulingDisabled`. The columns and cells are the
API server's node printer's (kubernetes pkg/printers/internalversion/printers.go), the
ages its `duration.HumanDuration`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from forewarn.protocol.timefmt import parse_time

# The Table versions kubectl accepts, in its order of preference.
TABLE_VERSIONS = ("v1", "v1beta1")
ROLE_PREFIX = "node-role.kubernetes.io/"


def table_version(accept: str | None) -> str | None:
    """The meta.k8s.io Table version the `Accept` header asks for first, None if it asks
    for none (a client that wants the object itself)."""
    for media_range in (accept or "").split(","):
        kind, *params = (part.strip() for part in media_range.split(";"))
        if kind != "application/json":
            continue
        values = dict(param.partition("=")[::2] for param in params)
        if values.get("as") == "Table" and values.get("g") == "meta.k8s.io":
            version = values.get("v")
            if version in TABLE_VERSIONS:
                return version
    return None


def _column(name: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": description,
        "priority": priority,
    }


NODE_COLUMNS = [
    _column("Name", "string", "Name must be unique within a namespace."),
    _column("Status", "string", "The status of the node"),
    _column("Roles", "string", "The roles of the node"),
    _column("Age", "string", "CreationTimestamp is a timestamp of when this object was created."),
    _column("Version", "string", "Kubelet Version reported by the node."),
    _column("Internal-IP", "string", "List of internal IPs.", 1),
    _column("External-IP", "string", "List of external IPs.", 1),
    _column("OS-Image", "string", "OS image reported by the node.", 1),
    _column("Kernel-Version", "string", "Kernel version reported by the node.", 1),
    _column("Container-Runtime", "string", "Container runtime reported by the node.", 1),
]


def human_duration(elapsed: timedelta) -> str:
    """An age as kubectl prints it (apimachinery's `duration.HumanDuration`)."""
    seconds = int(elapsed.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d" if rest == 0 else f"{days}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        rest = days % 365
        return f"{years}y" if rest == 0 else f"{years}y{rest}d"
    return f"{years}y"


def _age(metadata: dict[str, Any], now: datetime) -> str:
    created = metadata.get("creationTimestamp")
    if not isinstance(created, str):
        return "<unknown>"
    return human_duration(now - parse_time(created))


def node_status(node: dict[str, Any]) -> str:
    """`Ready`, `NotReady` (Ready False or Unknown), `Unknown` (no Ready condition), then
    `,SchedulingDisabled` when cordoned: the printer's STATUS."""
    ready = [c for c in node["status"].get("conditions") or [] if c.get("type") == "Ready"]
    status = (
        ["Unknown"] if not ready else ["Ready" if ready[0].get("status") == "True" else "NotReady"]
    )
    if node["spec"].get("unschedulable"):
        status.append("SchedulingDisabled")
    return ",".join(status)


def node_roles(labels: dict[str, str]) -> str:
    """The roles `node-role.kubernetes.io/<role>` and `kubernetes.io/role=<role>` name."""
    roles = {key[len(ROLE_PREFIX) :] for key in labels if key.startswith(ROLE_PREFIX)}
    roles.discard("")
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(roles)) or "<none>"


def _address(node: dict[str, Any], kind: str) -> str:
    for address in node["status"].get("addresses") or []:
        if address.get("type") == kind:
            return str(address.get("address", ""))
    return "<none>"


def node_cells(node: dict[str, Any], now: datetime) -> list[str]:
    info = node["status"].get("nodeInfo") or {}
    return [
        node["metadata"]["name"],
        node_status(node),
        node_roles(node["metadata"].get("labels") or {}),
        _age(node["metadata"], now),
        info.get("kubeletVersion", ""),
        _address(node, "InternalIP"),
        _address(node, "ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _row_object(item: dict[str, Any], include: str, version: str) -> dict[str, Any] | None:
    """The row's object as `includeObject` asks (`Metadata` unless told): kubectl reads
    labels (`--show-labels`, `-L`) and the namespace (`-A`) from it."""
    if include == "None":
        return None
    if include == "Object":
        return item
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": item["metadata"],
    }


def node_table(
    nodes: list[dict[str, Any]],
    resource_version: str,
    now: datetime,
    version: str,
    include: str | None,
) -> dict[str, Any]:
    """A Table of the nodes, as the API server answers a list or a get asked for one."""
    cells = [node_cells(node, now) for node in nodes]
    return _table(NODE_COLUMNS, nodes, cells, resource_version, version, include)


EVENT_COLUMNS = [
    _column("Last Seen", "string", "Time when this Event was last seen"),
    _column("Type", "string", "Type of this event (Normal, Warning)"),
    _column("Reason", "string", "Why the action was taken"),
    _column("Object", "string", "The object that this event is about"),
    _column("Subobject", "string", "The subobject this event is about (fieldPath)", 1),
    _column("Source", "string", "The component that reported this event", 1),
    _column("Message", "string", "A human-readable description of the status of this operation"),
    _column("First Seen", "string", "Time when this Event was first seen", 1),
    _column("Count", "integer", "The number of times this event has occurred", 1),
    _column("Name", "string", "Name must be unique within a namespace.", 1),
]


def _since(stamp: Any, now: datetime) -> str:
    """A time's age, `<unknown>` for none (the printer's translate*TimestampSince)."""
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    return human_duration(now - parse_time(stamp))


def event_cells(event: dict[str, Any], now: datetime) -> list[Any]:
    """A core v1 Event's cells, wide ones included (the server fills every column; kubectl
    shows the priority-1 ones for `-o wide`): first seen from `firstTimestamp`, else the
    `eventTime` an events.k8s.io/v1 Event has; last seen from `lastTimestamp`, else first."""
    first = event.get("firstTimestamp") or None
    first_seen = _since(first if first else event.get("eventTime"), now)
    last = event.get("lastTimestamp") or None
    last_seen = _since(last, now) if last else first_seen
    count = event.get("count") or 1
    series = event.get("series")
    if isinstance(series, dict):
        last_seen = _since(series.get("lastObservedTime"), now)
        count = series.get("count", count)
    regarding = event.get("involvedObject") or {}
    kind = str(regarding.get("kind", "")).lower()
    target = f"{kind}/{regarding['name']}" if regarding.get("name") else kind
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent", "")
    instance = source.get("host") or event.get("reportingInstance", "")
    return [
        last_seen,
        event.get("type", ""),
        event.get("reason", ""),
        target,
        regarding.get("fieldPath", ""),
        f"{component}, {instance}" if instance else component,
        str(event.get("message", "")).strip(),
        first_seen,
        count,
        event["metadata"].get("name", ""),
    ]


def event_table(
    events: list[dict[str, Any]],
    resource_version: str,
    now: datetime,
    version: str,
    include: str | None,
) -> dict[str, Any]:
    """A Table of core v1 Events, as the API server answers `kubectl get events`."""
    cells = [event_cells(event, now) for event in events]
    return _table(EVENT_COLUMNS, events, cells, resource_version, version, include)


PDB_COLUMNS = [
    _column("Name", "string", "Name must be unique within a namespace."),
    _column("Min Available", "string", "The minimum number of pods that must be available."),
    _column("Max Unavailable", "string", "The maximum number of pods that may be unavailable."),
    _column(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    _column("Age", "string", "CreationTimestamp is a timestamp of when this object was created."),
]


def pdb_cells(pdb: dict[str, Any], now: datetime) -> list[Any]:
    """A PodDisruptionBudget's cells: `N/A` for the one of minAvailable and maxUnavailable
    it does not set."""
    spec = pdb["spec"]
    return [
        pdb["metadata"]["name"],
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        pdb.get("status", {}).get("disruptionsAllowed", 0),
        _age(pdb["metadata"], now),
    ]


def pdb_table(
    pdbs: list[dict[str, Any]],
    resource_version: str,
    now: datetime,
    version: str,
    include: str | None,
) -> dict[str, Any]:
    """A Table of PodDisruptionBudgets, as the API server answers `kubectl get pdb`."""
    cells = [pdb_cells(pdb, now) for pdb in pdbs]
    return _table(PDB_COLUMNS, pdbs, cells, resource_version, version, include)


def _table(
    columns: list[dict[str, Any]],
    items: list[dict[str, Any]],
    cells: list[list[Any]],
    resource_version: str,
    version: str,
    include: str | None,
) -> dict[str, Any]:
    """The Table the API server wraps rows in, each row its cells and the object as asked."""
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns,
        "rows": [
            {"cells": row, "object": _row_object(item, include or "Metadata", version)}
            for item, row in zip(items, cells, strict=True)
        ],
    }
