"""A step of this instance's wall clock while the agent runs, through the real agent
subprocess on the IMDS simulator: the agent runs on a wall clock moved by a sitecustomize
(`shifted_wall_clock`: `datetime.now` and `time.time`, as an instance's clock is before NTP's
first sync); the simulator's `Date` is the machine's own clock, as AWS's is right."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from forewarn.protocol.timefmt import parse_time, utcnow
from forewarn.providers.aws.simulate import ImdsSimulator
from forewarn.providers.simulator import SimServer
from support import AgentProcess, agent_env, eventually, shifted_wall_clock

# The scheduled events' poll, as shipped (5 s): the window the board is left alone with a
# deadline moved by a skew after a step, until the watcher's next answer shows the new skew.
SCHEDULED_INTERVAL = 5.0


def _clock_off(agent: AgentProcess) -> bool:
    [health] = agent.control({"op": "status"})["health"]
    return "behind" in str(health["conditions"])


def test_a_scheduled_event_follows_ntps_step_with_no_clear(tmp_path: Path) -> None:
    """This instance's clock 2 h behind AWS's, a system reboot scheduled 30 min out: its drain
    goes out with NotBefore on this clock. NTP then steps the clock 2 h forward, the spot and
    rebalance polls off, so the watcher sees the new skew only at the scheduled events' next
    poll, up to 5 s later. Kubernetes and DigitalOcean sent a `clear` in such a window (their
    deadlines moved by a skew were held as moments); here the board does not retire a notice
    a step put past its deadline (`_stepped_forward`), and the drain goes out again, same id,
    its deadline where the step puts it. No clear."""
    shifted, offset = shifted_wall_clock(tmp_path, timedelta(hours=-2).total_seconds())
    sim = ImdsSimulator()
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_AWS_URL=server.url,
            FOREWARN_AWS_SCHEDULED_INTERVAL=str(SCHEDULED_INTERVAL),
            FOREWARN_AWS_SPOT_INTERVAL="0",
            FOREWARN_AWS_REBALANCE_INTERVAL="0",
            **shifted,
        )
        agent = AgentProcess(tmp_path, providers=("aws",), env=env)
        with agent, agent.subscriber() as sub:
            not_before = (utcnow() + timedelta(minutes=30)).replace(microsecond=0)
            event = sim.raise_notice(
                "scheduled", {"code": "system-reboot", "not_before": not_before.isoformat()}
            )
            drain = sub.notice(timeout=15)
            assert drain["action"] == "drain", drain
            assert event in drain["id"], drain
            left = parse_time(str(drain["deadline"])) - utcnow()
            assert abs(left - timedelta(hours=-1, minutes=-30)) < timedelta(minutes=1), drain
            eventually(lambda: _clock_off(agent), what="the clock condition")
            offset.write_text("0")  # NTP's step: the agent's wall clock is 2 h on
            stepped = time.monotonic()
            eventually(
                lambda: not _clock_off(agent),
                timeout=SCHEDULED_INTERVAL + 10,
                what="the watcher's new skew",
            )
            after = sub.drain(max(0.5, SCHEDULED_INTERVAL + 1.5 - (time.monotonic() - stepped)))
            active = agent.control({"op": "status"})["active"]
        sent = [(n["action"], n["id"]) for n in after]
        assert all(action == "drain" for action, _ in sent), sent
        assert [n["id"] for n in active] == [drain["id"]], active
        left = parse_time(str(active[0]["deadline"])) - utcnow()
        assert abs(left - timedelta(minutes=30)) < timedelta(minutes=1), active
    assert "expired" not in agent.output(), agent.output()
    # Each change of the clock said once (last session's notes had the warning twice in one
    # millisecond, never reproduced): at the first answer, and at the step.
    assert agent.output().count("behind IMDS's Date") == 1, agent.output()
    assert agent.output().count("within a few minutes of IMDS's Date again") == 1
