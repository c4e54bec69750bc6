"""Settings of the `[kubernetes]` section (environment `FOREWARN_KUBERNETES_<KEY>`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import NoDecode

from ..settings import EndpointSettings, WholeSeconds, split_list

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Seconds a kubeconfig's exec plugin has to print its credential (kubeconfig.EXEC_TIMEOUT).
DEFAULT_EXEC_TIMEOUT = 60.0

# Taints that mean "this node is being taken away". `DeletionCandidateOfClusterAutoscaler`
# is deliberately absent: it marks a candidate only, and most candidates are never removed.
DEFAULT_DRAIN_TAINTS: tuple[str, ...] = (
    "node.kubernetes.io/unschedulable",
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/scheduled-maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "aws-node-termination-handler/rebalance-recommendation",
    "cloud.google.com/impending-node-termination",
    "remediator.kubernetes.azure.com/unschedulable",
    # The same AKS auto-drain taint under its name before AKS renamed it.
    "remediator.aks.microsoft.com/unschedulable",
    "node.kubernetes.io/out-of-service",
)

# Of those, the ones that mean the machine itself is going within minutes, whatever happens to
# the pods: a terminate, not a drain. NTH's spot-itn comes with the two-minute interruption
# notice (the AWS provider makes a terminate of the same notice) and its ASG lifecycle taint
# with the instance's termination; GKE's handler taints ~30 s before a preemption. The
# out-of-service taint (non-graceful node shutdown, set on an instance shut down or terminated)
# has every pod without its toleration force-deleted at once, with no grace: as a drain, the
# job saved and trained on while its pod was being deleted. The others mark a disruption
# carried out by evicting pods (the pod's own SIGTERM follows), or a warning.
DEFAULT_TERMINATE_TAINTS: tuple[str, ...] = (
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "cloud.google.com/impending-node-termination",
    "node.kubernetes.io/out-of-service",
)


# A taint key is a Kubernetes qualified name (IsQualifiedName): an optional DNS subdomain
# prefix and "/", then a name of at most 63 characters.
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def taint_key_problem(key: str) -> str | None:
    """Why `key` cannot be a taint key, or None when it can."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _PREFIX.fullmatch(prefix)):
        return f"prefix {prefix!r} is not a DNS subdomain"
    if not (len(name) <= 63 and _NAME.fullmatch(name)):
        if any(mark in name for mark in "=:"):
            return "give the key alone, without =value or :effect"
        return "the name must be 1-63 letters, digits, '-', '_' or '.', alphanumeric at both ends"
    return None


