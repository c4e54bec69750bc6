"""Karpenter's deadline for a node it is taking away, read from the node's NodeClaim.

Karpenter (v1) marks the Node it disrupts with the `karpenter.sh/disrupted` taint and then
deletes it, but the time by which it will force the machine down whatever the pods' state
(`spec.terminationGracePeriod` after the NodeClaim's deletion) is on the NodeClaim only, as
the annotation `karpenter.sh/nodeclaim-termination-timestamp` (RFC 3339), stamped when the
NodeClaim is deleted and before Karpenter deletes the Node. The Node names its NodeClaim in
`metadata.ownerReferences` (`karpenter.sh/v1`, kind `NodeClaim`), which Karpenter sets when
the node registers. Without a terminationGracePeriod there is no annotation, and no deadline,
except for a node Karpenter's node repair deletes (an unhealthy condition past its toleration):
repair stamps the NodeClaim with the moment it acts, whatever the NodePool sets, so the deadline
is already past when the Node shows its mark (kubernetes-sigs/karpenter
pkg/controllers/node/health/controller.go, `annotateTerminationGracePeriod`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from forewarn.protocol.timefmt import parse_time

GROUP_VERSION = "karpenter.sh/v1"
TERMINATION_ANNOTATION = "karpenter.sh/nodeclaim-termination-timestamp"
# The Node-side marks of a Karpenter disruption (v1's taint, v1beta1's).
KARPENTER_TAINTS = frozenset({"karpenter.sh/disrupted", "karpenter.sh/disruption"})


def nodeclaim_name(node: Any) -> str | None:
    """The name of the `karpenter.sh/v1` NodeClaim that owns a Node, None if none does (or
    the object is not shaped as a Node: the node parser reports that)."""
    metadata = node.get("metadata") if isinstance(node, dict) else None
    owners = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if (
            isinstance(owner, dict)
            and owner.get("apiVersion") == GROUP_VERSION
            and owner.get("kind") == "NodeClaim"
            and isinstance(owner.get("name"), str)
            and owner["name"]
            and "/" not in owner["name"]
        ):
            return str(owner["name"])
    return None


def being_disrupted(node: Any) -> bool:
    """Whether a Node shows a disruption whose deadline the NodeClaim may hold: a Karpenter
    taint, or the Node's own deletion."""
    if not isinstance(node, dict):
        return False
    metadata = node.get("metadata")
    if isinstance(metadata, dict) and metadata.get("deletionTimestamp"):
        return True
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    return isinstance(taints, list) and any(
        isinstance(taint, dict) and taint.get("key") in KARPENTER_TAINTS for taint in taints
    )


def termination_deadline(nodeclaim: Any) -> datetime | None:
    """The NodeClaim's termination timestamp, None when it has none or it is not a time."""
    metadata = nodeclaim.get("metadata") if isinstance(nodeclaim, dict) else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    value = annotations.get(TERMINATION_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


__all__ = [
    "GROUP_VERSION",
    "KARPENTER_TAINTS",
    "TERMINATION_ANNOTATION",
    "being_disrupted",
    "nodeclaim_name",
    "termination_deadline",
]
