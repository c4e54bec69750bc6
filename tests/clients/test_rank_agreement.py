"""Two to four gloo ranks on CPU: a notice at one node's agent makes every rank save at the same
step; a terminate at another node's agent ends every rank cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from forked_ranks import RankLauncher, RankProcess
from support import AgentProcess, agent_env, eventually, free_port, requires

pytestmark = requires("torch")  # found without importing it: the ranks import torch

SCRIPT = Path(__file__).with_name("dist_train.py")


def read_saves(proc: RankProcess, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    found: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event["event"] == "saved":
            found.append(event)
    return found


def read_until(proc: RankProcess, event: str, timeout: float = 30) -> dict[str, Any]:
    """The next line of `proc` that says `event` (the lines before it passed over)."""
    assert proc.stdout is not None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        said = json.loads(line)
        if said["event"] == event:
            return dict(said)
    raise AssertionError(f"no {event} line from rank {proc.pid}")


def rank_env(
    env: dict[str, str], rank: int, world_size: int, port: int, **more: str
) -> dict[str, str]:
    """`env` for one gloo rank of `world_size` meeting on `port`, plus `more` for dist_train.py."""
    return {
        **env,
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        **more,
    }


@pytest.mark.parametrize("world_size", [2, 4])
def test_every_rank_saves_at_the_same_step_and_exits(
    tmp_path: Path, world_size: int, rank_launcher: RankLauncher
) -> None:
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    agents = []
    for node in nodes:
        node.mkdir()
        agents.append(AgentProcess(node, env=agent_env(node)).start())
    port = free_port()
    # Rank 0 takes no step while this file exists, and the others wait for it in the step's
    # all-reduce: the drain reaches both of node 1's ranks before the ranks next agree. Sent
    # while they trained, it reached one of them (its guard's thread slow to read it on a
    # loaded machine) an agreement after the other, which saved for its peer, not the drain.
    hold = tmp_path / "hold"
    hold.touch()
    ranks: list[RankProcess] = []
    try:
        for rank in range(world_size):
            env = rank_env(agents[rank % 2].env, rank, world_size, port, AGREE_EVERY="4")
            if rank == 0:
                env["HOLD_FILE"] = str(hold)
            # A process forked from a launcher that imported torch once.
            ranks.append(rank_launcher.start(SCRIPT, [], env, stderr=False))
        for proc in ranks:
            assert proc.stdout is not None
            assert json.loads(proc.stdout.readline())["event"] == "started"
        eventually(
            lambda: (
                sum(agent.control({"op": "status"})["agent"]["subscribers"] for agent in agents)
                >= world_size
            ),
            what="every rank's guard subscribed",
        )

        agents[1].control({"op": "notify", "action": "drain", "id": "local/node1-drain"})
        for proc in ranks[1::2]:
            assert read_until(proc, "notice")["id"] == "local/node1-drain"
        hold.unlink()
        drains = [read_saves(proc, 1)[0] for proc in ranks]
        assert len({save["step"] for save in drains}) == 1, drains
        assert all(not save["exit"] for save in drains)
        for rank, save in enumerate(drains):
            assert save["reasons"] == (["drain"] if rank % 2 == 1 else ["peer"]), save

        agents[0].control({"op": "notify", "action": "terminate", "id": "local/node0-term"})
        finals = [read_saves(proc, 1)[0] for proc in ranks]
        assert len({save["step"] for save in finals}) == 1, finals
        assert all(save["exit"] for save in finals)
        for proc in ranks:
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
        for agent in agents:
            agent.stop()


def test_an_exit_asked_for_just_before_a_periodic_save_ends_every_rank(
    tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """Rank 0 is asked to exit after step 9; step 10 is a periodic save (every 10 steps),
    due on every rank without the every-8-steps agreement. The ranks agree on exit there
    too: rank 1 exits with rank 0 instead of going on into a collective that rank 0 left
    (gloo fails, NCCL hangs). No agent runs."""
    port = free_port()
    ranks: list[RankProcess] = []
    try:
        for rank in range(2):
            env = rank_env(
                agent_env(tmp_path), rank, 2, port, AGREE_EVERY="8", EVERY_STEPS="10", EXIT_AT="0:9"
            )
            ranks.append(rank_launcher.start(SCRIPT, [], env, stderr=False))
        saves = [read_saves(proc, 1)[0] for proc in ranks]
        assert [(save["step"], save["exit"]) for save in saves] == [(10, True), (10, True)], saves
        assert "peer" in saves[1]["reasons"] and "manual" in saves[0]["reasons"], saves
        for proc in ranks:
            assert proc.wait(timeout=30) == 0
    finally:
        for proc in ranks:
            if proc.poll() is None:
                proc.kill()
