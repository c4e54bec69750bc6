"""The manifests run the agent with `readOnlyRootFilesystem: true` and only its two volumes
writable (its runtime and state directories): here the agent runs so, with the test's own two
directories, in a mount namespace whose root is read-only, and still serves, publishes,
records state and stops cleanly."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_the_agent_needs_no_writable_root(tmp_path: Path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with unshare (util-linux)")
        pytest.skip("needs root and unshare for a read-only root")
    run, state, logs = tmp_path / "run", tmp_path / "state", tmp_path / "logs"
    for path in (run, state, logs):
        path.mkdir()
    forewarn = f"{shlex.quote(sys.executable)} -m forewarn.agent.cli"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/nonexistent",
        "FOREWARN_RUNTIME_DIR": str(run),
        "FOREWARN_STATE_DIR": str(state),
        "FOREWARN_PROVIDERS": "local",
        "FOREWARN_LOG_FORMAT": "json",
        "FOREWARN_METRICS_ADDRESS": "127.0.0.1:0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    script = f"""
        # Only the two volumes stay writable, as in the pod (and this test's log directory).
        mount --bind {logs} {logs}
        mount --bind {run} {run}
        mount --bind {state} {state}
        mount -o remount,bind,ro /
        if touch /forewarn-ro-check 2>/dev/null; then echo 'root is writable'; exit 3; fi
        {forewarn} agent > {logs}/agent.log 2>&1 &
        agent=$!
        for _ in $(seq 600); do [ -S {run}/control ] || ! kill -0 $agent && break; sleep 0.1; done
        {forewarn} notify drain --note read-only
        {forewarn} status
        kill -TERM $agent
        wait $agent
    """
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "bash", "-eu", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = (logs / "agent.log").read_text() if (logs / "agent.log").exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert 'note "read-only"' in result.stdout
    assert "Read-only file system" not in log + result.stderr, log
    assert '"msg": "stopped"' in log
    assert (state / "state.json").exists()
