"""An ack says which action its save was for (`action`): a drain's ack still in flight when the
drain becomes a terminate (same id) counted for the terminate. Right for a guard whose drain
save the terminate interrupted (that save is the exit's), wrong for the README's shell loop,
whose drain ack released the notice (the flag file removed, Azure's early approval) and
listed the terminate as acted on while the loop saved again for it. Sent only to an agent
that lists `ack.action` in `takes`; older clients and older agents work as before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent.protocol import AckRequest, Heartbeat
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.event import Event
from forewarn.clients.notices import parse_heartbeat
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from support import AgentProcess, agent_env, eventually, examples, run_forewarn, wire_heartbeat
from test_shell_job_loops import _job_dir, readme_loop

pytestmark = pytest.mark.usefixtures("forked_agents")

ID = "local/nightly"
NOT_COUNTED = "was for the drain; it is a terminate now: not counted for it"


def _action(agent: AgentProcess) -> str:
    (notice,) = agent.control({"op": "status"})["active"]
    action: str = notice["action"]
    return action


def _escalate(agent: AgentProcess) -> None:
    """The operator makes the drain a terminate (same id), as a provider's escalation does."""
    assert agent.control({"op": "notify", "action": "terminate", "id": ID})["ok"]
    assert _action(agent) == "terminate"


def _acked_by(agent: AgentProcess) -> dict[str, list[str]]:
    acked: dict[str, list[str]] = agent.control({"op": "status"})["acked_by"]
    return acked


# The job's save: it notes that it began (`saving-N`) and ends when the test says so (`go-N`),
# so that the test escalates the drain while the loop saves for it. The poll is the scenario
# (a save that takes until the test ends it), not a wait for a result.
SAVE = """#!/bin/sh
n=$(( $(cat count 2>/dev/null || echo 0) + 1 )); echo "$n" > count
touch "saving-$n"
while [ ! -e "go-$n" ]; do sleep 0.05; done
"""


def test_the_readme_loops_drain_ack_after_the_escalation_is_not_the_terminates(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path) as agent:
        job, env = _job_dir(tmp_path, agent.env)
        (job / "save-checkpoint.sh").write_text(SAVE)
        assert agent.control({"op": "notify", "action": "drain", "id": ID})["ok"]
        stderr = tmp_path / "loop.err"
        with stderr.open("w") as err:
            loop = subprocess.Popen(
                ["bash", "-e", "-c", readme_loop()],
                cwd=job,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            eventually(lambda: (job / "saving-1").exists(), 20, "the loop's save for the drain")
            _escalate(agent)
            (job / "go-1").touch()
            eventually(lambda: f"ack {ID} from save-loop" in agent.output(), 20, "its drain ack")
            assert _acked_by(agent) == {}, agent.output()
            assert NOT_COUNTED in agent.output()
            eventually(lambda: (job / "saving-2").exists(), 20, "the save for the terminate")
            assert _acked_by(agent) == {}
            assert "flushed by every client" not in agent.output()
            (job / "go-2").touch()
            assert loop.wait(20) == 0, stderr.read_text()
        finally:
            if loop.poll() is None:
                os.killpg(loop.pid, signal.SIGKILL)
                loop.wait()
        assert _acked_by(agent) == {ID: ["save-loop"]}, agent.output()
        assert f"notice {ID} flushed by every client" in agent.output()


@contextmanager
def _guard(agent: AgentProcess) -> Iterator[tuple[CheckpointGuard, Notices]]:
    notices = Notices(agent.events, agent.control_endpoint, client_id="trainer")
    guard = CheckpointGuard(notices=notices, flag_file=None, handle_signals=False)
    try:
        eventually(lambda: notices.alive, 10, "the first heartbeat")
        yield guard, notices
    finally:
        guard.close()
        notices.close()


def test_a_guards_drain_save_acked_after_the_escalation_is_not_the_terminates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard recorded its save as the drain's before the terminate reached it (held here
    until then): its ack says so, and the terminate waits for the exit's save."""
    gate = threading.Event()
    received = CheckpointGuard._on_event

    def terminate_held(self: CheckpointGuard, event: Event) -> None:
        if event.action == "terminate":
            gate.wait(30)  # the scenario: the terminate reaches the job after its save
        received(self, event)

    monkeypatch.setattr(CheckpointGuard, "_on_event", terminate_held)
    with AgentProcess(tmp_path) as agent, _guard(agent) as (guard, _):
        assert agent.control({"op": "notify", "action": "drain", "id": ID})["ok"]
        eventually(lambda: guard.due(10), 10, "the guard to see the drain")
        _escalate(agent)
        assert not guard.save(10, lambda step: None).exit
        eventually(lambda: f"ack {ID} from trainer" in agent.output(), 10, "the drain's ack")
        assert _acked_by(agent) == {}, agent.output()
        assert NOT_COUNTED in agent.output()
        gate.set()
        eventually(lambda: guard.due(11), 10, "the guard to see the terminate")
        assert guard.save(11, lambda step: None).exit
        eventually(lambda: _acked_by(agent) == {ID: ["trainer"]}, 10, "the terminate's ack")


