"""Installing from the checkout under a Python older than 3.10 stops at once, saying why: pip
checks Requires-Python only after it has resolved and downloaded every dependency."""

from __future__ import annotations

import glob
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the image's build stage copies (the Dockerfile): enough for pip to build from.
TREE = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "protocol", "agent", "providers")
TREE += ("clients", "testing", "packaging")


def _old_python() -> str | None:
    """A Python 3.9 or 3.8 that runs on this machine (pyenv's, or on PATH), or None."""
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.[89].*/bin/python3"), reverse=True)
    candidates += [found for name in ("python3.9", "python3.8") if (found := shutil.which(name))]
    for candidate in candidates:
        asked = [candidate, "-c", "import sys; print(sys.version_info[:2] < (3, 10))"]
        done = subprocess.run(asked, capture_output=True, text=True, timeout=30)
        if done.returncode == 0 and done.stdout.strip() == "True":
            return candidate
    return None


def test_setup_py_refuses_a_python_older_than_3_10_naming_it() -> None:
    script = (
        "import sys; sys.version_info = (3, 9, 18, 'final', 0); sys.argv = ['setup.py', '--name']; "
        "exec(compile(open('setup.py').read(), 'setup.py', 'exec'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done
    assert done.stderr.startswith("forewarn needs Python 3.10 or newer; this is Python 3.9.18 ("), (
        done.stderr
    )
    assert "python3.X -m venv" in done.stderr


@pytest.mark.slow(30)  # a venv, and pip fetching its build isolation's setuptools
def test_pip_install_of_the_checkout_under_python_3_9_stops_at_once(tmp_path: Path) -> None:
    """The README's drill command on Amazon Linux 2023 or Debian 11 (`python3` 3.9): pip
    downloaded forewarn's dependencies for 71 s, then refused it; now it stops while it
    prepares the build, before any dependency, with forewarn's own line."""
    old = _old_python()
    if old is None:
        pytest.skip("no Python 3.8 or 3.9 on this machine")
    tree = tmp_path / "forewarn"
    for name in TREE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, tree / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy2(source, tree / name)
    subprocess.run([old, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    started = time.monotonic()
    done = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "pip"), "install", "--no-cache-dir", str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    assert done.returncode != 0
    assert "forewarn needs Python 3.10 or newer; this is Python 3." in done.stdout + done.stderr, (
        done
    )
    assert "Collecting httpx" not in done.stdout and "pydantic" not in done.stdout, done.stdout
    assert took < 120, took
