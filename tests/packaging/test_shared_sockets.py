"""The socket directory the overlays share works for a non-root training container, with the
uids, groups, capabilities and paths the rendered manifests give, on this machine's kernel:
what the kubelet does to the volume is replayed (an emptyDir with fsGroup; a hostPath made
by DirectoryOrCreate), the DaemonSet's init container runs its own command with only the
capabilities it keeps, the agent runs as its container's uid, and a training process of
another uid subscribes and asks for status through the shared directory."""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq
from forewarn.agent.config import load_settings
from forewarn.protocol import request
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from kustomize_render import render, render_example
from other_user import ForkedAgent, call_as
from support import eventually, requires

TRAIN = Path(__file__).with_name("daemonset_train.py")

# A training container's uid in the examples (sidecar-job.yaml's `train`), any non-root uid.
TRAINER = 1000


@pytest.fixture(autouse=True)
def _root_and_setpriv() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to take the manifests' uids")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")


@pytest.fixture
def host() -> Iterator[Path]:
    """A root-owned directory every uid can traverse (pytest's own tmp is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="forewarn-node-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def pod_of(resources: list[Any], kind: str) -> dict[str, Any]:
    workload = next(r for r in resources if r["kind"] == kind)
    return dict(workload["spec"]["template"]["spec"])


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name]
    assert len(found) == 1, name
    return dict(found[0])


def config(resources: list[Any]) -> dict[str, str]:
    return dict(next(r for r in resources if r["kind"] == "ConfigMap")["data"])


def mount_path(c: dict[str, Any], volume: str) -> str:
    return str(next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume))


def on_host(path: str, mount: str, volume_dir: Path) -> Path:
    """Where a path inside the container's mount is on the node."""
    assert path == mount or path.startswith(mount + "/"), (path, mount)
    return volume_dir / path[len(mount) :].lstrip("/")


def uid_gid(c: dict[str, Any]) -> tuple[int, int]:
    context = c["securityContext"]
    return int(context["runAsUser"]), int(context["runAsGroup"])


@contextlib.contextmanager
def agent_as(
    c: dict[str, Any],
    runtime: Path,
    host: Path,
    groups: tuple[int, ...] = (),
    state: Path | None = None,
    extra: dict[str, str] | None = None,
) -> Iterator[ForkedAgent]:
    """The agent as its container runs it (uid, gid, supplementary groups, umask 022), its
    log in `host`, its state in `state` (else a directory of its own in `host`)."""
    uid, gid = uid_gid(c)
    if state is None:
        state = host / "state"
        state.mkdir()
        os.chown(state, uid, gid)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FOREWARN_RUNTIME_DIR": str(runtime),
        "FOREWARN_STATE_DIR": str(state),
        "FOREWARN_PROVIDERS": "local",
        "FOREWARN_TELEMETRY": "false",
        **(extra or {}),
    }
    old = os.umask(0o022)  # the container runtime's default, inherited by the fork
    try:
        agent = ForkedAgent(uid, gid, env, [], host / "agent.log", groups=groups).start()
    finally:
        os.umask(old)
    try:
        eventually(
            lambda: (runtime / "control").is_socket() or not agent.alive(),
            timeout=60,
            what="the agent's control socket",
        )
        assert agent.alive(), agent.output()
        yield agent
    finally:
        agent.stop()


def training_client(runtime: str, timeout: float) -> dict[str, Any]:
    """What a training process does first: a control request and a subscription."""
    try:
        ok = request(f"ipc://{runtime}/control", {"op": "status"}, timeout=timeout).get("ok")
    except TimeoutError:
        ok = None
    context = zmq.Context()
    try:
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"heartbeat")
        sub.connect(f"ipc://{runtime}/events")
        topic = sub.recv_multipart()[0].decode() if sub.poll(int(timeout * 1000)) else None
        return {"status": ok, "heartbeat": topic}
    finally:
        context.destroy(linger=0)


