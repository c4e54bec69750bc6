"""`forewarn drill local` stopped the ways a user stops it: Ctrl-C (SIGINT to the terminal's
foreground process group), `kill` (SIGTERM to the drill alone), `kill -9` (SIGKILL, which runs
none of its cleanup) and a closed terminal (SIGHUP). Each drill runs in a session of its own,
so that every process it started, however re-parented, is found by that session: within a
bound none is left, the drill says it was interrupted, and the next drill in the same --dir
passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.agent.drill_local import minimum_steps
from job_session import end_session, every_worker_ends, session_processes
from support import forewarn_cmd

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="sessions and PR_SET_PDEATHSIG are Linux's"
)

# A slow link each save takes 12 s over: the drill's drain save is uploading from about 5 s in
# (the least steps of this drill, drained a fifth in), and a demo that makes a final save once
# stopped waits for that upload and then makes its own, up to 24 s, past the bound below.
UPLOAD_DELAY = 12.0
SLOW_UPLOAD = (
    *("--background", "--upload-delay", f"{UPLOAD_DELAY:g}", "--step-time", "0.02"),
    *("--steps", str(minimum_steps(0.02, True, UPLOAD_DELAY))),
)
GONE_WITHIN = 8.0  # seconds: the agent's own stop, on a loaded machine


def _training_drill(work: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`drill local --background` over a slow link in a session of its own, returned once its
    drain's save is uploading."""
    drill = subprocess.Popen(
        forewarn_cmd("drill", "local", *SLOW_UPLOAD, "--dir", str(work)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert drill.stdout is not None
    for line in drill.stdout:
        if "(drain) uploading in the background" in line:
            break
    else:
        raise AssertionError(f"the drill ended before its drain's save: {drill.stderr}")
    return drill


# How each stop reaches the drill: Ctrl-C to the whole group, the others to the drill alone.
STOPS = {
    "ctrl-c": lambda pid: os.killpg(pid, signal.SIGINT),
    "kill": lambda pid: os.kill(pid, signal.SIGTERM),
    "kill-9": lambda pid: os.kill(pid, signal.SIGKILL),
    "terminal-closed": lambda pid: os.kill(pid, signal.SIGHUP),
}
SIGNALS = {"ctrl-c": "SIGINT", "kill": "SIGTERM", "terminal-closed": "SIGHUP"}


@pytest.mark.slow(20)
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_drill_stopped_mid_upload_leaves_no_process_and_says_so(
    tmp_path: Path, env: dict[str, str], stop: str
) -> None:
    work = tmp_path / "drill"
    drill = _training_drill(work, env)
    try:
        assert len(session_processes(drill.pid)) >= 3, "the drill, its agent and its demo"
        STOPS[stop](drill.pid)
        code = drill.wait(60)
        every_worker_ends(drill.pid, GONE_WITHIN)
        if stop != "kill-9":  # a SIGKILL says nothing, by its nature
            assert code == 130, code
            assert drill.stderr is not None
            said = drill.stderr.read().strip().splitlines()
            assert said and f"interrupted by {SIGNALS[stop]}" in said[-1], said
    finally:
        end_session(drill)
    # Nothing the stopped drill left in its directory (its agent's socket, its demo's
    # checkpoints, half an upload) misleads the next one there.
    again = subprocess.run(
        forewarn_cmd("drill", "local", "--dir", str(work)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == "steps lost: 0", again.stdout
