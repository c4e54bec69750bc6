"""A terminate whose deadline passes without every client's ack: the agent says who.

A job that never answered a terminate is an operator's first question after a lost step,
and the agent logged nothing at the deadline: its log, `forewarn status` and the metrics now
name the notice, its deadline and each client that received it and did not ack.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from forewarn.agent.holders import pid_namespace
from forewarn.protocol.timefmt import format_time
from support import AgentProcess, Subscriber, agent_env, eventually, run_forewarn
from test_metrics import metrics_url, scrape_url, value

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); tests/agent/test_agent.py starts them fresh.
pytestmark = pytest.mark.usefixtures("forked_agents")

WARNING = "passed without an ack from"
# A long grace: the notice stays active past its deadline, for `status` to show it.
ARGS = ("--exit-margin", "1s", "--set", "notice_grace=60")


def _terminate(agent: AgentProcess, seconds: float) -> tuple[str, datetime]:
    """A terminate due in `seconds`: its id and deadline."""
    deadline = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    request = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
    notice_id: str = agent.control(request)["notice"]["id"]
    return notice_id, deadline


def test_a_terminate_past_its_deadline_names_the_clients_that_did_not_ack(
    tmp_path: Path,
) -> None:
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        notice_id, deadline = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        assert WARNING not in agent.output(), "warned before the deadline"

        warned = eventually(
            lambda: re.search(
                rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
            ),
            10,
            "the warning at the deadline",
        )
        line = warned.group(0)
        assert "WARNING" in line and "trainer" in line and "saver" not in line, line
        assert format_time(deadline)[:19] in line, line

        status = run_forewarn("status", env=env)
        assert status.returncode == 0, status.stderr
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "acked by saver" in shown and "not acked by trainer" in shown, shown
        reply = json.loads(run_forewarn("status", "--json", env=env).stdout)
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}

        found = scrape_url(metrics_url(agent))
        labels = {"provider": "local", "reason": "manual"}
        assert value(found, "forewarn_unacked_terminates_total", **labels) == 1
        # Once per notice and deadline: the agent's later passes say nothing more.
        assert agent.control({"op": "status"})["ok"]
        assert agent.output().count(WARNING) == 1, agent.output()


def test_a_terminate_every_client_acked_passes_its_deadline_in_silence(tmp_path: Path) -> None:
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        notice_id, deadline = _terminate(agent, 1)
        assert trainer.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "trainer", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        eventually(
            lambda: datetime.now(timezone.utc) > deadline + timedelta(seconds=1),
            10,
            "a second past the deadline",
        )
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {}
        assert WARNING not in agent.output()
        found = scrape_url(metrics_url(agent))
        labels = {"provider": "local", "reason": "manual"}
        assert (
            value(found, "forewarn_unacked_terminates_total", **labels) == 0.0
        )  # at 0 from the start


def test_a_client_gone_before_its_ack_is_named_when_the_deadline_passes(tmp_path: Path) -> None:
    """A job that received the terminate and ended without acking it (killed mid-save by a
    systemd stop or an eviction's grace, crashed, finished its run without a save) is the
    job whose steps were lost: it left the clients, and the agent said nothing at the
    deadline (a terminate received by `trainer` and `saver`, `trainer` gone, `saver` acked:
    no warning, `status` silent), as if every job had answered."""
    env = agent_env(tmp_path)
    args = ("--exit-margin", "1s", "--set", "notice_grace=60")
    with (
        AgentProcess(tmp_path, args=args, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        deadline = datetime.now(timezone.utc) + timedelta(seconds=3)
        request = {"op": "notify", "action": "terminate", "deadline": format_time(deadline)}
        notice_id = agent.control(request)["notice"]["id"]
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        trainer.close()  # gone before its ack
        eventually(
            lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1,
            10,
            "the agent to see the trainer leave",
        )
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]

        warned = eventually(
            lambda: re.search(
                rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
            ),
            10,
            "the warning at the deadline",
        )
        line = warned.group(0)
        assert "trainer (gone before its ack)" in line and "saver" not in line, line
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}
        # `status` says what the warning says: the job left before its ack, not that it is late.
        assert reply["gone_before_ack"] == {notice_id: ["trainer"]}
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert shown.endswith("past its deadline, not acked by trainer (gone before its ack)"), (
            shown
        )


def test_a_client_gone_before_its_ack_is_still_named_so_after_a_restart(tmp_path: Path) -> None:
    """Who left before its ack was not in the state file: after a restart, a terminate the
    clients left had flushed (saver acked, trainer gone) was shown as if every job had
    answered ("unacked_past_deadline": {}), the job whose steps were lost no longer named."""
    env = agent_env(tmp_path)
    args = ("--exit-margin", "1s", "--set", "notice_grace=60")
    saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    with (
        AgentProcess(tmp_path, args=args, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        notice_id, _ = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        trainer.close()  # gone before its ack
        eventually(
            lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1,
            10,
            "the agent to see the trainer leave",
        )
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        _warned(agent, notice_id)
        eventually(
            lambda: notice_id in json.loads(saved.read_text()).get("overdue", {}),
            10,
            "the state saved after the warning",
        )
        assert agent.stop() == 0
    with AgentProcess(tmp_path, args=args, env=env) as agent:
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}, reply
        assert reply["gone_before_ack"] == {notice_id: ["trainer"]}, reply
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert shown.endswith("past its deadline, not acked by trainer (gone before its ack)"), (
            shown
        )
        assert WARNING not in agent.output(), "said again after the restart"


def test_a_held_client_past_the_deadline_is_named_once(tmp_path: Path) -> None:
    """A shell job's hold (`forewarn wait --client loop --pid N`) past the deadline is both
    held and unacked: `status` named it twice on the notice's line, "waiting for loop (pid N)
    not acked by loop (its deadline passed)", as if two jobs were late."""
    env = agent_env(tmp_path)
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        notice_id, _ = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id
        hold = {
            "op": "hold",
            "notice_id": notice_id,
            "client": "loop",
            "pid": os.getpid(),
            "pid_namespace": pid_namespace(),
        }
        assert agent.control(hold)["held"] is True
        for client in ("early", "other"):  # held, not past the deadline once acked: not listed
            assert agent.control({**hold, "client": client, "pid": None})["held"] is True
        assert agent.control({"op": "ack", "notice_id": notice_id, "client": "early"})["ok"]
        eventually(
            lambda: agent.control({"op": "status"})["unacked_past_deadline"],
            10,
            "the deadline passed",
        )
        status = run_forewarn("status", env=env)
        assert status.returncode == 0, status.stderr
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert shown.count("loop") == 1 and shown.count("trainer") == 1, shown
        assert "waiting for" not in shown and shown.count("early") == 1, shown
        assert "acked by early  past its deadline, not acked by" in shown, shown
        assert shown.endswith(
            f"not acked by loop (still held, pid {os.getpid()}), other (still held), trainer"
        ), shown
        # The JSON view keeps both fields as the schema has them.
        reply = json.loads(run_forewarn("status", "--json", env=env).stdout)
        assert reply["held_for"] == {notice_id: {"loop": os.getpid(), "other": None}}
        assert reply["unacked_past_deadline"] == {notice_id: ["loop", "other", "trainer"]}
        assert reply["gone_before_ack"] == {}  # each still there


def _warned(agent: AgentProcess, notice_id: str) -> re.Match[str]:
    """The warning line of `notice_id`'s deadline, once the restarted agent logged it."""
    found: re.Match[str] = eventually(
        lambda: re.search(
            rf"^.*notice {re.escape(notice_id)}: .*{WARNING}.*$", agent.output(), re.M
        ),
        10,
        "the warning after the restart",
    )
    return found


def _terminate_a_job_never_acks(tmp_path: Path, env: dict[str, str]) -> tuple[str, datetime]:
    """An agent sends a terminate that `saver` acks and `trainer` received; the agent stops
    before the deadline and `trainer`'s job dies while it is down: the deadline passes."""
    agent = AgentProcess(tmp_path, args=ARGS, env=env)
    # Closed after the agent stopped: its job died while the agent was down, and it never
    # reconnects.
    with (
        Subscriber(agent.events, ("notice", "client/trainer")) as trainer,
        agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer.ready()
        notice_id, deadline = _terminate(agent, 2)
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(
            lambda: (
                saved.exists()
                and ("received_by" not in saved.read_text() or "trainer" in saved.read_text())
            ),
            10,
            "the state saved",
        )
        assert agent.stop() == 0
    eventually(lambda: datetime.now(timezone.utc) > deadline, 10, "the deadline passed, agent down")
    return notice_id, deadline


def test_a_deadline_that_passed_while_the_agent_was_down_names_who_did_not_ack(
    tmp_path: Path,
) -> None:
    """The state file kept the terminate and `saver`'s ack, not that `trainer` had received
    it: after the restart the deadline was past, no client unacked was known, and the agent
    said nothing of the job that never saved; `status` showed the notice as if all was well."""
    env = agent_env(tmp_path)
    notice_id, deadline = _terminate_a_job_never_acks(tmp_path, env)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        warned = _warned(agent, notice_id)
        line = warned.group(0)
        assert "trainer" in line and "saver" not in line and "not known" not in line, line
        assert format_time(deadline)[:19] in line, line
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "acked by saver" in shown and "not acked by trainer" in shown, shown
        reply = json.loads(run_forewarn("status", "--json", env=env).stdout)
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}
        assert reply["past_deadline_receivers_unknown"] == []


def test_an_older_agents_state_file_says_the_receivers_are_not_known(tmp_path: Path) -> None:
    """A state file of an agent before `received_by` does not say who received the notice:
    past its deadline the agent says that it cannot name them, rather than nothing; and
    `status` keeps saying so once the clients still there have flushed it."""
    env = agent_env(tmp_path)
    notice_id, _ = _terminate_a_job_never_acks(tmp_path, env)
    saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    older = json.loads(saved.read_text())
    del older["received_by"]
    saved.write_text(json.dumps(older))
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        warned = _warned(agent, notice_id)
        assert "any client it can name (those that received it before" in warned.group(0)
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "acked by saver" in shown and "are not known" in shown, shown
        # The restart's hold on flushes passes (saver acked, nobody else connected): still
        # said. It went from the JSON status then (seen under load, status asked after it).
        eventually(
            lambda: f"notice {notice_id} flushed by every client" in agent.output(),
            10,
            "the flush once the restart's hold passed",
        )
        reply = json.loads(run_forewarn("status", "--json", env=env).stdout)
        assert reply["unacked_past_deadline"] == {}
        assert reply["past_deadline_receivers_unknown"] == [notice_id]
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "are not known" in shown, shown


def test_a_deadline_told_before_a_restart_is_not_told_again(tmp_path: Path) -> None:
    """The agent warned of the missed deadline (and counted it), stopped, and the
    restarted agent warned of the same terminate's same deadline again: when it was told was
    not in the state file."""
    env = agent_env(tmp_path)
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/trainer")).ready() as trainer,
    ):
        notice_id, _ = _terminate(agent, 1)
        assert trainer.notice()["id"] == notice_id
        _warned(agent, notice_id)
        saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(lambda: notice_id in json.loads(saved.read_text()).get("overdue", {}), 10)
        assert agent.stop() == 0
    with (
        AgentProcess(tmp_path, args=ARGS, env=env) as agent,
        Subscriber(agent.events, ("heartbeat",)).ready() as beats,
    ):
        # A periodic heartbeat goes out after each pass that tells missed deadlines: two are
        # a whole pass after the subscriber was there (a replay's heartbeat is none).
        periodic = 0
        while periodic < 2:
            _, beat = beats.recv(timeout=10)
            periodic += beats.token not in beat.get("replay_for", [])
        assert agent.control({"op": "status"})["unacked_past_deadline"] == {notice_id: ["trainer"]}
        assert WARNING not in agent.output(), agent.output()


