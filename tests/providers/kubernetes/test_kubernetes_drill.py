"""`forewarn drill kubernetes`: prints without --yes, cordons through the API with it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from support import agent_env, run_forewarn

# The drill imports the Kubernetes client library (about a second of CPU): on a loaded
# machine that alone can take tens of seconds.
DRILL_TIMEOUT = 90
NODE = "drill-node"

# Three cases run `forewarn drill kubernetes` as its own fresh interpreter, as a user does: the
# plan it prints (exit 0), a refused token (exit 1) and a missing node (exit 2). The others
# fork from a process that loaded the command line and the client library once
# (`run_kubernetes_drill_forked`, tests/conftest.py; still their own process, environment,
# output and exit code): ~0.05 CPU-s each instead of ~0.75.
Forked = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def server() -> Iterator[SimServer]:
    with SimServer(KubernetesSimulator(node=NODE, token="op-token")) as running:
        yield running


def env(tmp_path: Path, server: SimServer, token: str = "op-token") -> dict[str, str]:
    token_file = tmp_path / "operator-token"
    token_file.write_text(token)
    environment = agent_env(
        tmp_path,
        FOREWARN_KUBERNETES_URL=server.url,
        FOREWARN_KUBERNETES_TOKEN_FILE=str(token_file),
        HOME=str(tmp_path),  # no ~/.kube/config: the URL and token file are what count
    )
    environment.pop("KUBECONFIG", None)
    return environment


def unschedulable(server: SimServer) -> bool:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    with sim.lock:
        assert sim.node is not None
        return bool(sim.node["spec"].get("unschedulable"))


def test_without_yes_only_prints(tmp_path: Path, server: SimServer) -> None:
    done = run_forewarn(
        "drill", "kubernetes", "--node", NODE, env=env(tmp_path, server), timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"PATCH {server.url}/api/v1/nodes/{NODE}" in done.stdout
    assert '{"spec": {"unschedulable": true}}' in done.stdout
    assert "application/strategic-merge-patch+json" in done.stdout
    assert "add --yes" in done.stdout
    # The server came from FOREWARN_KUBERNETES_URL, outside any pod: not "in-cluster".
    assert "in-cluster" not in done.stdout, done.stdout
    assert f"through FOREWARN_KUBERNETES_URL {server.url} (token from " in done.stdout
    assert not unschedulable(server)
    assert server.sim.requests == {}


def test_yes_cordons_and_uncordon_undoes(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    environment = env(tmp_path, server)
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", "--node", NODE, "--yes", env=environment, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "spec.unschedulable=true" in done.stdout
    assert unschedulable(server)
    done = run_kubernetes_drill_forked(
        "drill",
        "kubernetes",
        "--node",
        NODE,
        "--uncordon",
        "--yes",
        env=environment,
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not unschedulable(server)


def test_refused_token_is_explained(tmp_path: Path, server: SimServer) -> None:
    done = run_forewarn(
        "drill",
        "kubernetes",
        "--node",
        NODE,
        "--yes",
        env=env(tmp_path, server, "wrong"),
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("forewarn: drill kubernetes: 401 Unauthorized:"), done.stderr
    assert f"refused the credentials of FOREWARN_KUBERNETES_URL {server.url}" in done.stderr
    assert not unschedulable(server)


def test_node_is_required(tmp_path: Path, server: SimServer) -> None:
    environment = env(tmp_path, server)
    environment.pop("NODE_NAME", None)
    done = run_forewarn("drill", "kubernetes", env=environment, timeout=DRILL_TIMEOUT)
    assert done.returncode == 2
    assert done.stderr.startswith("forewarn: drill kubernetes: --node:"), done.stderr


def test_a_node_name_and_url_lose_the_space_around_them(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    """NODE_NAME and FOREWARN_KUBERNETES_URL from a ConfigMap block end with a newline, as the
    agent reads them without: the drill kept it and would patch `nodes/drill-node%0A`."""
    environment = env(tmp_path, server)
    environment["NODE_NAME"] = f" {NODE}\n"
    environment["FOREWARN_KUBERNETES_URL"] = f"{server.url}\n"
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", env=environment, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"  PATCH {server.url}/api/v1/nodes/{NODE}\n" in done.stdout
    environment["NODE_NAME"] = " \n"
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", env=environment, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 2
    assert done.stderr.startswith("forewarn: drill kubernetes: --node:"), done.stderr


def test_a_bad_url_is_named(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    # Was exit 1: "unexpected ValidationError: 1 validation error for Settings" and its dump.
    environment = env(tmp_path, server)
    done = run_kubernetes_drill_forked(
        "drill",
        "kubernetes",
        "--node",
        NODE,
        "--url",
        "ftp://x",
        env=environment,
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("forewarn: drill kubernetes: --url: must start with http")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_node_name_in_capitals_is_lowered_as_the_agent_lowers_it(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    """The watcher reads NODE_NAME in lower case (a Node's name is a DNS subdomain; the
    kubelet lowers `$(hostname)`), but the drill sent `--node Drill-Node` as given: the
    PATCH of `nodes/Drill-Node` named a node that cannot exist, 404, and nothing was drilled."""
    environment = env(tmp_path, server)
    done = run_kubernetes_drill_forked(
        "drill",
        "kubernetes",
        "--node",
        NODE.upper(),
        "--yes",
        env=environment,
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"  PATCH {server.url}/api/v1/nodes/{NODE}\n" in done.stdout
    assert unschedulable(server)


def test_the_node_is_the_one_the_agent_watches(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    """The agent watches `kubernetes.node_name` (FOREWARN_KUBERNETES_NODE_NAME) before
    NODE_NAME; the drill read NODE_NAME alone, so with both set it cordoned another node than
    the one the agent watched (on a real cluster, someone else's), and the agent saw nothing."""
    environment = env(tmp_path, server)
    environment["NODE_NAME"] = "someone-elses-node"
    environment["FOREWARN_KUBERNETES_NODE_NAME"] = f"{NODE.upper()}\n"
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", env=environment, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"  PATCH {server.url}/api/v1/nodes/{NODE}\n" in done.stdout


def test_a_url_over_a_kubeconfig_is_named_as_the_server(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    """`--url` with a kubeconfig: the drill patches the URL with the kubeconfig's token, and
    said "through kubeconfig FILE (context C)", which named the kubeconfig's cluster."""
    config = tmp_path / "kubeconfig.json"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "ops",
                "contexts": [{"name": "ops", "context": {"cluster": "c1", "user": "u1"}}],
                "clusters": [{"name": "c1", "cluster": {"server": "https://127.0.0.2:1"}}],
                "users": [{"name": "u1", "user": {"token": "op-token"}}],
            }
        )
    )
    environment = env(tmp_path, server)
    environment.pop("FOREWARN_KUBERNETES_URL")
    done = run_kubernetes_drill_forked(
        "drill",
        "kubernetes",
        "--node",
        NODE,
        "--kubeconfig",
        str(config),
        "--url",
        server.url,
        "--yes",
        env=environment,
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert unschedulable(server)
    assert f"through --url {server.url} (credentials from kubeconfig {config}, context ops)" in (
        done.stdout
    ), done.stdout


def test_a_refused_patch_names_the_verb_it_needs_not_the_agents_role(
    tmp_path: Path, run_kubernetes_drill_forked: Forked
) -> None:
    """An operator whose identity may read nodes but not patch them (the agent's own
    ServiceAccount, say). Found: the drill's 403 ended with the hint made for the watcher,
    "the identity needs list and watch on nodes (packaging/kubernetes/base/clusterrole.yaml)",
    a role this identity has; the verb missing is patch."""
    sim = KubernetesSimulator(node=NODE, token="op-token", grants=frozenset({"list:nodes"}))
    with SimServer(sim) as server:
        done = run_kubernetes_drill_forked(
            "drill",
            "kubernetes",
            "--node",
            NODE,
            "--yes",
            env=env(tmp_path, server),
            timeout=DRILL_TIMEOUT,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'cannot patch resource "nodes"' in done.stderr, done.stderr  # the server's words
    assert "list and watch" not in done.stderr, done.stderr
    assert "clusterrole.yaml" not in done.stderr, done.stderr
    assert "needs patch on nodes" in done.stderr, done.stderr
