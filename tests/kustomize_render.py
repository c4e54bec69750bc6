"""Render the shipped kustomize overlays the way a user does (`kubectl kustomize`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

KUSTOMIZE = Path(__file__).resolve().parents[1] / "packaging" / "kubernetes"
OVERLAYS = ("daemonset", "sidecar-job")
COMPONENTS = ("metrics", "notifications", "cordon", "karpenter")


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is missing: .ci/setup.d/40-packaging-tools.sh installs it")
        pytest.skip("kubectl is not installed (.ci/setup.d/40-packaging-tools.sh installs it)")
    return path


def render(overlay: str, components: tuple[str, ...] = (), work: Path | None = None) -> list[Any]:
    """`kubectl kustomize` of an overlay as shipped, or of a copy under `work` with
    `components` enabled the documented way (uncommenting their lines). Each overlay and set
    of components is built once per test process (the shipped tree does not change while the
    tests run); every call parses that output afresh, so callers may change what they get."""
    if components:
        assert work is not None, "enabling components needs a work directory"
    return [doc for doc in yaml.safe_load_all(_kustomize(overlay, components, work)) if doc]


_built: dict[tuple[str, tuple[str, ...]], str] = {}


def _kustomize(overlay: str, components: tuple[str, ...], work: Path | None) -> str:
    key = (overlay, components)
    if key in _built:
        return _built[key]
    source = KUSTOMIZE / "overlays" / overlay
    if components:
        assert work is not None
        tree = work / "kubernetes"
        shutil.copytree(KUSTOMIZE, tree)
        source = tree / "overlays" / overlay
        text = (source / "kustomization.yaml").read_text()
        for component in components:
            line = f"  # - ../../components/{component} "
            assert line in text, f"{overlay} does not offer {component} as documented"
            text = text.replace(line, f"  - ../../components/{component} ")
        (source / "kustomization.yaml").write_text(text)
    result = subprocess.run(
        [kubectl(), "kustomize", str(source)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    _built[key] = result.stdout
    return result.stdout


def render_example(name: str) -> list[Any]:
    """`kubectl kustomize packaging/kubernetes/examples/<name>` as shipped."""
    source = KUSTOMIZE / "examples" / name
    assert (source / "kustomization.yaml").is_file(), f"{source}: no such example shipped"
    result = subprocess.run(
        [kubectl(), "kustomize", str(source)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def containers(resource: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every container and init container of a workload."""
    spec = resource.get("spec", {}).get("template", {}).get("spec")
    if spec is None:
        return
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        yield spec, container
