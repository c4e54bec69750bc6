"""A node API simulator, good enough for the watcher: one Node, served like kube-apiserver.

- `GET /api/v1/nodes?fieldSelector=metadata.name%3D<node>`: a NodeList with the current
  resourceVersion; `&watch=1&resourceVersion=<rv>&allowWatchBookmarks=true&timeoutSeconds=<n>`:
  a chunked stream of newline-delimited `{"type", "object"}` events (ADDED, MODIFIED, DELETED,
  BOOKMARK, ERROR), replaying what happened after `<rv>`, ended after `timeoutSeconds` or
  the simulator's own `max_watch_seconds`, whichever is first.
- A resourceVersion older than the last compaction gets 410 Gone: by default as the real
  server does it (HTTP 200, then an ERROR event with a Status of code 410), or as an HTTP 410.
- A resourceVersion newer than the server's (a client that watched before an etcd restore)
  waits, as kube-apiserver's watch cache does, up to 3 s for the server to reach it, then
  gets an ERROR event: a 504 Timeout "Too large resource version" whose cause is
  `ResourceVersionTooLarge`.
- `GET`/`PATCH /api/v1/nodes/<node>` (merge or strategic-merge patch; what `kubectl cordon` and
  `forewarn drill kubernetes` send). Cordoning adds the `node.kubernetes.io/unschedulable` taint, as
  the node lifecycle controller does (NoSchedule, no value), and records who set
  `spec.unschedulable` and when in a `metadata.managedFields` entry (the `fieldManager` parameter,
  else `kubectl-cordon`), which loses the field when the cordon is lifted; `spec.taints` (an
  atomic list) is one field there too, owned by its last writer (the controller's
  `kube-controller-manager` for the cordon's taint). As the API server does, a
  taint gets `timeAdded` only when its effect is NoExecute. A `metadata.uid` in the patch other than
  the node's is 422 Invalid (the uid is immutable), as the API server answers; so is a taint the API
  server's validation refuses (a key that is no qualified name, a value that is no label value, an
  unknown effect), whether patched or raised through `/_sim/notices`, and a patch listing two taints
  of one key and effect (taints are unique by that pair).
- `GET /api/v1/pods` (the pods raised with `pod`, none by default; see `simpods`, which also
  serves `GET .../namespaces/<ns>/pods/<name>` and the `.../eviction` `kubectl drain` posts,
  refused with a 429 while a PodDisruptionBudget holds the pod; `GET /apis/policy/v1/...
  poddisruptionbudgets` serves the budgets, see `simpdbs`),
  `GET /api/v1/events` (the
  Events posted, in their core v1 form) and the node's Lease in `kube-node-lease`: what
  `kubectl describe node` reads.
- The legacy discovery documents (`/api`, `/apis`, `/api/v1` and the two groups' versions),
  which `kubectl` reads before it touches a resource.
- With a token set, requests without `Authorization: Bearer <token>` get 401.
- `POST /apis/events.k8s.io/v1/namespaces/<ns>/events`: an Event, checked for the fields the
  API server requires (422 otherwise), kept in `GET /_sim/state` under `events`.
- With grants (`--grant VERB:RESOURCE`), only those verbs pass, as RBAC would; the rest get
  the API server's 403 Forbidden.

Control API kinds (`POST /_sim/notices {"kind": ...}`), with the id each returns:

| kind | fields | effect | id (DELETE undoes) |
| --- | --- | --- | --- |
| `cordon` | `taint` (default true) | spec.unschedulable + taint | `cordon` |
| `taint` | `key`, `value`, `effect` (NoSchedule), `manager` | adds a taint | `taint/<key>` |
| `shutdown` | `message`, `reason` | Ready=False, "node is shutting down" | `shutdown` |
| `vm-event` | `event`, `status`, `not_before` | AKS VMEventScheduled=True | `vm-event` |
| `delete` | | deletes the Node | `node` |
| `compact` | `as` (stream/status), `expire_watches` | every rv so far is too old | |
| `restore` | `back` (default 100) | an etcd restore: the rv goes back, watches end | |
| `timeout` | | ends every open watch now (server-side timeout) | |
| `rotate-token` | `token` | only this token is accepted from now on | |
| `pod` | `name`, `namespace`, `grace`, `labels` | a pod on the node, owned by a Job | `pod/…` |
| `pdb` | `name`, `namespace`, `match_labels`, `min_available`, `max_unavailable` | PDB | `pdb/…` |
| `karpenter` | `termination` | Karpenter's disruption (see below) | `karpenter` |

`pod/…` and `pdb/…` are `<kind>/<ns>/<name>`. `pdb` is a policy/v1 PodDisruptionBudget (see
`simpdbs`): an eviction it forbids is the API server's 429.

`karpenter`: a NodeClaim owns the Node, which gets the `karpenter.sh/disrupted` taint; with
`termination` (RFC 3339), the NodeClaim is deleted with that termination timestamp and then
the Node (`GET /apis/karpenter.sh/v1/nodeclaims/<name>` serves the NodeClaim).

Faults are the shared vocabulary (`POST /_sim/faults`), answered with a `Status` object as
kube-apiserver does; a `slow`, `malformed` or `oversize` fault on a watch applies to its
stream.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from http import HTTPStatus
from typing import Any

from forewarn.protocol.timefmt import duration_arg

from ..sim_cli import SimulatorCommand
from ..simulator import (
    SimError,
    SimRequest,
    SimResponse,
    Simulator,
    refuse_unknown_fields,
    yes_or_no,
)
from .karpenter import TERMINATION_ANNOTATION
from .nodes import CORDON_TAINT, SHUTDOWN_MESSAGE
from .settings import taint_key_problem
from .simpdbs import PDB_NOTICE_FIELDS, PDB_PATH, PDB_RESOURCE, check_pdb_fields
from .simpods import POD_NOTICE_FIELDS, POD_PATH, POD_RESOURCES, SimPods, check_pod_fields
from .simstatus import api_status
from .tables import event_table, node_table, pdb_table, table_version

DEFAULT_NODE = "forewarn-sim-node"
# The field manager of the node lifecycle controller's writes (the cordon's taint), and of a
# taint raised through the control API without a `manager`.
CONTROLLER = "kube-controller-manager"
SIM_MANAGER = "forewarn-sim"
DRILL_TOKEN = "forewarn-drill-token"
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
HISTORY = 1000
# kube-apiserver's watch cache waits this long for a resourceVersion it has not reached yet
# (`blockTimeout`) before it answers "Too large resource version".
TOO_LARGE_WAIT = 3.0
# The simulator's server closes the connection after a stream; say so, or a client would
# try to reuse it and see "server disconnected".
STREAM_HEADERS = {"Connection": "close"}
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def _stamp(moment: datetime) -> str:
    """A Kubernetes timestamp: RFC 3339 in whole seconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _too_large(asked: int, current: int) -> dict[str, Any]:
    """kube-apiserver's answer to a resourceVersion it has not reached (storage's
    `NewTooLargeResourceVersionError`): a 504 Timeout with a cause and a retry hint."""
    status = api_status(504, "Timeout", f"Too large resource version: {asked}, current: {current}")
    status["details"] = {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }
    return status


# What a Table request's `includeObject` may be (none: Metadata).
INCLUDE_OBJECT = (None, "None", "Metadata", "Object")


