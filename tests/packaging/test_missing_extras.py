"""Every entry point that needs one of forewarn's extras says, when the extra is missing, which
`pip install` adds it, not a bare `ModuleNotFoundError: No module named 'prometheus_client'`.

found: `import forewarn.agent.metrics` (what `forewarn agent --metrics-address` loads, and
what an embedder importing the metrics service reaches) raised the bare error; so did
`python -m forewarn.clients.demo_torch` without torch, as a traceback.

Each process runs with a `sitecustomize` on its path that refuses the extra's modules as an
environment without them would (`ModuleNotFoundError` naming the top-level package), rather
than in a fresh virtual environment: the refusal is the same exception a missing package
raises, and the same process also proves that nothing else stood in for it, at a tenth of a
venv install's CPU on a shared 2-core machine. One test sweeps every module of the package
with all the extras refused, so a new module that imports one at its top is caught too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import AgentProcess, agent_env, eventually

# The top-level modules each extra installs (pyproject.toml's optional-dependencies), and
# what those pull in that the core dependencies do not.
EXTRA_MODULES = {
    "aws": ("boto3", "botocore"),
    "gcp": ("google", "requests"),
    "azure": ("azure",),
    "k8s": ("kubernetes", "yaml"),
    "metrics": ("prometheus_client",),
    "plot": ("matplotlib", "numpy"),
    "torch": ("torch",),
    "lightning": ("lightning", "pytorch_lightning"),
    "transformers": ("transformers", "accelerate"),
}
EVERY_EXTRA = tuple(sorted({module for modules in EXTRA_MODULES.values() for module in modules}))

REFUSER = '''\
"""Refuses the modules named in $REFUSED_MODULES, as an environment without them would."""
import os
import sys

_REFUSED = frozenset(filter(None, os.environ.get("REFUSED_MODULES", "").split(",")))


class _Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in _REFUSED:
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        return None


sys.meta_path.insert(0, _Refuse())
'''


def _env(tmp_path: Path, refused: tuple[str, ...]) -> dict[str, str]:
    site = tmp_path / "refuser"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(REFUSER)
    env = agent_env(tmp_path)
    path = [str(site), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONPATH=os.pathsep.join(path), REFUSED_MODULES=",".join(refused))
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_refuser_refuses_as_a_missing_package_does(tmp_path: Path) -> None:
    done = _run(
        ["-c", "import prometheus_client.core"], _env(tmp_path, ("prometheus_client",)), tmp_path
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'prometheus_client'" in done.stderr


@pytest.mark.slow(8)
def test_every_module_imports_or_names_its_extra_without_the_extras(tmp_path: Path) -> None:
    sweep = (
        "import importlib, pkgutil\n"
        "import forewarn.agent, forewarn.clients, forewarn.protocol, forewarn.providers\n"
        "for package in (forewarn.protocol, forewarn.agent, forewarn.providers, "
        "forewarn.clients):\n"
        "    for found in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        try:\n"
        "            importlib.import_module(found.name)\n"
        "        except ModuleNotFoundError as error:\n"
        "            print(found.name, '|', error)\n"
    )
    done = _run(["-c", sweep], _env(tmp_path, EVERY_EXTRA), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    failed = [line for line in done.stdout.splitlines() if line]
    assert failed, "the lightning and transformers integrations need their extras"
    bare = [line for line in failed if "pip install" not in line or "[" not in line]
    assert bare == [], "\n".join(bare)


def test_importing_the_metrics_module_names_the_metrics_extra(tmp_path: Path) -> None:
    done = _run(
        ["-c", "import forewarn.agent.metrics"],
        _env(tmp_path, EXTRA_MODULES["metrics"]),
        tmp_path,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "prometheus_client" in last, last
    assert "pip install" in last and "[metrics]" in last, last


def test_the_agent_with_a_metrics_address_names_the_metrics_extra(tmp_path: Path) -> None:
    argv = ["-m", "forewarn.agent.cli", "agent", "--provider", "local"]
    argv += ["--metrics-address", "127.0.0.1:0"]
    done = _run(argv, _env(tmp_path, EXTRA_MODULES["metrics"]), tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "[metrics]" in done.stderr and "prometheus_client" in done.stderr, done.stderr


def test_the_torch_demo_without_torch_names_the_torch_extra(tmp_path: Path) -> None:
    argv = ["-m", "forewarn.clients.demo_torch", "--dir", str(tmp_path / "ckpt")]
    done = _run(argv, _env(tmp_path, EXTRA_MODULES["torch"]), tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip()
    assert line.startswith("forewarn: ") and "\n" not in line, line
    assert "torch" in line and "pip install" in line and "[torch]" in line, line


# The commands that need a cloud SDK, the Kubernetes client or matplotlib, each run without
# it (these named their extra already; kept so that a new import path cannot lose it).
COMMANDS_NEEDING_AN_EXTRA = {
    "aws": "drill aws --instance-id i-0123456789abcdef0 --region us-east-1 "
    "--role-arn arn:aws:iam::123456789012:role/forewarn-test --yes",
    "gcp": "drill gcp --project p --zone us-central1-a --instance vm1 --yes",
    "k8s": "drill kubernetes --node n1 --yes",
}


@pytest.mark.parametrize("extra", sorted(COMMANDS_NEEDING_AN_EXTRA))
def test_a_command_that_needs_an_extra_names_it(extra: str, tmp_path: Path) -> None:
    argv = ["-m", "forewarn.agent.cli", *COMMANDS_NEEDING_AN_EXTRA[extra].split()]
    done = _run(argv, _env(tmp_path, EXTRA_MODULES[extra]), tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("forewarn: ") and f"[{extra}]" in last and "pip install" in last, last


# `forewarn agent --provider kubernetes` without the k8s extra (brief H279): with no kubeconfig
# it needs none and says what to set; with one, it names the extra. Either way the agent runs
# and `status` holds the cause (a kubeconfig can be mounted later; the watcher retries).
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
    "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    "users: [{name: u, user: {token: not-a-secret}}]\n"
)


@pytest.mark.parametrize("kubeconfig", [False, True], ids=["none", "given"])
def test_the_kubernetes_agent_without_the_extra_says_what_to_do(
    kubeconfig: bool, tmp_path: Path
) -> None:
    env = _env(tmp_path, EXTRA_MODULES["k8s"])
    env.update(HOME=str(tmp_path / "home"), NODE_NAME="n1")
    env.pop("KUBECONFIG", None)
    args: tuple[str, ...] = ()
    if kubeconfig:
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG)
        args = ("--set", f"kubernetes.kubeconfig={path}")
    with AgentProcess(tmp_path, ("kubernetes",), args, env) as agent:
        health = eventually(
            lambda: (
                (found := agent.control({"op": "status"})["health"][0])["last_error"] == "config"
                and found
            ),
            20,
            "the config error in status",
        )
        message = health["last_error_message"]
        if kubeconfig:
            assert "[k8s]" in message and "pip install" in message, message
        else:
            assert "not in a pod" in message and "kubernetes.kubeconfig" in message, message
        assert message in agent.output(), agent.output()
