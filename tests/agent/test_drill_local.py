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
    assert (
        "resumed from step" in done.stdout and "verified (checksums), state matches" in done.stdout
    )


def test_a_terminate_during_a_background_upload_is_durable_before_its_deadline(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 20: the demo uploads in the background over a slow link, the terminate arrives
    while a periodic save is uploading, the final checkpoint is durable before the deadline,
    and the resume loses no step (real agent and demo processes)."""
    done = subprocess.run(
        forewarn_cmd(
            "drill",
            "local",
            "--background",
            "--upload-delay",
            "1.5",
            "--deadline",
            "30",
            "--dir",
            str(tmp_path / "drill"),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "terminate sent during the upload of step" in out
    assert "final save: waited for the upload in flight" in out
    assert "durable" in out and "before deadline" in out
    assert "steps lost: 0" in out and "state matches" in out