def _bad_include(include: str | None) -> SimResponse:
    """The API server's 400 for an `includeObject` it does not know."""
    message = f'includeObject: Unsupported value: "{include}"'
    return SimResponse.json(api_status(400, "BadRequest", message), 400)


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (a strategic merge patch of scalars is the same)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Each notice kind's fields (POST /_sim/notices): any other is refused, as a typo (`efect`)
# quietly became the default of the field meant.
NOTICE_FIELDS: dict[str, tuple[str, ...]] = {
    "cordon": ("taint",),
    "taint": ("key", "value", "effect", "manager"),
    "shutdown": ("reason", "message"),
    "unreachable": (),
    "vm-event": ("event", "status", "not_before"),
    "delete": (),
    "compact": ("as", "expire_watches"),
    "restore": ("back",),
    "timeout": (),
    "rotate-token": ("token",),
    "karpenter": ("termination",),
    "pod": POD_NOTICE_FIELDS,
    "pdb": PDB_NOTICE_FIELDS,
}


class KubernetesSimulator(Simulator):
    name = "kubernetes"
    notice_kinds = (
        "cordon",
        "taint",
        "shutdown",
        "unreachable",
        "vm-event",
        "delete",
        "compact",
        "restore",
        "timeout",
        "rotate-token",
        "karpenter",
        "pod",
        "pdb",
    )
    # kube-apiserver's own limit is per client priority level, not a fixed rate; this is the
    # client-go default (QPS 5) a well-behaved client stays under.
    throttle_rate = 5.0

    def __init__(
        self,
        node: str = DEFAULT_NODE,
        token: str | None = None,
        max_watch_seconds: float = 60.0,
        bookmark_interval: float = 5.0,
        gone_as: str = "stream",
        grants: frozenset[str] | None = None,
        too_large_wait: float = TOO_LARGE_WAIT,
    ) -> None:
        super().__init__()
        # RBAC, as far as the agent meets it: None grants everything; otherwise only the
        # listed "verb:resource" pairs (e.g. "patch:nodes", "create:events") pass, and the
        # rest get the API server's 403.
        self.grants = grants
        self.events: list[dict[str, Any]] = []
        if gone_as not in ("stream", "status"):
            raise ValueError("gone_as must be 'stream' or 'status'")
        self.node_name = node
        self.token = token
        self.max_watch_seconds = max_watch_seconds
        self.bookmark_interval = bookmark_interval
        self.gone_as = gone_as
        self.too_large_wait = too_large_wait
        self.rv = 1000
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.compacted_rv = 0  # a watch from an rv below this is too old
        self.dropped_upto = 0  # events up to this rv are no longer in the history
        self.timeout_generation = 0  # bumped to end open watches (server-side timeout)
        self.expire_generation = 0  # bumped to end open watches with a 410
        self.open_watches = 0
        self.watch_log: list[dict[str, Any]] = []
        # Each `verb:resource` a client was let through with, to hold a role to what is used.
        self.verbs_used: set[str] = set()
        self.counts = {
            "lists": 0,
            "watches": 0,
            "unauthorized": 0,
            "gone": 0,
            "too_large": 0,
            "bookmarks": 0,
            "forbidden": 0,
        }
        # Bumped at each stop of a server serving this simulator: the watches open then end.
        # A count, not a flag: the same simulator served again (an API server restarted over
        # its etcd) streams its new watches, where a flag ended each at once, for good.
        self.stops = 0
        self.node: dict[str, Any] | None = None
        # Karpenter's NodeClaims by name (`karpenter`): what GET .../nodeclaims/<name> serves.
        self.nodeclaims: dict[str, dict[str, Any]] = {}
        # The field manager that set each taint raised through the control API, by key: the
        # one that removes it (`DELETE /_sim/notices/taint/<key>`) or changes it.
        self.taint_managers: dict[str, str] = {}
        # The pods bound to the node (`pod`): what `kubectl drain` lists and evicts.
        self.sim_pods = SimPods(node, lambda: _stamp(self.now()))
        self._commit("ADDED", self._fresh_node())

    # The Node object.

    def _fresh_node(self) -> dict[str, Any]:
        now = _stamp(self.now())
        return {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": self.node_name,
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "node.kubernetes.io/instance-type": "gpu-sim",
                },
            },
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {
                "conditions": [self._ready_condition(True)],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.10"},
                    {"type": "Hostname", "address": self.node_name},
                ],
                "capacity": {"cpu": "8", "memory": "65536Mi", "pods": "110"},
                "allocatable": {"cpu": "7910m", "memory": "63000Mi", "pods": "110"},
                # Every field a kubelet reports: client libraries (the official Python one)
                # refuse a Node whose nodeInfo lacks one.
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": str(uuid.uuid4()),
                    "containerRuntimeVersion": "containerd://1.7.22",
                    "kernelVersion": "6.8.0-1015-aws",
                    "kubeProxyVersion": "v1.31.0",
                    "kubeletVersion": "v1.31.0-forewarn-sim",
                    "machineID": uuid.uuid4().hex,
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 24.04.1 LTS",
                    "systemUUID": str(uuid.uuid4()),
                },
            },
        }

    def _ready_condition(
        self,
        ready: bool | None,
        reason: str = "KubeletReady",
        message: str = "kubelet is posting ready status",
    ) -> dict[str, Any]:
        now = _stamp(self.now())
        return {
            "type": "Ready",
            "status": "Unknown" if ready is None else "True" if ready else "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    def _commit(self, kind: str, node: dict[str, Any]) -> None:
        """Record a change: a new resourceVersion, a history entry, wake the watches."""
        with self.lock:
            self.rv += 1
            node = copy.deepcopy(node)
            node["metadata"]["resourceVersion"] = str(self.rv)
            self.node = None if kind == "DELETED" else node
            self.history.append((self.rv, kind, node))
            if len(self.history) > HISTORY:
                self.dropped_upto = self.history[0][0]
                self.compacted_rv = max(self.compacted_rv, self.dropped_upto)
                del self.history[0]
            self.notify_change()

    def _edit(self) -> dict[str, Any]:
        if self.node is None:
            raise SimError(f"node {self.node_name!r} is deleted", 409)
        return copy.deepcopy(self.node)

    def _set_taint(
        self, node: dict[str, Any], key: str, value: str | None, effect: str, manager: str
    ) -> None:
        taints = [t for t in node["spec"].get("taints", []) if t.get("key") != key]
        taint: dict[str, Any] = {"key": key, "effect": effect}
        if effect == "NoExecute":
            # As the API server writes it: "only written for NoExecute taints" (Taint).
            taint["timeAdded"] = _stamp(self.now())
        if value:
            taint["value"] = value
        node["spec"]["taints"] = [*taints, taint]
        self._own(node, "f:taints", manager)

    def _own(self, node: dict[str, Any], field: str, manager: str) -> None:
        """`metadata.managedFields` as the API server keeps it for a field of the spec
        (`f:unschedulable`, or `f:taints`, an atomic list: one field) that `manager` has
        just written (an Update): present, it is `manager`'s alone (its entry's `time` now, in
        whole seconds; another manager's entry loses it); gone, no entry holds it. An entry
        left with no field goes."""
        name = field.removeprefix("f:")
        entries: list[dict[str, Any]] = []
        own: dict[str, Any] | None = None
        for entry in copy.deepcopy(node["metadata"].get("managedFields", [])):
            fields = entry.setdefault("fieldsV1", {})
            fields.get("f:spec", {}).pop(field, None)
            if not fields.get("f:spec", True):
                del fields["f:spec"]
            if entry.get("manager") == manager and entry.get("operation") == "Update":
                own = entry
            if fields:
                entries.append(entry)
        if node["spec"].get(name):
            if own is None or not any(entry is own for entry in entries):
                own = {"manager": manager, "operation": "Update", "apiVersion": "v1"}
                own.update(fieldsType="FieldsV1", fieldsV1={})
                entries.append(own)
            own["time"] = _stamp(self.now())
            own["fieldsV1"].setdefault("f:spec", {})[field] = {}
        if entries:
            node["metadata"]["managedFields"] = entries
        else:
            node["metadata"].pop("managedFields", None)

    def _own_unschedulable(self, node: dict[str, Any], manager: str) -> None:
        self._own(node, "f:unschedulable", manager)

    def _drop_taint(self, node: dict[str, Any], key: str, manager: str) -> bool:
        taints = node["spec"].get("taints", [])
        kept = [t for t in taints if t.get("key") != key]
        if kept:
            node["spec"]["taints"] = kept
        else:
            node["spec"].pop("taints", None)
        if len(kept) != len(taints):
            self._own(node, "f:taints", manager)
        return len(kept) != len(taints)

    def _sync_cordon_taint(self, node: dict[str, Any]) -> None:
        # The node lifecycle controller (in kube-controller-manager) mirrors
        # spec.unschedulable as a taint.
        if node["spec"].get("unschedulable"):
            if not any(t.get("key") == CORDON_TAINT for t in node["spec"].get("taints", [])):
                self._set_taint(node, CORDON_TAINT, None, "NoSchedule", CONTROLLER)
        else:
            self._drop_taint(node, CORDON_TAINT, CONTROLLER)

    # Control API hooks.

    def check_notice(self, kind: str, fields: dict[str, Any]) -> None:
        if kind not in NOTICE_FIELDS:
            return  # raise_notice names the kinds
        refuse_unknown_fields(kind, fields, NOTICE_FIELDS[kind])
        if kind == "cordon":
            yes_or_no(fields.get("taint", True), "taint")
        elif kind == "taint":
            key = fields.get("key")
            if not isinstance(key, str) or not key:
                raise SimError('a taint needs "key", a non-empty string')
            manager = fields.get("manager", SIM_MANAGER)
            if not isinstance(manager, str) or not manager:
                raise SimError('"manager" must be a non-empty string (a field manager)')
            self._check_taint(fields, fields.get("effect", "NoSchedule"))
        elif kind == "shutdown":
            for name in ("reason", "message"):
                if not isinstance(fields.get(name, ""), str):
                    raise SimError(f'"{name}" must be a string')
        elif kind == "vm-event":
            for name in ("event", "status", "not_before"):
                if not isinstance(fields.get(name, ""), str):
                    raise SimError(f'"{name}" must be a string')
        elif kind == "compact":
            if fields.get("as", self.gone_as) not in ("stream", "status"):
                raise SimError('"as" must be "stream" (an ERROR event) or "status" (HTTP 410)')
            yes_or_no(fields.get("expire_watches", False), "expire_watches")
        elif kind == "restore":
            back = fields.get("back", 100)
            if isinstance(back, bool) or not isinstance(back, int) or not 1 <= back < self.rv:
                raise SimError(f'"back" must be a whole number of versions, 1 to {self.rv - 1}')
        elif kind == "rotate-token":
            token = fields.get("token")
            if not isinstance(token, str) or not token:
                raise SimError('"token" must be a non-empty string')
        elif kind == "pod":
            check_pod_fields(fields)
        elif kind == "pdb":
            check_pdb_fields(fields)
        elif kind == "karpenter" and not isinstance(fields.get("termination", ""), str):
            raise SimError('"termination" must be an RFC 3339 time (a string)')

    @staticmethod
    def _check_taint(fields: dict[str, Any], effect: Any) -> None:
        if effect not in EFFECTS:
            raise SimError(f'"effect" must be one of {", ".join(EFFECTS)}')
        value = fields.get("value")
        if value is not None and not isinstance(value, str):
            raise SimError('"value" must be a string')
        problem = _taint_problem({"key": fields.get("key"), "value": value, "effect": effect})
        if problem is not None:
            raise SimError(f"the API server refuses this taint: {problem}", 422)

    def raise_notice(self, kind: str, fields: dict[str, Any]) -> str:
        self.check_notice(kind, fields)
        with self.lock:
            if kind == "cordon":
                node = self._edit()
                node["spec"]["unschedulable"] = True
                self._own_unschedulable(node, "kubectl-cordon")
                if fields.get("taint", True):
                    self._sync_cordon_taint(node)
                self._commit("MODIFIED", node)
                return "cordon"
            if kind == "taint":
                key = fields["key"]
                effect = fields.get("effect", "NoSchedule")
                value = fields.get("value")
                node = self._edit()
                manager = str(fields.get("manager") or SIM_MANAGER)
                self.taint_managers[key] = manager  # who removes it (DELETE taint/<key>)
                self._set_taint(node, key, value, effect, manager)
                self._commit("MODIFIED", node)
                return f"taint/{key}"
            if kind == "shutdown":
                node = self._edit()
                condition = self._ready_condition(
                    False,
                    str(fields.get("reason", "KubeletNotReady")),
                    str(fields.get("message", SHUTDOWN_MESSAGE)),
                )
                others = [c for c in node["status"]["conditions"] if c.get("type") != "Ready"]
                node["status"]["conditions"] = [*others, condition]
                self._commit("MODIFIED", node)
                return "shutdown"
            if kind == "unreachable":
                # What the node lifecycle controller writes once the kubelet stopped posting.
                node = self._edit()
                condition = self._ready_condition(
                    None, "NodeStatusUnknown", "Kubelet stopped posting node status."
                )
                others = [c for c in node["status"]["conditions"] if c.get("type") != "Ready"]
                node["status"]["conditions"] = [*others, condition]
                self._commit("MODIFIED", node)
                return "unreachable"
            if kind == "vm-event":
                # AKS's node-problem-detector: the Scheduled Event's type, status and
                # NotBefore in the message of its VMEventScheduled condition.
                event = str(fields.get("event", "Preempt"))
                status = str(fields.get("status", "Scheduled"))
                not_before = str(fields.get("not_before", ""))
                head = f"{event} {status}: {not_before}" if not_before else f"{event} {status}"
                message = f"{head}. For more information, see https://aka.ms/aks/scheduledevents"
                self._set_vm_event(True, "VMEventScheduled", message)
                return "vm-event"
            if kind == "delete":
                self._commit("DELETED", self._edit())
                return "node"
            if kind == "compact":
                return self._compact(fields)
            if kind == "restore":
                return self._restore(int(fields.get("back", 100)))
            if kind == "timeout":
                self.timeout_generation += 1
                self.notify_change()
                return "timeout"
            if kind == "karpenter":
                return self._karpenter(fields.get("termination"))
            if kind == "pod":
                self.rv += 1
                return self.sim_pods.add(fields, self.rv)
            if kind == "pdb":
                self.rv += 1
                return self.sim_pods.budgets.add(fields, self.rv)
            if kind == "rotate-token":
                token = fields.get("token")
                if not isinstance(token, str) or not token:
                    raise SimError('"token" must be a non-empty string')
                self.token = token
                return "token"
        raise SimError(
            f"unknown kind {kind!r}; use cordon, taint, shutdown, unreachable, vm-event, delete, "
            "compact, restore, timeout, rotate-token, karpenter or pod"
        )

    def _karpenter(self, termination: str | None) -> str:
        """Karpenter disrupting the node: the Node owned by a NodeClaim, tainted
        `karpenter.sh/disrupted`; with `termination`, the NodeClaim deleted with its
        termination timestamp stamped, then the Node deleted (its finalizer holds it)."""
        node = self._edit()
        name = f"{self.node_name}-claim"
        claim = self.nodeclaims.setdefault(
            name,
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodeClaim",
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": _stamp(self.now()),
                },
                "status": {"nodeName": self.node_name},
            },
        )
        owner = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "name": name,
            "uid": claim["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
        node["metadata"]["ownerReferences"] = [owner]
        self._set_taint(node, "karpenter.sh/disrupted", None, "NoSchedule", "karpenter")
        if termination:
            claim["metadata"]["deletionTimestamp"] = _stamp(self.now())
            claim["metadata"]["annotations"] = {TERMINATION_ANNOTATION: termination}
            node["metadata"]["deletionTimestamp"] = _stamp(self.now())
            node["metadata"]["finalizers"] = ["karpenter.sh/termination"]
        self._commit("MODIFIED", node)
        return "karpenter"

    def _get_nodeclaim(self, name: str) -> SimResponse:
        with self.lock:
            claim = self.nodeclaims.get(name)
            if claim is None:
                message = f'nodeclaims.karpenter.sh "{name}" not found'
                return SimResponse.json(api_status(404, "NotFound", message), 404)
            return SimResponse.json(claim)

    def _compact(self, fields: dict[str, Any]) -> str:
        gone_as = fields.get("as", self.gone_as)
        if gone_as not in ("stream", "status"):
            raise SimError('"as" must be "stream" (an ERROR event) or "status" (HTTP 410)')
        self.gone_as = gone_as
        # As if the cluster's other objects moved on: every version held so far is too old.
        self.dropped_upto = self.rv
        self.rv += 1
        self.compacted_rv = self.rv
        self.history.clear()
        if fields.get("expire_watches"):
            self.expire_generation += 1
        self.notify_change()
        return "compact"

    def _restore(self, back: int) -> str:
        """An etcd snapshot restored: the store's revision goes `back` versions, the node
        keeps its content (the snapshot's) under that older version, and the API server
        restarts, ending every open watch. A client that watched before it now holds a
        resourceVersion the server has not reached."""
        self.rv -= back
        self.history = [item for item in self.history if item[0] <= self.rv]
        # The snapshot's own history: versions up to it are served (or compacted) as before.
        self.compacted_rv = min(self.compacted_rv, self.rv)
        self.dropped_upto = min(self.dropped_upto, self.rv)
        if self.node is not None:
            self.node["metadata"]["resourceVersion"] = str(self.rv)
        self.timeout_generation += 1
        self.notify_change()
        return "restore"

    def _set_vm_event(self, active: bool, reason: str, message: str) -> None:
        node = self._edit()
        now = _stamp(self.now())
        condition = {
            "type": "VMEventScheduled",
            "status": "True" if active else "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        others = [c for c in node["status"]["conditions"] if c.get("type") != "VMEventScheduled"]
        node["status"]["conditions"] = [*others, condition]
        self._commit("MODIFIED", node)

    def withdraw(self, notice_id: str) -> bool:
        with self.lock:
            if notice_id.startswith("pod/"):
                return self.sim_pods.remove(notice_id)
            if notice_id.startswith("pdb/"):
                return self.sim_pods.budgets.remove(notice_id)
            if notice_id == "node":
                if self.node is not None:
                    return False
                self._commit("ADDED", self._fresh_node())
                return True
            if self.node is None:
                return False
            node = self._edit()
            if notice_id == "cordon":
                if not node["spec"].get("unschedulable") and not self._drop_taint(
                    node, CORDON_TAINT, CONTROLLER
                ):
                    return False
                node["spec"].pop("unschedulable", None)
                self._own_unschedulable(node, "kubectl-cordon")
                self._sync_cordon_taint(node)
            elif notice_id.startswith("taint/"):
                key = notice_id[len("taint/") :]
                if not self._drop_taint(node, key, self.taint_managers.get(key, SIM_MANAGER)):
                    return False
            elif notice_id == "karpenter":
                # The disruption called off (a replacement that failed to launch): the taint
                # goes; a deletion already under way cannot be undone, but the sim allows it.
                if not self._drop_taint(node, "karpenter.sh/disrupted", "karpenter"):
                    return False
                node["metadata"].pop("deletionTimestamp", None)
                node["metadata"].pop("finalizers", None)
                for claim in self.nodeclaims.values():
                    claim["metadata"].pop("deletionTimestamp", None)
                    claim["metadata"].pop("annotations", None)
            elif notice_id == "vm-event":
                self._set_vm_event(False, "NoVMEventScheduled", "VM has no scheduled event")
                return True
            elif notice_id in ("shutdown", "unreachable"):
                ready = [c for c in node["status"]["conditions"] if c.get("type") == "Ready"]
                if ready and ready[0].get("status") == "True":
                    return False
                others = [c for c in node["status"]["conditions"] if c.get("type") != "Ready"]
                node["status"]["conditions"] = [*others, self._ready_condition(True)]
            else:
                return False
            self._commit("MODIFIED", node)
            return True

    def change_notice(self, notice_id: str, fields: dict[str, Any]) -> None:
        if not notice_id.startswith("taint/"):
            raise SimError("only taints can be changed (value, effect)", 405)
        with self.lock:
            key = notice_id[len("taint/") :]
            node = self._edit()
            current = [t for t in node["spec"].get("taints", []) if t.get("key") == key]
            if not current:
                raise SimError(f"no taint {key!r}", 404)
            refuse_unknown_fields(notice_id, fields, ("value", "effect"))
            effect = fields.get("effect", current[0].get("effect", "NoSchedule"))
            self._check_taint({**fields, "key": key}, effect)
            manager = self.taint_managers.get(key, SIM_MANAGER)
            self._set_taint(
                node, key, fields.get("value", current[0].get("value")), effect, manager
            )
            self._commit("MODIFIED", node)

    def state(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "resourceVersion": str(self.rv),
            "compactedResourceVersion": str(self.compacted_rv),
            "token_required": self.token is not None,
            "open_watches": self.open_watches,
            "watch_log": self.watch_log[-50:],
            "verbs_used": sorted(self.verbs_used),
            "events": self.events[-200:],
            "pods": [pod for pod in self.sim_pods.listed([])],
            "evictions": self.sim_pods.evictions[-200:],
            "refusals": self.sim_pods.refusals[-200:],
            "pdbs": self.sim_pods.budgets.listed(self.sim_pods.pods.values()),
            **self.counts,
        }

    def cancel_scripts(self) -> None:
        # SimServer.stop calls this: end open watch streams too, so their threads finish.
        super().cancel_scripts()
        with self.lock:
            self.stops += 1
            self.notify_change()

    def error_page(self, status: int) -> SimResponse:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        reason = phrase.replace(" ", "")
        headers = {"Retry-After": "1"} if status == 429 else {}
        return SimResponse.json(api_status(status, reason, phrase), status, headers=headers)

    # The node API.

    def handle(self, request: SimRequest) -> SimResponse:
        path = request.path.rstrip("/")
        if path == "/version":
            return SimResponse.json({"major": "1", "minor": "31", "gitVersion": "v1.31.0-sim"})
        events = path.startswith(EVENTS_PREFIX)
        # The core v1 event list: all namespaces (None) or one.
        core = _CORE_EVENTS.match(path)
        core_namespace = core.group(1) if core else None
        nodeclaim = path[len(NODECLAIMS_PREFIX) :] if path.startswith(NODECLAIMS_PREFIX) else None
        discovery = DISCOVERY.get(path)
        pod = POD_PATH.match(path)
        pdb = PDB_PATH.match(path)
        if (
            not path.startswith("/api/v1/nodes")
            and pdb is None
            and path != PODS_PATH
            and pod is None
            and core is None
            and not path.startswith(LEASES_PREFIX)
            and not events
            and nodeclaim is None
            and discovery is None
        ):
            return SimResponse.json(api_status(404, "NotFound", f"no route {request.path}"), 404)
        if self.token is not None and request.header("Authorization") != f"Bearer {self.token}":
            with self.lock:
                self.counts["unauthorized"] += 1
            return SimResponse.json(api_status(401, "Unauthorized", "Unauthorized"), 401)
        if discovery is not None:
            # Any identity the server knows may read discovery (system:discovery), whatever
            # its role.
            if request.method != "GET":
                message = f"{request.method} {request.path}"
                return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
            return SimResponse.json(discovery)
        resource = (
            "poddisruptionbudgets"
            if pdb is not None
            else "events"
            if events
            else "nodeclaims"
            if nodeclaim is not None
            else "pods"
            if path == PODS_PATH or (pod is not None and pod.group(3) is None)
            else "pods/eviction"
            if pod is not None
            else "events"
            if core is not None
            else "leases"
            if path.startswith(LEASES_PREFIX)
            else "nodes"
        )
        refused = self._refuse(request.method, resource, request)
        if refused is not None:
            return refused
        if pdb is not None:
            return self._pdbs(request, pdb.group(1), pdb.group(2))
        if nodeclaim is not None:
            if request.method != "GET" or not nodeclaim or "/" in nodeclaim:
                message = f"{request.method} {request.path}"
                return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
            return self._get_nodeclaim(nodeclaim)
        if core is not None:
            return self._core_events(request, core_namespace)
        if events:
            return self._create_event(path, request)
        if pod is not None:
            return self._pod(request, pod.group(1), pod.group(2), pod.group(3))
        if resource == "pods":
            return self._pods(request)
        if resource == "leases":
            return self._lease(path[len(LEASES_PREFIX) :], request)
        if path == "/api/v1/nodes" and request.method == "GET":
            matches = self._selector_matches(request.param("fieldSelector"))
            if request.param("watch") in ("1", "true"):
                return self._watch(request, matches)
            return self._list(matches, request)
        name = path[len("/api/v1/nodes/") :] if path.startswith("/api/v1/nodes/") else ""
        if name and "/" not in name:
            if request.method == "GET":
                return self._get(name, request)
            if request.method == "PATCH":
                return self._patch(name, request)
        return SimResponse.json(
            api_status(405, "MethodNotAllowed", f"{request.method} {request.path}"), 405
        )

    def _refuse(self, method: str, resource: str, request: SimRequest) -> SimResponse | None:
        """The 403 the API server gives an identity without the verb on the resource."""
        verb = {"GET": "get", "PATCH": "patch", "POST": "create", "PUT": "update"}.get(
            method, method.lower()
        )
        if verb == "get" and request.param("watch") in ("1", "true"):
            verb = "watch"
        elif verb == "get" and (
            request.path.rstrip("/") in ("/api/v1/nodes", PODS_PATH)
            or _CORE_EVENTS.match(request.path.rstrip("/"))
            or request.path.rstrip("/").endswith("/poddisruptionbudgets")
        ):
            verb = "list"
        if self.grants is None or f"{verb}:{resource}" in self.grants:
            with self.lock:
                self.verbs_used.add(f"{verb}:{resource}")
            return None
        with self.lock:
            self.counts["forbidden"] += 1
        group = {
            "events": "events.k8s.io",
            "nodeclaims": "karpenter.sh",
            "poddisruptionbudgets": "policy",
        }.get(resource, "")
        if request.path.startswith("/api/"):
            group = ""  # the core group's (pods, nodes, core v1 events)
        message = (
            f'{resource} is forbidden: User "system:serviceaccount:forewarn:forewarn" cannot '
            f'{verb} resource "{resource}" in API group "{group}"'
        )
        return SimResponse.json(api_status(403, "Forbidden", message), 403)

    def _create_event(self, path: str, request: SimRequest) -> SimResponse:
        """POST /apis/events.k8s.io/v1/namespaces/<ns>/events, checked as the API server
        checks the fields the agent sends."""
        namespace, _, rest = path[len(EVENTS_PREFIX) :].partition("/")
        if request.method != "POST" or rest != "events" or not namespace:
            return SimResponse.json(
                api_status(405, "MethodNotAllowed", f"{request.method} {request.path}"), 405
            )
        try:
            event = json.loads(request.body or b"null")
        except (ValueError, RecursionError) as error:  # nested too deep: a 400, not a 500
            return SimResponse.json(api_status(400, "BadRequest", f"event: {error}"), 400)
        problems = event_problems(event, namespace)
        if problems:
            message = f"Event is invalid: {'; '.join(problems)}"
            return SimResponse.json(api_status(422, "Invalid", message), 422)
        with self.lock:
            name = event["metadata"].get("name")
            if name and any(
                e["metadata"]["name"] == name and e["metadata"]["namespace"] == namespace
                for e in self.events
            ):
                # As the API server: a name is one object's in its namespace.
                message = f'events.events.k8s.io "{name}" already exists'
                return SimResponse.json(api_status(409, "AlreadyExists", message), 409)
            self.rv += 1
            stored = {
                **event,
                "metadata": {
                    **event["metadata"],
                    "name": name or event["metadata"].get("generateName", "") + f"{self.rv:x}",
                    "namespace": namespace,
                    "resourceVersion": str(self.rv),
                    # As the API server stamps every object it creates (kubectl's AGE and
                    # `--sort-by=.metadata.creationTimestamp` read it).
                    "creationTimestamp": _stamp(self.now()),
                },
            }
            self.events.append(stored)
            return SimResponse.json(stored, 201)

    def _selector_matches(self, selector: str | None) -> bool:
        if not selector:
            return True
        for clause in selector.split(","):
            field_name, _, value = clause.replace("==", "=").partition("=")
            if field_name != "metadata.name":
                raise SimError(f"field label not supported: {field_name}", 400)
            if value != self.node_name:
                return False
        return True

    def _pods(self, request: SimRequest) -> SimResponse:
        """`GET /api/v1/pods`: the pods raised with `pod` that the field selector picks (what
        `kubectl describe node` and `kubectl drain` list, by `spec.nodeName`), or the API
        server's 400 for a field selector it would refuse."""
        if request.method != "GET" or request.param("watch") in ("1", "true"):
            message = f"{request.method} {request.path}"
            return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
        wanted = parse_field_selector(request.param("fieldSelector") or "", POD_FIELDS)
        if isinstance(wanted, str):
            return SimResponse.json(api_status(400, "BadRequest", wanted), 400)
        with self.lock:
            rv = str(self.rv)
            items = self.sim_pods.listed(wanted)
        return SimResponse.json(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    def _pdbs(self, request: SimRequest, namespace: str | None, name: str | None) -> SimResponse:
        """`GET /apis/policy/v1[/namespaces/<ns>]/poddisruptionbudgets[/<name>]`: the budgets
        raised with `pdb`, each with the status the disruption controller would give it (see
        `simpdbs`); what `kubectl get pdb` and `describe pdb` read."""
        if request.method != "GET" or request.param("watch") in ("1", "true"):
            message = f"{request.method} {request.path}"
            return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
        include = request.param("includeObject")
        if include not in INCLUDE_OBJECT:
            return _bad_include(include)
        with self.lock:
            rv = str(self.rv)
            items = self.sim_pods.budgets.listed(self.sim_pods.pods.values(), namespace)
        if name is not None:
            items = [item for item in items if item["metadata"]["name"] == name]
            if not items:
                message = f'poddisruptionbudgets.policy "{name}" not found'
                return SimResponse.json(api_status(404, "NotFound", message), 404)
        version = table_version(request.header("Accept"))
        if version is not None:
            return SimResponse.json(pdb_table(items, rv, self.now(), version, include))
        if name is not None:
            return SimResponse.json(items[0])
        return SimResponse.json(
            {
                "kind": "PodDisruptionBudgetList",
                "apiVersion": "policy/v1",
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    def _pod(
        self, request: SimRequest, namespace: str, name: str, subresource: str | None
    ) -> SimResponse:
        """`GET .../namespaces/<ns>/pods/<name>` and `POST .../pods/<name>/eviction`: what
        `kubectl drain` sends each pod, then reads until it is gone (see `simpods`)."""
        with self.lock:
            if subresource is None and request.method == "GET":
                answer, code = self.sim_pods.get(namespace, name)
            elif subresource == "eviction" and request.method == "POST":
                answer, code = self.sim_pods.evict(namespace, name, request.body, self.now())
                if code == 201:
                    self.rv += 1
            else:
                message = f"{request.method} {request.path}"
                answer, code = api_status(405, "MethodNotAllowed", message), 405
        return SimResponse.json(answer, code)

    def _core_events(self, request: SimRequest, namespace: str | None) -> SimResponse:
        """`GET /api/v1/events` (or `/api/v1/namespaces/<ns>/events`): the Events posted
        through events.k8s.io/v1, in the core v1 form the API server also serves them in
        (what `kubectl describe node` lists, by `involvedObject`, and `kubectl get events`),
        or the API server's 400 for a field selector it would refuse."""
        if request.method != "GET" or request.param("watch") in ("1", "true"):
            message = f"{request.method} {request.path}"
            return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
        wanted = parse_field_selector(request.param("fieldSelector") or "", CORE_EVENT_FIELDS)
        if isinstance(wanted, str):
            return SimResponse.json(api_status(400, "BadRequest", wanted), 400)
        with self.lock:
            rv = str(self.rv)
            items = [
                core_event(event)
                for event in self.events
                if namespace is None or event["metadata"]["namespace"] == namespace
            ]
        items = [item for item in items if _selected(_event_fields(item), wanted)]
        version = table_version(request.header("Accept"))
        if version is not None:  # `kubectl get events`: the API server's columns
            include = request.param("includeObject")
            if include not in INCLUDE_OBJECT:
                return _bad_include(include)
            return SimResponse.json(event_table(items, rv, self.now(), version, include))
        return SimResponse.json(
            {
                "kind": "EventList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": rv},
                "items": items,
            }
        )

    def _lease(self, rest: str, request: SimRequest) -> SimResponse:
        """The node's heartbeat Lease in kube-node-lease, renewed now (the kubelet renews it
        every 10 s), as `kubectl describe node` shows it."""
        if request.method != "GET":
            message = f"{request.method} {request.path}"
            return SimResponse.json(api_status(405, "MethodNotAllowed", message), 405)
        with self.lock:
            if rest != self.node_name or self.node is None:
                message = f'leases.coordination.k8s.io "{rest}" not found'
                return SimResponse.json(api_status(404, "NotFound", message), 404)
            created = self.node["metadata"].get("creationTimestamp")
            rv = str(self.rv)
        now = self.now()  # a MicroTime, on the provider's clock as every time here
        renewed = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}Z"
        return SimResponse.json(
            {
                "kind": "Lease",
                "apiVersion": "coordination.k8s.io/v1",
                "metadata": {
                    "name": self.node_name,
                    "namespace": "kube-node-lease",
                    "resourceVersion": rv,
                    "creationTimestamp": created,
                },
                "spec": {
                    "holderIdentity": self.node_name,
                    "leaseDurationSeconds": 40,
                    "renewTime": renewed,
                },
            }
        )

    def _table(self, request: SimRequest, nodes: list[dict[str, Any]]) -> SimResponse | None:
        """The Table `kubectl get` asks for (its `Accept`), None if the request asks for the
        objects themselves; a bad `includeObject` is the API server's 400."""
        version = table_version(request.header("Accept"))
        if version is None:
            return None
        include = request.param("includeObject")
        if include not in INCLUDE_OBJECT:
            return _bad_include(include)
        table = node_table(nodes, str(self.rv), self.now(), version, include)
        return SimResponse.json(table)

    def _list(self, matches: bool, request: SimRequest) -> SimResponse:
        with self.lock:
            self.counts["lists"] += 1
            items = [self.node] if matches and self.node is not None else []
            table = self._table(request, items)
            if table is not None:
                return table
            return SimResponse.json(
                {
                    "kind": "NodeList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            )

    def _get(self, name: str, request: SimRequest) -> SimResponse:
        with self.lock:
            if name != self.node_name or self.node is None:
                return SimResponse.json(
                    api_status(404, "NotFound", f'nodes "{name}" not found'), 404
                )
            table = self._table(request, [self.node])
            return table if table is not None else SimResponse.json(self.node)

    def _patch(self, name: str, request: SimRequest) -> SimResponse:
        content_type = (request.header("Content-Type") or "").split(";")[0].strip()
        if content_type not in PATCH_TYPES:
            message = f"the body of the request was in an unknown format - {content_type}"
            return SimResponse.json(api_status(415, "UnsupportedMediaType", message), 415)
        try:
            patch = json.loads(request.body or b"null")
        except (ValueError, RecursionError) as error:  # nested too deep: a 400, not a 500
            return SimResponse.json(api_status(400, "BadRequest", f"patch: {error}"), 400)
        if not isinstance(patch, dict):
            return SimResponse.json(api_status(400, "BadRequest", "patch must be an object"), 400)
        with self.lock:
            if name != self.node_name or self.node is None:
                return SimResponse.json(
                    api_status(404, "NotFound", f'nodes "{name}" not found'), 404
                )
            # A uid in the patch is a precondition, as the API server has it (metadata.uid is
            # immutable: another value is 422 Invalid): a patch meant for a Node deleted since
            # does not land on the one created again under its name.
            meta = patch.get("metadata")
            uid = meta.get("uid") if isinstance(meta, dict) else None
            current = self.node["metadata"].get("uid")
            if uid is not None and uid != current:
                message = (
                    f'Node "{name}" is invalid: metadata.uid: Invalid value: "{uid}": '
                    "field is immutable"
                )
                return SimResponse.json(api_status(422, "Invalid", message), 422)
            before = bool(self.node["spec"].get("unschedulable"))
            node = merge_patch(self.node, patch)
            node.setdefault("spec", {})
            taints = node["spec"].get("taints") or []
            problems = [
                problem
                for index, taint in enumerate(taints if isinstance(taints, list) else [taints])
                if (problem := _taint_problem(taint, f"spec.taints[{index}]")) is not None
            ]
            if not problems and isinstance(taints, list):
                problems = _duplicate_taints(taints)
            if problems:
                # As the API server validates the patched Node: 422, and nothing changes.
                message = f'Node "{name}" is invalid: {"; ".join(problems)}'
                return SimResponse.json(api_status(422, "Invalid", message), 422)
            if node["spec"].get("taints") != self.node["spec"].get("taints"):
                # The request's own write of the list: its fieldManager, else (as the API
                # server names a manager that gave none) its User-Agent up to the first "/".
                agent = (request.header("User-Agent") or "").split("/")[0]
                self._own(node, "f:taints", request.param("fieldManager") or agent or "unknown")
            if bool(node["spec"].get("unschedulable")) != before:
                # kubectl cordon's field manager unless the request names its own.
                manager = request.param("fieldManager") or "kubectl-cordon"
                self._own_unschedulable(node, manager)
                self._sync_cordon_taint(node)
            self._commit("MODIFIED", node)
            return SimResponse.json(self.node)

    def _watch(self, request: SimRequest, matches: bool) -> SimResponse:
        asked = request.param("resourceVersion") or ""
        timeout_param = request.param("timeoutSeconds")
        try:
            timeout = float(timeout_param) if timeout_param else self.max_watch_seconds
        except ValueError:
            raise SimError(f"timeoutSeconds: not a number: {timeout_param!r}", 400) from None
        timeout = min(timeout, self.max_watch_seconds)
        bookmarks = request.param("allowWatchBookmarks") == "true"
        with self.lock:
            self.counts["watches"] += 1
            entry: dict[str, Any] = {"resourceVersion": asked, "outcome": "ok"}
            self.watch_log.append(entry)
            initial: list[tuple[str, dict[str, Any] | None]] = []
            if asked in ("", "0"):
                start = self.rv
                initial = [("ADDED", self.node)] if matches and self.node is not None else []
            else:
                try:
                    start = int(asked)
                except ValueError:
                    raise SimError(f"invalid resourceVersion {asked!r}", 400) from None
                if start > self.rv:
                    entry["outcome"] = "ahead"
                elif start < self.compacted_rv:
                    self.counts["gone"] += 1
                    entry["outcome"] = f"gone-{self.gone_as}"
                    message = f"too old resource version: {start} ({self.compacted_rv})"
                    if self.gone_as == "status":
                        return SimResponse.json(api_status(410, "Expired", message), 410)
                    expired = _line("ERROR", api_status(410, "Expired", message))
                    return SimResponse(
                        200,
                        content_type="application/json",
                        headers=dict(STREAM_HEADERS),
                        stream=iter([expired]),
                    )
            self.open_watches += 1
        stream = self._stream(start, initial, matches, timeout, bookmarks, self._encoder(request))
        return SimResponse(
            200, content_type="application/json", headers=dict(STREAM_HEADERS), stream=stream
        )

    def _encoder(self, request: SimRequest) -> Callable[[str, dict[str, Any]], bytes]:
        """How a watch writes each node: itself, or (`kubectl get -w` asks for it by
        `Accept`) a one-row Table, the columns on the first event only as the API server
        sends them; before, kubectl printed a second `NAME AGE` header and no STATUS at the
        first change."""
        version = table_version(request.header("Accept"))
        if version is None:
            return _line
        include = request.param("includeObject")
        first = [True]

        def encode(kind: str, node: dict[str, Any]) -> bytes:
            rv = str(node["metadata"].get("resourceVersion") or self.rv)
            table = node_table([node], rv, self.now(), version, include)
            if not first[0]:
                table["columnDefinitions"] = []
            first[0] = False
            return _line(kind, table)

        return encode

    def _stream(
        self,
        start: int,
        initial: list[tuple[str, dict[str, Any] | None]],
        matches: bool,
        timeout: float,
        bookmarks: bool,
        encode: Callable[[str, dict[str, Any]], bytes] = _line,
    ) -> Iterator[bytes]:
        try:
            deadline = time.monotonic() + timeout
            sent = start
            with self.changed:
                timeout_generation = self.timeout_generation
                expire_generation = self.expire_generation
                stops = self.stops
                caught_up = self.changed.wait_for(
                    lambda: self.rv >= start or self.stops != stops, self.too_large_wait
                )
                if not caught_up:
                    self.counts["too_large"] += 1
            if not caught_up:
                yield _line("ERROR", _too_large(start, self.rv))
                return
            for kind, node in initial:
                if node is not None:
                    yield encode(kind, node)
            next_bookmark = time.monotonic() + self.bookmark_interval
            while True:
                out: list[bytes] = []
                finished = False
                with self.changed:
                    while True:
                        now = time.monotonic()
                        if self.stops != stops or self.timeout_generation != timeout_generation:
                            finished = True
                            break
                        if self.expire_generation != expire_generation or sent < self.dropped_upto:
                            # This watch fell behind the history: the real server says 410.
                            message = f"too old resource version: {sent} ({self.compacted_rv})"
                            out.append(_line("ERROR", api_status(410, "Expired", message)))
                            self.counts["gone"] += 1
                            finished = True
                            break
                        pending = [item for item in self.history if item[0] > sent]
                        if pending:
                            for version, kind, node in pending:
                                if matches:
                                    out.append(encode(kind, node))
                                sent = version
                            break
                        if now >= deadline:
                            finished = True
                            break
                        if bookmarks and now >= next_bookmark:
                            sent = max(sent, self.rv)
                            bookmark = {
                                "kind": "Node",
                                "apiVersion": "v1",
                                "metadata": {"resourceVersion": str(self.rv)},
                            }
                            out.append(_line("BOOKMARK", bookmark))
                            self.counts["bookmarks"] += 1
                            next_bookmark = now + self.bookmark_interval
                            break
                        wake = min(deadline, next_bookmark) if bookmarks else deadline
                        self.changed.wait(max(0.001, min(wake - now, 1.0)))
                yield from out
                if finished:
                    return
        finally:
            with self.lock:
                self.open_watches -= 1


EVENTS_PREFIX = "/apis/events.k8s.io/v1/namespaces/"
PODS_PATH = "/api/v1/pods"
# The fields a pod list may be selected by, as kube-apiserver allows them
# (pkg/registry/core/pod/strategy.go and the v1 conversion's field label funcs).
POD_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.podIPs",
        "status.nominatedNodeName",
    }
)


_CORE_EVENTS = re.compile(r"/api/v1(?:/namespaces/([^/]+))?/events\Z")
LEASES_PREFIX = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
# The fields a core v1 event list may be selected by (pkg/registry/core/event/strategy.go).
CORE_EVENT_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


def parse_field_selector(
    selector: str, fields: frozenset[str]
) -> list[tuple[str, bool, str]] | str:
    """A field selector (`a=b,c!=d`) as (field, equal, value) clauses, or what the API server
    would refuse in it (a field it does not select by, a clause with no operator)."""
    clauses: list[tuple[str, bool, str]] = []
    if not selector:
        return clauses
    for clause in selector.split(","):
        for operator in ("!=", "==", "="):
            field_name, found, value = clause.partition(operator)
            if found:
                break
        else:
            return f"invalid selector: {selector!r}; {clause!r} has no operator"
        field_name = field_name.strip()
        if field_name not in fields:
            return f"field label not supported: {field_name}"
        clauses.append((field_name, operator != "!=", value.strip()))
    return clauses


def pod_selector_problem(selector: str) -> str | None:
    """What the API server would refuse in a pod list's field selector, or None. Values are
    not checked: no pod matches them anyway."""
    parsed = parse_field_selector(selector, POD_FIELDS)
    return parsed if isinstance(parsed, str) else None


def _selected(values: dict[str, str], wanted: list[tuple[str, bool, str]]) -> bool:
    return all((values.get(name, "") == value) == equal for name, equal, value in wanted)


def core_event(event: dict[str, Any]) -> dict[str, Any]:
    """An events.k8s.io/v1 Event in its core v1 form, as the API server converts it."""
    regarding = event.get("regarding") or {}
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": event["metadata"],
        "involvedObject": regarding,
        "reason": event.get("reason", ""),
        "message": event.get("note", ""),
        "type": event.get("type", ""),
        "source": {},
        "eventTime": event.get("eventTime"),
        "action": event.get("action", ""),
        "reportingComponent": event.get("reportingController", ""),
        "reportingInstance": event.get("reportingInstance", ""),
        "firstTimestamp": None,
        "lastTimestamp": None,
        "count": 0,
    }


def _event_fields(event: dict[str, Any]) -> dict[str, str]:
    values = {f"involvedObject.{key}": str(value) for key, value in event["involvedObject"].items()}
    values["metadata.name"] = str(event["metadata"].get("name", ""))
    values["metadata.namespace"] = str(event["metadata"].get("namespace", ""))
    values["reason"] = event["reason"]
    values["reportingComponent"] = event["reportingComponent"]
    values["type"] = event["type"]
    return values


NODECLAIMS_PREFIX = "/apis/karpenter.sh/v1/nodeclaims/"


def _resources(group_version: str, *resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list(resources),
    }


def _group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


# The API's discovery, as far as the simulator serves it: what `kubectl` reads before it
# touches a resource (`kubectl cordon` failed with "the server could not find the requested
# resource" without it). The legacy documents, which kubectl falls back to when the server
# does not answer its aggregated discovery.
DISCOVERY: dict[str, dict[str, Any]] = {
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group("events.k8s.io"), _group("karpenter.sh"), _group("policy")],
    },
    "/api/v1": _resources(
        "v1",
        {
            "name": "nodes",
            "singularName": "node",
            "namespaced": False,
            "kind": "Node",
            "verbs": ["get", "list", "patch", "watch"],
            "shortNames": ["no"],
        },
        *POD_RESOURCES,
        {
            "name": "events",
            "singularName": "event",
            "namespaced": True,
            "kind": "Event",
            "verbs": ["list"],
            "shortNames": ["ev"],
        },
    ),
    "/apis/events.k8s.io/v1": _resources(
        "events.k8s.io/v1",
        {
            "name": "events",
            "singularName": "event",
            "namespaced": True,
            "kind": "Event",
            "verbs": ["create"],
            "shortNames": ["ev"],
        },
    ),
    "/apis/policy/v1": _resources("policy/v1", PDB_RESOURCE),
    "/apis/karpenter.sh/v1": _resources(
        "karpenter.sh/v1",
        {
            "name": "nodeclaims",
            "singularName": "nodeclaim",
            "namespaced": False,
            "kind": "NodeClaim",
            "verbs": ["get"],
        },
    ),
}
EVENT_REQUIRED = ("eventTime", "reportingController", "reportingInstance", "action", "reason")


