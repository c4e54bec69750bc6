"""A test's timeout never cuts an import short (tests/import_timeouts.py): an import cut short
leaves what it registered outside its module (torch's operator registry, in C) while the
module itself is forgotten, so every later import of it in that worker fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# A module standing in for torch: what it registers outside itself survives an import cut
# short, and a second run of it refuses, as torch's operator registry does.
REGISTERING = """
import builtins
import time

if getattr(builtins, "_{name}_registered", False):
    raise RuntimeError("duplicate registrations for {name}")
builtins._{name}_registered = True
time.sleep({seconds})  # the scenario: an import slower than the test's timeout
"""

CASES = """
import importlib

import pytest


@pytest.mark.timeout(1.0)
def test_slow_import_past_the_timeout() -> None:
    importlib.import_module("slow_import")


def test_the_same_import_later() -> None:
    importlib.import_module("slow_import")


@pytest.mark.timeout(0.5)
def test_hung_import() -> None:
    importlib.import_module("hung_import")
"""


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "slow_import.py").write_text(REGISTERING.format(name="slow", seconds=1.5))
    (tmp_path / "hung_import.py").write_text(REGISTERING.format(name="hung", seconds=60))
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(TESTS)])}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "import_timeouts", "-p", "no:randomly"]
    argv += ["-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path)]
    return subprocess.run(
        [*argv, "test_cases.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_timeout_inside_an_import_waits_for_it_and_poisons_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path)
    out = result.stdout
    # The slow import finished: the test still fails for its timeout, and the same import in
    # the next test finds the module whole.
    assert "FAILED test_cases.py::test_slow_import_past_the_timeout" in out, out
    assert "Timeout (>1.0s) from pytest-timeout" in out, out
    assert "RuntimeError: duplicate registrations" not in out, out
    assert "FAILED test_cases.py::test_the_same_import_later" not in out, out
    # An import that hangs is cut at twice the timeout, not waited for.
    assert "FAILED test_cases.py::test_hung_import" in out, out
    assert "Timeout (>0.5s)" in out, out
    assert "1 passed" in out, out
