"""`forewarn status` shows each provider's health and each active notice's time left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from forewarn.agent.runner import provider_health
from forewarn.providers.health import WATCHER_FAILED, PollHealth
from support import DEAD_LOOPBACK, AgentProcess, agent_env, eventually, run_forewarn
from webhook_receiver import receiver

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


# `forewarn status` runs as its own fresh interpreter, as a user runs it, for its text reply
# (exit 0 and exit 1) and its JSON reply, and in the weeks-long timeout test. Its other
# runs, most of them polls inside `eventually`, fork from a process that loaded forewarn's
# command line once (`run_forewarn_forked`, tests/conftest.py; each still its own process,
# environment, output and exit code): ~0.05 CPU-s a run instead of ~0.25.
Forked = Callable[..., subprocess.CompletedProcess[str]]


def test_status_shows_each_provider_and_notice(tmp_path: Path, run_forewarn_forked: Forked) -> None:
    env = agent_env(tmp_path, FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}")
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env) as agent:
        agent.control(
            {"op": "notify", "action": "drain", "note": "rehearsal", "deadline": _in_minutes(10)}
        )

        def health() -> dict[str, dict[str, object]] | None:
            reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
            states = {item["name"]: item for item in reply["health"]}
            ready = states.get("aws", {}).get("state") == "degraded"
            return states if ready and states["local"]["state"] == "healthy" else None

        states = eventually(health, what="aws degraded and local healthy")
        text = run_forewarn("status", env=env)
    assert states["aws"]["last_error"] and states["aws"]["last_success"] is None
    assert states["local"]["last_success"]
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    aws = next(line for line in lines if line.startswith("provider   aws"))
    assert "degraded (last error:" in aws and "no successful poll yet" in aws
    local = next(line for line in lines if line.startswith("provider   local"))
    assert "healthy; last successful poll" in local
    assert lines[0].startswith("agent ") and "(forewarn " in lines[0]
    active = next(line for line in lines if line.startswith("active "))
    assert "drain" in active and re.search(r"deadline \S+ \(in \d+s\)", active), active
    assert 'note "rehearsal"' in active


def _in_minutes(minutes: int) -> str:
    from datetime import datetime, timedelta, timezone

    from forewarn.protocol.timefmt import format_time

    return format_time(datetime.now(timezone.utc) + timedelta(minutes=minutes))


def test_status_shows_a_standing_condition_until_it_is_resolved(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """A state file the agent cannot write is a standing problem: `status` names it while it
    lasts (the log says it once), and drops it once the retry has written the file."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        state.mkdir()  # a directory in its place fails every write, as a full disk would
        agent.control({"op": "notify", "action": "drain", "id": "local/kept"})

        def conditions() -> dict[str, str]:
            reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
            return dict(reply["agent"]["conditions"])

        standing = eventually(conditions, what="the failed write in status")
        assert list(standing) == ["state"] and str(state) in standing["state"], standing
        text = run_forewarn_forked("status", env=env).stdout
        assert f"condition  agent: state: cannot write {state}" in text, text
        state.rmdir()
        eventually(lambda: conditions() == {}, what="the condition resolved")
        assert "condition " not in run_forewarn_forked("status", env=env).stdout


def test_the_readmes_status_reply_names_every_field_of_the_reply() -> None:
    """The control-request table showed the status reply without `health` and
    `agent.conditions`, which `status --json` prints and scripts read."""
    from forewarn.agent.protocol import AgentInfo, ProviderHealth, StatusReply

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith('| `{"op": "status"}`'))
    reply = row.split("|")[2]
    for model in (StatusReply, AgentInfo, ProviderHealth):
        for name in model.model_fields:
            assert re.search(rf"\b{name}\b", reply), (model.__name__, name)
    agent = re.search(r'"agent": \{([^}]*)\}', reply)
    health = re.search(r'"health": \[\{([^}]*)\}\]', reply)
    assert agent and health, reply
    assert {word.strip() for word in agent.group(1).split(",")} == set(AgentInfo.model_fields)
    assert {word.strip() for word in health.group(1).split(",")} == set(ProviderHealth.model_fields)


def test_a_watcher_crash_is_an_error_in_status_but_no_poll() -> None:
    """`status` counted a watcher's crash (and its restart) as a poll of the endpoint, where
    `forewarn_polls_total` did not: a watcher crashing in a loop looked busy polling."""
    health = PollHealth("aws")
    health.success()
    health.error("http-500", "the endpoint answered 500")
    health.error(WATCHER_FAILED, "RuntimeError: boom; restarting in 1.0s")
    shown = provider_health("aws", health)
    assert (shown.polls, shown.errors, shown.last_error) == (2, 2, WATCHER_FAILED)


