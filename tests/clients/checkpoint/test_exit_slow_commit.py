"""The interpreter's exit waits for a background save in flight; it stops waiting for one
that writes nothing for `EXIT_STALL_SECONDS` (a write stuck on a hung mount, parts stuck on
stalled connections), but not for one whose file is closed and whose commit is slow (slow
directory fsyncs, a throttled service): that one is bounded by the storage's own timeouts and
commits. A real process that ends without close(); no torch (the saver pickles the state)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from forewarn.clients.checkpoint import CheckpointStore

_EXIT_WHILE_THE_COMMIT_IS_SLOW = """
import sys, time
from forewarn.clients.checkpoint import BackgroundSaver, CheckpointStore, background, store
from forewarn.clients.checkpoint.testing import DelegatingBackend

class SlowCommit(DelegatingBackend):  # the file is written; the commit's fsyncs crawl
    def make_durable(self, prefix):
        time.sleep(float(sys.argv[2]) * 4)
        super().make_durable(prefix)

background.EXIT_STALL_SECONDS = float(sys.argv[2])
store.RELEASE_WITHIN = float(sys.argv[2])  # the store's own exit wait for a commit under way
saver = BackgroundSaver(CheckpointStore(backend=SlowCommit(CheckpointStore(sys.argv[1]).backend)))
saver.save(7, {"w": list(range(1000))})
print("in flight:", saver.in_flight, flush=True)
"""


def test_the_exit_waits_for_a_background_save_whose_commit_is_slow(tmp_path: Path) -> None:
    """The exit counted a stall from the save's last write, so a save whose file was closed
    and whose commit took longer than EXIT_STALL_SECONDS (120 s) was given up as hung
    and the process exited mid-commit: the run's last checkpoint was lost. It commits now."""
    url = str(tmp_path / "store")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_THE_COMMIT_IS_SLOW, url, "0.2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "in flight: 7" in done.stdout
    latest = CheckpointStore(url).latest(verify="checksums")
    assert latest is not None and latest.step == 7, done.stderr
    assert "wrote nothing" not in done.stderr, done.stderr