def _terminate_a_job_left_unacked(tmp_path: Path, env: dict[str, str]) -> tuple[str, datetime]:
    """An agent sends a terminate that `saver` acks and `trainer` received; `trainer`'s job
    dies before its ack while the agent runs (the notice is then flushed by every client
    left), and the agent stops before the deadline: the deadline passes while it is down."""
    agent = AgentProcess(tmp_path, args=ARGS, env=env)
    with agent, Subscriber(agent.events, ("notice", "client/saver")).ready() as saver:
        trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
        notice_id, deadline = _terminate(agent, 3)
        assert trainer.notice()["id"] == notice_id and saver.notice()["id"] == notice_id
        trainer.close()  # gone before its ack
        eventually(
            lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 1,
            10,
            "the agent to see the trainer leave",
        )
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        eventually(
            lambda: f"notice {notice_id} flushed by every client" in agent.output(),
            10,
            "the flush by the clients left",
        )
        assert agent.stop() == 0
        assert WARNING not in agent.output(), "warned before the deadline"
    eventually(lambda: datetime.now(timezone.utc) > deadline, 10, "the deadline passed, agent down")
    return notice_id, deadline


def test_a_client_gone_before_its_ack_is_named_by_an_agent_restarted_since(
    tmp_path: Path,
) -> None:
    """Found in a field walk (AWS spot, 2 min): a job that never acked was killed, the other
    job's ack made the terminate flushed by every client left, and the agent restarted
    before the deadline: the state file kept who received only notices not flushed, so the
    restarted agent let the deadline pass in silence (no warning, nothing counted) and
    `status` named nobody, for the one job whose steps were lost."""
    env = agent_env(tmp_path, FOREWARN_METRICS_ADDRESS="127.0.0.1:0")
    notice_id, deadline = _terminate_a_job_left_unacked(tmp_path, env)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        line = _warned(agent, notice_id).group(0)
        assert "trainer (gone before its ack)" in line and "saver" not in line, line
        assert format_time(deadline)[:19] in line, line
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert "acked by saver" in shown, shown
        assert shown.endswith("past its deadline, not acked by trainer (gone before its ack)"), (
            shown
        )
        found = scrape_url(metrics_url(agent))
        labels = {"provider": "local", "reason": "manual"}
        assert value(found, "forewarn_unacked_terminates_total", **labels) == 1


