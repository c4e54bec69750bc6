"""End to end: the real agent subprocess with the AWS watcher against the IMDS simulator,
and a raw ZeroMQ subscriber."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from forewarn.protocol.timefmt import format_time, parse_time
from forewarn.providers.aws.imds import ASG_PATH, SCHEDULED_PATH, TOKEN_PATH
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from support import DEAD_LOOPBACK, AgentProcess, Subscriber, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

FAST = {"FOREWARN_AWS_SCHEDULED_INTERVAL": "0.5", "FOREWARN_AWS_ASG_INTERVAL": "0.5"}


@pytest.fixture
def agent(tmp_path: Path, server: SimServer) -> Iterator[AgentProcess]:
    env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, **FAST)
    with AgentProcess(tmp_path, providers=("aws",), args=("--exit-margin", "1s"), env=env) as a:
        yield a


def next_notice(sub: Subscriber, **match: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        notice = sub.notice(timeout=deadline - time.monotonic())
        if all(notice.get(key) == value for key, value in match.items()):
            return notice
    raise AssertionError(f"no notice matching {match}")


def test_every_aws_notice_reaches_a_subscriber(agent: AgentProcess, sim: ImdsSimulator) -> None:
    with agent.subscriber() as sub:
        sim.raise_notice("rebalance", {"noticeTime": "2026-11-30T03:00:00Z"})
        rebalance = next_notice(sub, action="drain")
        assert rebalance["reason"] == "rebalance-recommendation" and rebalance["provider"] == "aws"
        assert rebalance["deadline"] is None
        assert rebalance["detail"] == {
            "noticeTime": "2026-11-30T03:00:00Z",
            "notice_time": "2026-11-30T03:00:00Z",
        }

        event_id = sim.raise_notice(
            "scheduled", {"code": "system-maintenance", "not_before": "2030-01-02T03:04:05Z"}
        )
        scheduled = next_notice(sub, reason="scheduled-maintenance")
        assert scheduled["id"] == f"aws/scheduled/{event_id}" and scheduled["action"] == "drain"
        assert scheduled["deadline"] == "2030-01-02T03:04:05Z"
        assert scheduled["detail"]["NotBefore"] == "2 Jan 2030 03:04:05 GMT"
        assert scheduled["detail"]["Code"] == "system-maintenance"

        sim.change_notice(event_id, {"state": "canceled"})
        cleared = next_notice(sub, action="clear", id=scheduled["id"])
        assert cleared["detail"]["State"] == "canceled"

        sim.raise_notice("spot", {"action": "stop", "time": "2030-01-02T03:04:05Z"})
        spot = next_notice(sub, reason="spot-interruption")
        assert spot["action"] == "terminate" and spot["deadline"] == "2030-01-02T03:04:05Z"
        assert spot["detail"] == {"action": "stop", "time": "2030-01-02T03:04:05Z"}

        sim.raise_notice("asg", {"state": "Terminated"})
        asg = next_notice(sub, id="aws/asg-lifecycle/terminated")
        assert asg["action"] == "terminate"
        assert asg["detail"] == {"target-lifecycle-state": "Terminated"}

        sim.withdraw("rebalance")
        assert next_notice(sub, action="clear", id=rebalance["id"])["provider"] == "aws"

    status = agent.control({"op": "status"})
    active = {notice["id"] for notice in status["active"]}
    assert active == {spot["id"], asg["id"]}


def test_a_scheduled_event_escalates_to_terminate_before_not_before(
    agent: AgentProcess, sim: ImdsSimulator
) -> None:
    with agent.subscriber() as sub:
        not_before = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=4)
        sim.raise_notice(
            "scheduled", {"code": "instance-stop", "not_before": format_time(not_before)}
        )
        drain = next_notice(sub, action="drain")
        terminate = next_notice(sub, action="terminate")
        assert terminate["id"] == drain["id"]
        assert parse_time(terminate["deadline"]) == not_before
        assert datetime.now(timezone.utc) < not_before  # before NotBefore, by the exit margin


def test_the_agent_rides_token_expiry_and_revocation(tmp_path: Path) -> None:
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_TOKEN_TTL="2")
        with (
            AgentProcess(tmp_path, providers=("aws",), env=env) as agent,
            agent.subscriber() as sub,
        ):
            # A token lives 2 s: a second one is the agent renewing it before it expired.
            # Counted once issued: revoked before that, the renewed token would outlive the
            # revocation and the agent would never need a third (seen under load: 2 >= 3).
            eventually(lambda: sim.tokens_issued >= 2, what="a renewed token")
            sim.raise_notice("revoke-tokens", {})
            sim.raise_notice("spot", {})
            assert next_notice(sub, action="terminate")["reason"] == "spot-interruption"
            output = agent.output()
        assert sim.requests["PUT " + TOKEN_PATH] >= 3
        assert "unauthorized" not in output and "WARNING" not in output, output


def test_a_hanging_token_put_is_explained_once_in_the_agent_log(tmp_path: Path) -> None:
    sim = ImdsSimulator()
    sim.add_fault("hop-limit", seconds=30)
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_TIMEOUT="0.2")
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            deadline = time.monotonic() + 10
            while sim.requests["PUT " + TOKEN_PATH] < 4 and time.monotonic() < deadline:
                time.sleep(0.1)
            output = agent.output()
    assert output.count("Fix: raise the hop limit to 2") == 1, output
    assert "hostNetwork" in output


@pytest.mark.parametrize("status", [403, 404, 405])
def test_an_imds_without_tokens_names_the_setting_that_reads_it(
    tmp_path: Path, status: int
) -> None:
    """A metadata endpoint that serves only IMDSv1 (kube2iam in front of IMDS answers the
    token PUT 403, jtblin/kube2iam#241; an IMDS-compatible endpoint without tokens 404 or
    405) with `aws.imdsv1` off: every poll failed and the log said what (`no IMDSv2 here`,
    `IMDS refuses tokens here`), not what to do, and no notice was ever seen. The first
    message now names the setting that reads it."""
    sim = ImdsSimulator(imdsv1=True)
    sim.add_fault("status", path=TOKEN_PATH, method="PUT", status=status)
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_SPOT_INTERVAL="0.1")
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            eventually(lambda: sim.requests["PUT " + TOKEN_PATH] >= 4, 10, "token PUTs")
            output = agent.output()
    assert output.count("FOREWARN_AWS_IMDSV1=true") == 1, output
    assert "aws.imdsv1 = true" in output


@pytest.mark.parametrize("state", ["Warmed:Stopped", "Warmed:Hibernated"])
def test_a_scale_in_back_to_the_warm_pool_is_a_terminate(
    agent: AgentProcess, sim: ImdsSimulator, state: str
) -> None:
    """An Auto Scaling group with a warm pool that reuses instances on scale in sends an
    in-service instance back to the pool stopped or hibernated (its target lifecycle state
    becomes Warmed:Stopped or Warmed:Hibernated): the job on it stops as on a termination.
    Only Terminated and Warmed:Terminated were notices; the job was stopped unwarned."""
    with agent.subscriber() as sub:
        sim.raise_notice("asg", {"state": "InService"})
        sim.raise_notice("asg", {"state": state})
        notice = next_notice(sub, reason="eviction")
    assert notice["action"] == "terminate" and notice["deadline"] is None
    assert notice["id"] == "aws/asg-lifecycle/" + state.replace(":", "-").lower()
    assert notice["detail"] == {"target-lifecycle-state": state}


def test_auto_picks_an_imds_without_tokens_and_names_the_setting(tmp_path: Path) -> None:
    """`--provider auto` on a metadata endpoint that serves only IMDSv1 (kube2iam answers the
    token PUT 403) with `aws.imdsv1` off: detection asked for a token, was refused, and said
    `auto: aws not picked: its detection probe said no`; the agent ran without AWS, and
    nothing said why or what to set. A tokenless read of EC2's identity document now tells
    EC2 apart (as for a token PUT that hangs): AWS is picked, and its first error names
    `aws.imdsv1`."""
    sim = ImdsSimulator(imdsv1=True)
    sim.add_fault("status", path=TOKEN_PATH, method="PUT", status=403)
    with SimServer(sim) as server:
        dead = f"http://{DEAD_LOOPBACK}"
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AZURE_URL=dead,
            FOREWARN_GCP_URL=dead,
            FOREWARN_DIGITALOCEAN_URL=dead,
        )
        with AgentProcess(tmp_path, providers=("auto",), env=env) as agent:
            assert "aws" in agent.control({"op": "status"})["agent"]["providers"]
            eventually(lambda: "FOREWARN_AWS_IMDSV1=true" in agent.output(), 10, "the hint")


def test_a_hanging_token_put_stands_in_status_with_its_fix_until_a_token_comes(
    tmp_path: Path,
) -> None:
    """The hop-limit explanation was logged once; `forewarn status` (what an operator runs
    later, or a probe reads) showed only `last_error: token-timeout`, the cause and the fix
    long scrolled away. It is now a standing condition of the health until a token comes."""
    sim = ImdsSimulator()
    fault = sim.add_fault("hop-limit", seconds=30)
    with SimServer(sim) as server:
        # Long enough for a loaded node's simulator to answer the token PUT once the fault
        # ends: at 0.2 s, answers 0.3 s late kept the condition standing past the wait.
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_TIMEOUT="1")
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:

            def conditions() -> dict[str, str]:
                [health] = agent.control({"op": "status"})["health"]
                return dict(health["conditions"])

            eventually(lambda: "imds-token" in conditions(), 10, "the condition")
            assert "hop limit to 2" in conditions()["imds-token"]
            sim.remove_fault(fault)
            eventually(lambda: "imds-token" not in conditions(), 10, "the condition cleared")


def test_a_scheduled_event_still_listed_past_its_window_is_retired_once(tmp_path: Path) -> None:
    """A scheduled event still listed `active` after its window ended (NotAfter passed, the
    instance still running: maintenance that did not need it): the agent retired it past the
    window plus the grace, the next poll raised it again, and so a clear and the same
    terminate went out every grace (300 s), each stopping the job resumed since. Retired
    past its window, it is now raised again only if it changes."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_SCHEDULED_INTERVAL="0.2",
            FOREWARN_NOTICE_GRACE="0.5",
        )
        with (
            AgentProcess(tmp_path, providers=("aws",), env=env) as agent,
            agent.subscriber() as sub,
        ):
            event_id = sim.raise_notice(
                "scheduled",
                {
                    "code": "system-maintenance",
                    "not_before": "2026-01-01T01:00:00Z",
                    "not_after": "2026-01-01T03:00:00Z",
                },
            )
            notice_id = f"aws/scheduled/{event_id}"
            assert next_notice(sub, id=notice_id)["action"] == "terminate"
            assert next_notice(sub, id=notice_id)["action"] == "clear"
            polls = "GET " + SCHEDULED_PATH
            target = sim.requests[polls] + 8
            eventually(lambda: sim.requests[polls] >= target, 10, "more polls")
            with pytest.raises(TimeoutError):
                sub.notice(timeout=0.1)
            # A real change (rescheduled) is a notice again.
            sim.change_notice(event_id, {"not_before": "2030-01-01T01:00:00Z"})
            assert next_notice(sub, id=notice_id)["deadline"] == "2030-01-01T01:00:00Z"


