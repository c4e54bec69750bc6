"""A protected spawn or forkserver worker that has not reached its init yet: still stopped by
its main process's `terminate()`, and a program it starts meanwhile still ends on SIGTERM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("starting_worker.py")


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_a_worker_hung_before_its_init_is_stopped_and_its_program_ends(
    tmp_path: Path, start_method: str
) -> None:
    """It started with SIGTERM and SIGINT blocked until its init: one that hung before (as it
    imported the user's module) ignored terminate(), and multiprocessing's exit handler, which
    waits for it without a timeout, hung the job's exit for ever (measured with a DataLoader
    given `timeout=3`: the loop raised, and the job never exited); a program the main module
    started as the worker imported it kept SIGTERM blocked and outlived its SIGTERM."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), start_method, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"program ended": True, "worker": 0}
