"""Ctrl-C on a shell script blocked in `forewarn wait` or `forewarn watch` stops the script, as
it does one blocked in any other command."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from support import AgentProcess, eventually, forewarn_cmd


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _subscribed(pid: int) -> bool:
    # ZeroMQ's I/O thread runs once the command has made its socket: it is in its loop.
    try:
        return len(list(Path(f"/proc/{pid}/task").iterdir())) > 1
    except OSError:
        return False


@pytest.mark.parametrize("command", ["wait", "watch"])
def test_ctrl_c_stops_the_script_not_only_the_command(tmp_path: Path, command: str) -> None:
    # The command caught the SIGINT and exited 130: bash took that for a command that handled
    # Ctrl-C itself and went on with the script (the documented `id=$(forewarn wait --for
    # drain --json | jq -r .id)` then ran the job's save and acked an empty id). A command
    # that ends on SIGINT must end by it for the shell to stop too.
    script = tmp_path / "job.sh"
    forewarn = shlex.join(forewarn_cmd(command, "--agent-timeout", "0"))
    script.write_text(f'{forewarn}\necho "went on after $?"\n')
    with AgentProcess(tmp_path) as agent:
        job = subprocess.Popen(
            ["bash", str(script)],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's job has
        )
        try:
            eventually(
                lambda: any(_subscribed(pid) for pid in _children(job.pid)),
                timeout=30,
                what=f"forewarn {command} running",
            )
            os.killpg(job.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
            out, _ = job.communicate(timeout=30)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
    assert "went on" not in out, out
    assert job.returncode in (130, -signal.SIGINT), (job.returncode, out)
