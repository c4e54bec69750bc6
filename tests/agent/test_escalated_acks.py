"""Acks belong to an action: a drain's ack is no terminate's.

A drain the board re-sends as terminate at `deadline - exit_margin` keeps its id, and the
agent counted the drain's acks for the terminate: a job that saved for the drain and then
ignored the terminate was not named at the deadline, `status` said the terminate was acked
by a job that had died before it was sent, and the notice, flushed as a drain, was never
flushed (its provider never told) as a terminate.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.protocol.ages import status_ages
from forewarn.protocol.timefmt import format_time
from support import AgentProcess, Subscriber, agent_env, eventually, run_forewarn
from test_metrics import metrics_url, scrape_url, value

pytestmark = pytest.mark.usefixtures("forked_agents")

WARNING = "passed without an ack from"
# A job's first steps under a CheckpointGuard: "exit" once a terminate asks it to exit,
# "train" when 10 s of steps pass without (its guard logs why on stderr).
NEXT_JOB = """
import sys, time
from forewarn.clients import CheckpointGuard, Notices
notices = Notices(sys.argv[1], sys.argv[2])
guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
end = time.monotonic() + 10
while time.monotonic() < end and not (guard.due(1) and guard.should_exit):
    time.sleep(0.05)  # a training step
print("exit" if guard.should_exit else "train")
guard.close()
notices.close()
"""
# A long grace: the notice stays active past its deadline, for `status` to show it.
ARGS = ("--exit-margin", "1s", "--set", "notice_grace=60")


def _drain(agent: AgentProcess, seconds: float) -> tuple[str, datetime]:
    """A drain due in `seconds`, escalated to terminate a second before: its id and deadline."""
    deadline = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    request = {"op": "notify", "action": "drain", "deadline": format_time(deadline)}
    notice_id: str = agent.control(request)["notice"]["id"]
    return notice_id, deadline


def _ack(agent: AgentProcess, notice_id: str, client: str) -> None:
    ack = {"op": "ack", "notice_id": notice_id, "client": client, "flush_seconds": 0.1}
    assert agent.control(ack)["ok"]


def test_a_client_that_saved_for_the_drain_and_ignored_its_terminate_is_named(
    tmp_path: Path,
) -> None:
    """`trainer` and `saver` save for the drain; escalated, only `saver` acks the terminate.
    The drain's acks counted for the terminate: no warning at the deadline, and `status`
    showed the terminate acked by both."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        notice_id, deadline = _drain(agent, 4)
        assert trainer.notice()["action"] == "drain" and saver.notice()["action"] == "drain"
        _ack(agent, notice_id, "trainer")
        _ack(agent, notice_id, "saver")
        assert agent.control({"op": "status"})["acked_by"] == {notice_id: ["saver", "trainer"]}
        escalated = trainer.notice(10)
        assert (escalated["id"], escalated["action"]) == (notice_id, "terminate")
        assert saver.notice(10)["action"] == "terminate"
        # The terminate is acked by no one yet: the drain's acks were for the drain.
        assert agent.control({"op": "status"})["acked_by"] == {}
        _ack(agent, notice_id, "saver")

        warned = eventually(
            lambda: re.search(
                rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
            ),
            10,
            "the warning at the deadline",
        )
        line = warned.group(0)
        assert "trainer" in line and "saver" not in line, line
        assert format_time(deadline)[:19] in line, line
        reply = agent.control({"op": "status"})
        assert reply["acked_by"] == {notice_id: ["saver"]}
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "acked by saver  past its deadline, not acked by trainer" in shown, shown
        found = scrape_url(metrics_url(agent))
        labels = {"provider": "local", "reason": "manual"}
        assert value(found, "forewarn_unacked_terminates_total", **labels) == 1


def test_a_client_gone_after_the_drain_is_not_shown_acking_the_terminate(
    tmp_path: Path,
) -> None:
    """`job-b` saved for the drain and died before the escalation: `status` showed the
    terminate acked by it, a job that never received it."""
    env = agent_env(tmp_path)
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/job-a")).ready() as job_a,
    ):
        job_b = Subscriber(agent.events, ("notice", "client/job-b")).ready()
        notice_id, _ = _drain(agent, 4)
        assert job_a.notice()["action"] == "drain" and job_b.notice()["action"] == "drain"
        _ack(agent, notice_id, "job-a")
        _ack(agent, notice_id, "job-b")
        job_b.close()
        eventually(
            lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1,
            10,
            "the agent to see job-b leave",
        )
        assert job_a.notice(10)["action"] == "terminate"
        _ack(agent, notice_id, "job-a")
        reply = agent.control({"op": "status"})
        assert reply["acked_by"] == {notice_id: ["job-a"]}, reply
        shown = run_forewarn("status", "--json", env=env).stdout
        assert json.loads(shown)["acked_by"] == {notice_id: ["job-a"]}


