"""A scheduled reboot that rebooted the instance, still listed after it: the real agent
subprocess against the IMDS simulator, across a restart in a new boot."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from forewarn.protocol.fields import stable_id
from forewarn.protocol.timefmt import format_time, parse_time, utcnow
from forewarn.providers.aws.imds import SCHEDULED_PATH
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.boot import machine_started
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


def _as_if_rebooted(tmp_path: Path) -> None:
    """The state files as an instance that rebooted finds them: written in another boot."""
    for name in ("state.json", "aws-boot.json"):
        path = tmp_path / "state" / name
        if path.exists():
            path.write_text(json.dumps({**json.loads(path.read_text()), "boot_id": "before"}))


def _polls(sim: ImdsSimulator) -> int:
    return int(sim.requests["GET " + SCHEDULED_PATH])


@pytest.mark.parametrize(
    ("code", "held"),
    [("system-reboot", True), ("system-maintenance", False)],
)
def test_a_scheduled_reboot_still_listed_after_it_rebooted_the_instance_is_not_raised_again(
    tmp_path: Path, code: str, held: bool
) -> None:
    """IMDS lists a scheduled reboot (or stop) `active` for a while after it rebooted the
    instance (aws-node-termination-handler#75: "there is latency between a scheduled
    maintenance event being completed and the status being flipped"). The agent after the
    reboot read it as a new event past its NotBefore: a terminate, and the job resumed after
    the reboot exited at once, at each restart, until IMDS marked it completed or its window
    ended. One the agent published before this boot began, its NotBefore passed before the
    boot, is now held back while it stays listed unchanged; a system-maintenance (no reboot)
    is raised as before, and so is a reboot rescheduled since."""
    booted = machine_started()
    assert booted is not None
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_AWS_SCHEDULED_INTERVAL="0.2"
        )
        event_id = sim.raise_notice(
            "scheduled",
            {
                "code": code,
                "not_before": format_time(booted - timedelta(minutes=2)),
                "not_after": format_time(utcnow() + timedelta(hours=2)),
            },
        )
        notice_id = f"aws/scheduled/{event_id}"
        with AgentProcess(tmp_path, providers=("aws",), env=env) as first:
            assert first.subscriber().notice()["action"] == "terminate"
        _as_if_rebooted(tmp_path)
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            seen = _polls(sim)
            eventually(lambda: _polls(sim) >= seen + 3, what="three polls")
            active = {n["id"]: n["action"] for n in agent.control({"op": "status"})["active"]}
            if not held:
                assert active == {notice_id: "terminate"}
                return
            assert active == {}, agent.output()
            assert f"{event_id} ({code}) was due before this boot began" in agent.output()
            # Rescheduled: a reboot still to come, raised.
            later = utcnow().replace(microsecond=0) + timedelta(hours=1)
            sim.change_notice(event_id, {"not_before": format_time(later)})
            eventually(lambda: agent.control({"op": "status"})["active"], what="the new time")
            [notice] = agent.control({"op": "status"})["active"]
            assert notice["action"] == "drain" and parse_time(notice["deadline"]) == later


def test_a_spot_interruption_of_the_boot_before_still_listed_is_not_raised_again(
    tmp_path: Path,
) -> None:
    """A spot interruption the agent saw in time, in a boot that it then ended (a stop,
    started again by EC2 later), still listed after the start: the new boot's agent took its
    id from `aws-spot.json` as seen in time, so not stale, and raised a terminate at its first
    poll and again at every grace while IMDS listed it. The job resumed after the start
    exited at each restart. One seen in the boot before, its time before this boot began, is
    now held back while it stays listed unchanged."""
    booted = machine_started()
    assert booted is not None
    when = format_time(booted.replace(microsecond=0) - timedelta(minutes=1))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "aws-spot.json").write_text(
        json.dumps(
            {
                "boot_id": "before",
                "retired": [],
                "in_time": [stable_id("aws", "spot-itn", {"action": "stop", "time": when})],
            }
        )
    )
    sim = ImdsSimulator()
    sim.raise_notice("spot", {"action": "stop", "time": when})
    with SimServer(sim) as server:
        env = agent_env(tmp_path, FOREWARN_AWS_URL=server.url, FOREWARN_NOTICE_GRACE="0.2")
        with AgentProcess(tmp_path, providers=("aws",), env=env) as agent:
            polls = "GET /latest/meta-data/spot/instance-action"
            eventually(lambda: sim.requests[polls] >= 6, what="polls past a grace")
            assert agent.control({"op": "status"})["active"] == [], agent.output()
            assert "terminate aws/spot-itn" not in agent.output()
