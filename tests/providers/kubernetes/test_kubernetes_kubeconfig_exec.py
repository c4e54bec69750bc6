"""Kubeconfigs as EKS, GKE and AKS write them: the credentials come from an `exec` plugin.

The plugin is a small script that prints an ExecCredential with the token in a file beside
it and counts its runs. The agent (finding the kubeconfig in $KUBECONFIG) and
`forewarn drill kubernetes` (finding it in ~/.kube/config) run as real processes against
the node API simulator on loopback: the drill cordons the node, the agent sees it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from forewarn.agent.notifications.kubernetes import KubernetesNotifier
from forewarn.providers.kubernetes import kubeconfig
from forewarn.providers.kubernetes.settings import Settings
from forewarn.providers.kubernetes.simulate import KubernetesSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually, run_forewarn

# The drill imports the Kubernetes client library (about a second of CPU): on a loaded
# machine that alone can take tens of seconds.
DRILL_TIMEOUT = 90
# The drills here fork from a process that loaded the command line and the client library
# once (`run_kubernetes_drill_forked`, tests/conftest.py: still their own process, environment,
# home directory, output and exit code), and so do the agents (`forked_agents`); the drill's
# start as a fresh interpreter is test_kubernetes_drill.py's.
pytestmark = pytest.mark.usefixtures("forked_agents")
Forked = Callable[..., subprocess.CompletedProcess[str]]
NODE = "exec-node"
EXEC_API = "client.authentication.k8s.io/v1"

PLUGIN = """\
import json, pathlib
here = pathlib.Path(__file__).parent
runs = here / "runs"
# Replaced whole, never rewritten in place: the test reads it while the plugin runs.
(here / "runs.new").write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))
(here / "runs.new").replace(runs)
token = (here / "token").read_text().strip()
print(json.dumps({"apiVersion": "%s", "kind": "ExecCredential",
                  "status": {"token": token, "expirationTimestamp": "%s"}}))
"""


@pytest.fixture
def server() -> Iterator[SimServer]:
    sim = KubernetesSimulator(node=NODE, token="exec-token-1", max_watch_seconds=30)
    with SimServer(sim) as running:
        yield running


def write_kubeconfig(
    directory: Path,
    server: str,
    token: str,
    expires: str = "2099-01-01T00:00:00Z",
    command: list[str] | None = None,
) -> Path:
    """A YAML kubeconfig whose user runs `plugin.py` (through this Python), or `command`,
    for a token."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plugin.py").write_text(PLUGIN % (EXEC_API, expires))
    (directory / "token").write_text(token)
    command = command or [sys.executable, str(directory / "plugin.py")]
    user = {
        "exec": {
            "apiVersion": EXEC_API,
            "command": command[0],
            "args": command[1:],
            "interactiveMode": "Never",
        }
    }
    # The YAML form kubectl writes; json.dumps of a value is valid YAML for it.
    text = (
        "apiVersion: v1\nkind: Config\ncurrent-context: eks\n"
        "contexts:\n- name: eks\n  context: {cluster: sim, user: plugin}\n"
        f"clusters:\n- name: sim\n  cluster:\n    server: {json.dumps(server)}\n"
        f"users:\n- name: plugin\n  user: {json.dumps(user)}\n"
    )
    path = directory / "config"
    path.write_text(text)
    return path


def control(server: SimServer, kind: str, **fields: object) -> None:
    response = httpx.post(
        f"{server.url}/_sim/notices", json={"kind": kind, **fields}, trust_env=False, timeout=5
    )
    assert response.status_code == 201, response.text


def runs(directory: Path) -> int:
    counter = directory / "runs"
    return int(counter.read_text()) if counter.exists() else 0


def unschedulable(server: SimServer) -> bool:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    with sim.lock:
        assert sim.node is not None
        return bool(sim.node["spec"].get("unschedulable"))


def open_watches(server: SimServer) -> int:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    with sim.lock:
        return sim.open_watches


