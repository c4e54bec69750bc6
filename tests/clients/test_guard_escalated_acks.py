"""A real training job under a drain the agent escalates to terminate (same id): it saves for
the drain and trains on, then saves for the terminate, acks it and exits; the agent counts
the terminate flushed by that second ack, not by the drain's."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import format_time
from support import AgentProcess, eventually
from test_guard import EXIT_RECLAIMED, Training

pytestmark = pytest.mark.usefixtures("forked_agents")


def test_a_job_saves_for_the_drain_then_acks_its_terminate_after_the_exit_save(
    tmp_path: Path,
) -> None:
    args = ("--exit-margin", "1s", "--set", "notice_grace=60")
    with AgentProcess(tmp_path, args=args) as agent:
        run = Training(agent.env, tmp_path / "ckpt", "--steps", "100000", "--step-time", "0.01")
        run.until("step", step=10)
        deadline = datetime.now(timezone.utc) + timedelta(seconds=4)
        request = {"op": "notify", "action": "drain", "deadline": format_time(deadline)}
        notice_id = agent.control(request)["notice"]["id"]
        drain_save = run.until("saved")
        assert drain_save["reasons"] == ["drain"] and not drain_save["exit"]
        flushed = rf"notice {re.escape(notice_id)} flushed by every client \(1\)"
        eventually(lambda: re.search(flushed, agent.output()), 10, "the drain's flush")
        exit_save = run.until("saved", timeout=15)
        assert exit_save["reasons"] == ["terminate"] and exit_save["exit"], exit_save
        assert exit_save["step"] > drain_save["step"]
        code, err = run.finish()
        assert code == EXIT_RECLAIMED, err
        # Flushed again, as a terminate, by the exit save's ack: the drain's counted for it.
        eventually(
            lambda: len(re.findall(flushed, agent.output())) == 2, 10, "the terminate's flush"
        )
        eventually(
            lambda: datetime.now(timezone.utc) > deadline + timedelta(seconds=1),
            10,
            "a second past the deadline",
        )
        assert agent.control({"op": "status"})["unacked_past_deadline"] == {}
        assert "passed without an ack" not in agent.output()
