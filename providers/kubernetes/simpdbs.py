"""The simulator's PodDisruptionBudgets: what holds a `kubectl drain` on a real cluster.

Without them every eviction was admitted, so a drain a budget holds (the node cordoned, the
job's pod refused eviction again and again) could not be rehearsed. A budget raised through the
control API (`pdb`) is a policy/v1 PodDisruptionBudget whose status is worked out as the
disruption controller works it out, from the pods raised with `pod`:

- `minAvailable: N` (a whole number): `expectedPods` is the number of pods it selects,
  `desiredHealthy` is N, `currentHealthy` the selected pods that are Running (the simulator's
  pods are Ready once Running), `disruptionsAllowed` is `currentHealthy - desiredHealthy`, at
  least 0;
- `maxUnavailable` (or a percentage `minAvailable`): the controller sizes it by the scale of the
  pods' controllers, and a Job (the owner of every simulated pod) has no scale subresource, so
  the sync fails (`found no controllers for pod ...`, condition reason `SyncFailed`) and the
  controller's fail-safe allows no disruption at all. A budget with `maxUnavailable: 1` over a
  training Job's pod holds its eviction: a surprise worth rehearsing.

The eviction subresource (`simpods`) asks `refusal`: a pod no budget selects is evicted, one
that two budgets select is the API server's 500, one whose budget allows no disruption is its
429 TooManyRequests ("Cannot evict pod as it would violate the pod's disruption budget."), on
which `kubectl drain` says `will retry after 5s` and tries again until its `--timeout`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ..simulator import SimError
from .simstatus import api_status

PDB_NOTICE_FIELDS = ("name", "namespace", "match_labels", "min_available", "max_unavailable")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
# A DNS-1123 subdomain (a budget's name) and label (a namespace), as the API server checks them.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
# intstr as the API server takes it: a whole number, or a whole percentage in a string.
_PERCENT = re.compile(r"(0|[1-9][0-9]*)%\Z")


def _int_or_percent(value: Any, name: str) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _PERCENT.match(value):
        return value
    raise SimError(f'"{name}" must be a whole number 0 or more, or a percentage ("50%")', 422)


def check_pdb_fields(fields: dict[str, Any]) -> None:
    """The control API's `pdb` fields, refused as the API server would refuse the budget."""
    name = fields.get("name", "train")
    namespace = fields.get("namespace", "default")
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.match(name):
        raise SimError('"name" must be a budget name (a DNS-1123 subdomain)', 422)
    if not isinstance(namespace, str) or len(namespace) > 63 or not _LABEL.match(namespace):
        raise SimError('"namespace" must be a namespace name (a DNS-1123 label)', 422)
    labels = fields.get("match_labels", {})
    if not isinstance(labels, dict) or not all(
        isinstance(key, str) and key and isinstance(value, str) for key, value in labels.items()
    ):
        raise SimError('"match_labels" must be an object of label names to strings', 422)
    if ("min_available" in fields) == ("max_unavailable" in fields):
        # policy/v1 validation: the two are mutually exclusive, and a budget needs one.
        raise SimError('a budget needs exactly one of "min_available" and "max_unavailable"', 422)
    for key in ("min_available", "max_unavailable"):
        if key in fields:
            _int_or_percent(fields[key], key)


def _selects(budget: dict[str, Any], pod: dict[str, Any]) -> bool:
    """policy/v1: an empty selector selects every pod of the budget's namespace."""
    if pod["metadata"]["namespace"] != budget["metadata"]["namespace"]:
        return False
    labels = pod["metadata"].get("labels", {})
    wanted = budget["spec"]["selector"]["matchLabels"]
    return all(labels.get(key) == value for key, value in wanted.items())


