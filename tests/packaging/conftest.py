"""The packaging tests run system tools that .ci/setup.d installs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest


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
