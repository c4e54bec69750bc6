from __future__ import annotations

import subprocess
from pathlib import Path

from support import forewarn_cmd


def test_drill_local_loses_no_step(tmp_path: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(tmp_path / "drill")),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps lost: 0" in done.stdout
    assert "resumed from step" in done.stdout and "state verified" in done.stdout
