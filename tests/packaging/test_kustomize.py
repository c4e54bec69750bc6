"""The kustomize overlays render with `kubectl kustomize`, pass the Kubernetes schemas in
strict mode, and every container runs as Pod Security "restricted" asks, with resource
requests; the one exception (the DaemonSet's root init container for a hostPath) is named."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from forewarn.agent.config import load_settings
from kustomize_render import (
    COMPONENTS,
    KUSTOMIZE,
    OVERLAYS,
    containers,
    kubectl,
    render,
    render_example,
)
from status_probe import run_check, runs_status, silent_agent, status_timeout
from support import AgentProcess, LazyModule, agent_env, requires

# Imported at first use, not while collecting (tests/test_collection_imports.py).
kubernetes_validate = LazyModule("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_VERSION = "1.32.0"
# The agent's uid and group in the image (Dockerfile) and in every manifest.
AGENT_UID = 10001
# (overlay, container) pairs allowed to run outside "restricted", and why.
EXCEPTIONS = {
    ("daemonset", "host-dirs"): "chowns the hostPath socket and state directories: only root can",
}
# Kinds outside the Kubernetes schemas (CRDs), checked by `check_custom` instead.
CUSTOM_KINDS = {"ServiceMonitor"}


def restricted_violations(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """What Pod Security "restricted" (plus this project's read-only root and resource
    requests) finds wrong with one container."""
    context = container.get("securityContext", {})
    pod_context = pod.get("securityContext", {})
    found = []
    if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
        found.append("runAsNonRoot is not true")
    if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
        found.append("runs as uid 0")
    if context.get("allowPrivilegeEscalation") is not False:
        found.append("allowPrivilegeEscalation is not false")
    if "ALL" not in context.get("capabilities", {}).get("drop", []):
        found.append("capabilities do not drop ALL")
    if set(context.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
        found.append("adds capabilities")
    seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {}))
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        found.append("no RuntimeDefault seccompProfile")
    if context.get("privileged"):
        found.append("privileged")
    if context.get("readOnlyRootFilesystem") is not True:
        found.append("root file system is writable")
    requests = container.get("resources", {}).get("requests", {})
    if not {"cpu", "memory"} <= set(requests):
        found.append("no cpu and memory requests")
    return found


def check_custom(resource: dict[str, Any]) -> None:
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    spec = resource["spec"]
    assert set(spec) == {"selector", "endpoints"}
    assert spec["selector"]["matchLabels"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval"} and endpoint["port"]


@pytest.mark.parametrize(
    ("overlay", "components"),
    [(overlay, ()) for overlay in OVERLAYS] + [(overlay, COMPONENTS) for overlay in OVERLAYS],
    ids=lambda value: "+".join(value) if isinstance(value, tuple) else value,
)
def test_overlay_renders_and_passes_the_schemas_strictly(
    overlay: str, components: tuple[str, ...], tmp_path: Path
):
    resources = render(overlay, components, tmp_path)
    kinds = {resource["kind"] for resource in resources}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap"} <= kinds
    for resource in resources:
        if resource["kind"] in CUSTOM_KINDS:
            check_custom(resource)
            continue
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_strict_validation_catches_a_misspelled_field():
    bad = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "dataa": {"a": "b"},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_is_restricted_and_requests_resources(overlay: str, tmp_path: Path):
    checked = 0
    for resource in render(overlay, COMPONENTS, tmp_path):
        for pod, container in containers(resource):
            checked += 1
            found = restricted_violations(pod, container)
            if (overlay, container["name"]) in EXCEPTIONS:
                assert found, f"{container['name']} is an exception it no longer needs"
                assert not [f for f in found if "requests" in f or "writable" in f]
                continue
            assert found == [], f"{overlay}/{container['name']}: {found}"
    assert checked >= 2


def test_the_check_fails_a_container_without_the_restricted_context():
    pod = {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}
    container = {"name": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    assert set(restricted_violations(pod, container)) == {
        "runAsNonRoot is not true",
        "allowPrivilegeEscalation is not false",
        "capabilities do not drop ALL",
        "root file system is writable",
    }
    container["securityContext"] = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert restricted_violations(pod, container) == []
    del container["resources"]
    assert restricted_violations(pod, container) == ["no cpu and memory requests"]


def agent_containers(resources: list[Any]) -> list[dict[str, Any]]:
    return [
        container
        for resource in resources
        for _, container in containers(resource)
        if container["name"] == "forewarn"
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_uid_and_one_image_setting_for_every_agent(overlay: str, tmp_path: Path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"USER {AGENT_UID}:{AGENT_UID}" in dockerfile
    assert f"--uid {AGENT_UID}" in dockerfile
    image = yaml.safe_load((KUSTOMIZE / "components" / "image" / "kustomization.yaml").read_text())
    forewarn = next(entry for entry in image["images"] if entry["name"] == "forewarn")
    expected = f"{forewarn['newName']}:{forewarn['newTag']}"
    resources = render(overlay)
    agents = agent_containers(resources)
    assert agents
    for container in agents:
        assert container["securityContext"]["runAsUser"] == AGENT_UID
        assert container["securityContext"]["runAsGroup"] == AGENT_UID
        assert container["image"] == expected
        assert container["envFrom"] == [
            {"configMapRef": {"name": container["envFrom"][0]["configMapRef"]["name"]}}
        ]
    # No image is named anywhere but through the image component.
    for path in KUSTOMIZE.rglob("*.yaml"):
        if path.parent.name != "image":
            for found in re.findall(r"image:\s*(\S+)", path.read_text()):
                assert found in ("forewarn", "trainer"), f"{path}: image {found}"


def test_daemonset_is_node_critical_and_shares_a_host_socket_directory(tmp_path: Path):
    resources = render("daemonset")
    daemonset = next(r for r in resources if r["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["forewarn-run"]["hostPath"]["path"] == "/run/forewarn"
    namespace = next(r for r in resources if r["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/warn"] == "restricted"


def test_daemonset_keeps_the_agents_state_on_the_node():
    """The state (manual notices, acks, escalations, provider notices) was in an emptyDir,
    which goes with the pod: a rolling update or an eviction lost every notice the agent is
    meant to keep across a restart. It is a hostPath, which the init container hands to the
    agent's uid."""
    resources = render("daemonset")
    pod = next(r for r in resources if r["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    state_dir = next(r for r in resources if r["kind"] == "ConfigMap")["data"]["FOREWARN_STATE_DIR"]
    agent = next(c for c in pod["containers"] if c["name"] == "forewarn")
    mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == state_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume.get("hostPath") == {"path": state_dir, "type": "DirectoryOrCreate"}, volume
    init = next(c for c in pod["initContainers"] if c["name"] == "host-dirs")
    assert {m["name"]: m["mountPath"] for m in init["volumeMounts"]}[mount["name"]] == state_dir
    assert f"chown {AGENT_UID}:{AGENT_UID} {state_dir}" in " ".join(init["command"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_critical_pods_have_a_quota_in_their_namespace(overlay: str):
    """GKE Standard, like any cluster with a quota scoped to the critical priority classes,
    admits a pod of such a class only in a namespace holding a matching quota: without one
    the DaemonSet created no pod ("insufficient quota to match these scopes")."""
    resources = render(overlay)
    allowed: set[tuple[str, str]] = set()
    for quota in (r for r in resources if r["kind"] == "ResourceQuota"):
        for expression in quota["spec"].get("scopeSelector", {}).get("matchExpressions", []):
            if expression["scopeName"] == "PriorityClass" and expression["operator"] == "In":
                namespace = quota["metadata"]["namespace"]
                allowed |= {(namespace, value) for value in expression["values"]}
    for resource in resources:
        pod = resource.get("spec", {}).get("template", {}).get("spec")
        priority = (pod or {}).get("priorityClassName", "")
        if priority.startswith("system-"):
            where = (resource["metadata"]["namespace"], priority)
            assert where in allowed, f"{resource['kind']} {where}: no ResourceQuota admits it"


def test_sidecar_shares_its_sockets_with_a_non_root_training_container(tmp_path: Path):
    resources = render("sidecar-job")
    job = next(r for r in resources if r["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["securityContext"]["fsGroup"] == AGENT_UID
    train = next(c for c in pod["containers"] if c["name"] == "train")
    assert train["securityContext"]["runAsUser"] != 0
    mounts = {m["mountPath"] for m in train["volumeMounts"]}
    assert "/run/forewarn" in mounts
    assert not any("hostPath" in volume for volume in pod["volumes"])


def test_the_sidecar_job_retries_a_reclaimed_pod_without_counting_it() -> None:
    """The training container's exit after a reclaim save (`CheckpointGuard.exit_code`, 143)
    makes a new pod that does not count toward backoffLimit. The job exited 0 before, which
    completed the Job, although the manifest said a reclaimed node fails the pod."""
    job = next(r for r in render("sidecar-job") if r["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # needed by the policy
    train = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "train")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    reclaim = {"containerName": train["name"], "operator": "In", "values": [128 + signal.SIGTERM]}
    assert {"action": "Ignore", "onExitCodes": reclaim} in rules


def test_the_sidecar_job_retries_a_pod_kubernetes_disrupted_whatever_its_exit_code() -> None:
    """torchrun exits 1 after a rank's 143 or its own SIGTERM, so under torchrun every
    reclaim counted toward backoffLimit: the pod condition Kubernetes sets when it ends a
    pod itself (eviction, taint, graceful node shutdown, PodGC) tells those apart."""
    job = next(r for r in render("sidecar-job") if r["kind"] == "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    disrupted = [{"type": "DisruptionTarget", "status": "True"}]
    assert {"action": "Ignore", "onPodConditions": disrupted} in rules


@pytest.mark.parametrize(
    ("component", "verb"),
    [
        ("notifications", ("events.k8s.io", "events", "create")),
        ("cordon", ("", "nodes", "patch")),
        ("karpenter", ("karpenter.sh", "nodeclaims", "get")),
    ],
)
def test_permissions_come_only_with_their_component(
    component: str, verb: tuple[str, str, str], tmp_path: Path
):
    def grants(resources: list[Any]) -> set[tuple[str, str, str]]:
        return {
            (group, kind, action)
            for resource in resources
            if resource["kind"] == "ClusterRole"
            for rule in resource["rules"]
            for group, kind, action in itertools.product(
                rule["apiGroups"], rule["resources"], rule["verbs"]
            )
        }

    for overlay in OVERLAYS:
        assert verb not in grants(render(overlay))
        enabled = render(overlay, (component,), tmp_path / f"{overlay}-{component}")
        assert verb in grants(enabled)
        bindings = [r for r in enabled if r["kind"] == "ClusterRoleBinding"]
        service_accounts = {r["metadata"]["name"] for r in enabled if r["kind"] == "ServiceAccount"}
        for binding in bindings:
            for subject in binding["subjects"]:
                assert subject["name"] in service_accounts
                assert subject["namespace"] == binding.get("metadata", {}).get(
                    "namespace", subject["namespace"]
                )


def test_the_commands_the_manifests_name_run(tmp_path: Path):
    """Each `kubectl kustomize ...` a manifest's comment tells a user to run works as written
    from the repository root (one once said `kubectl kustomize edit set image`, which kubectl
    does not have)."""
    found = {
        match.group(0).rstrip(".`)")
        for path in KUSTOMIZE.rglob("*.yaml")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith("#")
        for match in re.finditer(r"kubectl kustomize [^`\n]+", line)
    }
    # And each one the README and docs name in running text (their ```sh blocks run in
    # tests/packaging/test_docs_shell.py).
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    found |= {
        match.group(1)
        for page in pages
        for match in re.finditer(r"`(kubectl kustomize [^`\n]+)`", page.read_text())
    }
    assert len(found) >= 2, found
    for command in sorted(found):
        result = subprocess.run(
            [kubectl(), *command.split()[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, f"{command}: {result.stderr}"


def test_setting_the_image_in_its_one_place_moves_every_agent(tmp_path: Path):
    """What the image component's comment says to do, done: every agent container of every
    overlay then runs REGISTRY/forewarn:TAG."""
    tree = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    image = tree / "components" / "image" / "kustomization.yaml"
    config = yaml.safe_load(image.read_text())
    for entry in config["images"]:
        if entry["name"] == "forewarn":
            entry["newName"], entry["newTag"] = "registry.example.com/ml/forewarn", "2026.12.1"
    image.write_text(yaml.safe_dump(config))
    for overlay in OVERLAYS:
        result = subprocess.run(
            [kubectl(), "kustomize", str(tree / "overlays" / overlay)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        resources = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        images = {c["image"] for r in resources for _, c in containers(r) if c["name"] != "train"}
        assert images == {"registry.example.com/ml/forewarn:2026.12.1"}, (overlay, images)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_metrics_are_off_by_default_and_reach_prometheus_when_enabled(overlay: str, tmp_path: Path):
    def config(resources: list[Any]) -> dict[str, str]:
        return dict(next(r for r in resources if r["kind"] == "ConfigMap")["data"])

    plain = render(overlay)
    assert not {"Service", "ServiceMonitor"} & {r["kind"] for r in plain}
    assert "FOREWARN_METRICS_ADDRESS" not in config(plain)

    resources = render(overlay, ("metrics",), tmp_path)
    settings = config(resources)
    host, _, port = settings["FOREWARN_METRICS_ADDRESS"].rpartition(":")
    # On every pod address, IPv6 ones too (0.0.0.0 left an IPv6-only cluster's Prometheus
    # nothing to scrape), which the agent serves only with allow_remote.
    assert host == "[::]" and settings["FOREWARN_ALLOW_REMOTE"] == "true"
    agent = load_settings(
        metrics_address=settings["FOREWARN_METRICS_ADDRESS"],
        allow_remote=settings["FOREWARN_ALLOW_REMOTE"] == "true",
    )
    assert agent.metrics_listen() == ("::", int(port))
    service = next(r for r in resources if r["kind"] == "Service")
    monitor = next(r for r in resources if r["kind"] == "ServiceMonitor")
    workload = next(r for r in resources if r["kind"] in ("DaemonSet", "Job"))
    namespace = workload["metadata"]["namespace"]
    assert service["metadata"]["namespace"] == monitor["metadata"]["namespace"] == namespace
    # Service -> the agents' pods, ServiceMonitor -> the Service, by label and port name.
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert str(ports[endpoint["port"]]["targetPort"]) == port
        assert endpoint["path"] == "/metrics"


def test_both_overlays_can_share_a_cluster(tmp_path: Path):
    """Cluster-scoped objects of the two overlays (all components on) either differ in name
    or are the same object: applying one never rebinds the other's service account."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for overlay in OVERLAYS:
        for resource in render(overlay, COMPONENTS, tmp_path / overlay):
            if resource["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                continue
            key = (resource["kind"], resource["metadata"]["name"])
            if key in seen:
                assert seen[key] == resource, f"{overlay} redefines {key}"
            seen[key] = resource
    bindings = [name for kind, name in seen if kind == "ClusterRoleBinding"]
    assert len(bindings) == 2 * (1 + len(("notifications", "cordon", "karpenter"))), bindings


# Where libraries a training job uses write their caches, as they compute it themselves.
CACHE_PATHS = """
import json, os
import huggingface_hub.constants, torch.hub
print(json.dumps({
    "torch hub": torch.hub.get_dir(),
    "Hugging Face": huggingface_hub.constants.HF_HOME,
    "triton": os.path.join(os.path.expanduser("~"), ".triton", "cache"),  # its default
    "XDG cache (pip, datasets)": os.path.join(os.path.expanduser("~"), ".cache"),
}))
"""


# Found, not imported: the pytest worker has no use for torch (2 CPU-s), the child computes.
@requires("torch")
@requires("huggingface_hub")
def test_the_sidecar_training_container_has_a_writable_home_for_caches(tmp_path: Path):
    """The training container runs on a read-only root with no HOME: its uid has no home in
    most images, so the runtime sets HOME=/, and torch hub, Hugging Face datasets and triton
    failed to write ~/.cache. Each library's own cache path, computed with the container's
    environment, is on a writable emptyDir of the container."""
    job = next(r for r in render("sidecar-job") if r["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    train = next(c for c in pod["containers"] if c["name"] == "train")
    assert train["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e["value"] for e in train.get("env", []) if "value" in e}
    # What the container runtime does for a uid without a passwd entry.
    env.setdefault("HOME", "/")
    env["PATH"] = "/usr/bin:/bin"
    result = subprocess.run(
        [sys.executable, "-c", CACHE_PATHS],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # The agent's socket directory (1 MiB of memory) is no place for caches.
    scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v} - {"forewarn-run"}
    writable = [
        m["mountPath"]
        for m in train["volumeMounts"]
        if m["name"] in scratch and not m.get("readOnly")
    ]
    for library, path in json.loads(result.stdout).items():
        assert any(path.startswith(mount.rstrip("/") + "/") for mount in writable), (
            f"{library} writes {path}, on the read-only root (writable: {writable})"
        )


PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_status_probes_answer_before_the_kubelet_kills_them(overlay: str, tmp_path: Path):
    """`forewarn status` waits 30 s by default and the probes time out after 10: against a
    hung agent the kubelet killed the probe, and its events said only that. Each probe that
    runs status gives it a --timeout below the probe's own, and it answers within it."""
    checks = [
        (container["name"], probe["exec"]["command"], float(probe.get("timeoutSeconds", 1)))
        for resource in render(overlay)
        for _, container in containers(resource)
        for probe in (container.get(kind) for kind in PROBES)
        if probe and "exec" in probe and runs_status(probe["exec"]["command"])
    ]
    assert checks, f"{overlay}: no probe runs forewarn status"
    for name, command, limit in checks:
        assert status_timeout(command) < limit, f"{overlay}/{name}: {command}"
    env = agent_env(tmp_path)
    for command, limit in {(tuple(c), limit) for _, c, limit in checks}:
        with silent_agent(Path(env["FOREWARN_RUNTIME_DIR"])):
            result = run_check(list(command), env, limit)
        assert result.returncode == 1
        assert "has not answered within" in result.stderr, result.stderr


def _agent_sees(resources: list[Any]) -> list[tuple[dict[str, str], Path | None]]:
    """For every agent container: its FOREWARN_ variables (the ConfigMaps it reads by
    envFrom, then its literal env) and the config file it reads, as the pod gives them: the
    image's own /etc/forewarn/forewarn.toml (packaging/container/forewarn.toml) unless a
    volume is mounted over it."""
    config_maps = {
        r["metadata"]["name"]: r.get("data", {}) for r in resources if r["kind"] == "ConfigMap"
    }
    found = []
    for resource in resources:
        for pod, container in containers(resource):
            if container["name"] != "forewarn":
                continue
            env: dict[str, str] = {}
            for source in container.get("envFrom", []):
                env.update(config_maps[source["configMapRef"]["name"]])
            env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
            file: Path | None = ROOT / "packaging" / "container" / "forewarn.toml"
            for mount in container.get("volumeMounts", []):
                if mount["mountPath"] in ("/etc/forewarn", "/etc/forewarn/forewarn.toml"):
                    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
                    assert set(volume) == {"name", "emptyDir"}, volume
                    assert mount.get("readOnly") is True, mount
                    file = None
            found.append(({k: v for k, v in env.items() if k.startswith("FOREWARN_")}, file))
    assert found
    return found


@pytest.mark.parametrize(
    ("overlay", "components"),
    [(o, c) for o in OVERLAYS for c in ((), ("metrics",), COMPONENTS)],
    ids=lambda value: "+".join(value) if isinstance(value, tuple) else value,
)
def test_the_configmap_is_the_agents_one_configuration(
    overlay: str, components: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The agent in a pod takes its settings from the ConfigMap's FOREWARN_ variables alone:
    the image's config file (metrics on 127.0.0.1) once stayed in play under them, so the
    metrics component's [::]:9464 and the sidecar's runtime directory each logged "overrides
    its value in /etc/forewarn/forewarn.toml" at every start of the documented setup, and a
    key taken out of the ConfigMap fell back to the image's file, not to its default."""
    resources = render(overlay, components, tmp_path) if components else render(overlay)
    monkeypatch.setattr("forewarn.agent.config.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    for env, file in _agent_sees(resources):
        for variable in [name for name in os.environ if name.startswith("FOREWARN_")]:
            monkeypatch.delenv(variable)
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        settings = load_settings(file)
        assert settings.overridden == [], settings.overridden
        assert settings.unused_sections == [], settings.unused_sections
        assert file is None, f"the image's {file} is read beside the ConfigMap"
        if "metrics" in components:
            assert settings.metrics_listen() == ("::", 9464)


def test_the_startup_probe_follows_the_runtime_dir_setting(tmp_path: Path) -> None:
    """An operator who moves the agent's sockets (FOREWARN_RUNTIME_DIR in the ConfigMap, as
    the docs invite) gets a startup probe that finds them: it hard-coded
    `/run/forewarn/agent/control`, never passed, and the kubelet restarted the sidecar every
    30 s while training never started. Run against a real agent whose directory is elsewhere."""
    (job,) = [r for r in render("sidecar-job") if r["kind"] == "Job"]
    probes = [
        container["startupProbe"]["exec"]["command"]
        for _, container in containers(job)
        if "startupProbe" in container
    ]
    assert probes, "the sidecar has no startup probe"
    elsewhere = tmp_path / "operator-sockets"
    elsewhere.mkdir(mode=0o750)
    env = agent_env(tmp_path, FOREWARN_RUNTIME_DIR=str(elsewhere))

    def probe(argv: list[str]) -> subprocess.CompletedProcess[str]:
        if argv[0] == "forewarn":
            return run_check(argv, env, 30)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)

    for argv in probes:
        assert probe(argv).returncode != 0, f"{argv} passed with no agent running"
    with AgentProcess(tmp_path, env=env, runtime=elsewhere):
        for argv in probes:
            done = probe(argv)
            assert done.returncode == 0, f"{argv}: {done.returncode} {done.stdout}{done.stderr}"


def _host_dir(pod: dict[str, Any], container: dict[str, Any], path: str) -> str:
    """The node directory (a hostPath) under which `path` inside the container is."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        inside = mount["mountPath"].rstrip("/")
        if path == inside or path.startswith(inside + "/"):
            host = volumes[mount["name"]]["hostPath"]["path"].rstrip("/")
            return host + path[len(inside) :]
    raise AssertionError(f"{container['name']}: nothing mounted at {path}")


def test_the_daemonset_training_job_reaches_the_node_agent_as_documented() -> None:
    """The DaemonSet mode's training pod was prose only (docs/kubernetes.md): the shipped
    example mounts the node's socket directory where its client looks, runs with the agent's
    group as a supplemental group, holds no API token, waits the documented grace period, and
    passes the Kubernetes schemas."""
    job_resources = render_example("daemonset-job")
    for resource in job_resources:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    (job,) = [r for r in job_resources if r["kind"] == "Job"]
    daemonset_resources = render("daemonset")
    (daemonset,) = [r for r in daemonset_resources if r["kind"] == "DaemonSet"]
    config = next(r for r in daemonset_resources if r["kind"] == "ConfigMap")["data"]
    (sidecar,) = [r for r in render("sidecar-job") if r["kind"] == "Job"]
    agent_pod, agent = next((p, c) for p, c in containers(daemonset) if c["name"] == "forewarn")
    pod = job["spec"]["template"]["spec"]
    (train,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in train["env"]}
    # The client's directory is the agent's, on the node.
    assert _host_dir(pod, train, env["FOREWARN_RUNTIME_DIR"]) == _host_dir(
        agent_pod, agent, config["FOREWARN_RUNTIME_DIR"]
    )
    # Its uid is not the agent's; the agent's group is one of its groups (fsGroup does not
    # apply to a hostPath).
    context = pod["securityContext"]
    assert context["runAsUser"] not in (0, AGENT_UID) and context["runAsNonRoot"] is True
    assert agent["securityContext"]["runAsGroup"] in context["supplementalGroups"]
    assert "fsGroup" not in context
    assert restricted_violations(pod, train) == []
    # The documented grace period, the sidecar Job's; no token; no agent of its own.
    assert pod["terminationGracePeriodSeconds"] == 120
    assert (
        pod["terminationGracePeriodSeconds"]
        == sidecar["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    )
    assert pod["automountServiceAccountToken"] is False
    assert job["spec"]["podFailurePolicy"] == sidecar["spec"]["podFailurePolicy"]
    assert [c["name"] for _, c in containers(job)] == ["train"]
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert "examples/daemonset-job" in docs
    assert "supplementalGroups: [10001]" in docs and "FOREWARN_RUNTIME_DIR=/run/forewarn" in docs


def test_the_sidecars_runtime_dir_is_set_in_one_place(tmp_path: Path) -> None:
    """Moving the sidecar's sockets takes one change, the ConfigMap's FOREWARN_RUNTIME_DIR
    (where the docs send settings): the training container had a literal copy of it, and a
    client looking in the old place found no agent while the agent served in the new one."""
    tree = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    overlay = tree / "overlays" / "sidecar-job"
    text = (overlay / "kustomization.yaml").read_text()
    assert "FOREWARN_RUNTIME_DIR=/run/forewarn/agent" in text
    text = text.replace(
        "FOREWARN_RUNTIME_DIR=/run/forewarn/agent", "FOREWARN_RUNTIME_DIR=/run/forewarn/s"
    )
    (overlay / "kustomization.yaml").write_text(text)
    done = subprocess.run(
        [kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    resources = [r for r in yaml.safe_load_all(done.stdout) if r]
    config_maps = {r["metadata"]["name"]: r["data"] for r in resources if r["kind"] == "ConfigMap"}
    (job,) = [r for r in resources if r["kind"] == "Job"]
    for _, container in containers(job):
        found = {}
        for source in container.get("envFrom", []):
            found.update(config_maps[source["configMapRef"]["name"]])
        for entry in container.get("env", []):
            if "value" in entry:
                found[entry["name"]] = entry["value"]
            elif "configMapKeyRef" in entry.get("valueFrom", {}):
                ref = entry["valueFrom"]["configMapKeyRef"]
                found[entry["name"]] = config_maps[ref["name"]][ref["key"]]
        assert found.get("FOREWARN_RUNTIME_DIR") == "/run/forewarn/s", container["name"]
