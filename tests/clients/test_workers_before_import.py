"""DataLoader workers started before `forewarn.clients` is imported are not protected from a
job-wide SIGTERM (the hooks that protect them act as a worker is started): the guard says so
when it is made, naming the workers and what to do.

found: the README's loop lines pasted below a script's set-up (its DataLoader, persistent
workers, iterated before the guard's import): a SIGTERM to the job's process group ended with
the save, exit 143, then `RuntimeError: DataLoader worker (pid ...) is killed by signal:
Terminated` in forewarn's own exit handler (`Exception ignored in atexit callback ...
_close_at_exit`), 2 runs of 2; with the import at the top, 0 of 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import requires

pytestmark = requires("torch")

SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.zeros(8, 1)), num_workers=2, persistent_workers=True)
batches = iter(loader)
next(batches)
if sys.argv[1] == "late":
    import forewarn.clients
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(every_steps=600, notices=False, flag_file=None)
guard.close()
del batches
"""


@pytest.mark.slow(5)
@pytest.mark.parametrize("imported", ["late", "first"])
def test_the_guard_names_workers_started_before_forewarn_was_imported(
    tmp_path: Path, imported: str
) -> None:
    script = SCRIPT
    if imported == "first":
        script = "import forewarn.clients\n" + SCRIPT
    env = dict(os.environ, OMP_NUM_THREADS="1", FOREWARN_RUNTIME_DIR=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-c", script, imported],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "before forewarn.clients" in line]
    if imported == "first":
        assert warned == [], done.stderr
    else:
        (line,) = warned
        assert "2 worker process(es)" in line and "import forewarn.clients" in line, line
