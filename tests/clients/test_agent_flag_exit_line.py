"""A job that exits on the agent's terminate for a flag file's deadline says, in its exit
line, how to withdraw that deadline, as a job exiting on a deadline it kept itself says
(test_flag_deadline_withdrawn.py): on a machine that was not taken, the operator reads the
job's log for why it stopped, and the terminate stands until the deadline."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from support import agent_env, eventually, running_agent

# A loop with the guard, connected to the agent (FOREWARN_RUNTIME_DIR): it prints `ready` once
# it hears the agent, and exits with the guard's code at the save that says exit.
JOB = textwrap.dedent(
    """
    import sys, time
    from forewarn.clients import CheckpointGuard

    with CheckpointGuard(handle_signals=False, agree=False) as guard:
        step = 0
        while True:
            step += 1
            time.sleep(0.02)
            if step == 2:
                print("ready", flush=True)
            if guard.due(step) and guard.saved(step, 0.01).exit:
                sys.exit(guard.exit_code)
    """
)


def test_the_exit_line_of_the_agents_flag_terminate_says_how_to_withdraw_it(
    tmp_path: Path,
) -> None:
    env = agent_env(tmp_path)
    flag = Path(env["FOREWARN_RUNTIME_DIR"]) / "checkpoint-now"
    with running_agent(tmp_path, env=env) as agent:
        job = subprocess.Popen(
            [sys.executable, "-c", JOB],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert job.stdout is not None
            assert job.stdout.readline().strip() == "ready"
            # Within the default 30 s exit margin a few seconds after it is read: a drain,
            # then the terminate the job exits on.
            flag.write_text("33s\n")
            _, log = job.communicate(timeout=60)
        finally:
            if job.poll() is None:
                job.kill()
                job.communicate()
        (exit_line,) = [line for line in log.splitlines() if "exiting at step" in line]
        assert " on terminate local/flag/" in exit_line, exit_line
        assert f"write it again, empty (`: > {flag}`), to withdraw it" in exit_line, exit_line
        assert "; checkpoint " in exit_line and exit_line.count(";") == 1, exit_line

        # The way the line says: the terminate is withdrawn, a drain without a deadline
        # takes its place.
        flag.write_bytes(b"")

        def withdrawn() -> bool:
            active = agent.control({"op": "status"})["active"]
            return [notice["action"] for notice in active] in ([], ["drain"])

        eventually(withdrawn, timeout=15, what="the flag's terminate withdrawn")
