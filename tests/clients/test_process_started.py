"""When the job's process started, which tells a terminate in force before the job (another
job's, acted on) from one the job must act on at once."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forewarn.clients.guard import process_started


def test_this_process_started_before_now() -> None:
    started = process_started()
    assert started <= time.time() + 0.02


def test_the_start_is_right_where_proc_uptime_is_the_containers(tmp_path: Path) -> None:
    """lxcfs (LXD, Kubernetes nodes that give containers their own /proc view) makes
    /proc/uptime the container's uptime, while /proc/self/stat counts from the host's boot:
    the job's start came out hours in the future, every terminate then looked inherited, and
    one another job had acked did not make this job save and exit at once. The start is now
    read against the kernel's own boot clock. Here /proc/uptime is bind-mounted over in a
    mount namespace of the test's own."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare")
    fake = tmp_path / "uptime"
    fake.write_text("5.00 5.00\n")
    probe = (
        "import time; from forewarn.clients.guard import process_started; "
        "print(process_started() - time.time())"
    )
    script = 'mount --bind "$1" /proc/uptime && exec "$0" -c "$2"'
    done = subprocess.run(
        [unshare, "--mount", "sh", "-c", script, sys.executable, str(fake), probe],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if (
        done.returncode != 0
        and not done.stdout
        and ("unshare" in done.stderr or "mount" in done.stderr)
    ):
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    age = -float(done.stdout)
    assert 0 <= age < 10, f"started {age:.0f}s ago by its own reckoning"