def test_a_client_gone_before_its_ack_stays_named_after_a_restart_past_the_deadline(
    tmp_path: Path,
) -> None:
    """Told at the deadline, `trainer (gone before its ack)`, and then the agent restarted:
    `status` of the restarted agent showed the terminate past its deadline as if every job
    had acked it, and named no one."""
    env = agent_env(tmp_path)
    notice_id, _ = _terminate_a_job_left_unacked(tmp_path, env)
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        _warned(agent, notice_id)
        saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(lambda: notice_id in json.loads(saved.read_text()).get("overdue", {}), 10)
        assert agent.stop() == 0
    with AgentProcess(tmp_path, args=ARGS, env=env) as agent:
        assert agent.control({"op": "status"})["unacked_past_deadline"] == {notice_id: ["trainer"]}
        status = run_forewarn("status", env=env)
        (shown,) = [row for row in status.stdout.splitlines() if notice_id in row]
        assert shown.endswith("past its deadline, not acked by trainer (gone before its ack)"), (
            shown
        )
        assert WARNING not in agent.output(), agent.output()


def test_a_client_gone_before_its_ack_of_an_escalated_drain_is_named_after_a_sigkill(
    tmp_path: Path,
) -> None:
    """A drain sent as terminate (its deadline inside the exit margin) is saved as the drain
    it was asked for: the restarted agent compared the terminate it restores with that
    drain, took it for a change, and forgot the job that had left before its terminate ack
    (H173's fix, 5f206fc8, tested at the board only). Across a real agent SIGKILLed once the
    job's leaving was saved, the restarted agent still names it, in `status` and at the
    deadline."""
    env = agent_env(tmp_path)
    args = ("--exit-margin", "60s", "--set", "notice_grace=60")
    saved = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
    agent = AgentProcess(tmp_path, args=args, env=env).start()
    try:
        with Subscriber(agent.events, ("notice", "client/saver")).ready() as saver:
            trainer = Subscriber(agent.events, ("notice", "client/trainer")).ready()
            deadline = datetime.now(timezone.utc) + timedelta(seconds=4)
            request = {"op": "notify", "action": "drain", "deadline": format_time(deadline)}
            notice = agent.control(request)["notice"]
            notice_id = notice["id"]
            assert notice["action"] == "terminate"  # escalated: inside the 60 s margin
            assert trainer.notice()["action"] == saver.notice()["action"] == "terminate"
            trainer.close()  # gone before its ack
            ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
            assert agent.control(ack)["ok"]
            eventually(
                lambda: (
                    json.loads(saved.read_text()).get("gone_before_ack") == {notice_id: ["trainer"]}
                ),
                10,
                "the trainer's leaving saved",
            )
    finally:
        agent.kill()
    with AgentProcess(tmp_path, args=args, env=env) as agent:
        reply = agent.control({"op": "status"})
        (active,) = reply["active"]
        assert (active["id"], active["action"]) == (notice_id, "terminate"), reply
        assert reply["gone_before_ack"] == {notice_id: ["trainer"]}, reply
        line = _warned(agent, notice_id).group(0)
        assert "trainer (gone before its ack)" in line and "saver" not in line, line
        reply = agent.control({"op": "status"})
        assert reply["unacked_past_deadline"] == {notice_id: ["trainer"]}, reply
