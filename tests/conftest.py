"""Shared fixtures: every test gets its own runtime and state directories."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import agent_env

# The suite starts about a thousand Python processes (agents, simulators, CLIs, trainers, the
# xdist workers), each importing forewarn from an editable checkout. Where the environment
# forbids bytecode caches (PYTHONDONTWRITEBYTECODE, as on the project's CI machines), every one
# of them compiled the same sources again, and every worker re-rewrote every test module: tens
# of CPU-seconds of a 2-core run. The suite writes the caches Python writes by default
# (`__pycache__/`, ignored by git). Not PYTHONPYCACHEPREFIX: with a prefix Python ignores the
# caches pip compiled into site-packages and compiles torch and the standard library again.
# This runs before xdist starts its workers, which inherit the environment.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return agent_env(tmp_path)
