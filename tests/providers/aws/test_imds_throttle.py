"""IMDS throttling and token trouble, through the real agent subprocess: IMDS limits each
instance's queries (429 above an unstated rate) and may refuse or not answer a token PUT;
the 2-minute interruption notice must still reach the job in time, once."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.aws.imds import TOKEN_PATH
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


def aws_agent(tmp_path: Path, server: SimServer, **extra: str) -> AgentProcess:
    env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, **extra)
    return AgentProcess(tmp_path, providers=("aws",), env=env)


def test_a_spot_notice_is_seen_in_time_while_imds_throttles(tmp_path: Path) -> None:
    """IMDS answers 429 above one query a second (the watcher asks about four a second):
    the interruption notice still arrives within seconds, with its time as the deadline, and
    once; the end of the throttling sends nothing again."""
    sim = ImdsSimulator()
    with SimServer(sim) as server, aws_agent(tmp_path, server) as agent:
        with agent.subscriber() as sub:
            throttle = sim.add_fault("throttle", rate=1)
            eventually(lambda: sim.faults()[0]["answered"] >= 3, what="a few 429s")
            raised = utcnow()
            sim.raise_notice("spot", {"lead": 120})
            notice = sub.notice(timeout=5)
            assert (notice["action"], notice["reason"]) == ("terminate", "spot-interruption")
            lead = parse_time(notice["deadline"]) - raised
            assert timedelta(seconds=115) < lead <= timedelta(seconds=121), lead
            sim.remove_fault(throttle)
            polls = sim.requests["GET /latest/meta-data/spot/instance-action"]
            eventually(
                lambda: sim.requests["GET /latest/meta-data/spot/instance-action"] > polls + 4,
                what="polls after the throttling",
            )
            assert sub.drain(0.3) == []
        assert "rate" in agent.output() or "throttl" in agent.output()


def test_a_refused_token_renewal_does_not_blind_the_watcher(tmp_path: Path) -> None:
    """The token is renewed before it expires (a fifth of its life early, at most a minute).
    A renewal refused (IMDS throttling the PUT) failed every poll from then on, though the
    token in hand was good for that margin still: a notice raised then was not seen."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        # A 10 s token is renewed after 8 s; it is good for 2 s more.
        agent = aws_agent(tmp_path, server, FOREWARN_AWS_TOKEN_TTL="10")
        with agent, agent.subscriber() as sub:
            eventually(lambda: sim.tokens_issued == 1, what="the first token")
            sim.add_fault("status", path=TOKEN_PATH, method="PUT", status=429)
            eventually(lambda: sim.faults()[0]["answered"] >= 1, timeout=15, what="the renewal")
            sim.raise_notice("spot", {"lead": 120})
            notice = sub.notice(timeout=1.5)
            assert notice["action"] == "terminate"


def test_a_hanging_token_renewal_does_not_hold_the_polls(tmp_path: Path) -> None:
    """A renewal PUT that is never answered (the hop-limit signature, or an IMDS under load)
    held every round of polls for the whole request timeout while the token in hand was
    still good."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        agent = aws_agent(tmp_path, server, FOREWARN_AWS_TOKEN_TTL="10")
        with agent, agent.subscriber() as sub:
            eventually(lambda: sim.tokens_issued == 1, what="the first token")
            sim.add_fault("hop-limit")
            eventually(lambda: sim.requests["PUT " + TOKEN_PATH] >= 2, timeout=15, what="renewal")
            started = time.monotonic()
            sim.raise_notice("spot", {"lead": 120})
            notice = sub.notice(timeout=1.5)
            assert notice["action"] == "terminate"
            assert time.monotonic() - started < 1.0


def test_a_429_from_imds_is_backed_off(tmp_path: Path) -> None:
    """IMDS answering 429 (AWS: "retry with exponential backoff") was asked again at each
    path's own cadence, about four requests a second, for as long as it throttled: 17 429s
    in 4 s. The watcher now waits 1 s, 2 s, 4 s (at most 5 s, AWS's own spot cadence) after
    each 429, every path alike, and a notice raised as the throttling ends still arrives."""
    sim = ImdsSimulator()
    with SimServer(sim) as server, aws_agent(tmp_path, server) as agent:
        with agent.subscriber() as sub:
            spot = "GET /latest/meta-data/spot/instance-action"
            eventually(lambda: sim.requests[spot] >= 2, what="the first polls")
            throttle = sim.add_fault("status", path="/latest/meta-data/", status=429)
            eventually(lambda: sim.faults()[0]["answered"] >= 1, what="the first 429")
            first = time.monotonic()
            # The scenario: IMDS throttles for 4 s.
            time.sleep(4.0)
            answered = sim.faults()[0]["answered"]
            sim.remove_fault(throttle)
            sim.raise_notice("spot", {"lead": 120})
            notice = sub.notice(timeout=8)
            assert notice["action"] == "terminate"
            assert answered <= 6, f"{answered} 429s in {time.monotonic() - first:.1f} s"
        assert "429" in agent.output()


def test_a_429_to_the_first_token_put_is_backed_off_too(tmp_path: Path) -> None:
    """IMDS answering the token PUT 429 (no token in hand yet): the watcher asked for a
    token again at every round of polls, two a second, for as long as IMDS throttled."""
    sim = ImdsSimulator()
    throttle = sim.add_fault("status", path=TOKEN_PATH, method="PUT", status=429)
    with SimServer(sim) as server, aws_agent(tmp_path, server) as agent:
        with agent.subscriber() as sub:
            eventually(lambda: sim.faults()[0]["answered"] >= 1, what="the first 429")
            # The scenario: IMDS throttles the token PUT for 4 s.
            time.sleep(4.0)
            answered = sim.faults()[0]["answered"]
            sim.remove_fault(throttle)
            sim.raise_notice("spot", {"lead": 120})
            assert sub.notice(timeout=8)["action"] == "terminate"
            assert answered <= 6, f"{answered} token PUTs answered 429"
        assert "429" in agent.output()
