"""The packaging tests run system tools that .ci/setup.d installs, and share two builds
across the session: the Dockerfile's build stage (its wheel) and a wheelhouse of what the
documented installs resolve."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from image_build import ROOT, replay_build_stage
from session_build import shared_build

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _require(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/setup.d/40-packaging-tools.sh installs it")
        pytest.skip(f"{name} is not installed (.ci/setup.d/40-packaging-tools.sh installs it)")
    return path


@pytest.fixture
def tool() -> Callable[[str], str]:
    """`tool(name)`: the path of a program; skips without it, and fails without it in CI."""
    return _require


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every distribution the documented installs and builds resolve (forewarn's
    dependencies with the `metrics` extra, the build backend's requirements, and `build`),
    downloaded once per session from the indexes this machine's pip is configured with.
    Installs pointed at it (PIP_NO_INDEX, PIP_FIND_LINKS) still resolve each requirement, from
    the same versions, without reading every index page again (most of a `pip install`'s CPU
    here): a requirement missing from it fails them as it would against the indexes."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = [
        *pyproject["project"]["dependencies"],
        *pyproject["project"]["optional-dependencies"]["metrics"],
        *pyproject["build-system"]["requires"],
        "build",
    ]

    def download(directory: Path) -> None:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(directory)]
        subprocess.run([*pip, *requirements], check=True, timeout=300)

    return shared_build(tmp_path_factory, "wheelhouse", download)


@pytest.fixture(scope="session")
def pip_from_wheelhouse(wheelhouse: Path) -> dict[str, str]:
    """The environment variables that make pip resolve from the wheelhouse alone."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


@pytest.fixture(scope="session")
def image_build_stage(
    tmp_path_factory: pytest.TempPathFactory, pip_from_wheelhouse: dict[str, str]
) -> Path:
    """The Dockerfile's build stage replayed once per session (its wheel under /dist): the
    image's filesystem as the final stage's `COPY --from=build` finds it."""

    def build(directory: Path) -> None:
        replay_build_stage(directory / "image", directory, pip_from_wheelhouse)

    return shared_build(tmp_path_factory, "image-build-stage", build) / "image"