def test_a_guards_drain_save_the_terminate_interrupted_is_the_exits_save(tmp_path: Path) -> None:
    """Unchanged: the terminate reached the guard during its drain save, which is the exit's
    save, and its ack counts for the terminate."""
    with AgentProcess(tmp_path) as agent, _guard(agent) as (guard, notices):
        assert agent.control({"op": "notify", "action": "drain", "id": ID})["ok"]
        eventually(lambda: guard.due(10), 10, "the guard to see the drain")

        def write(step: int) -> None:
            _escalate(agent)
            eventually(
                lambda: (
                    notices.active.get(ID) is not None and notices.active[ID].action == "terminate"
                ),
                10,
                "the terminate to reach the job mid-save",
            )

        assert guard.save(10, write).exit
        eventually(lambda: _acked_by(agent) == {ID: ["trainer"]}, 10, "the ack")
        assert NOT_COUNTED not in agent.output()


def test_an_older_clients_ack_without_action_counts_for_the_terminate_as_before(
    tmp_path: Path,
) -> None:
    with AgentProcess(tmp_path) as agent:
        assert agent.control({"op": "notify", "action": "drain", "id": ID})["ok"]
        _escalate(agent)
        ack = {"op": "ack", "notice_id": ID, "client": "older", "step": 3, "flush_seconds": 0.1}
        assert agent.control(ack)["ok"]
        assert _acked_by(agent) == {ID: ["older"]}


