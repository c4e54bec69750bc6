"""The launcher that ties the drill's children to it (PR_SET_PDEATHSIG, then exec)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.agent.tethered import tethered
from support import eventually

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"
)

SAY = [sys.executable, "-c", "import os, sys; print(os.getpid(), sys.argv[1:]); sys.exit(3)", "x"]


def test_the_command_runs_in_the_launchers_process_with_its_exit_code() -> None:
    child = subprocess.Popen(tethered(SAY), stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 3
    assert out.split(maxsplit=1) == [str(child.pid), "['x']\n"]


# A parent that starts a tethered child which says "up" once it runs, then waits.
PARENT = """
import subprocess, sys, time
from forewarn.agent.tethered import tethered
child = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]
print(subprocess.Popen(tethered(child)).pid, flush=True)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_the_command_ends_when_its_parent_is_killed_outright() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline() == "up\n"  # the command itself runs, past the exec
        parent.kill()
        parent.wait()
        eventually(lambda: not _running(child), timeout=10, what="the child's end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if _running(child):
            os.kill(child, signal.SIGKILL)


def test_a_parent_dead_before_the_request_does_not_run_the_command(tmp_path: Path) -> None:
    """The kernel sends nothing for a parent that died before prctl: the launcher sees its
    parent is not the one it was started by and stops, rather than run an orphan."""
    marker = tmp_path / "ran"
    argv = tethered([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    pid_at = argv.index(str(os.getpid()))
    argv[pid_at] = "1"  # not this process: as if the drill were gone and the child reparented
    done = subprocess.run(argv, capture_output=True, timeout=30)
    assert done.returncode == 128 + signal.SIGTERM
    assert not marker.exists()
