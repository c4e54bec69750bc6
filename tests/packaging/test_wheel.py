"""The wheel holds every package: built from a copy of the tree (the Dockerfile's build
stage, replayed once per session by the `image_build_stage` fixture, which copies the tree as
the image would and removes that copy once the wheel is built), installed into a fresh
directory, and imported there without the source tree or the editable install."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The code folders, as setup.py names them (tests/packaging/test_dockerfile.py checks that the
# image's build stage copies each of them).
FOLDERS = ast.literal_eval(
    re.search(r"^FOLDERS = (\(.*?\))$", (ROOT / "setup.py").read_text(), re.M).group(1)  # type: ignore[union-attr]
)

# Runs with `python -S` so that neither the editable install's finder nor the source tree is
# on the path: only the installed wheel and the dependencies' site-packages.
CHECK = """
import argparse, json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from pathlib import Path

import pytest
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


def test_the_wheel_carries_every_provider_face(tmp_path: Path, image_build_stage: Path) -> None:
    (wheel,) = (image_build_stage / "dist").glob("forewarn-*.whl")
    assert not (image_build_stage / "src").exists()  # nothing may come from the built copy
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    target = tmp_path / "installed"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        timeout=120,
    )
    # Every package of the tree is in the wheel (a hand-kept list once missed new ones).
    packages = {
        str(path.parent.relative_to(ROOT))
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("__init__.py")
    }
    installed = {
        str(path.parent.relative_to(target / "forewarn"))
        for path in (target / "forewarn").rglob("__init__.py")
    }
    assert packages == installed
    # The licence the metadata declares travels with the code (the repository had no file).
    (licence,) = target.glob("forewarn-*.dist-info/licenses/LICENSE")
    assert licence.read_text().split()[:3] == ["Apache", "License", "Version"]
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


def test_the_project_table_uses_no_form_setuptools_is_dropping() -> None:
    """`python -m build` printed a warning for `license = { text = ... }`: setuptools
    deprecated the table form and said builds using it would stop being supported on
    2027-02-18 (the isolated build takes the newest setuptools, so the documented build
    command would break on its own). Any deprecation in the project table fails here."""
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert dist.metadata.license_expression == "Apache-2.0"


# The PEP 517 hook pip calls for `pip install .` (the README's first command), in the tree.
BUILD_WHEEL = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"


def test_a_module_removed_from_the_checkout_is_not_in_the_next_wheel(tmp_path: Path) -> None:
    """`pip install .` builds in the checkout, and setuptools copies the packages into
    `build/lib`, which it keeps between builds: a module a `git pull` deleted or renamed
    since the last `pip install .` was still copied into the next wheel, and installed.
    (A package turned into a module of the same name would even shadow the new module.)
    The earlier build's leftover is laid in `build/lib` here, as that build left it."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        (tree / name).write_bytes((ROOT / name).read_bytes())
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "forewarn_sub")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    leftover = tree / "build" / "lib" / "forewarn" / "agent" / "removed_since.py"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("REMOVED = True\n")
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-c", BUILD_WHEEL, str(out)],
        cwd=tree,
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = out.glob("forewarn-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "forewarn/agent/cli.py" in names
    assert "forewarn/agent/removed_since.py" not in names


def test_the_build_takes_every_folder_of_package_data_for_a_package(tmp_path: Path) -> None:
    """found: `python -m build` (the README's release command) printed four warnings of
    "Package would be ignored", one for each folder that holds only package data
    (`clients/schema`, `agent/deploy/files` and its `systemd` and `examples`): setuptools
    asked for each to be listed among the packages, and said a later version would leave
    such files out. The wheel still carries them, and the build says nothing of it."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        (tree / name).write_bytes((ROOT / name).read_bytes())
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "forewarn_sub")
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-c", BUILD_WHEEL, str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    said = built.stdout + built.stderr
    assert "absent from the `packages` configuration" not in said, said
    (wheel,) = out.glob("forewarn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "forewarn/clients/schema/protocol-v1.json",
        "forewarn/agent/deploy/files/systemd/forewarn-agent.service",
        "forewarn/agent/deploy/files/systemd/example-training.service",
        "forewarn/agent/deploy/files/examples/stop-job-on-terminate.service",
        "forewarn/agent/deploy/files/cloud-init/user-data.yaml.tmpl",
        "forewarn/clients/c/forewarn_sub.c",
        "forewarn/clients/c/Makefile",
    ):
        assert data in names
    # Nothing but the data the package-data patterns name: no manifests, no Dockerfile config.
    assert not any(name.startswith("forewarn/agent/deploy/files/kubernetes") for name in names)
    assert not any(name.startswith("forewarn/agent/deploy/files/container") for name in names)


