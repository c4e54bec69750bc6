"""A training job started in the background of a script (`python train.py &`, `nohup python
train.py &`): the shell starts it with SIGINT ignored, so that a Ctrl-C in the script's
terminal does not stop it. The guard keeps it so."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from support import agent_env

JOB = """
import sys, time
from forewarn.clients import CheckpointGuard

guard = CheckpointGuard(notices=False, flag_file=None)
print("ready", flush=True)
step = 0
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    time.sleep(0.005)
    step += 1
    if guard.due(step):
        result = guard.saved(step)
        if result.exit:
            break
guard.close()
print("exit", guard.exit_code, flush=True)
sys.exit(guard.exit_code)
"""


def test_a_ctrl_c_in_the_scripts_terminal_leaves_a_background_job_training(
    tmp_path: Path,
) -> None:
    """A Ctrl-C reaches the whole foreground process group, a script's background job with
    it (a non-interactive shell has no job control), and the shell had that job ignore it:
    the guard installed its SIGINT handler over the ignore, and the Ctrl-C meant for the
    script's `tail -f` or `wait` saved and stopped the training (exit 130). Python leaves an
    ignored SIGINT ignored; so does the guard. The platform's SIGTERM still stops it (143),
    SIGINT being delivered first when both are pending."""
    script = '"$0" -c "$1" & echo "$!"; wait'
    shell = subprocess.Popen(
        ["sh", "-c", script, sys.executable, JOB],
        stdout=subprocess.PIPE,
        text=True,
        env=agent_env(tmp_path),
        start_new_session=True,
    )
    assert shell.stdout is not None
    job = int(shell.stdout.readline())
    lines: list[str] = []
    try:
        assert shell.stdout.readline().strip() == "ready"
        os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C: the terminal's foreground group
        os.kill(job, signal.SIGTERM)  # the platform's SIGTERM, after it
        lines = shell.stdout.read().split()  # until the job exits
    finally:
        if not lines:
            # Not seen to end (the job is the shell's child, reaped by another: only then is
            # its pid certainly still its own). The group holds it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(timeout=10)
    assert lines == ["exit", "143"], lines
