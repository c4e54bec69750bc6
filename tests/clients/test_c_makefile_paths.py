"""The README's build of the C subscriber from an installed forewarn (`make -f "$(.venv/bin/python
-c ...)"`) where the package lies under a path with a space (a venv in `~/GPU jobs/.venv`, a
macOS-style `Application Support`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _documented_c_build() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"`(make -f \"\$\(\.venv/bin/python -c .*?\)\")`", text)
    assert found, "the README names no build of the C subscriber from the installed package"
    return found.group(1)


@pytest.mark.parametrize("where", ["site packages", "it's here", "plain"])
def test_the_documented_build_works_from_a_path_with_a_space_or_a_quote(
    tmp_path: Path, where: str
) -> None:
    """found: with the package under `/tmp/h218 sp/...`, the README's command stopped with
    `make: *** No rule to make target 'forewarn_sub.c', needed by 'forewarn_sub'.  Stop.`:
    make split the Makefile's own path at the space, so its vpath named no directory."""
    if not Path("/usr/include/zmq.h").exists() or shutil.which("cc") is None:
        if os.environ.get("CI"):
            pytest.fail("libzmq headers or a C compiler missing in CI (.ci/setup.d/10-libzmq.sh)")
        pytest.skip("libzmq headers (libzmq3-dev) or a C compiler are not installed")
    site = tmp_path / where
    package = site / "forewarn" / "clients"
    (package / "c").mkdir(parents=True)
    (site / "forewarn" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(ROOT / "clients" / "c" / name, package / "c" / name)
    work = tmp_path / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    python = work / ".venv" / "bin" / "python"
    # Sees this copy alone (-S, its own PYTHONPATH), as a venv sees its installed forewarn.
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    command = _documented_c_build()
    built = subprocess.run(
        ["sh", "-c", command], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert os.access(work / "forewarn_sub", os.X_OK)
    assert sorted(path.name for path in (package / "c").iterdir()) == [
        "Makefile",
        "forewarn_sub.c",
    ]
    again = subprocess.run(
        ["sh", "-c", command], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout + again.stderr
