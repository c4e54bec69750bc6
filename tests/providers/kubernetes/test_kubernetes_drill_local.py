"""`forewarn drill local --provider kubernetes`: the local drill with the API server
simulator as the notice source (a cordon drains, a graceful node shutdown terminates)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import forewarn_cmd


def test_drill_local_with_the_kubernetes_simulator_keeps_its_token_in_its_directory(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The agent's token file was /tmp/forewarn-kubernetes-drill/token, written by every
    `forewarn drill local` (whatever its provider) and never removed: shared by every user
    of the machine, so another user's drill failed on it, and followed wherever someone else
    had pointed that path."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    work = tmp_path / "drill"
    done = subprocess.run(
        forewarn_cmd(
            "drill", "local", "--provider", "kubernetes", "--steps", "150", "--dir", str(work)
        ),
        env={**env, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert re.search(r"demo received drain \(kubernetes/[\w-]+/cordon\)", out), out
    assert re.search(r"demo received terminate \(kubernetes/[\w-]+/shutdown\)", out), out
    assert "steps lost: 0" in out
    assert list(tmp.iterdir()) == []
    token = work / "machine-1" / "kubernetes-token"
    assert token.read_text().strip() and token.stat().st_mode & 0o077 == 0
