"""A step of the wall clock between a flag file's writing and the agent's first read of it,
through the real agent subprocess: the agent runs on a wall clock moved by a sitecustomize
(`shifted_wall_clock`), and the file's mtime is what the machine's clock said at the writing,
before the step."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from support import AgentProcess, agent_env, eventually, shifted_wall_clock


@pytest.mark.parametrize("step", [timedelta(hours=2), timedelta(hours=-2)], ids=["forward", "back"])
def test_a_flags_duration_counts_from_the_first_read_when_a_step_came_after_the_writing(
    tmp_path: Path, step: timedelta
) -> None:
    """`echo 10m > checkpoint-now` on a clock 2 h off, then NTP's step, then the agent's
    first look. The duration counted from the mtime, by the clock before the step: 2 h
    forward, the drain's deadline was 1 h 50 min past (a terminate, and its `clear` at once,
    past the grace); 2 h back, it was 2 h 10 min away (the terminate 2 h late). The agent's
    last look before found no file, a quarter second earlier by the boot clock: the file was
    written since, and the first read is the anchor. Ten minutes, and nothing else."""
    shifted, offset = shifted_wall_clock(tmp_path, -step.total_seconds())
    env = agent_env(tmp_path, **shifted)
    with AgentProcess(tmp_path, env=env) as agent, agent.subscriber() as sub:
        flag = agent.runtime / "checkpoint-now"
        assert agent.control({"op": "status"})["ok"]
        offset.write_text("0")  # NTP's step: the agent's wall clock is right
        # Written just before the step: its mtime is the clock's then.
        written = tmp_path / "flag-written"
        written.write_text("10m\n")
        mtime = time.time() - step.total_seconds()
        os.utime(written, (mtime, mtime))
        os.rename(written, flag)
        drain = sub.notice(timeout=10)
        assert drain["action"] == "drain" and drain["id"].startswith("local/flag/"), drain
        left = parse_time(drain["deadline"]) - utcnow()
        assert timedelta(minutes=9) < left <= timedelta(minutes=10), drain
        assert sub.drain(1.5) == []
        [active] = agent.control({"op": "status"})["active"]
        assert (active["action"], active["deadline"]) == ("drain", drain["deadline"]), active
        eventually(lambda: f"flag file {flag}: its mtime" in agent.output(), what="the warning")