def event_problems(event: Any, namespace: str) -> list[str]:
    """What the API server's validation would say of an events.k8s.io/v1 Event."""
    if not isinstance(event, dict):
        return ["body must be an object"]
    problems = []
    if event.get("apiVersion") != "events.k8s.io/v1" or event.get("kind") != "Event":
        problems.append("apiVersion/kind must be events.k8s.io/v1 Event")
    metadata = event.get("metadata")
    if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
        problems.append("metadata.name or metadata.generateName: Required value")
    elif metadata.get("namespace", namespace) != namespace:
        problems.append("metadata.namespace does not match the request")
    for field_name in EVENT_REQUIRED:
        if not isinstance(event.get(field_name), str) or not event[field_name]:
            problems.append(f"{field_name}: Required value")
    if event.get("type") not in ("Normal", "Warning"):
        problems.append('type: Unsupported value: must be "Normal" or "Warning"')
    regarding = event.get("regarding")
    if not isinstance(regarding, dict) or not regarding.get("kind") or not regarding.get("name"):
        problems.append("regarding: kind and name are required")
    elif not regarding.get("namespace") and namespace not in ("default", "kube-system"):
        # A cluster-scoped object (a Node): only these two namespaces, as the API server says.
        problems.append("regarding.namespace: does not match event.namespace")
    note = event.get("note", "")
    if not isinstance(note, str) or len(note.encode()) > 1024:
        problems.append("note: must have at most 1024 bytes")
    return problems


