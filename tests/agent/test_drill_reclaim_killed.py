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
from support import eventually, forewarn_cmd, processes_mentioning, requires

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
    held = tmp_path / "held"
    held.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD)
    path = [str(site), *filter(None, [env.get("PYTHONPATH")])]
    env = dict(env, PYTHONPATH=os.pathsep.join(path), HELD_RANKS=str(held))
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