def test_a_stray_first_answer_after_a_restart_does_not_withdraw_a_restored_notice(
    tmp_path: Path,
) -> None:
    """The agent restarted while a scheduled event was listed, and IMDS answered its first
    poll of the path with one stray 404 (another host's IMDS mid-rollout): the notice
    restored from before the restart was withdrawn (a clear) as soon as every path had
    answered once, and raised again at the next poll, so the job saved its drain again.
    One answer in a row without it is no withdrawal, as in the watcher's own run."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        # Heartbeats (where the agent settles restored notices) between two polls of the path.
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_SCHEDULED_INTERVAL="1",
            FOREWARN_HEARTBEAT_INTERVAL="0.1",
        )
        event_id = sim.raise_notice("scheduled", {"not_before": "2030-01-02T03:04:05Z"})
        notice_id = f"aws/scheduled/{event_id}"
        with (
            AgentProcess(tmp_path, providers=("aws",), env=env) as first,
            first.subscriber() as sub,
        ):
            drain = next_notice(sub, id=notice_id)
            assert drain["action"] == "drain"
        sim.add_fault("status", path=SCHEDULED_PATH, status=404, count=1)
        polls = "GET " + SCHEDULED_PATH
        target = sim.requests[polls] + 3
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            eventually(lambda: sim.requests[polls] >= target, 10, "three polls after the restart")
            # The notice as it was before the restart, not cleared and raised anew since.
            [active] = agent.control({"op": "status"})["active"]
            assert active["id"] == notice_id
            assert active["noticed_at"] == drain["noticed_at"], agent.output()


@pytest.mark.parametrize("meanwhile", ["withdrawn", "moved"])
def test_a_spot_interruption_across_a_restart_keeps_its_id_and_is_not_cleared(
    tmp_path: Path, meanwhile: str
) -> None:
    """The agent restarted (an upgrade, a crash) during a spot interruption's two minutes,
    and meanwhile IMDS stopped showing it, or showed it with its time a minute later. Within
    one run the interruption is kept (a terminate is final) and a move is re-sent under its
    id. Across the restart the watcher took the moved one for a new interruption (a second
    terminate, its own id, then a clear of the first) and the vanished one was cleared as
    "not reported by aws since the agent restarted": a job started then trained on."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_HEARTBEAT_INTERVAL="0.1", **FAST
        )
        first_time = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=10)
        sim.raise_notice("spot", {"time": format_time(first_time)})
        with (
            AgentProcess(tmp_path, providers=("aws",), env=env) as first,
            first.subscriber() as sub,
        ):
            spot = next_notice(sub, reason="spot-interruption")
        moved = first_time + timedelta(minutes=1)
        if meanwhile == "withdrawn":
            sim.withdraw("spot")
        else:
            sim.change_notice("spot", {"time": format_time(moved)})
        polls = "GET " + ASG_PATH
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            target = sim.requests[polls] + 4
            eventually(lambda: sim.requests[polls] >= target, 10, "every path answered twice")
            status = agent.control({"op": "status"})
            [active] = status["active"]
            assert active["id"] == spot["id"], agent.output()
            expected = first_time if meanwhile == "withdrawn" else moved
            assert active["deadline"] == format_time(expected), agent.output()