class Settings(EndpointSettings):
    node_name: str | None = Field(
        default=None,
        description="The node to watch; default the `NODE_NAME` environment variable "
        "(set it from the downward API, `spec.nodeName`). Read in lower case, as Node names "
        "are (`$(hostname)` may print capitals the kubelet lowered).",
    )
    kubeconfig: Path | None = Field(
        default=None,
        description="A kubeconfig file to use instead of the in-cluster service account, read "
        "as kubectl reads it (exec credential plugins included; needs the `k8s` extra). "
        "Outside a pod, with no `url`: `$KUBECONFIG`, else `~/.kube/config`. Proxies are "
        "not supported: a cluster with `proxy-url` is refused.",
    )
    context: str | None = Field(
        default=None, description="The kubeconfig context; default its `current-context`."
    )
    token_file: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "token",
        description="The service-account token, re-read on every (re)connect (it rotates).",
    )
    ca_file: Path = Field(
        default=SERVICE_ACCOUNT_DIR / "ca.crt",
        description="The cluster CA used to verify an https API server in-cluster.",
    )
    boot_id_file: Path | None = Field(
        default=None,
        description="This host's boot id, compared with the Node's `status.nodeInfo.bootID`: "
        "a shutdown condition reported for another boot is left over from before a reboot "
        "and ignored. Default: `/proc/sys/kernel/random/boot_id` when the agent runs in a "
        "pod (in-cluster, on the node); with `url` or a kubeconfig the agent may run on "
        "another machine, so no comparison is made unless this is set. A shutdown is "
        "ignored only if, as well, it was posted before this host booted "
        "(`boot_time_file`): under gVisor or Kata the pod's boot id is never the node's.",
    )
    boot_time_file: Path | None = Field(
        default=None,
        description="A file in the format of `/proc/stat` whose `btime` line is this host's "
        "boot time (seconds since the epoch), read when the boot id is compared: a "
        "shutdown for another boot is ignored only if its Ready condition's "
        "`lastHeartbeatTime` is earlier. Default: `/proc/stat` (under gVisor or Kata, the "
        "sandbox's start: a shutdown posted since is kept).",
    )
    # NoDecode: the environment gives a comma-separated list, not JSON.
    taints: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_DRAIN_TAINTS),
        description="Taint keys that raise a notice, a drain or, for `terminate_taints`, a "
        "terminate (separated by commas or space, or a JSON "
        "list, in the environment). Setting it replaces the defaults; to add keys to them, use "
        "`extra_taints`. Blank is unset (the defaults); `[]` is no taint key at all.",
    )
    # Users who set `taints` to add their own key dropped every default with it (the Cluster
    # Autoscaler's and Karpenter's deletions then went unnoticed): adding has its own key.
    extra_taints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="More taint keys that raise a notice, added to `taints` (separated by "
        "commas or space, or a JSON list, in the environment).",
    )
    # A spot interruption through NTH was a drain: the job saved and trained on, and when NTH
    # only cordons (cordonOnly) nothing else came before the instance went two minutes later.
    terminate_taints: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_TERMINATE_TAINTS),
        description="Of the taint keys that raise a notice (`taints` and `extra_taints`), "
        "those that mean the machine goes within minutes: a terminate instead of a drain "
        "(same forms as `taints`; `[]`: every taint is a drain).",
    )
    # Bounded: the watcher waits on the plugin before each (re)connect; past ten minutes a
    # hung one would hold it, silent, for longer than any reclaim notice lasts.
    exec_timeout: float = Field(
        default=DEFAULT_EXEC_TIMEOUT,
        gt=0,
        le=600,
        description="Seconds a kubeconfig's exec credential plugin (`aws eks get-token`, "
        "`gke-gcloud-auth-plugin`, `kubelogin`) has to print its credential; one that has "
        "not is stopped and reported as a `config` error, then run again at the next retry.",
    )
    watch_timeout: WholeSeconds = Field(
        default=300,
        ge=1,
        le=3600,
        description="`timeoutSeconds` asked of each watch; the watch is then resumed from "
        "the last resourceVersion.",
    )
    retry_max: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Ceiling, in seconds, of the backoff between failed connections.",
    )

    events: bool = Field(
        default=False,
        description="Create a Kubernetes Event (events.k8s.io/v1) on the Node, and on the Pod "
        "when POD_NAME and POD_NAMESPACE are set, for every published notice. Needs "
        "`create` on events (packaging/kubernetes/components/notifications).",
    )
    # The API server accepts an Event about a cluster-scoped object (a Node) only in these
    # two namespaces (core validation, legacyValidateEvent); any other got 422 for every notice.
    events_namespace: Literal["default", "kube-system"] = Field(
        default="default",
        description="Namespace of the Events about the Node: `default` (where kubectl looks) "
        "or `kube-system`, the only two the API server accepts for a Node.",
    )
    cordon: bool = Field(
        default=False,
        description="Cordon the node (spec.unschedulable) when a terminate is published. "
        "Needs `patch` on nodes (packaging/kubernetes/components/cordon).",
    )

    @field_validator("taints", "extra_taints", "terminate_taints", mode="before")
    @classmethod
    def _split_taints(cls, value: Any, info: ValidationInfo) -> Any:
        # Blank is the defaults; no taint at all is the JSON list `[]`.
        return split_list(value, cls.model_fields.get(info.field_name or ""), json_list=True)

    @field_validator("taints", "extra_taints", "terminate_taints")
    @classmethod
    def _taint_keys(cls, value: list[str]) -> list[str]:
        # A key that cannot exist (kubectl's `key=value:Effect` form, a space inside) would
        # never match a taint, and that reclaim would be missed without a word.
        for key in value:
            problem = taint_key_problem(key)
            if problem is not None:
                raise ValueError(f"{key!r} is not a taint key: {problem}")
        return value

    @property
    def drain_taints(self) -> frozenset[str]:
        """Every taint key that raises a drain: `taints` and `extra_taints`."""
        return frozenset(self.taints) | frozenset(self.extra_taints)

    @property
    def imminent_taints(self) -> frozenset[str]:
        """The taint keys that raise a terminate: `terminate_taints` that raise a notice."""
        return frozenset(self.terminate_taints) & self.drain_taints

    @field_validator("node_name", "context")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        # Blank is unset: NODE_NAME, the kubeconfig's current-context.
        return value.strip() or None if value is not None else None


__all__ = [
    "DEFAULT_DRAIN_TAINTS",
    "DEFAULT_EXEC_TIMEOUT",
    "DEFAULT_TERMINATE_TAINTS",
    "SERVICE_ACCOUNT_DIR",
    "Settings",
    "taint_key_problem",
]
