"""`forewarn notify --deadline 15m` is 15 minutes from the command, not the wall-clock time
it came to: the command sends the duration (`deadline_in`), which the agent keeps on the
boot clock (tests/agent/test_board.py has what a step of the wall clock then does)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent.cli import main
from forewarn.agent.protocol import NotifyRequest
from forewarn.protocol.timefmt import parse_time, utcnow
from pydantic import ValidationError
from support import (
    AgentProcess,
    agent_env,
    eventually,
    run_forewarn,
    running_agent,
    shifted_wall_clock,
)


class OlderAgent:
    """A control socket answering as an agent that predates `deadline_in`: a notify with it
    is refused as the agent refuses any field it does not know; any other is raised."""

    def __init__(self, endpoint: str) -> None:
        self.sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.requests: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.sock.poll(20):
                continue
            request = json.loads(self.sock.recv())
            self.requests.append(request)
            if "deadline_in" in request:
                reply: dict[str, Any] = {
                    "ok": False,
                    "error": "deadline_in: not a field of a notify request",
                }
            else:
                notice = {
                    "id": request["id"],
                    "action": "drain",
                    "reason": "manual",
                    "provider": "local",
                    "deadline": request.get("deadline"),
                }
                reply = {"ok": True, "notice": notice}
            self.sock.send(json.dumps(reply).encode())

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture
def older(tmp_path: Path) -> Iterator[tuple[OlderAgent, list[str]]]:
    agent = OlderAgent(f"ipc://{tmp_path}/control")
    try:
        yield agent, ["--runtime-dir", str(tmp_path)]
    finally:
        agent.close()


def run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as leave:
        return int(leave.code or 0)


def test_an_agent_older_than_deadline_in_still_gets_the_notice(
    older: tuple[OlderAgent, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The package upgraded, the agent not restarted yet: the notify is sent again with the
    deadline as a time alone, under the same id (no second notice)."""
    agent, flags = older
    assert run(["notify", "drain", "--deadline", "15m", *flags]) == 0, capsys.readouterr().err
    first, second = agent.requests
    assert first["deadline_in"] == 900.0 and "deadline_in" not in second
    assert first["id"] == second["id"] and first["deadline"] == second["deadline"]
    left = parse_time(second["deadline"]) - utcnow()
    assert timedelta(minutes=14) < left <= timedelta(minutes=15)


def test_a_deadline_given_as_a_time_is_sent_as_that_time_alone(
    older: tuple[OlderAgent, list[str]],
) -> None:
    agent, flags = older
    at = "2099-01-01T00:00:00Z"
    # More than 366 days ahead: refused by the command itself.
    assert run(["notify", "drain", "--deadline", at, *flags]) == 2
    moment = (utcnow() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert run(["notify", "drain", "--deadline", moment, *flags]) == 0
    [sent] = agent.requests
    assert "deadline_in" not in sent and parse_time(sent["deadline"]) == parse_time(moment)


def test_the_agent_takes_a_deadline_given_as_a_duration(tmp_path: Path) -> None:
    with running_agent(tmp_path) as agent:
        request = {"op": "notify", "action": "drain", "deadline_in": 900, "id": "local/d"}
        # `deadline` beside it, for older agents, is not what counts.
        request["deadline"] = "2099-01-01T00:00:00Z"
        reply = agent.control(request)
        assert reply["ok"], reply
        left = parse_time(reply["notice"]["deadline"]) - utcnow()
        assert timedelta(minutes=14) < left <= timedelta(minutes=15)


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), 366 * 86400 + 1, "15m"])
def test_a_deadline_in_out_of_range_is_refused_naming_it(seconds: object) -> None:
    with pytest.raises(ValidationError, match="deadline_in"):
        NotifyRequest.model_validate({"op": "notify", "action": "drain", "deadline_in": seconds})


def test_a_terminate_moved_by_a_step_of_the_agents_clock_is_sent_again(tmp_path: Path) -> None:
    """`forewarn notify terminate --deadline 15m`, then the agent's wall clock stepped back 10
    minutes (NTP setting right a clock that ran ahead): the agent moved the deadline with
    the step but sent nothing, and subscribers kept a deadline 10 minutes off the agent's
    clock. The terminate is sent again, same id, its deadline moved with the step."""
    shifted, offset = shifted_wall_clock(tmp_path)
    env = agent_env(tmp_path, **shifted)
    with AgentProcess(tmp_path, env=env) as agent, agent.subscriber() as sub:
        done = run_forewarn("notify", "terminate", "--deadline", "15m", env=agent_env(tmp_path))
        assert done.returncode == 0, done.stderr
        terminate = sub.notice(10)
        offset.write_text("-600")
        moved = sub.notice(10)
        assert (moved["id"], moved["action"]) == (terminate["id"], "terminate")
        shift = parse_time(terminate["deadline"]) - parse_time(moved["deadline"])
        assert abs(shift - timedelta(minutes=10)) < timedelta(seconds=1), (terminate, moved)
        [active] = agent.control({"op": "status"})["active"]
        assert active["deadline"] == moved["deadline"]


def test_an_escalated_terminate_moved_by_a_step_is_still_said_escalated(tmp_path: Path) -> None:
    """`forewarn notify drain --deadline 20s` with a 30 s exit margin goes out as terminate,
    its text-log line ending `(escalated from drain: ...)`; the agent's wall clock stepped back
    10 minutes sent it again (`take_moved`) with `escalated=False`, a line read as a plain
    terminate. Sent back as a drain (`notify drain --id` with a later deadline), its line
    did not say the terminate before it was withdrawn either."""
    shifted, offset = shifted_wall_clock(tmp_path)
    env = agent_env(tmp_path, FOREWARN_EXIT_MARGIN="30s", **shifted)
    with AgentProcess(tmp_path, env=env) as agent, agent.subscriber() as sub:
        done = run_forewarn("notify", "drain", "--deadline", "20s", env=agent_env(tmp_path))
        assert done.returncode == 0, done.stderr
        terminate = sub.notice(10)
        assert terminate["action"] == "terminate", terminate
        offset.write_text("-600")
        moved = sub.notice(10)
        assert (moved["id"], moved["action"]) == (terminate["id"], "terminate")

        def lines(action: str) -> list[str]:
            wanted = f" notice {action} {terminate['id']} "
            return [x for x in agent.output().splitlines() if wanted in x]

        eventually(lambda: len(lines("terminate")) >= 2, what="the moved terminate's line")
        again = run_forewarn(
            "notify", "drain", "--id", terminate["id"], "--deadline", "1h", env=agent_env(tmp_path)
        )
        assert again.returncode == 0, again.stderr
        assert sub.notice(10)["action"] == "drain"
        (drain,) = eventually(lambda: lines("drain"), what="the drain's line")
    first, second = lines("terminate")
    for line in (first, second):
        assert line.endswith("(escalated from drain: its deadline is within the exit margin, 30s)")
    assert drain.endswith(
        "(back to drain from terminate: its deadline is outside the exit margin, 30s)"
    ), drain