def test_drill_with_default_kubeconfig_cordons_and_the_agent_sees_it(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    agent_dir = tmp_path / "agent-kube"
    write_kubeconfig(agent_dir, server.url, "exec-token-1")
    home = tmp_path / "home"
    operator_dir = home / ".kube"
    write_kubeconfig(operator_dir, server.url, "exec-token-1")
    env = agent_env(tmp_path, HOME=str(home), KUBECONFIG=str(agent_dir / "config"))
    env["NODE_NAME"] = NODE
    with (
        AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent,
        agent.subscriber() as sub,
    ):
        eventually(lambda: open_watches(server) >= 1, what="the agent's watch")
        assert runs(agent_dir) >= 1

        # The operator's drill: no flags but the node; ~/.kube/config is found.
        drill_env = dict(env)
        del drill_env["KUBECONFIG"]
        done = run_kubernetes_drill_forked(
            "drill", "kubernetes", "--node", NODE, "--yes", env=drill_env, timeout=DRILL_TIMEOUT
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"kubeconfig {operator_dir / 'config'} (context eks)" in done.stdout
        assert "spec.unschedulable=true" in done.stdout
        assert runs(operator_dir) == 1
        assert unschedulable(server)

        notice = sub.notice(timeout=15)
        assert (notice["action"], notice["id"]) == ("drain", f"kubernetes/{NODE}/cordon")

        done = run_kubernetes_drill_forked(
            "drill",
            "kubernetes",
            "--node",
            NODE,
            "--uncordon",
            "--yes",
            env=drill_env,
            timeout=DRILL_TIMEOUT,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        notice = sub.notice(timeout=15)
        assert (notice["action"], notice["id"]) == ("clear", f"kubernetes/{NODE}/cordon")


def test_agent_runs_the_plugin_again_when_its_token_is_refused(
    tmp_path: Path, server: SimServer
) -> None:
    """An exec token that expires (EKS: 15 min) is fetched again: here the server starts
    refusing the old one, the plugin now hands out the new one, and the agent goes on."""
    kube = tmp_path / "kube"
    config = write_kubeconfig(kube, server.url, "exec-token-1")
    env = agent_env(tmp_path, HOME=str(tmp_path), KUBECONFIG=str(config))
    env["NODE_NAME"] = NODE
    with (
        AgentProcess(tmp_path, providers=("kubernetes",), env=env) as agent,
        agent.subscriber() as sub,
    ):
        eventually(lambda: open_watches(server) >= 1, what="the agent's watch")
        before = runs(kube)
        (kube / "token").write_text("exec-token-2")
        control(server, "rotate-token", token="exec-token-2")
        control(server, "timeout")  # the open watch ends; the next request gets a 401
        eventually(lambda: runs(kube) > before, what="the plugin to run again")
        control(server, "cordon")
        notice = sub.notice(timeout=15)
        assert (notice["action"], notice["id"]) == ("drain", f"kubernetes/{NODE}/cordon")


def test_drill_without_credentials_names_its_own_flags(
    tmp_path: Path, run_kubernetes_drill_forked: Forked
) -> None:
    env = agent_env(tmp_path, HOME=str(tmp_path / "empty-home"))
    env.pop("KUBECONFIG", None)
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", "--node", "n1", "--yes", env=env, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forewarn: drill kubernetes:"), done.stderr
    assert "--kubeconfig FILE" in lines[0] and "--url URL" in lines[0]
    assert "kubernetes.kubeconfig" not in lines[0] and "kubernetes.url" not in lines[0]


def test_drill_with_a_failing_plugin_says_so(
    tmp_path: Path, server: SimServer, run_kubernetes_drill_forked: Forked
) -> None:
    config = write_kubeconfig(tmp_path / "kube", server.url, "exec-token-1")
    config.write_text(config.read_text().replace(sys.executable, "/bin/false"))
    env = agent_env(tmp_path, HOME=str(tmp_path), KUBECONFIG=str(config))
    done = run_kubernetes_drill_forked(
        "drill", "kubernetes", "--node", NODE, "--yes", env=env, timeout=DRILL_TIMEOUT
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "exec: process returned 1" in done.stderr
    assert not unschedulable(server)


def hanging_kubeconfig(directory: Path, server: str) -> Path:
    """A kubeconfig whose plugin never answers, as `aws eks get-token` with no route to STS
    does: a shell that starts a child and waits for it. Their pids go to `pids`."""
    script = f"sleep 3600 & echo $$ $! > {directory / 'pids'}; wait"
    return write_kubeconfig(directory, server, "exec-token-1", command=["/bin/sh", "-c", script])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_plugin_that_never_answers_is_stopped_and_named(
    tmp_path: Path,
    server: SimServer,
    start_watcher: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The watcher waited on such a plugin forever: no error in `status` (the provider stayed
    `waiting`), the plugin and its children left running, and the agent unable to stop. The
    limit is `kubernetes.exec_timeout` (a duration, as every seconds key takes)."""
    kube = tmp_path / "kube"
    config = hanging_kubeconfig(kube, server.url)
    running = await start_watcher(kubeconfig=config, node_name=NODE, exec_timeout="1s")
    await running.until(lambda: running.health.last_error == "config", timeout=15)
    assert "/bin/sh did not answer within 1s" in caplog.text
    pids = [int(pid) for pid in (kube / "pids").read_text().split()]
    await running.until(lambda: not any(alive(pid) for pid in pids), what="the plugin ended")


def test_the_notifier_does_not_run_the_plugin_at_start(
    tmp_path: Path, server: SimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `kubernetes.events` on, the notifier ran the plugin while the agent started: one
    that hung held the start for EXEC_TIMEOUT, one that failed stopped the agent (exit 2)."""
    monkeypatch.setattr(kubeconfig, "EXEC_TIMEOUT", 1.0)
    kube = tmp_path / "kube"
    config = hanging_kubeconfig(kube, server.url)
    settings = Settings(kubeconfig=config, node_name=NODE, events=True, exec_timeout=1)
    notifier = KubernetesNotifier(settings, env={})
    assert notifier.cluster.server == server.url
    assert not (kube / "pids").exists()


@pytest.mark.parametrize("given", ["0", "-1", "601", "11m", "nan"])
def test_the_exec_timeout_is_bounded_and_named(given: str) -> None:
    # Above ten minutes a hung plugin would hold the watcher, silent, past any notice.
    with pytest.raises(ValueError, match="exec_timeout"):
        Settings(exec_timeout=given)


def failing_plugin_env(tmp_path: Path, server: SimServer) -> tuple[Path, dict[str, str]]:
    """An agent with Events on whose kubeconfig's plugin fails until `token` is written, as a
    cloud CLI does until someone logs in."""
    kube = tmp_path / "kube"
    config = write_kubeconfig(kube, server.url, "exec-token-1")
    (kube / "token").unlink()
    env = agent_env(
        tmp_path,
        HOME=str(tmp_path),
        KUBECONFIG=str(config),
        FOREWARN_KUBERNETES_EVENTS="true",
        FOREWARN_KUBERNETES_NODE_NAME=NODE,
    )
    return kube, env


def events_of(server: SimServer) -> list[dict[str, Any]]:
    sim = server.sim
    assert isinstance(sim, KubernetesSimulator)
    with sim.lock:
        return list(sim.events)


def test_a_failing_plugin_does_not_stop_the_agent_and_is_retried_with_backoff(
    tmp_path: Path, server: SimServer
) -> None:
    """The notifier's plugin failed at start and the agent exited 2: no notice of any
    provider was published until someone logged the cloud CLI in and restarted it."""
    kube, env = failing_plugin_env(tmp_path, server)
    with (
        AgentProcess(tmp_path, providers=("local",), env=env) as agent,
        agent.subscriber() as sub,
    ):
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]
        assert sub.notice(timeout=15)["id"] == notice["id"]
        failed = "kubernetes: cannot get the credentials for the API server"
        eventually(lambda: agent.output().count(failed) >= 2, timeout=20, what="two failures")
        waits = re.findall(r"; trying again in (\d+)s \(", agent.output())
        assert waits[:2] == ["1", "2"], agent.output()
        assert "exec: process returned 1" in agent.output()
        assert events_of(server) == []

        (kube / "token").write_text("exec-token-1")  # logged in
        eventually(lambda: events_of(server), timeout=30, what="the queued notice's Event")
        assert notice["id"] in events_of(server)[0]["note"]
        assert agent.proc is not None and agent.proc.poll() is None


def test_a_kubeconfig_that_cannot_work_still_exits_2_at_start_without_the_plugin(
    tmp_path: Path, server: SimServer
) -> None:
    """What is cheap to check still is, before the plugin would run: here a CA file that is
    not there."""
    kube, env = failing_plugin_env(tmp_path, server)
    config = kube / "config"
    text = config.read_text().replace(
        f"server: {json.dumps(server.url)}",
        'server: "https://127.0.0.1:6443"\n    certificate-authority: missing-ca.crt',
    )
    config.write_text(text)
    (kube / "token").write_text("exec-token-1")
    done = run_forewarn("agent", "--provider", "local", env=env, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"kubeconfig {config}" in done.stderr and "missing-ca.crt" in done.stderr
    assert runs(kube) == 0


def test_a_plugin_dies_with_a_sigkilled_agent(tmp_path: Path, server: SimServer) -> None:
    """A SIGKILLed agent (the OOM killer, a grace period ended) cannot stop its plugin: the
    kernel does (PR_SET_PDEATHSIG). The plugin was left running, orphaned, for ever."""
    kube = tmp_path / "kube"
    kube.mkdir()
    plugin = kube / "slow_plugin.py"
    plugin.write_text(
        "import os, pathlib, time\n"
        "here = pathlib.Path(__file__).parent\n"
        "(here / 'pid.new').write_text(str(os.getpid()))\n"
        "(here / 'pid.new').replace(here / 'pid')\n"
        "time.sleep(3600)\n"
    )
    config = write_kubeconfig(
        kube, server.url, "exec-token-1", command=[sys.executable, str(plugin)]
    )
    env = agent_env(tmp_path, HOME=str(tmp_path), KUBECONFIG=str(config), NODE_NAME=NODE)
    started = kube / "pid"
    agent = AgentProcess(tmp_path, providers=("kubernetes", "local"), env=env).start()
    try:
        # A guard against a plugin never started, not a measure: the agent's first request
        # starts a Python interpreter, which missed 15 s at the suite's load (check 44a).
        eventually(started.exists, timeout=60, what="the plugin started")
        pid = int(started.read_text())
        assert alive(pid)
        agent.kill()
        eventually(lambda: not alive(pid), timeout=15, what="the plugin killed with the agent")
    finally:
        agent.stop()
        if started.exists() and alive(int(started.read_text())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(started.read_text()), signal.SIGKILL)


def test_the_agent_stops_at_once_while_a_plugin_hangs(tmp_path: Path, server: SimServer) -> None:
    """Stopping waited for the plugin (asyncio waits for the thread running it): the agent
    said "stopped", then stayed for up to a minute, past a pod's grace period."""
    kube = tmp_path / "kube"
    config = hanging_kubeconfig(kube, server.url)
    env = agent_env(tmp_path, HOME=str(tmp_path), KUBECONFIG=str(config), NODE_NAME=NODE)
    started = kube / "pids"
    agent = AgentProcess(tmp_path, providers=("kubernetes", "local"), env=env).start()
    try:
        eventually(  # 60 s: a guard, not a measure (15 s missed at the suite's load, 44a)
            lambda: started.exists() and started.read_text().strip(),
            timeout=60,
            what="the plugin started",
        )
        pids = [int(pid) for pid in (kube / "pids").read_text().split()]
        assert agent.proc is not None
        agent.proc.terminate()
        assert agent.proc.wait(timeout=15) == 0, agent.output()
        eventually(lambda: not any(alive(pid) for pid in pids), what="the plugin stopped")
        # A plugin stopped on purpose is no error of a clean stop.
        assert "ERROR" not in agent.output(), agent.output()
    finally:
        agent.stop()
        if started.exists():  # a plugin left behind by a failure, not for the next test
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(started.read_text().split()[0]), signal.SIGKILL)