def test_a_control_timeout_of_weeks_waits_as_long_as_needed(tmp_path: Path) -> None:
    """`--timeout 25d` (or more) was "unexpected OverflowError" and exit 1 from `status`,
    `notify` and `ack`: zmq's poll takes its wait as a C int of milliseconds (24.8 days)."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env):
        for command in (("status",), ("notify", "drain"), ("ack", "--step", "3")):
            result = run_forewarn(*command, "--timeout", "25d", env=env)
            assert result.returncode == 0, (command, result.stderr)
            assert "OverflowError" not in result.stderr
        huge = run_forewarn("status", "--timeout", "99999999999d", env=env)
        assert huge.returncode == 0, huge.stderr


def test_status_shows_what_each_notifier_failed_to_deliver(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """A webhook receiver refusing every notice (a 401: not retried) lost each one with only a
    WARNING in the log; `forewarn status` showed nothing of notifications at all."""
    with receiver(script=[401]) as hook:
        env = agent_env(tmp_path, FOREWARN_WEBHOOK_URL=hook.url + "/s3cr3t")
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain"})

            def failed() -> dict[str, object] | None:
                reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
                webhook = reply["notifiers"]["webhook"]
                return reply if webhook["failed"] == 1 else None

            reply = eventually(failed, what="the webhook's failure in status")
            text = run_forewarn_forked("status", env=env)
    assert reply["notifiers"] == {
        "webhook": {"delivered": 0, "failed": 1, "dropped": 0, "pending": 0}
    }
    assert text.returncode == 0
    line = next(line for line in text.stdout.splitlines() if line.startswith("notifier "))
    assert line.split(None, 1)[1] == "webhook       delivered 0, failed 1, dropped 0, pending 0"
    assert "s3cr3t" not in text.stdout


def test_status_exits_1_naming_a_dead_part_as_healthz_does(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """The events socket file removed (a /tmp cleaner, a job cleaning the shared emptyDir):
    no new client could subscribe, /healthz answered 503, but `forewarn status`, the
    liveness probe of the Kubernetes overlays and the Docker HEALTHCHECK, said all was well
    and exited 0, so nothing restarted the agent."""
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        healthy = run_forewarn("status", "--json", env=env)
        assert healthy.returncode == 0, healthy.stderr
        assert json.loads(healthy.stdout)["parts"]["events"] is True
        (tmp_path / "run" / "events").unlink()
        text = run_forewarn("status", env=env)
        as_json = run_forewarn_forked("status", "--json", env=env)
        assert agent.proc is not None and agent.proc.poll() is None
    assert text.returncode == 1, text.stdout
    dead = [line for line in text.stdout.splitlines() if line.startswith("dead ")]
    assert len(dead) == 1 and dead[0].split()[1] == "events:", text.stdout
    assert "no new client can subscribe" in dead[0]
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["parts"]["events"] is False


def test_status_names_the_clients_a_notice_is_held_for_and_their_processes(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """A notice held for a shell job (`forewarn wait --client ID --pid $$`) is not flushed
    until that job acks, or its process is gone: `status` showed neither the hold nor the
    process, so an operator could not tell what the agent waited for."""
    import os

    from forewarn.agent.holders import pid_namespace

    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        notice = agent.control({"op": "notify", "action": "terminate"})["notice"]
        here = {"op": "hold", "notice_id": notice["id"], "client": "train-a", "pid": os.getpid()}
        assert agent.control({**here, "pid_namespace": pid_namespace()})["watched"] is True
        unwatched = {"op": "hold", "notice_id": notice["id"], "client": "train-b"}
        assert agent.control(unwatched)["held"] is True
        reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
        assert reply["held_for"] == {notice["id"]: {"train-a": os.getpid(), "train-b": None}}
        text = run_forewarn_forked("status", env=env).stdout
        active = next(line for line in text.splitlines() if line.startswith("active "))
        assert f"waiting for train-a (pid {os.getpid()}), train-b" in active, active
        assert agent.control({"op": "ack", "notice_id": notice["id"], "client": "train-a"})["ok"]
        reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
        assert reply["held_for"] == {notice["id"]: {"train-b": None}}, reply


def test_status_after_a_restart_says_when_each_notice_was_noticed(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """A restarted agent sends its restored notices again: each line's time, its `sent_at`,
    became the restart's, and an operator reading `status` after a SIGKILL read every drain
    as raised a moment ago, however long it had stood. The line says when it was noticed."""
    env = agent_env(tmp_path)
    first = AgentProcess(tmp_path, env=env).start()
    try:
        notice = first.control({"op": "notify", "action": "drain", "note": "n"})["notice"]
        state = Path(env["FOREWARN_STATE_DIR"]) / "state.json"
        eventually(lambda: notice["id"] in state.read_text(), what="the notice saved")
    finally:
        first.stop(signal.SIGKILL)
    with AgentProcess(tmp_path, env=env):
        reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
        text = run_forewarn_forked("status", env=env).stdout
    (restored,) = reply["active"]
    assert restored["noticed_at"] == notice["noticed_at"] != restored["sent_at"]
    active = next(line for line in text.splitlines() if line.startswith("active "))
    assert f"noticed {notice['noticed_at']}" in active, active


def test_status_shows_a_degraded_providers_error_message_not_only_its_kind() -> None:
    """`status` said `degraded (last error: connect)`: the kind alone, where the agent's log
    said what failed and what to do (`GET http://...: connection refused ...`). The message
    is kept beside the kind, on one line, bounded, and shown after it."""
    from forewarn.agent.cli import _status_lines

    health = PollHealth("aws")
    health.error("connect", "GET http://127.0.0.1:9/latest: connection refused\n(is IMDS on?)")
    shown = provider_health("aws", health)
    assert shown.last_error == "connect"
    assert shown.last_error_message == (
        "GET http://127.0.0.1:9/latest: connection refused\\u000a(is IMDS on?)"
    )
    health.error("http-500", "x" * 400)
    assert len(provider_health("aws", health).last_error_message or "") <= 300
    reply = {
        "agent": {
            "agent": "a",
            "version": "0",
            "pid": 1,
            "providers": ["aws"],
            "events": "e",
            "control": "c",
            "started_at": "t",
            "seq": 1,
            "subscribers": 0,
        },
        "active": [],
        "health": [shown.model_dump(mode="json")],
    }
    (line,) = [line for line in _status_lines(reply) if line.startswith("provider   ")]
    assert "degraded (last error: connect: GET http://127.0.0.1:9/latest: connection" in line
    older = {**reply, "health": [{**reply["health"][0], "last_error_message": None}]}
    (line,) = [line for line in _status_lines(older) if line.startswith("provider   ")]
    assert "degraded (last error: connect)" in line  # an older agent sends the kind alone


def test_aws_status_keeps_the_first_explanation_not_the_reminder() -> None:
    """The AWS watcher logs an error kind's cause and fix once and a reminder after ("again;
    see the first message"): `status` has no first message to see, so it keeps the explained
    one."""
    health = PollHealth("aws")
    health.error("connect", "refused: start IMDS", shown="refused: start IMDS")
    health.error("connect", "refused (again; see the first message)", shown="refused: start IMDS")
    assert provider_health("aws", health).last_error_message == "refused: start IMDS"


def test_status_names_a_client_gone_before_its_ack_of_a_drain(tmp_path: Path) -> None:
    """A drain without a deadline is never past it: a job that received it and left before
    its ack (killed mid-save) was said only in the log's "flushed by every client left (1
    acked; trainer-1 left without its ack)", and `status` showed the drain as if every job
    had saved. It names it, `--json` in `gone_before_ack`, until it comes back."""
    from support import Subscriber

    env = agent_env(tmp_path)
    with (
        AgentProcess(tmp_path, env=env) as agent,
        Subscriber(agent.events, ("notice", "client/saver")).ready() as saver,
    ):
        trainer = Subscriber(agent.events, ("notice", "client/trainer-1")).ready()
        notice_id = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        assert saver.notice()["id"] == notice_id and trainer.notice()["id"] == notice_id
        ack = {"op": "ack", "notice_id": notice_id, "client": "saver", "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        trainer.close()
        reply = eventually(
            lambda: (r := agent.control({"op": "status"}))["agent"]["subscribers"] == 1 and r,
            10,
            "the agent to see trainer-1 leave",
        )
        assert reply["gone_before_ack"] == {notice_id: ["trainer-1"]}, reply
        shown = run_forewarn("status", env=env).stdout
        (line,) = [row for row in shown.splitlines() if notice_id in row]
        assert line.endswith("acked by saver  gone before its ack: trainer-1"), line
        with Subscriber(agent.events, ("notice", "client/trainer-1")).ready():
            back = agent.control({"op": "status"})
            assert back["gone_before_ack"] == {}, back  # back: it may ack yet


def test_status_says_an_agent_that_holds_its_directory_is_starting_or_stopping(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """An agent holds its runtime directory's lock from before it binds its sockets (its
    state loaded, its space reserved: on a slow disk, seconds) until after they are closed
    (its state saved). In between `status` said "no agent runs on ... (no socket file ...;
    is `forewarn agent` running?)" of an agent running. Found walking `forewarn status`
    as an operator meets it while the agent starts."""
    from forewarn.agent.rundir import AgentLock

    env = agent_env(tmp_path)
    runtime = Path(env["FOREWARN_RUNTIME_DIR"])
    # As the agent takes it in `AgentDirs.hold`, before anything is bound.
    lock = AgentLock(runtime / "agent.lock").acquire()
    try:
        held = run_forewarn_forked("status", env=env)
    finally:
        lock.release()
    # The file is left behind (a SIGKILLed agent leaves it), held by nobody: no agent runs.
    left = run_forewarn_forked("status", env=env)
    assert held.returncode == 1, held
    assert held.stderr == (
        f"forewarn: the agent on ipc://{runtime}/control is starting or stopping: pid "
        f"{os.getpid()} holds {runtime}/agent.lock, and no socket is there to answer (no "
        f"socket file {runtime}/control); try again in a moment (if it stays so, the agent "
        "serves another --control)\n"
    ), held.stderr
    assert left.returncode == 1, left
    assert left.stderr.startswith(f"forewarn: no agent runs on ipc://{runtime}/control ("), left


def test_status_help_says_what_each_exit_code_means() -> None:
    """`forewarn status --help` said nothing of its exit codes, and `forewarn --help` gave
    status's 1 as "no agent, or no answer" only: a monitoring script that reads exit 1 as
    "no agent" missed the third, a part of a running agent dead (README: as `/healthz`
    answers 503)."""
    from support import run_forewarn_here

    own = run_forewarn_here("status", "--help")
    text = " ".join(own.stdout.split())
    assert own.returncode == 0, own
    for said in (
        "Exit codes: 0 the agent answered and every part of it runs",
        "1 no agent runs, it is stopped, it did not answer within --timeout (with --json: a "
        "JSON object on stdout saying why, `answered` false), or a part of it is dead",
        "2 bad input, or the agent refused the request",
    ):
        assert said in text, text
    top = " ".join(run_forewarn_here("--help").stdout.split())
    assert "notify, status and ack: also no agent, or no answer; status: a part dead" in top, top


def test_status_ready_exits_4_while_a_provider_never_polled_as_readyz_answers_503(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    """An agent whose AWS watcher never reached IMDS (degraded, no successful poll: /readyz
    answers 503) made `forewarn status` exit 0, so a script or a readiness probe could not
    tell it from a ready one. `--ready` exits 4 then, naming the provider; the plain status
    stays 0, as it is the startup and liveness probe (a restart does not reach IMDS)."""
    env = agent_env(tmp_path, FOREWARN_AWS_URL=f"http://{DEAD_LOOPBACK}")
    with AgentProcess(tmp_path, providers=("local", "aws"), env=env):

        def degraded() -> bool:
            reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
            states = {item["name"]: item["state"] for item in reply["health"]}
            return states == {"local": "healthy", "aws": "degraded"}

        eventually(degraded, what="aws degraded and local healthy")
        plain = run_forewarn_forked("status", env=env)
        ready = run_forewarn("status", "--ready", env=env)
        as_json = run_forewarn_forked("status", "--ready", "--json", env=env)
    assert plain.returncode == 0, plain
    assert ready.returncode == 4, ready
    assert "not ready: aws has not polled successfully yet" in ready.stderr, ready.stderr
    assert as_json.returncode == 4 and json.loads(as_json.stdout)["health"]


def test_status_ready_exits_0_once_every_provider_polled(
    tmp_path: Path, run_forewarn_forked: Forked
) -> None:
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env):

        def healthy() -> bool:
            reply = json.loads(run_forewarn_forked("status", "--json", env=env).stdout)
            return all(item["last_success"] for item in reply["health"])

        eventually(healthy, what="every provider polled")
        ready = run_forewarn_forked("status", "--ready", env=env)
    assert ready.returncode == 0, ready
    assert ready.stderr == "", ready.stderr