class SimBudgets:
    """The budgets by `(namespace, name)`. The caller holds the simulator's lock."""

    def __init__(self, stamp: Callable[[], str]) -> None:
        self.stamp = stamp
        self.budgets: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, fields: dict[str, Any], resource_version: int) -> str:
        check_pdb_fields(fields)
        name = str(fields.get("name", "train"))
        namespace = str(fields.get("namespace", "default"))
        if (namespace, name) in self.budgets:
            message = f'poddisruptionbudgets.policy "{name}" already exists'
            raise SimError(message, 409)
        spec: dict[str, Any] = {"selector": {"matchLabels": dict(fields.get("match_labels", {}))}}
        if "min_available" in fields:
            spec["minAvailable"] = fields["min_available"]
        else:
            spec["maxUnavailable"] = fields["max_unavailable"]
        self.budgets[(namespace, name)] = {
            "kind": "PodDisruptionBudget",
            "apiVersion": "policy/v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": str(resource_version),
                "generation": 1,
                "creationTimestamp": self.stamp(),
            },
            "spec": spec,
        }
        return f"pdb/{namespace}/{name}"

    def remove(self, notice_id: str) -> bool:
        namespace, _, name = notice_id[len("pdb/") :].partition("/")
        return self.budgets.pop((namespace, name), None) is not None

    def with_status(self, budget: dict[str, Any], pods: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The budget as the API server serves it once the disruption controller synced it."""
        selected = [pod for pod in pods if _selects(budget, pod)]
        healthy = sum(
            1
            for pod in selected
            if pod["status"]["phase"] == "Running" and "deletionTimestamp" not in pod["metadata"]
        )
        minimum = budget["spec"].get("minAvailable")
        status: dict[str, Any] = {"observedGeneration": budget["metadata"]["generation"]}
        if isinstance(minimum, int):
            allowed = max(0, healthy - minimum)
            reason = "SufficientPods" if allowed > 0 else "InsufficientPods"
            condition = {"status": "True" if allowed > 0 else "False", "reason": reason}
            status |= {
                "disruptionsAllowed": allowed,
                "currentHealthy": healthy,
                "desiredHealthy": minimum,
                "expectedPods": len(selected),
            }
        elif selected:
            # Sized by the pods' controllers' scale, and a Job has none (see the module's
            # doc): the sync fails and the fail-safe allows nothing. Never synced, the counts
            # keep their zero values.
            message = f'found no controllers for pod "{selected[0]["metadata"]["name"]}"'
            condition = {"status": "False", "reason": "SyncFailed", "message": message}
            status |= {
                "disruptionsAllowed": 0,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }
        else:
            # No pods to size: nothing expected, nothing healthy, nothing to disrupt.
            condition = {"status": "False", "reason": "InsufficientPods"}
            status |= {
                "disruptionsAllowed": 0,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }
        status["conditions"] = [
            {
                "type": "DisruptionAllowed",
                "observedGeneration": budget["metadata"]["generation"],
                "lastTransitionTime": budget["metadata"]["creationTimestamp"],
                "message": "",
                **condition,
            }
        ]
        return {**budget, "status": status}

    def listed(
        self, pods: Iterable[dict[str, Any]], namespace: str | None = None
    ) -> list[dict[str, Any]]:
        every = list(pods)
        return [
            self.with_status(budget, every)
            for (ns, _), budget in sorted(self.budgets.items())
            if namespace is None or ns == namespace
        ]

    def refusal(
        self, pod: dict[str, Any], pods: Iterable[dict[str, Any]]
    ) -> tuple[dict[str, Any], int] | None:
        """The API server's refusal of an eviction of `pod` (a Status and its code), or None
        when the budgets let it go."""
        every = list(pods)
        matching = [b for b in self.budgets.values() if _selects(b, pod)]
        if not matching:
            return None
        if len(matching) > 1:
            return api_status(500, "InternalError", MULTIPLE_MESSAGE), 500
        budget = self.with_status(matching[0], every)
        status = budget["status"]
        if status["disruptionsAllowed"] > 0:
            return None
        cause = {
            "reason": "DisruptionBudget",
            "message": (
                f"The disruption budget {budget['metadata']['name']} needs "
                f"{status['desiredHealthy']} healthy pods and has {status['currentHealthy']} "
                "currently"
            ),
        }
        return api_status(429, "TooManyRequests", BUDGET_MESSAGE, {"causes": [cause]}), 429


# What `/apis/policy/v1` lists: `kubectl get pdb` reads it before it lists the budgets.
PDB_RESOURCE: dict[str, Any] = {
    "name": "poddisruptionbudgets",
    "singularName": "poddisruptionbudget",
    "namespaced": True,
    "kind": "PodDisruptionBudget",
    "verbs": ["get", "list"],
    "shortNames": ["pdb"],
}
# `/apis/policy/v1/poddisruptionbudgets` or `.../namespaces/<ns>/poddisruptionbudgets[/<name>]`.
PDB_PATH = re.compile(
    r"/apis/policy/v1/(?:namespaces/([^/]+)/)?poddisruptionbudgets(?:/([^/]+))?\Z"
)


__all__ = [
    "BUDGET_MESSAGE",
    "PDB_NOTICE_FIELDS",
    "PDB_PATH",
    "PDB_RESOURCE",
    "SimBudgets",
    "check_pdb_fields",
]
