"""The simulator's pods: what `kubectl drain` lists on the node and evicts.

Without pods, `kubectl drain` against the simulator cordoned the node, listed nothing and said
`drained`: the eviction a real drain sends each pod (and the job's SIGTERM that follows) could
not be rehearsed. A pod raised through the control API (`pod`) is bound to the simulated node
and owned by a Job, so `kubectl drain` evicts it without `--force` (a pod no controller owns
needs it). The simulator runs no containers: an eviction the API server admits removes the pod
at once, as a pod whose process exits on its SIGTERM leaves; it is kept in `evictions`.

Served as kube-apiserver serves them:

- `GET /api/v1/pods` (all namespaces, field selectors by the fields the API server allows),
- `GET /api/v1/namespaces/<ns>/pods/<name>`: the pod, or the 404 Status `kubectl drain`
  waits for after its eviction,
- `POST /api/v1/namespaces/<ns>/pods/<name>/eviction`: a policy/v1 Eviction naming the pod
  (400 for a body that is not one, 404 for a pod that is not there, 201 and a Success Status
  when admitted), or the API server's refusal when a PodDisruptionBudget (`simpdbs`) holds
  the pod: 429 TooManyRequests, kept in `refusals`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..simulator import SimError
from .simpdbs import SimBudgets
from .simstatus import api_status

# `<ns>/<name>` of a pod path, and the subresource (only `eviction` is served).
POD_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)(?:/([^/]+))?\Z")
# A DNS-1123 subdomain (a pod's name) and label (a namespace), as the API server checks them.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
POD_NOTICE_FIELDS = ("name", "namespace", "grace", "labels")
# A label's name is a qualified name (an optional DNS-subdomain prefix and `/`, then 1-63
# alphanumerics, `-`, `_`, `.`), its value a label value (empty, or 1-63 of the same).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}\Z")
_LABEL_VALUE = re.compile(rf"({_NAME})?\Z")


def check_pod_fields(fields: dict[str, Any]) -> None:
    """The control API's `pod` fields, refused as the API server would refuse the pod."""
    name = fields.get("name", "job-0")
    namespace = fields.get("namespace", "default")
    grace = fields.get("grace", 30)
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        raise SimError('"name" must be a pod name (a DNS-1123 subdomain)', 422)
    if not isinstance(namespace, str) or len(namespace) > 63 or not _LABEL.match(namespace):
        raise SimError('"namespace" must be a namespace name (a DNS-1123 label)', 422)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise SimError('"grace" must be a whole number of seconds, 0 or more', 422)
    labels = fields.get("labels", {})
    if not isinstance(labels, dict) or not all(
        _label_ok(key, value) for key, value in labels.items()
    ):
        raise SimError('"labels" must be an object of label names to label values', 422)


def _label_ok(key: Any, value: Any) -> bool:
    """A label the API server takes: a qualified name (prefix at most 253) and a label value."""
    if not isinstance(key, str) or not isinstance(value, str):
        return False
    prefix, _, _ = key.rpartition("/")
    return (
        len(prefix) <= 253
        and bool(_LABEL_KEY.match(key))
        and len(value) <= 63
        and bool(_LABEL_VALUE.match(value))
    )


