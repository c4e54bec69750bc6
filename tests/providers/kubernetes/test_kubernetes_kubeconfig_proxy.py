"""A kubeconfig whose cluster has `proxy-url`: kubectl sends its requests through that proxy,
forewarn has no proxy support, and the client library ignores the key. Such a kubeconfig was
used by connecting to the server directly, past the proxy its user relies on; it is refused,
naming proxy-url and the cluster, by the watcher, the notifier at start and the drill."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.errors import ConfigError
from forewarn.providers.kubernetes import kubeconfig
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import agent_env, examples, refused_port, run_forewarn

NODE = "proxied-node"
TOKEN = "proxy-token"
DRILL_TIMEOUT = 90  # the drill imports the client library: seconds on a loaded machine


@pytest.fixture
def server() -> Iterator[SimServer]:
    sim = KubernetesSimulator(node=NODE, token=TOKEN, max_watch_seconds=30)
    with SimServer(sim) as running:
        yield running


@pytest.fixture
def proxy() -> Iterator[str]:
    """A proxy address on loopback that nothing answers: nothing may be sent through it."""
    with refused_port() as port:
        yield f"http://127.0.0.1:{port}"


def write(path: Path, server: str, proxy_url: str, cluster: str = "behind-proxy") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ops",
        "contexts": [{"name": "ops", "context": {"cluster": cluster, "user": "op"}}],
        "clusters": [{"name": cluster, "cluster": {"server": server, "proxy-url": proxy_url}}],
        "users": [{"name": "op", "user": {"token": TOKEN}}],
    }
    # UTF-8, as kubectl writes it: PyYAML reads a JSON escape of a character past U+FFFF as
    # two lone surrogates.
    path.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return path


def requests_seen(server: SimServer) -> int:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    with sim.lock:
        return sum(sim.counts.values()) + sim.open_watches + len(sim.events)


async def test_the_watcher_shows_a_config_error_naming_proxy_url(
    tmp_path: Path,
    server: SimServer,
    proxy: str,
    start_watcher: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = write(tmp_path / "kubeconfig", server.url, proxy)
    running = await start_watcher(kubeconfig=config, node_name=NODE)
    await running.until(lambda: running.health.last_error == "config", timeout=15)
    assert "cluster 'behind-proxy' has proxy-url" in caplog.text
    assert str(config) in caplog.text
    assert running.watcher.lists == 0 and requests_seen(server) == 0


def test_the_notifier_exits_2_at_start_naming_proxy_url(
    tmp_path: Path, server: SimServer, proxy: str
) -> None:
    config = write(tmp_path / "kubeconfig", server.url, proxy)
    env = agent_env(
        tmp_path,
        HOME=str(tmp_path),
        KUBECONFIG=str(config),
        FOREWARN_KUBERNETES_EVENTS="true",
        FOREWARN_KUBERNETES_NODE_NAME=NODE,
    )
    done = run_forewarn("agent", "--provider", "local", env=env, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "proxy-url" in done.stderr and "'behind-proxy'" in done.stderr
    assert str(config) in done.stderr


def test_the_drill_exits_2_naming_proxy_url_and_sends_nothing(
    tmp_path: Path, server: SimServer, proxy: str
) -> None:
    config = write(tmp_path / "kubeconfig", server.url, proxy)
    env = agent_env(tmp_path, HOME=str(tmp_path))
    done = run_forewarn(
        "drill",
        "kubernetes",
        "--node",
        NODE,
        "--kubeconfig",
        str(config),
        "--yes",
        env=env,
        timeout=DRILL_TIMEOUT,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forewarn: drill kubernetes:"), done.stderr
    assert "proxy-url" in lines[0] and "'behind-proxy'" in lines[0]
    assert requests_seen(server) == 0


def test_another_context_without_a_proxy_is_used(tmp_path: Path, server: SimServer) -> None:
    """Only the chosen context's cluster matters, as for kubectl."""
    path = write(tmp_path / "kubeconfig", server.url, "http://127.0.0.1:9")
    config = json.loads(path.read_text())
    config["clusters"].append({"name": "direct", "cluster": {"server": server.url}})
    config["contexts"].append({"name": "plain", "context": {"cluster": "direct", "user": "op"}})
    path.write_text(json.dumps(config))
    configuration, name = kubeconfig.load(str(path), "plain")
    assert (configuration.host, name) == (server.url, "plain")
    with pytest.raises(ConfigError, match="proxy-url"):
        kubeconfig.load(str(path), None)


@given(
    cluster=st.text(st.characters(exclude_categories=("Cc", "Cs", "Cn")), min_size=1, max_size=30),
    secret=st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=8, max_size=20),
    credentials=st.booleans(),
)
@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_any_proxy_url_is_refused_naming_the_cluster_and_not_the_url(
    tmp_path: Path, cluster: str, secret: str, credentials: bool
) -> None:
    """The proxy's address may carry a password: the message names the key, not the value."""
    path = write(
        tmp_path / "kubeconfig",
        "https://127.0.0.1:6443",
        f"http://u:{secret}@127.0.0.1:3128",
        cluster,
    )
    with pytest.raises(ConfigError) as refused:
        kubeconfig.load(str(path), None, credentials=credentials)
    message = str(refused.value)
    assert f"cluster {cluster!r} has proxy-url" in message
    assert secret not in message.replace(str(path), "").replace(repr(cluster), "")
