"""Programs a protected DataLoader worker starts (a dataset that decodes with ffmpeg, a helper
process of its own) get SIGTERM and SIGINT as they would without forewarn."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("worker_programs.py")


def test_a_program_a_protected_worker_starts_ends_on_sigterm_and_sigint() -> None:
    """The worker ignored SIGTERM and SIGINT (SIG_IGN) and kept SIGTERM blocked, and an exec'd
    program keeps both: a program started from the dataset (`subprocess.Popen`,
    `os.posix_spawn`, `os.fork` and exec, `os.system`) or a process of the worker's own ignored
    `terminate()`, so a dataset that stops its decoder that way waited for it for ever, and the
    loop with it; and one still running outlived a stop until the platform's SIGKILL."""
    assert ended_by_signals("protected") == ended_by_signals("plain")


def ended_by_signals(mode: str) -> dict[str, int | None]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ended: dict[str, int | None] = json.loads(done.stdout)
    assert all(code is not None for code in ended.values()), f"{mode}: {ended}"
    return ended
