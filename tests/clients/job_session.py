"""The processes still running in a job's session, for the tests that kill a job's main
process and check that nothing it started is left on the node for the next job."""

from __future__ import annotations

import subprocess


def session_processes(sid: int) -> list[str]:
    """The session's processes still running, as `ps` lines (pid, sid, state, command): not a
    zombie, which is gone in all but its parent's table (a spawn or forkserver start's resource
    tracker and fork server end once the job has exited, and wait there for init's reaping)."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in out.splitlines()
        if line.split()[1] == str(sid) and not line.split()[2].startswith("Z")
    ]
