"""A `--scenario` drill killed outright (`kill -9`, which runs none of its cleanup) takes its
torchrun job with it, as the quick drill takes its demo (tests/agent/test_drill_local.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import (
    as_in_a_terminal,
    eventually,
    forewarn_cmd,
    processes_mentioning,
    requires,
    run_forewarn,
)

pytestmark = [
    requires("torch"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]

# Each rank of the job, before its module runs (torchrun gives ranks LOCAL_RANK, nothing else
# of the drill has it), says it is up and waits. A rank that writes nothing: untethered, the job
# ended only when rank 0's first line broke its pipe to the dead drill, which a rank still
# importing torch or in a long first step does not write for a while. It also keeps the test
# cheap: no rank imports torch.
HOLD = """\
import os, pathlib, time
if "LOCAL_RANK" in os.environ:
    pathlib.Path(os.environ["HELD_RANKS"], str(os.getpid())).touch()
    time.sleep(120)
"""


def _held_ranks(tmp_path: Path, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """The job's environment with HOLD loaded into every rank, and the folder it writes to."""
    held = tmp_path / "held"
    held.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD)
    path = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    return held, dict(env, PYTHONPATH=os.pathsep.join(path), HELD_RANKS=str(held))


def _pids(text: str) -> list[int]:
    """Live processes whose command line or environment holds `text` (a zombie's are empty)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            named = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            if text.encode() in named:
                found.append(int(entry.name))
    return found


@pytest.mark.slow(8)
def test_a_scenario_drill_killed_outright_takes_its_torchrun_job_with_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    work = tmp_path / "drill"
    held, env = _held_ranks(tmp_path, env)
    drill = subprocess.Popen(
        forewarn_cmd("drill", "local", "--scenario", "cloud", "--seed", "1", "--dir", str(work)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The job runs: torchrun has started both ranks.
        eventually(lambda: len(list(held.iterdir())) == 2, timeout=120, what="the job's ranks")
        job = " ".join(processes_mentioning(str(work)))
        assert "torch.distributed.run" in job and "forewarn.agent.cli agent" in job
        drill.kill()
        drill.wait()
        # torchrun gets SIGTERM and ends its ranks (the held ones at once); the agent too.
        eventually(
            lambda: not _pids(str(work)), timeout=30, what="no process of the drill or its job"
        )
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
        for pid in _pids(str(work)):  # this test's orphans, had the tether not held
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# How each stop reaches the drill: Ctrl-C to the terminal's whole group (the drill in a session
# of its own stands for that terminal), the others to the drill alone. torchrun's ranks run in
# sessions of their own, which no terminal's signal reaches: the drill must end them.
STOPS = {"ctrl-c": signal.SIGINT, "kill": signal.SIGTERM, "terminal-closed": signal.SIGHUP}


@pytest.mark.slow(12)
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_scenario_drill_stopped_by_its_user_ends_its_job_and_says_so(
    tmp_path: Path, env: dict[str, str], stop: str
) -> None:
    work = tmp_path / "drill"
    held, held_env = _held_ranks(tmp_path, env)
    argv = forewarn_cmd("drill", "local", "--scenario", "cloud", "--seed", "1", "--dir", str(work))
    drill = subprocess.Popen(
        as_in_a_terminal(argv),  # SIGHUP at its default: under nohup the drill ignores it
        env=held_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        eventually(lambda: len(list(held.iterdir())) == 2, timeout=120, what="the job's ranks")
        if stop == "ctrl-c":
            os.killpg(drill.pid, STOPS[stop])
        else:
            drill.send_signal(STOPS[stop])
        _, err = drill.communicate(timeout=60)
        assert drill.returncode == 130, err
        said = err.strip().splitlines()
        assert said and f"interrupted by {STOPS[stop].name}" in said[-1], err
        eventually(
            lambda: not _pids(str(work)), timeout=10, what="no process of the drill or its job"
        )
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
        for pid in _pids(str(work)):  # this test's orphans, had the drill not ended them
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # The next drill in that directory starts afresh and passes.
    again = run_forewarn("drill", "local", "--dir", str(work), env=env, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1] == "steps lost: 0", again.stdout
