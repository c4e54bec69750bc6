"""The wheel holds every package: built from a copy of the tree, installed into a fresh
directory, and imported there without the source tree or the editable install."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md")
SOURCES += ("protocol", "agent", "providers", "clients", "testing")

# Runs with `python -S` so that neither the editable install's finder nor the source tree is
# on the path: only the installed wheel and the dependencies' site-packages.
CHECK = """
import argparse, json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from pathlib import Path
from forewarn.providers import REGISTRY, PollHealth, WatcherContext
import forewarn.clients, forewarn.protocol, forewarn.testing.plugin
from forewarn.agent import cli, configdoc, runner
from importlib import resources
seen = {}
for spec in REGISTRY:
    settings = spec.settings.model_validate(
        {"url": "http://127.0.0.1:9"} if "url" in spec.settings.model_fields else {}
    )
    watcher = spec.watcher(settings, WatcherContext(Path("."), Path("."), PollHealth(spec.name)))
    faces = [type(watcher).__module__]
    for loader in (spec.simulate, spec.drill):
        if loader is not None:
            face = loader()
            face.add_arguments(argparse.ArgumentParser())
            faces.append(face.__name__)
    seen[spec.name] = [sys.modules[name].__file__ for name in faces]
schema = resources.files("forewarn.clients").joinpath("schema").iterdir()
print(json.dumps({
    "faces": seen,
    "modules": [m.__file__ for m in (forewarn.clients, cli, configdoc, runner)],
    "schemas": sorted(path.name for path in schema),
    "keys": len(configdoc.table().splitlines()),
}))
"""


def test_the_wheel_carries_every_provider_face(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        timeout=120,
    )
    (wheel,) = wheels.glob("forewarn-*.whl")
    target = tmp_path / "installed"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        timeout=120,
    )
    shutil.rmtree(source)  # nothing may come from the copy it was built from
    # Every package of the tree is in the wheel (a hand-kept list once missed new ones).
    packages = {
        str(path.parent.relative_to(ROOT))
        for folder in SOURCES[3:]
        for path in (ROOT / folder).rglob("__init__.py")
    }
    installed = {
        str(path.parent.relative_to(target / "forewarn"))
        for path in (target / "forewarn").rglob("__init__.py")
    }
    assert packages == installed
    site = sysconfig.get_paths()["purelib"]
    out = subprocess.run(
        [sys.executable, "-S", "-c", CHECK, str(target), site],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert set(found["faces"]) == {"local", "aws", "gcp", "azure", "digitalocean", "kubernetes"}
    files = [file for faces in found["faces"].values() for file in faces] + found["modules"]
    assert all(file.startswith(str(target)) for file in files), files
    assert sum(len(faces) for faces in found["faces"].values()) == 1 + 5 * 3
    assert "protocol-v1.json" in found["schemas"]
    assert found["keys"] > 10
