"""packaging/kubernetes, as `kubectl kustomize` renders each overlay: least RBAC, the shared
runtime directory, the node name."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from kustomize_render import OVERLAYS, render

RUNTIME = "/run/forewarn"


@functools.cache
def rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(overlay))


def documents() -> list[dict[str, Any]]:
    docs = []
    for overlay in OVERLAYS:
        for doc in rendered(overlay):
            docs.append({**doc, "__overlay__": overlay})
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents() if doc["kind"] == kind]


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def agent_container(spec: dict[str, Any]) -> dict[str, Any]:
    containers = [*spec.get("initContainers", []), *spec["containers"]]
    agents = [c for c in containers if c["name"] == "forewarn"]
    assert len(agents) == 1, [c["name"] for c in containers]
    return agents[0]


def mount_of(container: dict[str, Any], path: str) -> str | None:
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"] == path:
            return str(mount["name"])
    return None


def env_of(container: dict[str, Any], name: str) -> dict[str, Any]:
    for entry in container.get("env", []):
        if entry["name"] == name:
            return dict(entry)
    raise AssertionError(f"{container['name']} has no {name}")


def config_of(workload: dict[str, Any], name: str) -> str:
    """A setting the agent reads from its ConfigMap (envFrom) in the same overlay."""
    agent = agent_container(pod_spec(workload))
    (source,) = agent["envFrom"]
    maps = [
        doc
        for doc in rendered(workload["__overlay__"])
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == source["configMapRef"]["name"]
    ]
    assert len(maps) == 1
    return str(maps[0]["data"][name])


def test_every_document_names_its_kind() -> None:
    for doc in documents():
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]


def test_rbac_is_list_watch_on_nodes_only() -> None:
    roles = of_kind("ClusterRole") + of_kind("Role")
    assert {role["metadata"]["name"] for role in roles} == {"forewarn-node-reader"}
    (rule,) = roles[0]["rules"]
    assert rule == {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    assert not [doc for doc in documents() if "*" in str(doc.get("rules", ""))]


def test_bindings_bind_only_that_role_to_the_agents_accounts() -> None:
    accounts = {
        (sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in of_kind("ServiceAccount")
    }
    bindings = of_kind("ClusterRoleBinding") + of_kind("RoleBinding")
    assert len(bindings) == 2
    bound = set()
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "forewarn-node-reader",
        }
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            bound.add((subject["namespace"], subject["name"]))
    assert bound == accounts
    for workload in of_kind("DaemonSet") + of_kind("Job"):
        namespace = workload["metadata"]["namespace"]
        assert (namespace, pod_spec(workload)["serviceAccountName"]) in accounts


@pytest.mark.parametrize("kind", ["DaemonSet", "Job"])
def test_node_name_comes_from_the_downward_api(kind: str) -> None:
    (workload,) = of_kind(kind)
    agent = agent_container(pod_spec(workload))
    assert env_of(agent, "NODE_NAME")["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    providers = config_of(workload, "FOREWARN_PROVIDERS").split(",")
    assert "kubernetes" in providers
    runtime = config_of(workload, "FOREWARN_RUNTIME_DIR")
    # In the sidecar the agent keeps its own directory inside the shared (0777) emptyDir.
    assert runtime == (RUNTIME if kind == "DaemonSet" else f"{RUNTIME}/agent")


@pytest.mark.parametrize("kind", ["DaemonSet", "Job"])
def test_the_pod_is_named_for_its_events_by_the_downward_api(kind: str) -> None:
    """The Events about the agent's pod name it with its uid, which `kubectl describe pod`
    searches by (the notifications component)."""
    (workload,) = of_kind(kind)
    agent = agent_container(pod_spec(workload))
    for name, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_UID", "metadata.uid"),
    ):
        assert env_of(agent, name)["valueFrom"] == {"fieldRef": {"fieldPath": path}}


def test_sidecar_shares_an_empty_dir_with_the_training_container() -> None:
    (job,) = of_kind("Job")
    spec = pod_spec(job)
    agent = agent_container(spec)
    # A native sidecar, so the Job can complete.
    assert agent in spec["initContainers"] and agent["restartPolicy"] == "Always"
    (train,) = spec["containers"]
    volume = mount_of(agent, RUNTIME)
    assert volume is not None and mount_of(train, RUNTIME) == volume
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[volume]
    # Both look for the sockets in the same place, below the shared mount.
    # (the training container takes it from the agent's ConfigMap: one place to change it).
    ref = env_of(train, "FOREWARN_RUNTIME_DIR")["valueFrom"]["configMapKeyRef"]
    assert ref["key"] == "FOREWARN_RUNTIME_DIR"
    assert ref["name"] == agent["envFrom"][0]["configMapRef"]["name"]
    # The startup probe asks the agent where the settings put it (no path of its own).
    probe = agent["startupProbe"]["exec"]["command"]
    assert probe[:2] == ["forewarn", "status"]
    assert not any(config_of(job, "FOREWARN_RUNTIME_DIR") in word for word in probe)
    # The state directory is writable although the root filesystem is not.
    state = config_of(job, "FOREWARN_STATE_DIR")
    assert agent["securityContext"]["readOnlyRootFilesystem"] is True
    assert mount_of(agent, state) is not None


def test_only_the_sidecar_holds_an_api_token() -> None:
    (job,) = of_kind("Job")
    spec = pod_spec(job)
    assert spec["automountServiceAccountToken"] is False
    agent = agent_container(spec)
    secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
    volume = mount_of(agent, secrets)
    assert volume is not None
    (projected,) = [v for v in spec["volumes"] if v["name"] == volume]
    paths = {
        source.get("serviceAccountToken", {}).get("path") or source["configMap"]["items"][0]["path"]
        for source in projected["projected"]["sources"]
    }
    assert paths == {"token", "ca.crt"}  # the defaults of kubernetes.token_file and ca_file
    for container in spec["containers"]:
        assert mount_of(container, secrets) is None


def test_daemonset_uses_the_host_runtime_dir_and_tolerates_drains() -> None:
    (daemonset,) = of_kind("DaemonSet")
    spec = pod_spec(daemonset)
    agent = agent_container(spec)
    volume = mount_of(agent, RUNTIME)
    (host,) = [v for v in spec["volumes"] if v["name"] == volume]
    assert host["hostPath"]["path"] == RUNTIME
    assert {"operator": "Exists"} in spec["tolerations"]
    assert config_of(daemonset, "FOREWARN_STATE_DIR") in {
        m["mountPath"] for m in agent["volumeMounts"]
    }


SPOT_TAINTS = (
    ("kubernetes.azure.com/scalesetpriority", "spot"),  # AKS spot node pools
    ("cloud.google.com/gke-spot", "true"),  # GKE spot node pools
    ("cloud.google.com/gke-preemptible", "true"),  # GKE preemptible node pools
)


def tolerates(spec: dict[str, Any], key: str, value: str, effect: str = "NoSchedule") -> bool:
    """As the scheduler matches a toleration to a taint."""
    for toleration in spec.get("tolerations", []):
        if toleration.get("effect") not in (None, "", effect):
            continue
        if toleration.get("operator") == "Exists" and toleration.get("key") in (None, key):
            return True
        if toleration.get("operator", "Equal") == "Equal" and (
            toleration.get("key"),
            toleration.get("value", ""),
        ) == (key, value):
            return True
    return False


@pytest.mark.parametrize(("key", "value"), SPOT_TAINTS)
def test_every_agent_pod_schedules_on_tainted_spot_nodes(key: str, value: str) -> None:
    """The sidecar Job had no tolerations: on AKS spot nodes (always tainted) and tainted GKE
    spot pools it stayed Pending, never reaching the nodes forewarn is for."""
    workloads = [*of_kind("Job"), *of_kind("DaemonSet")]
    assert {w["kind"] for w in workloads} == {"Job", "DaemonSet"}
    for workload in workloads:
        assert tolerates(pod_spec(workload), key, value), workload["kind"]


def test_settings_defaults_match_the_manifests() -> None:
    from forewarn.providers.kubernetes.settings import SERVICE_ACCOUNT_DIR

    assert str(SERVICE_ACCOUNT_DIR) == "/var/run/secrets/kubernetes.io/serviceaccount"
