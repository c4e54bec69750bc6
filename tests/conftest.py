"""Shared fixtures: every test gets its own runtime and state directories."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import agent_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return agent_env(tmp_path)