def make_simulator(**options: Any) -> KubernetesSimulator:
    return KubernetesSimulator(**options)


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node", type=_node_name, default=DEFAULT_NODE, help=f"node name (default {DEFAULT_NODE})"
    )
    parser.add_argument(
        "--token", default=None, help="bearer token to require (default: accept any request)"
    )
    parser.add_argument(
        "--max-watch-seconds",
        type=_positive_duration,
        default=60.0,
        metavar="S",
        help="end every watch after this long, like the API server's own limit (default 60)",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=_positive_duration,
        default=5.0,
        metavar="S",
        help="seconds between BOOKMARK events on watches that allow them (default 5)",
    )
    parser.add_argument(
        "--gone-as",
        choices=("stream", "status"),
        default="stream",
        help="how a too-old resourceVersion is refused: an in-stream ERROR (as real servers "
        "do) or an HTTP 410 (default stream)",
    )
    parser.add_argument(
        "--grant",
        action="append",
        metavar="VERB:RESOURCE",
        type=_grant,
        help="answer like RBAC: allow only these (repeatable; e.g. list:nodes, watch:nodes, "
        "get:nodes, patch:nodes, create:events); others get 403 (default: allow all)",
    )


# A taint's value is a label value (IsValidLabelValue): empty, or at most 63 alphanumerics,
# '-', '_' or '.', alphanumeric at both ends.
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def _taint_problem(taint: Any, where: str = "taint") -> str | None:
    """What the API server's validation of a Node's taint (key a qualified name, value a
    label value, a known effect) says of `taint` at `where`, or None when it takes it."""
    if not isinstance(taint, dict):
        return f"{where}: Invalid value: {json.dumps(taint)}: must be an object"
    key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
    if not isinstance(key, str) or not key:
        return f"{where}.key: Required value"
    problem = taint_key_problem(key)
    if problem is not None:
        return f"{where}.key: Invalid value: {json.dumps(key)}: {problem}"
    if value is not None and not (
        isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value)
    ):
        return (
            f"{where}.value: Invalid value: {json.dumps(value)}: a label value must be empty "
            "or 1-63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
        )
    if effect not in EFFECTS:
        supported = ", ".join(json.dumps(e) for e in EFFECTS)
        return f"{where}.effect: Unsupported value: {json.dumps(effect)}: supported: {supported}"
    return None


