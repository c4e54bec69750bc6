"""The simulator flow of docs/kubernetes.md, run as written: pasted as a script it must work
(the simulator says when it listens through --ready-file; nothing races it)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from support import agent_env

DOC = Path(__file__).resolve().parents[3] / "docs" / "kubernetes.md"


def simulator_flow() -> str:
    """The first `sh` block of the simulator section."""
    text = DOC.read_text()
    section = text[text.index("## Simulator: `forewarn simulate kubernetes`") :]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match is not None, "docs/kubernetes.md: no sh block in the simulator section"
    return match.group(1)


def test_the_documented_simulator_flow_runs_as_written(tmp_path: Path) -> None:
    script = simulator_flow()
    assert "--ready-file" in script  # the documented flow waits for the simulator
    # `forewarn` on PATH is this interpreter's, as an installed console script would be.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "forewarn"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m forewarn.agent.cli "$@"\n')
    shim.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = agent_env(tmp_path, TMPDIR=str(scratch))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.Popen(
        ["bash", "-e", "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the flow's own background jobs go with it on failure
    )
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None or proc.returncode != 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out + err
    lines = out.splitlines()
    assert '{"id": "taint/karpenter.sh/disrupted"}' in lines
    assert any("drain" in line and "kubernetes/gpu-1/taint" in line for line in lines), out
    assert any("terminate" in line and "kubernetes/gpu-1/shutdown" in line for line in lines), out
    assert "Traceback" not in err