def _documented_c_build() -> str:
    """The README's command that builds the C subscriber from an installed forewarn: the
    `make -f "$(python -c ...)"` line after the C subscriber's paragraph."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"`(make -f \"\$\(\.venv/bin/python -c .*?\)\")`", text)
    assert found, "the README names no build of the C subscriber from the installed package"
    return found.group(1)


def test_the_wheel_carries_the_c_subscriber_and_it_builds_from_there(
    tmp_path: Path, image_build_stage: Path
) -> None:
    """found: the wheel held no `clients/c`: `make -C clients/c` (the README's only word on
    the C subscriber) worked from a checkout alone, and a user who installed the wheel had no
    source to build. Its source and Makefile ship in the package, and the README's command
    builds `./forewarn_sub` in the working directory from the installed copy, which it leaves
    as it was (a venv's site-packages may be root's)."""
    (wheel,) = (image_build_stage / "dist").glob("forewarn-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"forewarn/clients/c/forewarn_sub.c", "forewarn/clients/c/Makefile"} <= names
    assert not any(name.endswith("/forewarn_sub") for name in names)  # no binary
    command = _documented_c_build()
    if not Path("/usr/include/zmq.h").exists() or shutil.which("cc") is None:
        if os.environ.get("CI"):
            pytest.fail("libzmq headers or a C compiler missing in CI (.ci/setup.d/10-libzmq.sh)")
        pytest.skip("libzmq headers (libzmq3-dev) or a C compiler are not installed")
    target = tmp_path / "installed"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        timeout=120,
    )
    # `.venv/bin/python` of the command, as one that sees the installed wheel alone (`-S`:
    # neither the editable install nor the source tree), so the path comes from the wheel.
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    site = sysconfig.get_paths()["purelib"]
    (bin_dir / "python").write_text(
        f'#!/bin/sh\nPYTHONPATH={target}:{site} exec {sys.executable} -S "$@"\n'
    )
    (bin_dir / "python").chmod(0o755)
    before = sorted(path.name for path in (target / "forewarn" / "clients" / "c").iterdir())
    built = subprocess.run(
        ["sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert str(target / "forewarn" / "clients" / "c") in built.stdout  # the wheel's copy
    binary = tmp_path / "forewarn_sub"
    assert os.access(binary, os.X_OK)
    after = sorted(path.name for path in (target / "forewarn" / "clients" / "c").iterdir())
    assert after == before == ["Makefile", "forewarn_sub.c"]
    usage = subprocess.run([str(binary), "--bogus"], capture_output=True, text=True, timeout=10)
    assert usage.stderr.startswith("usage: forewarn_sub"), usage.stderr


# The PEP 517 hook `python -m build` calls for the sdist (docs/operations.md's release block).
BUILD_SDIST = "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"


def test_the_sdist_holds_the_package_and_no_part_of_the_test_suite(tmp_path: Path) -> None:
    """found: the release's sdist carried the 30 `tests/test_*.py` at the top of tests/ (a
    setuptools default), without conftest.py, support.py or any test folder, so not one of
    them was sure to run from it (16 stopped pytest at collection, `No module named 'support'`). The
    suite needs the whole checkout (docs, manifests, Dockerfile): the sdist is for installing.
    Built here from a tree with the test suite in it, as the release block builds it."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        (tree / name).write_bytes((ROOT / name).read_bytes())
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "forewarn_sub")
    for folder in (*FOLDERS, "tests"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    if (ROOT / "MANIFEST.in").exists():
        (tree / "MANIFEST.in").write_bytes((ROOT / "MANIFEST.in").read_bytes())
    out = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-c", BUILD_SDIST, str(out)],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    (sdist,) = out.glob("forewarn-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
    tests = sorted(name for name in names if name.split("/")[0] == "tests")
    assert tests == [], f"{len(tests)} files of tests/ in the sdist: {tests[:3]}"
    assert "agent/cli.py" in names
    assert "agent/deploy/files/systemd/forewarn-agent.service" in names
