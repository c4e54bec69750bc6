"""SIGKILL of a job whose background save is mid-commit (its state written, its COMMIT marker
or the LATEST hint not yet): a resume verifies and takes the newest complete generation,
never a half-committed one (a real job process, a real local store, the kill deterministic:
the job blocks at the write named and says so before the test kills it)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import load_state
from support import LazyModule, requires

pytestmark = requires("torch")
torch = LazyModule("torch")

JOB = """
import sys, threading
import torch
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import BackgroundSaver
from forewarn.clients.checkpoint.testing import DelegatingBackend

class StopAt(DelegatingBackend):  # step 2's write of `key` never happens: the kill comes first
    armed = False  # once step 1 is committed

    def put_small(self, key, data):
        if self.armed and key == sys.argv[2]:
            print("at", key, flush=True)
            threading.Event().wait()
        return self.inner.put_small(key, data)

backend = StopAt(CheckpointStore(sys.argv[1]).backend)
saver = BackgroundSaver(CheckpointStore(backend=backend))
for step in (1, 2):
    saver.save(step, {"w": torch.full((256, 64), float(step))})
    saver.wait()
    backend.armed = True
print("not stopped", flush=True)
"""


@pytest.mark.parametrize(
    ("key", "resumed"),
    [
        ("step-000000000002/COMMIT", 1),  # step 2 written, not committed: the one before
        ("LATEST", 2),  # step 2 committed, the hint still naming step 1: step 2
    ],
)
def test_a_sigkill_mid_commit_resumes_from_the_newest_complete_generation(
    tmp_path: Path, key: str, resumed: int
) -> None:
    url = str(tmp_path / "store")
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, url, key],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert job.stdout is not None
    try:
        line = job.stdout.readline().strip()
        assert line == f"at {key}", (line, job.communicate(timeout=60))
    finally:
        job.send_signal(signal.SIGKILL)
        job.communicate(timeout=60)
    store = CheckpointStore(url)
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == resumed, latest
    assert torch.equal(load_state(latest)["w"], torch.full((256, 64), float(resumed)))
    for generation in store.generations():
        assert store.verify(generation, checksums=True).ok
