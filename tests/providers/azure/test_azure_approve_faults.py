"""The approval POST (StartRequests) against an IMDS that refuses it for a while, through the
real agent subprocess: the approval is what lets a job that saved early be released early, so
a few refusals in a row must not lose it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.protocol.timefmt import parse_time
from forewarn.providers.azure.simulate import AzureSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


EVENTS = "/metadata/scheduledevents"


@pytest.fixture
def imds() -> Iterator[tuple[AzureSimulator, SimServer]]:
    sim = AzureSimulator(vm_name="gpu-0", removal_after=30, rate_limit=10)
    with SimServer(sim) as server:
        yield sim, server


def azure_agent(tmp_path: Path, server: SimServer) -> AgentProcess:
    env = agent_env(
        tmp_path,
        FOREWARN_AZURE_URL=server.url,
        FOREWARN_AZURE_VM_NAME="gpu-0",
        FOREWARN_AZURE_INTERVAL="0.25",
    )
    return AgentProcess(tmp_path, providers=("azure",), env=env)


def posts(sim: AzureSimulator) -> int:
    return sim.requests[f"POST {EVENTS}"]


def flushed_terminate(
    sim: AzureSimulator, agent: AgentProcess, sub: Subscriber
) -> tuple[str, dict[str, object], float]:
    """A Terminate ten minutes out, received and acked by the one client; (EventId, notice,
    the moment of the ack)."""
    # Answered, not only counted: an agent that read the subscription late replayed the
    # terminate raised meanwhile after it came, and the test took the repeat for the start.
    sub.ready()
    event_id = sim.raise_notice("Terminate", {"not_before_seconds": 600})
    notice = sub.notice(timeout=10)
    assert (notice["id"], notice["action"]) == (f"azure/{event_id}", "terminate")
    acked = time.monotonic()
    reply = agent.control(
        {"op": "ack", "notice_id": notice["id"], "client": "trainer-0", "flush_seconds": 0.1}
    )
    assert reply["ok"], reply
    return event_id, notice, acked


def test_an_approval_refused_more_than_three_times_is_still_sent(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """IMDS answered the POST 503 a few times in a row (as under its 5 requests/s limit, or
    a hiccup of the host agent): after three tries about a poll apart the watcher gave up,
    and the job that had saved waited out NotBefore, ten minutes, for nothing."""
    sim, server = imds
    sim.add_fault("status", path=EVENTS, method="POST", status=503, count=4)
    agent = azure_agent(tmp_path, server)
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        event_id, notice, _ = flushed_terminate(sim, agent, sub)
        (approval,) = eventually(lambda: sim.approvals, timeout=20, what="the approval")
        assert approval["EventId"] == event_id
        assert posts(sim) == 5  # four refused, one approved
        # Started by the approval: the same notice, its deadline now, and no clear between.
        started = sub.notice(timeout=10)
        assert (started["id"], started["action"]) == (notice["id"], "terminate")
        assert parse_time(started["deadline"]) < parse_time(str(notice["deadline"]))
        assert sub.drain(0.5) == []
        assert len(sim.approvals) == 1
        assert "approved event" in agent.output()


def test_a_retry_after_on_the_approval_is_waited_out(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """A 429 with Retry-After: 1, twice: the POST was tried again at the next poll, a quarter
    of a second later, and so into the limit again."""
    sim, server = imds
    sim.add_fault("status", path=EVENTS, method="POST", status=429, retry_after=1, count=2)
    agent = azure_agent(tmp_path, server)
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        event_id, _, acked = flushed_terminate(sim, agent, sub)
        (approval,) = eventually(lambda: sim.approvals, timeout=20, what="the approval")
        assert approval["EventId"] == event_id
        assert posts(sim) == 3
        assert approval["monotonic"] - acked >= 2.0, "a Retry-After was not waited out"


def test_an_approval_tried_again_waits_for_a_client_that_joined_since(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """Refused approvals are tried again until NotBefore: a job that started in the meantime
    received the terminate by replay and was not waiting for its own save, yet the approval
    went out without its ack and Azure took the VM under it. A retry now waits while a client
    subscribed since has not acked; its ack lets the approval go."""
    sim, server = imds
    sim.add_fault("status", path=EVENTS, method="POST", status=503, count=2)
    agent = azure_agent(tmp_path, server)
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        event_id, notice, _ = flushed_terminate(sim, agent, sub)
        with Subscriber(agent.events, ("notice", "client/trainer-1")) as late:
            assert late.notice(timeout=10)["id"] == notice["id"]  # by replay
            eventually(
                lambda: agent.control({"op": "status"})["agent"]["subscribers"] == 2,
                what="the second client",
            )
            refused = posts(sim)
            assert sim.approvals == [] and refused < 3, refused
            # Past the retries' backoff (0.25 + 0.5 s): the third POST would be approved.
            polls = sim.requests[f"GET {EVENTS}"]
            eventually(lambda: sim.requests[f"GET {EVENTS}"] >= polls + 6, timeout=10, what="polls")
            assert sim.approvals == [], "approved before the second client saved"
            reply = agent.control(
                {
                    "op": "ack",
                    "notice_id": notice["id"],
                    "client": "trainer-1",
                    "flush_seconds": 0.1,
                }
            )
            assert reply["ok"], reply
            acked = time.monotonic()
            (approval,) = eventually(lambda: sim.approvals, timeout=20, what="the approval")
        assert approval["EventId"] == event_id and approval["monotonic"] >= acked


def test_approvals_that_keep_failing_are_said_past_the_third_try(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """IMDS refused the approval POST (503) five times in a row: the first three failures
    were WARNINGs, every later one DEBUG, so at the default log level an operator saw three
    failures and then nothing while the tries went on for up to 15 minutes, the event
    starting at NotBefore without them. Past the third, a failure is a WARNING at the
    fourth, eighth, sixteenth... try and at least once a minute; the approval that finally
    goes through says how many tries failed before it."""
    sim, server = imds
    sim.add_fault("status", path=EVENTS, method="POST", status=503, count=5)
    agent = azure_agent(tmp_path, server)
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        event_id, _, _ = flushed_terminate(sim, agent, sub)
        approved = f"approved event {event_id} (after-ack) after 5 failed tries, this one in"
        # Its 200 read, not only received: the line follows the answer.
        eventually(lambda: approved in agent.output(), timeout=30, what="the approval")
        assert posts(sim) == 6
        output = agent.output()
        failed = [line for line in output.splitlines() if "approving event" in line]
        assert [line.split(" (attempt ")[1].split(",")[0] for line in failed] == [
            "1",
            "2",
            "3",
            "4",
        ], output
        assert all(" WARNING " in line for line in failed), output
        assert "later failures are said at the 4th, 8th, 16th" in failed[2], output


def test_an_approval_of_an_event_gone_meanwhile_is_said_once_and_not_tried_again(
    tmp_path: Path, imds: tuple[AzureSimulator, SimServer]
) -> None:
    """The approval POST was on its way when Azure removed the event (it started and ended,
    or was cancelled): IMDS refuses an EventId it no longer lists with a 400. The refusal
    must not become a loop of tries and warnings for an event that will never come back,
    and the log must say the event was gone, not that approving it failed."""
    sim, server = imds
    held = sim.add_fault("hang", path=EVENTS, method="POST")
    agent = azure_agent(tmp_path, server)
    with agent, Subscriber(agent.events, ("notice", "client/trainer-0")) as sub:
        event_id, notice, _ = flushed_terminate(sim, agent, sub)
        eventually(
            lambda: sim.faults()[0]["answered"] == 1, timeout=10, what="the approval POST held"
        )
        assert sim.withdraw(event_id)
        cleared = sub.notice(timeout=10)
        assert (cleared["id"], cleared["action"]) == (notice["id"], "clear")
        polls = sim.requests[f"GET {EVENTS}"]
        assert sim.remove_fault(held)
        gone = (
            f"not approving event {event_id}: it was removed while its approval was on its "
            "way (HTTP 400: "
        )
        eventually(lambda: gone in agent.output(), timeout=10, what="the line saying it is gone")
        # Eight more polls, two seconds: any try again would have gone out by now.
        eventually(
            lambda: sim.requests[f"GET {EVENTS}"] >= polls + 8, timeout=10, what="more polls"
        )
        assert posts(sim) == 1
        assert sim.approvals == []
        output = agent.output()
        assert output.count(gone) == 1, output
        assert f"approving event {event_id} failed" not in output, output