class SimPods:
    """The pods bound to the simulated node, by `(namespace, name)`. The caller holds the
    simulator's lock around each call."""

    def __init__(self, node_name: str, stamp: Callable[[], str]) -> None:
        self.node_name = node_name
        self.stamp = stamp
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.evictions: list[dict[str, Any]] = []
        # The evictions a budget refused (namespace, name, time, code), as kubectl retried.
        self.refusals: list[dict[str, Any]] = []
        self.budgets = SimBudgets(stamp)

    def add(self, fields: dict[str, Any], resource_version: int) -> str:
        check_pod_fields(fields)
        name = str(fields.get("name", "job-0"))
        namespace = str(fields.get("namespace", "default"))
        if (namespace, name) in self.pods:
            raise SimError(f'pods "{name}" already exists in namespace {namespace!r}', 409)
        now = self.stamp()
        self.pods[(namespace, name)] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": str(resource_version),
                "creationTimestamp": now,
                # The labels the Job controller puts on its pods, unless given.
                "labels": dict(
                    fields.get("labels", {"batch.kubernetes.io/job-name": name, "job-name": name})
                ),
                # A controller owns it: `kubectl drain` refuses, without --force, a pod
                # that none does ("cannot delete Pods that declare no controller").
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": str(uuid.uuid4()),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "nodeName": self.node_name,
                "restartPolicy": "Never",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                "terminationGracePeriodSeconds": int(fields.get("grace", 30)),
                "containers": [{"name": "train", "image": "forewarn-sim/train"}],
            },
            "status": {"phase": "Running", "podIP": "10.244.0.10", "startTime": now},
        }
        return f"pod/{namespace}/{name}"

    def remove(self, notice_id: str) -> bool:
        namespace, _, name = notice_id[len("pod/") :].partition("/")
        return self.pods.pop((namespace, name), None) is not None

    def listed(self, wanted: list[tuple[str, bool, str]]) -> list[dict[str, Any]]:
        """The pods a field selector (parsed) picks, in name order."""
        out = []
        for pod in sorted(self.pods.values(), key=lambda p: p["metadata"]["name"]):
            values = {
                "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": pod["metadata"]["namespace"],
                "spec.nodeName": pod["spec"]["nodeName"],
                "spec.restartPolicy": pod["spec"]["restartPolicy"],
                "spec.schedulerName": pod["spec"]["schedulerName"],
                "spec.serviceAccountName": pod["spec"]["serviceAccountName"],
                "spec.hostNetwork": "false",
                "status.phase": pod["status"]["phase"],
                "status.podIP": pod["status"]["podIP"],
            }
            if all((values.get(name, "") == value) == equal for name, equal, value in wanted):
                out.append(pod)
        return out

    def get(self, namespace: str, name: str) -> tuple[dict[str, Any], int]:
        pod = self.pods.get((namespace, name))
        if pod is None:
            return api_status(404, "NotFound", f'pods "{name}" not found'), 404
        return pod, 200

    def evict(self, namespace: str, name: str, body: bytes, now: datetime) -> tuple[Any, int]:
        """A policy/v1 (or v1beta1) Eviction of the pod: admitted unless a disruption budget
        holds the pod (its 429, or 500 for two budgets), the pod gone at once; a body that is
        no Eviction of this pod is the API server's 400."""
        try:
            eviction = json.loads(body or b"null")
        except (ValueError, RecursionError) as error:
            return api_status(400, "BadRequest", f"eviction: {error}"), 400
        metadata = eviction.get("metadata") if isinstance(eviction, dict) else None
        if (
            not isinstance(eviction, dict)
            or eviction.get("kind") != "Eviction"
            or eviction.get("apiVersion") not in ("policy/v1", "policy/v1beta1")
            or not isinstance(metadata, dict)
        ):
            message = "the body must be a policy/v1 Eviction"
            return api_status(400, "BadRequest", message), 400
        if metadata.get("name") != name or metadata.get("namespace", namespace) != namespace:
            message = "name in URL does not match name in Eviction object"
            return api_status(400, "BadRequest", message), 400
        pod = self.pods.get((namespace, name))
        if pod is None:
            return api_status(404, "NotFound", f'pods "{name}" not found'), 404
        refused = self.budgets.refusal(pod, self.pods.values())
        if refused is not None:
            answer, code = refused
            at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
            self.refusals.append({"namespace": namespace, "name": name, "at": at, "code": code})
            del self.refusals[:-200]
            return answer, code
        del self.pods[(namespace, name)]
        options = eviction.get("deleteOptions")
        grace = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
        self.evictions.append(
            {
                "namespace": namespace,
                "name": name,
                "uid": pod["metadata"]["uid"],
                "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "gracePeriodSeconds": grace
                if isinstance(grace, int) and not isinstance(grace, bool)
                else pod["spec"]["terminationGracePeriodSeconds"],
            }
        )
        return api_status(201), 201


# What `/api/v1` says of pods and their eviction subresource: `kubectl drain` evicts through
# policy/v1 only when the core group lists `pods/eviction` with its group and version, and
# deletes the pods otherwise.
POD_RESOURCES: tuple[dict[str, Any], ...] = (
    {
        "name": "pods",
        "singularName": "pod",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["get", "list"],
        "shortNames": ["po"],
    },
    {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    },
)


__all__ = [
    "POD_NOTICE_FIELDS",
    "POD_PATH",
    "POD_RESOURCES",
    "SimPods",
    "check_pod_fields",
]