def as_trainer(runtime: Path, groups: tuple[int, ...], timeout: float = 10.0) -> Any:
    return call_as(
        TRAINER,
        TRAINER,
        lambda: training_client(str(runtime), timeout),
        timeout=3 * timeout,
        groups=groups,
    )


def test_sidecar_emptydir_sockets_reach_a_non_root_training_container(host: Path):
    resources = render("sidecar-job")
    pod = pod_of(resources, "Job")
    agent, train = container(pod, "forewarn"), container(pod, "train")
    fs_group = int(pod["securityContext"]["fsGroup"])
    train_uid, _ = uid_gid(train)
    assert train_uid not in (0, uid_gid(agent)[0])
    # The kubelet makes an emptyDir 0777 and, with fsGroup, gives it that group and setgid.
    volume = host / "emptydir"
    volume.mkdir()
    os.chown(volume, 0, fs_group)
    volume.chmod(0o2777)
    mount = mount_path(agent, "forewarn-run")
    assert mount == mount_path(train, "forewarn-run")
    runtime_in_pod = config(resources)["FOREWARN_RUNTIME_DIR"]
    # The training container reads the agent's own setting (one place to change it).
    (setting,) = [e for e in train["env"] if e["name"] == "FOREWARN_RUNTIME_DIR"]
    ref = setting["valueFrom"]["configMapKeyRef"]
    config_map = next(r for r in resources if r["kind"] == "ConfigMap")
    assert (ref["name"], ref["key"]) == (config_map["metadata"]["name"], "FOREWARN_RUNTIME_DIR")
    runtime = on_host(runtime_in_pod, mount, volume)
    # fsGroup is a supplementary group of every container in the pod.
    with agent_as(agent, runtime, host, groups=(fs_group,)) as running:
        reached = as_trainer(runtime, groups=(fs_group,))
        assert reached == {"status": True, "heartbeat": "heartbeat"}, running.output()
        # Without the pod's group the sockets stay shut: the group is what opens them.
        shut = as_trainer(runtime, groups=(), timeout=1.5)
        assert shut == {"status": None, "heartbeat": None}


