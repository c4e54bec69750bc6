"""A process whose guard answered a reclaim's exit skips Python's final collection of its heap
(the seconds a torchrun rank spent there kept torchrun alive until the platform's SIGKILL);
one that finished training, or never answered an exit, exits as Python does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

JOB = """
import os, signal, sys
from forewarn.clients import CheckpointGuard

class CycleWithFinalizer:
    def __init__(self):
        self.itself = self
    # Bound now: the builtins and modules are emptied by the time the final collection runs.
    def __del__(self, create=os.open, path=sys.argv[1], flags=os.O_CREAT | os.O_WRONLY):
        create(path, flags)

HELD = CycleWithFinalizer()  # only the final collection frees it
guard = CheckpointGuard(every_steps=5, notices=False, flag_file=None)
for step in range(1, 11):
    if sys.argv[2] == "sigterm" and step == 3:
        os.kill(os.getpid(), signal.SIGTERM)
    if guard.due(step) and guard.saved(step, 0.01).exit:
        break
guard.close()
sys.exit(guard.exit_code)
"""


@pytest.mark.parametrize(
    ("how", "code", "finalized"),
    [("sigterm", 143, False), ("finished", 0, True)],
)
def test_the_final_collection_is_skipped_only_after_a_reclaims_exit(
    tmp_path: Path, env: dict[str, str], how: str, code: int, finalized: bool
) -> None:
    marker = tmp_path / "finalized"
    done = subprocess.run(
        [sys.executable, "-c", JOB, str(marker), how],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    assert marker.exists() is finalized, done.stderr
