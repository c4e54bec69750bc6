"""The simulator flow of docs/kubernetes.md, run as written: pasted as a script it must work
(the simulator says when it listens through --ready-file; nothing races it)."""

from __future__ import annotations

import contextlib
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
from k8s_support import NODE, Cluster, Running
from support import agent_env

DOC = Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md"


def simulator_flow() -> str:
    """The first `sh` block of the simulator section."""
    text = DOC.read_text()
    section = text[text.index("## Simulator: `forewarn simulate kubernetes`") :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "docs/kubernetes.md: no sh block in the simulator section"
    return match.group(1)


def test_the_documented_simulator_flow_runs_as_written(tmp_path: Path) -> None:
    script = simulator_flow()
    assert "--ready-file" in script  # the documented flow waits for the simulator
    # `forewarn` on PATH is this interpreter's, as an installed console script would be.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "forewarn"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m forewarn.agent.cli "$@"\n')
    shim.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = agent_env(tmp_path, TMPDIR=str(scratch))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    # As pasted: the flow names its own state directory (tests/packaging/test_docs_shell.py
    # checks that it does before this runs it without one); a home of its own to check.
    assert "export FOREWARN_STATE_DIR=$FOREWARN_RUNTIME_DIR/" in script
    del env["FOREWARN_STATE_DIR"]
    home = tmp_path / "home"
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / ".local" / "state"))
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the flow's own background jobs go with it on failure
    )
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None or proc.returncode != 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert '{"id": "taint/karpenter.sh/disrupted"}' in lines
    assert any("drain" in line and "kubernetes/gpu-1/taint" in line for line in lines), out
    assert any("terminate" in line and "kubernetes/gpu-1/shutdown" in line for line in lines), out
    assert "Traceback" not in err
    assert not home.exists(), sorted(home.rglob("*"))  # the state stayed in the try's directory


def aks_handler_lines() -> list[str]:
    """The `FOREWARN_*` lines docs/kubernetes.md gives for the AKS handler's taints."""
    text = DOC.read_text()
    section = text[text.index("### AKS node termination handler: its taints are opt-in") :]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match is not None, "docs/kubernetes.md: no yaml block in the AKS handler section"
    return match.group(1).splitlines()


async def test_the_aks_handlers_taints_turn_on_as_documented(
    tmp_path: Path, cluster: Cluster, start_watcher: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its taints are opt-in, and nothing said how to have them: a Preempt was only the
    handler's cordon, a drain with no hurry. The documented lines, pasted into the base's
    literals and rendered as an operator renders them, make its Preempt a terminate and keep
    every default terminate one."""
    from forewarn.agent.config import load_settings
    from forewarn.providers.kubernetes.settings import DEFAULT_TERMINATE_TAINTS
    from kustomize_render import KUSTOMIZE, kubectl

    tree = tmp_path / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    base = tree / "base" / "kustomization.yaml"
    literal = "      - FOREWARN_LOG_FORMAT=json\n"
    assert literal in base.read_text()
    base.write_text(
        base.read_text().replace(literal, literal + "\n".join(aks_handler_lines()) + "\n")
    )
    rendered = subprocess.run(
        [kubectl(), "kustomize", str(tree / "overlays" / "daemonset")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    (config,) = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc
        and doc["kind"] == "ConfigMap"
        and doc["metadata"]["name"].startswith("forewarn-config")
    ]
    for key, value in config["data"].items():
        if key.startswith("FOREWARN_KUBERNETES_"):
            monkeypatch.setenv(key, value)
    loaded = load_settings().kubernetes
    preempt, terminate = (f"aks-node-termination-handler/{t}" for t in ("preempt", "terminate"))
    assert loaded.imminent_taints == {*DEFAULT_TERMINATE_TAINTS, preempt, terminate}
    running: Running = await start_watcher(
        url=cluster.url,
        node_name=NODE,
        token_file=cluster.token_file,
        extra_taints=loaded.extra_taints,
        terminate_taints=loaded.terminate_taints,
    )
    cluster.raise_("taint", key="aks-node-termination-handler/reboot")
    await running.report("drain", f"kubernetes/{NODE}/taint/aks-node-termination-handler/reboot")
    cluster.raise_("taint", key=preempt, value="a-scheduled-event-id")
    await running.report("terminate", f"kubernetes/{NODE}/taint/{preempt}")