def test_a_restored_scheduled_event_listed_canceled_is_cleared_at_the_first_answer(
    tmp_path: Path,
) -> None:
    """The agent restarted while a scheduled event was listed, and meanwhile AWS canceled it:
    IMDS's first answer after the restart lists it with `State: canceled`. Within one run
    that clears the notice at once; after the restart the watcher knew nothing of the event,
    so the canceled one was no news to it, and the agent held the restored drain until
    every path had answered twice (6 s at the default cadence), its escalation still armed.
    An explicit `canceled` proves the withdrawal at its first answer."""
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        # Two seconds between the scheduled path's polls: the first answer and the second
        # are told apart by the simulator's count.
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_SCHEDULED_INTERVAL="2",
            FOREWARN_AWS_ASG_INTERVAL="2",
            FOREWARN_HEARTBEAT_INTERVAL="0.1",
        )
        event_id = sim.raise_notice("scheduled", {"not_before": "2030-01-02T03:04:05Z"})
        notice_id = f"aws/scheduled/{event_id}"
        with (
            AgentProcess(tmp_path, providers=("aws",), env=env) as first,
            first.subscriber() as sub,
        ):
            assert next_notice(sub, id=notice_id)["action"] == "drain"
        sim.change_notice(event_id, {"state": "canceled"})
        polls = "GET " + SCHEDULED_PATH
        before = sim.requests[polls]
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            eventually(lambda: not agent.control({"op": "status"})["active"], 10, "the clear")
            assert sim.requests[polls] == before + 1, agent.output()
