"""tests/other_user.py's shared directories: made under /tmp for another uid, gone at exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from other_user import other_user

HERE = Path(__file__).parent


def test_a_shared_directory_is_removed_when_the_process_that_made_it_exits() -> None:
    """found: 52 `/tmp/forewarn-uid-*` directories on the project's machine, one left by every
    test that gave another user a directory (under /tmp, not the run's private TMPDIR, so the
    run's leftover check never saw them)."""
    uid, gid = other_user()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from other_user import shared_tmp\n"
        "path = shared_tmp(int(sys.argv[2]), int(sys.argv[3]))\n"
        "(path / 'made-by-the-test').write_text('x')\n"
        "print(path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(HERE), str(uid), str(gid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.name.startswith("forewarn-uid-")
    if path.exists():  # pragma: no cover - the failure's own clean-up
        subprocess.run(["rm", "-rf", str(path)], check=False)
        pytest.fail(f"{path} was left behind")
