"""Importing the checkpoint store loads no SDK, no torch and no agent runtime."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("boto3", "botocore", "torch", "numpy", "httpx", "zmq", "pydantic", "forewarn.agent.runner")


def test_import_is_light() -> None:
    code = (
        "import json, sys, time; t = time.perf_counter();"
        "import forewarn.clients.checkpoint;"
        "print(json.dumps({'seconds': time.perf_counter() - t,"
        f"'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["loaded"] == []
    assert result["seconds"] < 2.0  # generous: the 150 ms goal is measured, not asserted