def test_a_drain_acked_before_a_restart_is_a_terminate_no_one_acked_after_it(
    tmp_path: Path,
) -> None:
    """The agent is down while the drain's deadline comes within the exit margin: it comes
    back as terminate, and the state file's acks were the drain's. Counted for the
    terminate, `trainer` (which saved for the drain, then ignored the terminate) was shown
    acking it, and not named at the deadline."""
    env = agent_env(tmp_path)
    saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        notice_id, deadline = _drain(agent, 5)
        assert trainer.notice()["action"] == "drain"
        _ack(agent, notice_id, "trainer")
        eventually(
            lambda: notice_id in json.loads(saved.read_text()).get("acked_by", {}),
            10,
            "the drain's ack saved",
        )
        assert json.loads(saved.read_text())["acked_for"] == {notice_id: "drain"}
        assert agent.stop() == 0
    # While the agent is down the drain's deadline comes within the 1 s exit margin.
    eventually(
        lambda: datetime.now(timezone.utc) > deadline - timedelta(seconds=1),
        10,
        "the drain's deadline within the exit margin",
    )
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        assert trainer.notice()["action"] == "terminate"
        assert agent.control({"op": "status"})["acked_by"] == {}
        warned = eventually(
            lambda: re.search(
                rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
            ),
            10,
            "the warning at the deadline",
        )
        assert "trainer" in warned.group(0), warned.group(0)


def test_an_older_agents_state_keeps_its_acks_as_that_agent_counted_them(
    tmp_path: Path,
) -> None:
    """A state file of an agent before `acked_for` (it does not say which action the acks
    were for) loads, and its acks count for the notice as it comes back, as they did."""
    env = agent_env(tmp_path)
    saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        notice_id, _ = _drain(agent, 5)
        assert trainer.notice()["action"] == "drain"
        _ack(agent, notice_id, "trainer")
        eventually(
            lambda: notice_id in json.loads(saved.read_text()).get("acked_by", {}),
            10,
            "the drain's ack saved",
        )
        assert agent.stop() == 0
    older = json.loads(saved.read_text())
    del older["acked_for"]  # as the agent before it wrote it
    saved.write_text(json.dumps(older, indent=1))
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        reply = agent.control({"op": "status"})
        assert reply["acked_by"] == {notice_id: ["trainer"]}, reply
        assert [n["action"] for n in reply["active"] if n["id"] == notice_id] == ["drain"]
        assert not (tmp_path / "state" / "state.json.broken").exists()


def test_a_terminate_a_job_saved_only_the_drain_for_is_no_inherited_one(tmp_path: Path) -> None:
    """`trainer` saves for an operator's drain (no deadline) and ends; the operator then makes
    it a terminate (same id). The heartbeat's `acked` still listed it, as if an earlier job had
    acted on the terminate: the next job on the node took it for inherited and, with no
    deadline, ignored it ("it does not stop this job ... it is ignored") and trained on under
    a terminate nobody answered."""
    env = agent_env(tmp_path)
    notice_id = "local/manual/move-off"
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        with Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer:
            agent.control({"op": "notify", "action": "drain", "id": notice_id})
            assert trainer.notice()["action"] == "drain"
            _ack(agent, notice_id, "trainer")
        agent.control({"op": "notify", "action": "terminate", "id": notice_id})

        with Subscriber(agent.events, ("heartbeat",)).ready() as beats:
            _, beat = beats.recv(10)
        assert notice_id in beat["active"] and notice_id not in beat.get("acked", []), beat

        # The next job is a process started after the terminate, as on a node: the guard
        # takes a notice from before its process's start for one that may be inherited. It
        # starts once the agent ages the terminate past 0.5 s: started 5 ms after it, the job
        # judged it raised after its start (by an age read after the start, within the reply's
        # latency; the side to err on) and exited without the inherited words, 1 run in 3.
        eventually(
            lambda: (status_ages(agent.control({"op": "status"})) or {}).get(notice_id, 0) > 0.5,
            10,
            "the terminate half a second old on the agent's clock",
        )
        job = subprocess.run(
            [sys.executable, "-c", NEXT_JOB, agent.events, agent.control_endpoint],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert job.stdout.strip() == "exit", (job.stdout, job.stderr)
        assert "no client has acted on it: this job saves and exits now" in job.stderr, job.stderr
