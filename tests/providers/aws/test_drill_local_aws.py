"""`forewarn drill local --provider aws`: the local drill with the IMDS simulator as the
notice source (a rebalance drains, a spot interruption terminates)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from support import forewarn_cmd


def test_drill_local_with_the_aws_simulator_loses_no_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--provider", "aws", "--dir", str(tmp_path / "drill")),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "aws simulator serving on http://127.0.0.1:" in out
    assert re.search(r"demo received drain \(aws/rebalance/\w+\)", out), out
    assert re.search(r"demo received terminate \(aws/spot-itn/\w+\)", out), out
    assert "steps lost: 0" in out
