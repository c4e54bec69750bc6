"""`forewarn drill local` stopped the ways a user stops it: Ctrl-C (SIGINT to the terminal's
foreground process group), `kill` (SIGTERM to the drill alone), `kill -9` (SIGKILL, which runs
none of its cleanup) and a closed terminal (SIGHUP). Each drill runs in a session of its own,
so that every process it started, however re-parented, is found by that session: within a
bound none is left, the drill says it was interrupted, and the next drill in the same --dir
passes."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from forewarn.agent.drill_local import minimum_steps
from job_session import end_session, every_worker_ends, session_processes
from support import as_in_a_terminal, forewarn_cmd, run_forewarn, sighup_as_in_a_terminal

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


def _training_drill(
    work: Path, env: dict[str, str], before: list[str] | None = None
) -> subprocess.Popen[str]:
    """`drill local --background` over a slow link in a session of its own, returned once its
    drain's save is uploading; SIGHUP at its default, as typed into a terminal, unless
    `before` (`nohup`) says otherwise."""
    argv = forewarn_cmd("drill", "local", *SLOW_UPLOAD, "--dir", str(work))
    drill = subprocess.Popen(
        [*before, *argv] if before else as_in_a_terminal(argv),
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
    again = run_forewarn("drill", "local", "--dir", str(work), env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == "steps lost: 0", again.stdout


def test_a_drill_whose_terminal_closes_ends_everything_and_exits_130(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The terminal itself closed (an ssh session dropped): the drill, the terminal's session
    leader here, gets its SIGHUP, and the last line it writes meets the closed terminal's EIO.
    That EIO ended the drill as an unexpected error, exit 1, where a parent reading the status
    (`ssh host forewarn drill local; echo $?`) was to see an interrupt."""
    work = tmp_path / "drill"
    # As a user's shell has it: buffered output, whose flush at the exit meets the EIO too.
    env = {key: value for key, value in env.items() if key != "PYTHONUNBUFFERED"}
    pid, master = pty.fork()
    if pid == 0:  # the drill: a session of its own, the pty its controlling terminal
        with contextlib.suppress(BaseException):
            sighup_as_in_a_terminal()
            argv = forewarn_cmd("drill", "local", *SLOW_UPLOAD, "--dir", str(work))
            os.execve(argv[0], argv, env)
        os._exit(127)
    session = pid  # the drill leads its session
    said = b""
    try:
        with contextlib.suppress(OSError):  # EIO: the drill ended; what it said is below
            while b"(drain) uploading in the background" not in said:
                said += os.read(master, 65536)
        os.close(master)  # the ssh session closes: the kernel hangs up the terminal
        master = -1
        _, status = os.waitpid(pid, 0)
        code, pid = os.waitstatus_to_exitcode(status), 0
        every_worker_ends(session, GONE_WITHIN)
    finally:
        if master >= 0:
            os.close(master)
        for line in session_processes(session):  # what the drill left, had it left any
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        if pid:
            os.waitpid(pid, 0)
    assert code == 130, (code, said.decode(errors="replace"))


def test_a_drill_under_nohup_runs_on_through_a_hangup(tmp_path: Path, env: dict[str, str]) -> None:
    """`nohup forewarn drill local ... &` asked for a drill that outlives its terminal: the
    drill took the SIGHUP for an interrupt all the same, and stopped at the logout. The SIGHUP
    ignored when it starts stays ignored; a `kill` after it is what stops this one."""
    work = tmp_path / "drill"
    drill = _training_drill(work, env, ["nohup"])
    try:
        drill.send_signal(signal.SIGHUP)  # the lower number: taken first, had it been heard
        drill.send_signal(signal.SIGTERM)
        _, err = drill.communicate(timeout=60)
        assert drill.returncode == 130, err
        assert "interrupted by SIGTERM" in err.strip().splitlines()[-1], err
        every_worker_ends(drill.pid, GONE_WITHIN)
    finally:
        end_session(drill)


def test_a_drill_stopped_twice_at_once_says_it_once_without_a_traceback(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`kill` and then Ctrl-C (an impatient user, a CI runner's SIGTERM and its group's
    SIGINT): the second signal, already on its way as the first's handler set SIG_IGN, printed
    Python's `OSError: Signal 2 ignored due to race condition` traceback above the last line."""
    work = tmp_path / "drill"
    drill = _training_drill(work, env)
    try:
        drill.send_signal(signal.SIGTERM)
        os.killpg(drill.pid, signal.SIGINT)
        _, err = drill.communicate(timeout=60)
        assert drill.returncode == 130, err
        assert "Traceback" not in err and "race condition" not in err, err
        # Both may be pending when Python runs its handlers, which it does lowest number
        # first: either is the one named, once.
        assert err.count("interrupted by") == 1, err
        assert re.search(r"interrupted by SIG(TERM|INT):", err.strip().splitlines()[-1]), err
        every_worker_ends(drill.pid, GONE_WITHIN)
    finally:
        end_session(drill)