def _duplicate_taints(taints: list[dict[str, Any]]) -> list[str]:
    """What the API server's validation says of a Node's taints listed twice: they are
    unique by key and effect (another value or `timeAdded` is no other taint), each one
    after the first named at its index."""
    seen: set[tuple[str, str]] = set()
    problems = []
    for index, taint in enumerate(taints):
        pair = (taint["key"], taint["effect"])
        if pair in seen:
            problems.append(
                f"spec.taints[{index}]: Duplicate value: {json.dumps(taint)}: taints must be "
                "unique by key and effect pair"
            )
        seen.add(pair)
    return problems


def _node_name(text: str) -> str:
    # `--node "$NODE_NAME"` with the variable unset served a node named "", which no agent
    # can be pointed at (its hint said FOREWARN_KUBERNETES_NODE_NAME= and nothing more).
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: give a name, or leave --node out")
    # As the agent reads NODE_NAME (config.node_name): `--node "$(hostname)"` printing
    # `GPU-1` served a Node no cluster can hold, and the agent, watching `gpu-1`, never
    # found it.
    return text.strip().lower()


def _positive_duration(text: str) -> float:
    # 0 sent bookmarks without a pause (tens of thousands a second) or ended every watch as
    # it began.
    seconds = duration_arg(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
    return seconds


def _grant(text: str) -> str:
    verb, sep, resource = text.partition(":")
    if not sep or verb not in VERBS or resource not in ("nodes", "events"):
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected VERB:RESOURCE with VERB one of {', '.join(VERBS)} and "
            "RESOURCE nodes or events"
        )
    return text