def test_a_terminates_save_answers_the_drain_it_became_again(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        assert agent.control({"op": "notify", "action": "terminate", "id": ID})["ok"]
        assert agent.control({"op": "notify", "action": "drain", "id": ID})["ok"]
        ack = {"op": "ack", "notice_id": ID, "client": "job", "action": "terminate"}
        assert agent.control(ack)["ok"]
        assert _acked_by(agent) == {ID: ["job"]}


def test_the_agent_lists_ack_action_in_its_heartbeat_and_status(tmp_path: Path) -> None:
    with AgentProcess(tmp_path) as agent, agent.subscriber(("heartbeat",), ready=False) as sub:
        topic, beat = sub.recv(10)
        assert topic == "heartbeat" and "ack.action" in beat["takes"], beat
        assert "ack.action" in agent.control({"op": "status"})["agent"]["takes"]


class OlderAgent:
    """An agent of the wire before `takes` over real ZeroMQ: heartbeats without it, a status
    whose `agent` lacks it, and every control request kept (answered ok)."""

    def __init__(self, tmp_path: Path, takes: Any) -> None:
        (tmp_path / "older").mkdir()
        self.events = f"ipc://{tmp_path}/older/events"
        self.control = f"ipc://{tmp_path}/older/control"
        self.takes = takes
        self.requests: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> OlderAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _serve(self) -> None:
        context = zmq.Context.instance()
        pub, rep = context.socket(zmq.PUB), context.socket(zmq.REP)
        pub.setsockopt(zmq.LINGER, 0)
        rep.setsockopt(zmq.LINGER, 0)
        pub.bind(self.events)
        rep.bind(self.control)
        seq = 1
        try:
            while not self._stop.is_set():
                beat = wire_heartbeat(seq=seq, active=[ID])
                beat.pop("takes", None)
                if self.takes is not None:
                    beat["takes"] = self.takes
                pub.send_multipart([b"heartbeat", json.dumps(beat).encode()])
                seq += 1
                if rep.poll(100):  # a heartbeat each 0.1 s while no request comes
                    request = json.loads(rep.recv())
                    self.requests.append(request)
                    rep.send(json.dumps(self._answer(request)).encode())
        finally:
            pub.close()
            rep.close()

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") != "status":
            return {"ok": True}
        agent: dict[str, Any] = {"agent": "older", "version": "0.0.9", "pid": 1}
        if self.takes is not None:
            agent["takes"] = self.takes
        notice = {"id": ID, "action": "terminate", "seq": 1, "provider": "local"}
        return {"ok": True, "agent": agent, "active": [notice]}

    def acks(self) -> list[dict[str, Any]]:
        return [request for request in self.requests if request.get("op") == "ack"]


@pytest.mark.parametrize(("takes", "sent"), [(None, False), ([], False), (["ack.action"], True)])
def test_the_client_sends_action_only_to_an_agent_that_takes_it(
    tmp_path: Path, takes: list[str] | None, sent: bool
) -> None:
    with OlderAgent(tmp_path, takes) as older:
        notices = Notices(older.events, older.control, client_id="trainer")
        try:
            eventually(lambda: notices.alive, 10, "the first heartbeat")
            assert notices.ack(ID, step=4, action="drain", wait=True)
        finally:
            notices.close()
        (ack,) = older.acks()
        assert ("action" in ack) is sent, ack
        assert ack.get("action", "drain") == "drain" and ack["step"] == 4


@pytest.mark.parametrize(
    ("takes", "sent"), [(None, False), ("ack.action", False), (["ack.action"], True)]
)
def test_forewarn_ack_sends_action_only_to_an_agent_that_takes_it(
    tmp_path: Path, takes: Any, sent: bool
) -> None:
    with OlderAgent(tmp_path, takes) as older:
        env = agent_env(tmp_path, FOREWARN_CONTROL=older.control, FOREWARN_EVENTS=older.events)
        done = run_forewarn("ack", ID, "--client", "loop", "--action", "drain", env=env)
        assert done.returncode == 0, done.stderr
        (ack,) = older.acks()
        assert ("action" in ack) is sent, ack
        assert ("--action: the agent is older than it" in done.stderr) is not sent, done.stderr


def test_forewarn_ack_refuses_an_action_that_is_none(tmp_path: Path) -> None:
    done = run_forewarn("ack", ID, "--action", "exit", env=agent_env(tmp_path))
    assert done.returncode == 2 and "--action" in done.stderr, done.stderr


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12)))
def test_an_acks_action_is_drain_terminate_or_left_out(value: object) -> None:
    payload = {"op": "ack", "notice_id": ID, "action": value}
    if value is None or value in ("drain", "terminate"):
        assert AckRequest.model_validate(payload).action == value
    else:
        with pytest.raises(ValidationError, match="action"):
            AckRequest.model_validate(payload)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=8),
        st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3),
    )
)
def test_a_heartbeats_takes_is_a_list_of_strings_or_dropped_naming_it(value: object) -> None:
    beat = {**wire_heartbeat(), "takes": value}
    payload = json.dumps(beat).encode()
    good = isinstance(value, list) and all(isinstance(item, str) for item in value)
    if good:
        assert parse_heartbeat(payload)["takes"] == value
        assert Heartbeat.model_validate(beat).takes == value
    else:
        with pytest.raises(ValueError, match="'takes'"):
            parse_heartbeat(payload)