def daemonset_pod(pod: dict[str, Any], host: Path, name: str) -> dict[str, Path]:
    """A pod of the DaemonSet started on the node `host`: where each of its volumes is on
    the node, as the kubelet makes it (a hostPath by DirectoryOrCreate: the node's directory,
    root's and 0755 when new, the same for every pod; an emptyDir: the pod's own), after its
    init container ran its own command there as root with only the capabilities it keeps
    and no privilege escalation."""
    volumes: dict[str, Path] = {}
    for spec in pod["volumes"]:
        if "hostPath" in spec:
            assert spec["hostPath"]["type"] == "DirectoryOrCreate", spec
            where = host / "node" / spec["hostPath"]["path"].lstrip("/")
        elif "emptyDir" in spec:
            where = host / name / spec["name"]
        else:
            continue
        if not where.exists():
            parts = where.relative_to(host).parts
            for depth in range(1, len(parts) + 1):
                host.joinpath(*parts[:depth]).mkdir(mode=0o755, exist_ok=True)
            where.chmod(0o777 if "emptyDir" in spec else 0o755)
        volumes[spec["name"]] = where
    init = container(pod, "host-dirs")
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["capabilities"]["drop"] == ["ALL"]
    keep = [name.lower() for name in context["capabilities"].get("add", [])]
    command = []
    for part in init["command"]:
        for mount in init["volumeMounts"]:
            part = part.replace(mount["mountPath"], str(volumes[mount["name"]]))
        command.append(part)
    bounding = ",".join(["-all", *(f"+{name}" for name in keep)])
    subprocess.run(
        [
            *("setpriv", "--reuid=0", "--regid=0", "--clear-groups", "--no-new-privs"),
            *(f"--bounding-set={bounding}", "--inh-caps=-all", *command),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return volumes


def in_pod(path: str, c: dict[str, Any], volumes: dict[str, Path]) -> Path:
    """Where a path of container `c` is on the node."""
    mount = max(
        (
            m
            for m in c["volumeMounts"]
            if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")
        ),
        key=lambda m: len(m["mountPath"]),
    )
    return on_host(path, mount["mountPath"], volumes[mount["name"]])


def test_daemonset_hostpath_sockets_reach_a_non_root_training_pod(host: Path):
    resources = render("daemonset")
    pod = pod_of(resources, "DaemonSet")
    init, agent = container(pod, "host-dirs"), container(pod, "forewarn")
    agent_uid, agent_gid = uid_gid(agent)
    volumes = daemonset_pod(pod, host, "pod")
    assert "hostPath" in next(v for v in pod["volumes"] if v["name"] == "forewarn-run")
    found = volumes["forewarn-run"].stat()
    assert (found.st_uid, found.st_gid) == (agent_uid, agent_gid)
    asked = re.search(r"chmod (\d+) ", " ".join(init["command"]))
    assert asked, init["command"]
    # The mode it sets is the mode it gets (a setgid bit needs CAP_FSETID, or is dropped).
    assert stat.S_IMODE(found.st_mode) == int(asked.group(1), 8)

    runtime = in_pod(config(resources)["FOREWARN_RUNTIME_DIR"], agent, volumes)
    with agent_as(agent, runtime, host) as running:
        # Training pods run with supplemental group 10001 (docs/kubernetes.md).
        reached = as_trainer(runtime, groups=(agent_gid,))
        assert reached == {"status": True, "heartbeat": "heartbeat"}, running.output()
        shut = as_trainer(runtime, groups=(), timeout=1.5)
        assert shut == {"status": None, "heartbeat": None}


def test_the_daemonset_training_job_reaches_the_node_agent(host: Path):
    """The shipped DaemonSet-mode training Job (examples/daemonset-job), with its own uid,
    groups, mount and FOREWARN_RUNTIME_DIR, scheduled on a new node before the agent's pod:
    its hostPath is made first (root's, 0755), the DaemonSet's init container then gives it
    to the agent, and the training process answers to status, hears the heartbeat and may
    write its flag file in the directory; without the supplemental group it reaches nothing."""
    job = next(r for r in render_example("daemonset-job") if r["kind"] == "Job")
    train_pod = dict(job["spec"]["template"]["spec"])
    (train,) = train_pod["containers"]
    context = train_pod["securityContext"]
    uid, gid = int(context["runAsUser"]), int(context["runAsGroup"])
    groups = tuple(int(g) for g in context["supplementalGroups"])
    train_volumes = {}
    for spec in train_pod["volumes"]:
        if "hostPath" in spec:
            assert spec["hostPath"]["type"] == "DirectoryOrCreate", spec
            where = host / "node" / spec["hostPath"]["path"].lstrip("/")
            where.mkdir(parents=True, mode=0o755)  # the kubelet, before the agent's pod
            train_volumes[spec["name"]] = where
    resources = render("daemonset")
    pod = pod_of(resources, "DaemonSet")
    agent = container(pod, "forewarn")
    volumes = daemonset_pod(pod, host, "pod")
    runtime = in_pod(config(resources)["FOREWARN_RUNTIME_DIR"], agent, volumes)
    train_env = {e["name"]: e.get("value") for e in train["env"]}
    assert in_pod(train_env["FOREWARN_RUNTIME_DIR"], train, train_volumes) == runtime

    def reach(timeout: float) -> dict[str, Any]:
        found = training_client(str(runtime), timeout)
        found["writable"] = os.access(runtime, os.W_OK | os.X_OK)
        return found

    with agent_as(agent, runtime, host) as running:
        reached = call_as(uid, gid, lambda: reach(10.0), timeout=30, groups=groups)
        assert reached == {"status": True, "heartbeat": "heartbeat", "writable": True}, (
            running.output()
        )
        shut = call_as(uid, gid, lambda: reach(1.5), timeout=30)
        assert shut == {"status": None, "heartbeat": None, "writable": False}


@requires("torch")  # found, not imported: the job imports it, not the pytest worker
def test_a_torch_loop_in_the_daemonset_training_job_saves_on_drain_and_exits_on_terminate(
    host: Path,
):
    """The walk of the DaemonSet mode: the shipped training Job's uid and groups, started on a
    new node before the agent's pod (the kubelet makes the hostPath, root's), run a torch loop
    with DataLoader workers and CheckpointGuard; the DaemonSet's agent comes, watches the node
    in the simulator, and the job saves on the cordon's drain and trains on, then saves and
    exits 143 on the graceful shutdown's terminate."""
    job = next(r for r in render_example("daemonset-job") if r["kind"] == "Job")
    train_pod = dict(job["spec"]["template"]["spec"])
    (train,) = train_pod["containers"]
    context = train_pod["securityContext"]
    uid, gid = int(context["runAsUser"]), int(context["runAsGroup"])
    groups = ",".join(str(g) for g in context["supplementalGroups"])
    train_volumes = {}
    for spec in train_pod["volumes"]:
        if "hostPath" in spec:
            where = host / "node" / spec["hostPath"]["path"].lstrip("/")
            where.mkdir(parents=True, mode=0o755)
            train_volumes[spec["name"]] = where
    train_env = {e["name"]: e.get("value") for e in train["env"]}
    runtime = in_pod(train_env["FOREWARN_RUNTIME_DIR"], train, train_volumes)
    home = host / "home"
    home.mkdir()
    os.chown(home, uid, gid)
    log = host / "train.log"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "FOREWARN_RUNTIME_DIR": str(runtime),
        "CKPT": str(home / "model.pt"),
    }
    with log.open("w") as out:
        trainer = subprocess.Popen(
            [
                *("setpriv", f"--reuid={uid}", f"--regid={gid}", f"--groups={groups}"),
                *(sys.executable, str(TRAIN)),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(lambda: "started" in log.read_text(), timeout=120, what="the torch loop")
        resources = render("daemonset")
        pod = pod_of(resources, "DaemonSet")
        agent = container(pod, "forewarn")
        volumes = daemonset_pod(pod, host, "pod")
        assert in_pod(config(resources)["FOREWARN_RUNTIME_DIR"], agent, volumes) == runtime
        # The forked agent (uid 10001) cannot read this interpreter's stdlib under /root:
        # what its node watch imports is loaded here first, as other_user.PRELOAD does.
        for name in ("importlib.readers", "forewarn.providers.kubernetes.watch", "certifi"):
            importlib.import_module(name)
        httpx.Client(trust_env=False).close()  # loads the TLS context's CA bundle
        sim = KubernetesSimulator(node="gpu-1")
        with SimServer(sim) as server:
            kubernetes = {
                "FOREWARN_PROVIDERS": "local,kubernetes",
                "FOREWARN_KUBERNETES_URL": server.url,
                "NODE_NAME": "gpu-1",
            }
            with agent_as(agent, runtime, host, extra=kubernetes) as running:

                def watching() -> bool:
                    with sim.lock:
                        return sim.open_watches >= 1

                eventually(watching, timeout=60, what="the agent's watch")
                post = f"{server.url}/_sim/notices"
                httpx.post(post, json={"kind": "cordon"}, trust_env=False, timeout=5)
                eventually(
                    lambda: "saved step" in log.read_text(), timeout=60, what="the drain's save"
                )
                assert trainer.poll() is None, log.read_text()  # a drain: it trains on
                httpx.post(post, json={"kind": "shutdown"}, trust_env=False, timeout=5)
                assert trainer.wait(timeout=60) == 143, log.read_text() + running.output()
        text = log.read_text()
        assert text.count("saved step") == 2, text
        assert "on terminate kubernetes/gpu-1/shutdown" in text, text
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()


def test_daemonset_notices_outlive_the_agents_pod(host: Path):
    """A manual notice posted to one pod of the DaemonSet is still active in the pod that
    replaces it on the node (a rolling update, an eviction). The state was in an emptyDir,
    which the next pod gets new: the notice was gone."""
    resources = render("daemonset")
    pod = pod_of(resources, "DaemonSet")
    agent = container(pod, "forewarn")
    settings = config(resources)
    active: list[list[str]] = []
    for name in ("first", "second"):
        volumes = daemonset_pod(pod, host, name)
        runtime = in_pod(settings["FOREWARN_RUNTIME_DIR"], agent, volumes)
        state = in_pod(settings["FOREWARN_STATE_DIR"], agent, volumes)
        (host / name).mkdir(exist_ok=True)
        with agent_as(agent, runtime, host / name, state=state) as running:
            control = f"ipc://{runtime}/control"
            if name == "first":
                raised = request(control, {"op": "notify", "action": "drain", "id": "local/kept"})
                assert raised["ok"], (raised, running.output())
            status = request(control, {"op": "status"}, timeout=10)
            active.append([notice["id"] for notice in status["active"]])
    assert active == [["local/kept"], ["local/kept"]]


def client_without_settings(timeout: float) -> dict[str, Any]:
    """A training process, `forewarn status` or a CheckpointGuard given no FOREWARN_* setting:
    where it looks for the agent, and whether the agent answers there."""
    from forewarn.protocol.wire import default_endpoints, runtime_dir

    _, control = default_endpoints()
    try:
        ok = request(control, {"op": "status"}, timeout=timeout).get("ok")
    except TimeoutError:
        ok = None
    return {
        "runtime": str(runtime_dir()),
        "agent_side": str(load_settings().resolved_runtime_dir()),
        "status": ok,
    }


def test_a_member_of_the_agents_group_finds_the_system_agent_without_settings(
    host: Path, monkeypatch: pytest.MonkeyPatch
):
    """The systemd unit and the image leave the system runtime directory 0750 with the agent's
    group, and tell users to join that group. A member cannot write there, and clients took
    "writable" as the sign of the system directory: they looked in /tmp/forewarn-<uid>, where
    no agent runs. (This test stands a directory of its own in for the system one.)"""
    from forewarn.protocol import wire

    system = host / "run-forewarn"  # as RuntimeDirectory=forewarn, RuntimeDirectoryMode=0750
    system.mkdir()
    agent = {"securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}
    os.chown(system, 10001, 10001)
    system.chmod(0o750)
    monkeypatch.setattr(wire, "SYSTEM_RUNTIME_DIR", system)
    for name in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    load_settings()  # its lazy imports, while the interpreter's files can be read
    with agent_as(agent, system, host) as running:
        member = call_as(TRAINER, TRAINER, lambda: client_without_settings(10.0), groups=(10001,))
        assert member["runtime"] == str(system) and member["status"] is True, running.output()
        # An agent of that user's own still takes a directory it can write.
        assert member["agent_side"] == f"/tmp/forewarn-{TRAINER}"
        # Someone outside the group keeps to a directory of their own.
        other = call_as(TRAINER, TRAINER, lambda: client_without_settings(0.5))
        assert other["runtime"] == f"/tmp/forewarn-{TRAINER}" and other["status"] is None


def documented_docker_commands() -> list[list[str]]:
    """The docker commands of docs/operations.md's container section, the training
    container's (a comment there, for it names no real image) included."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = text[text.index("## Container image") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "no sh block in the container section"
    commands = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("# ")
        if line.startswith("docker "):
            commands.append(shlex.split(line))
    return commands


def documented_agent_runs() -> list[list[str]]:
    """The `docker run` of the agent's image in docs/operations.md and in the Dockerfile's
    header (its comment lines, joined where they continue)."""
    runs = [c for c in documented_docker_commands() if c[:2] == ["docker", "run"]]
    header = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text().split("\nARG")[0]
    header = "\n".join(line.removeprefix("#").strip() for line in header.splitlines())
    lines = header.replace("\\\n", " ").splitlines()
    runs += [shlex.split(line) for line in lines if line.startswith("docker run ")]
    return [c for c in runs if any(arg.startswith("forewarn:") for arg in c)]


def test_the_documented_agent_container_comes_back_after_a_crash_or_a_reboot():
    """Docker leaves a container without a restart policy dead when its process exits and
    does not start it again when the machine boots: an agent that crashed, or a spot VM
    rebooted for maintenance, left the training container with no notice at all (systemd's
    unit and Kubernetes restart theirs). The container's state, in its own layer, survives."""
    runs = documented_agent_runs()
    assert len(runs) == 2, runs
    for run in runs:
        assert dict(itertools.pairwise(run)).get("--restart") == "unless-stopped", run


def test_the_documented_agent_container_keeps_its_state_when_replaced():
    """An upgrade of the image is `docker rm` and `docker run` of the new one: the state in
    the container's own layer went with the old container, and with it the manual notices (a
    planned maintenance's drain with its deadline, which nothing raises again), the acks, the
    DigitalOcean reclaims raised and GCP's notice ids. The documented agent keeps
    /var/lib/forewarn in a named volume, which Docker fills from the image (owner 10001, mode
    0750) the first time it mounts it empty."""
    runs = documented_agent_runs()
    assert len(runs) == 2, runs
    for run in runs:
        state = [m for m in mounted(run).values() if m[1] == "/var/lib/forewarn"]
        assert state, run
        name, _, options = state[0]
        assert not name.startswith("/") and "nocopy" not in options, run


def test_the_documented_training_container_has_time_to_save_when_stopped():
    """`docker stop` (and dockerd at a shutdown) sends SIGTERM, then SIGKILL after the
    container's stop timeout, 10 s unless set: the guard's reclaim save after a SIGTERM was
    killed mid-flush. The documented training container is given the sidecar Job's grace."""
    runs = [c for c in documented_docker_commands() if c[:2] == ["docker", "run"]]
    training_run = next(c for c in runs if not any(a.startswith("forewarn:") for a in c))
    timeout = dict(itertools.pairwise(training_run)).get("--stop-timeout")
    assert timeout is not None and int(timeout) >= 120, training_run


def volume_options(command: list[str]) -> dict[str, str]:
    options = {}
    for flag, value in itertools.pairwise(command):
        if flag in ("--opt", "-o"):
            key, _, setting = value.partition("=")
            options[key] = setting
    return options


def mounted(command: list[str]) -> dict[str, tuple[str, str, set[str]]]:
    """`-v NAME:PATH[:OPTIONS]` of a docker run, by volume name."""
    found = {}
    for flag, value in itertools.pairwise(command):
        if flag in ("-v", "--volume"):
            name, path, *rest = value.split(":")
            found[name] = (name, path, set(rest[0].split(",")) if rest else set())
    return found


@pytest.mark.parametrize("first", ["agent", "training"])
def test_the_documented_docker_volume_is_the_agents_whichever_container_comes_first(
    host: Path, first: str
):
    """A plain named volume takes its owner from a container's image when it mounts the
    volume empty: a training container first could leave /run/forewarn root's, where the
    agent (uid 10001) cannot write. The documented volume is a tmpfs whose mount options make
    it the agent's; it is mounted here with those options, and the agent and a training
    process with the documented group meet there."""
    commands = documented_docker_commands()
    runs = [c for c in commands if c[:2] == ["docker", "run"]]
    agent_run = next(c for c in runs if any(arg.startswith("forewarn:") for arg in c))
    training_run = next(c for c in runs if c is not agent_run)
    name, path, _ = next(m for m in mounted(agent_run).values() if m[1] == "/run/forewarn")
    assert mounted(training_run)[name][1] == path
    creates = [c for c in commands if c[:3] == ["docker", "volume", "create"] and c[-1] == name]
    assert creates, f"{name} is not created before use: its owner depends on who mounts it"
    assert commands.index(creates[0]) < commands.index(agent_run)
    options = volume_options(creates[0])
    assert options["type"] == "tmpfs", options
    # The training image must not be copied into it (its own /run/forewarn would be root's).
    assert "nocopy" in mounted(training_run)[name][2]
    groups = tuple(int(v) for f, v in itertools.pairwise(training_run) if f == "--group-add")

    volume = host / "volume"
    volume.mkdir(mode=0o755)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options["o"], options["device"], str(volume)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        # A training container first, mounting with nocopy, leaves the volume as its mount
        # options made it; the agent's image, populating it empty, gives it its own
        # /run/forewarn's owner and mode (Dockerfile).
        if first == "agent":
            os.chown(volume, 10001, 10001)
            volume.chmod(0o750)
        agent = {"securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}
        with agent_as(agent, volume, host) as running:
            reached = as_trainer(volume, groups=groups)
            assert reached == {"status": True, "heartbeat": "heartbeat"}, running.output()
    finally:
        subprocess.run(["umount", str(volume)], check=False)


def endpoints_of_a_client(env: dict[str, str]) -> dict[str, str]:
    """The endpoints a training process's client picks with `env` as its FOREWARN_*
    settings: Notices (and the CheckpointGuard on it) picks them once, when it is made."""
    from forewarn.clients.notices import Notices

    os.environ.update(env)
    notices = Notices(start=False)
    return {"events": notices.events, "control": notices.control}


def reach(events: str, control: str, timeout: float) -> dict[str, Any]:
    """A control request and a subscription at the endpoints a client picked."""
    try:
        ok = request(control, {"op": "status"}, timeout=timeout).get("ok")
    except TimeoutError:
        ok = None
    context = zmq.Context()
    try:
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"heartbeat")
        sub.connect(events)
        topic = sub.recv_multipart()[0].decode() if sub.poll(int(timeout * 1000)) else None
        return {"status": ok, "heartbeat": topic}
    finally:
        context.destroy(linger=0)


def test_the_documented_training_container_finds_an_agent_that_starts_after_it(
    host: Path, monkeypatch: pytest.MonkeyPatch
):
    """Docker starts containers with a restart policy side by side when the machine boots,
    and the tmpfs volume comes up empty: a training container whose guard is made before the
    agent has bound its sockets found /run/forewarn not writable (0750, the agent's) and no
    agent there yet, so its client took /tmp/forewarn-<uid> for good and never heard the
    agent that started a moment later. The documented line names the directory, as the
    systemd unit and the sidecar Job do. (A directory of this test's own stands in for the
    container's /run/forewarn, as the volume's mount options leave it.)"""
    from forewarn.protocol import wire

    runs = [c for c in documented_docker_commands() if c[:2] == ["docker", "run"]]
    training_run = next(c for c in runs if not any(a.startswith("forewarn:") for a in c))
    groups = tuple(int(v) for f, v in itertools.pairwise(training_run) if f == "--group-add")
    mount = next(m[1] for m in mounted(training_run).values() if m[1] == "/run/forewarn")
    volume = host / "volume"  # uid=10001,gid=10001,mode=0750 (docker volume create)
    volume.mkdir()
    os.chown(volume, 10001, 10001)
    volume.chmod(0o750)
    env = {}
    for flag, value in itertools.pairwise(training_run):
        if flag in ("-e", "--env"):
            key, _, setting = value.partition("=")
            if setting == mount or setting.startswith(mount + "/"):
                setting = str(volume) + setting[len(mount) :]
            env[key] = setting
    monkeypatch.setattr(wire, "SYSTEM_RUNTIME_DIR", volume)
    monkeypatch.setattr(wire, "DEFAULT_CONFIG_FILE", host / "no-config.toml")
    for name in list(os.environ):
        if name.upper().startswith("FOREWARN_") or name == "XDG_RUNTIME_DIR":
            monkeypatch.delenv(name)

    import forewarn.clients.notices  # noqa: F401  (its imports, while the files can be read)

    load_settings()
    # The training container first: its client picks where to look before the agent runs.
    picked = call_as(TRAINER, TRAINER, lambda: endpoints_of_a_client(env), groups=groups)
    agent = {"securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}
    with agent_as(agent, volume, host) as running:
        reached = call_as(
            TRAINER,
            TRAINER,
            lambda: reach(picked["events"], picked["control"], 10.0),
            timeout=30.0,
            groups=groups,
        )
        assert reached == {"status": True, "heartbeat": "heartbeat"}, (
            picked,
            running.output(),
        )