VERBS = ("get", "list", "watch", "patch", "create", "update")


def _hints(sim: Simulator, url: str, args: argparse.Namespace) -> list[str]:
    hint = f"FOREWARN_KUBERNETES_URL={url} FOREWARN_KUBERNETES_NODE_NAME={args.node}"
    if args.token:
        hint += " FOREWARN_KUBERNETES_TOKEN_FILE=<a file holding the token>"
    return [f"point the agent at it: {hint}"]


COMMAND = SimulatorCommand(
    name="kubernetes",
    build=lambda grant=None, **options: make_simulator(
        grants=frozenset(grant) if grant else None, **options
    ),
    passes=("node", "token", "max_watch_seconds", "bookmark_interval", "gone_as", "grant"),
    options=_options,
    hints=_hints,
)
add_arguments = COMMAND.add_arguments
run = COMMAND.run


def drill_script() -> dict[str, Any]:
    """Drain = cordon the node, terminate = graceful node shutdown (Ready=False). The token
    file is written by the drill in its own directory (a fixed one under /tmp was shared by
    every user, and followed whatever another user put there)."""
    return {
        "drain": ("cordon", {}),
        "terminate": ("shutdown", {}),
        "env": {"FOREWARN_KUBERNETES_NODE_NAME": DEFAULT_NODE},
        "files": {"FOREWARN_KUBERNETES_TOKEN_FILE": ("kubernetes-token", DRILL_TOKEN + "\n")},
    }


__all__ = [
    "DEFAULT_NODE",
    "KubernetesSimulator",
    "add_arguments",
    "drill_script",
    "make_simulator",
    "merge_patch",
    "run",
]
