"""The provider registry: one typed spec per provider package, and every face it names loads."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.protocol.errors import UsageError
from forewarn.providers import REGISTRY, PollHealth, ProviderSettings, Watcher, WatcherContext
from forewarn.providers.registry import Registry, UnknownProvider
from forewarn.providers.simulator import Simulator

PROVIDER_DIR = Path(importlib.import_module("forewarn.providers").__path__[0])


def test_every_provider_package_is_registered_once() -> None:
    packages = sorted(
        path.parent.name
        for path in PROVIDER_DIR.glob("*/__init__.py")
        if not path.parent.name.startswith("_")
    )
    assert sorted(REGISTRY.names()) == packages
    for spec in REGISTRY:
        module = importlib.import_module(f"forewarn.providers.{spec.name}")
        assert module.SPEC is spec and "SPEC" in module.__all__
        assert issubclass(spec.settings, ProviderSettings)
        assert spec.summary and spec.summary == spec.summary.strip()


@pytest.mark.parametrize("name", REGISTRY.names())
async def test_the_watcher_factory_has_one_shape(name: str, tmp_path: Path) -> None:
    spec = REGISTRY[name]
    settings = spec.settings.model_validate(
        {"url": "http://127.0.0.1:9"} if "url" in spec.settings.model_fields else {}
    )
    watcher = spec.watcher(settings, WatcherContext(tmp_path, tmp_path, PollHealth(name)))
    assert isinstance(watcher, Watcher) and watcher.name == name
    closer = getattr(type(watcher), "aclose", None)
    if closer is not None:
        await closer(watcher)


@pytest.mark.parametrize("spec", list(REGISTRY), ids=lambda spec: spec.name)
def test_a_spec_declares_exactly_the_faces_its_folder_has(spec) -> None:
    # of_package's simulate/drill flags must match the files, or a face is silently missing
    # from `forewarn simulate`/`drill` (or the CLI offers one that cannot import).
    folder = PROVIDER_DIR / spec.name
    assert (spec.simulate is not None) == (folder / "simulate.py").exists()
    assert (spec.drill is not None) == (folder / "drill.py").exists()


@pytest.mark.parametrize("spec", REGISTRY.with_simulator(), ids=lambda spec: spec.name)
def test_every_simulate_face_loads(spec) -> None:
    face = spec.simulate()
    parser = argparse.ArgumentParser()
    face.add_arguments(parser)
    assert callable(face.run)
    sim = face.make_simulator()
    assert isinstance(sim, Simulator)
    script = face.drill_script()
    assert script is None or {"drain", "terminate"} <= set(script)


@pytest.mark.parametrize("spec", REGISTRY.with_drill(), ids=lambda spec: spec.name)
def test_every_drill_face_loads(spec) -> None:
    face = spec.drill()
    face.add_arguments(argparse.ArgumentParser())
    assert callable(face.run)


def test_unknown_names_suggest_the_nearest() -> None:
    with pytest.raises(UnknownProvider, match="did you mean 'azure'") as caught:
        REGISTRY["azur"]
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2


def test_a_registry_refuses_a_name_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        Registry([*REGISTRY, REGISTRY["aws"]])


def test_the_registry_loads_no_provider_face() -> None:
    """The agent imports only the watchers it runs: the registry alone loads no httpx, no
    simulator and no drill."""
    code = (
        "import sys; from forewarn.providers import REGISTRY; REGISTRY.names(); "
        "print(sorted(m for m in sys.modules if m == 'httpx' or m.endswith(('.simulate', "
        "'.drill', '.watch', 'simulator'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
