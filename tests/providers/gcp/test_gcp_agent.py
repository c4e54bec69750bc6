"""End to end: the real agent subprocess with `--provider gcp` against the simulator, read
by a raw ZeroMQ subscriber; and `forewarn drill local --provider gcp`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, cast

import pytest
from forewarn.protocol.timefmt import parse_time
from forewarn.providers.gcp.active import ACTIVE_FILE
from forewarn.providers.gcp.simulate import GcpSimulator
from forewarn.providers.simulator import SimServer
from support import (
    AgentProcess,
    Subscriber,
    agent_env,
    eventually,
    fill_disk,
    forewarn_cmd,
    tmpfs_disk,
)

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")

FAST_ENV = {
    "FOREWARN_GCP_RETRY_DELAY": "0.2",
    "FOREWARN_GCP_UPCOMING_INTERVAL": "0.2",
    "FOREWARN_GCP_TIMEOUT_SEC": "5",
}


@pytest.fixture
def agent(tmp_path: Path, server: SimServer) -> Iterator[AgentProcess]:
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as running:
        yield running


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _subscribed(agent: AgentProcess) -> Subscriber:
    """A subscriber whose subscription is live: it has received a heartbeat."""
    sub = agent.subscriber(topics=("notice", "heartbeat"))
    while sub.recv(10)[0] != "heartbeat":
        pass
    return sub


def test_maintenance_drain_clear_and_preemption_through_the_agent(
    agent: AgentProcess, sim: GcpSimulator
) -> None:
    with _subscribed(agent) as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(10)
        assert (drain["action"], drain["reason"], drain["provider"]) == (
            "drain",
            "host-maintenance",
            "gcp",
        )
        deadline = parse_time(drain["deadline"])
        assert abs(deadline - (_now() + timedelta(minutes=60))) < timedelta(seconds=30)
        sim.withdraw("maintenance-event")
        clear = sub.notice(10)
        assert (clear["action"], clear["id"]) == ("clear", drain["id"])
        assert clear["seq"] > drain["seq"]
        sim.raise_notice("preempt", {})
        terminate = sub.notice(10)
        assert (terminate["action"], terminate["reason"]) == ("terminate", "preemption")
        assert abs(parse_time(terminate["deadline"]) - (_now() + timedelta(seconds=30))) < (
            timedelta(seconds=10)
        )
    status = agent.control({"op": "status"})
    assert status["agent"]["providers"] == ["gcp"]
    assert [notice["id"] for notice in status["active"]] == [terminate["id"]]


def test_a_notice_file_that_cannot_be_written_loses_no_preemption(
    tmp_path: Path, agent: AgentProcess, sim: GcpSimulator
) -> None:
    # A directory at the file's path fails every write, as a full disk or a read-only state
    # directory would (chmod does not stop root). The watcher once died before its emit.
    notices_file = tmp_path / "state" / ACTIVE_FILE
    notices_file.mkdir()
    with _subscribed(agent) as sub:
        sim.raise_notice("preempt", {})
        terminate = sub.notice(10)
    assert (terminate["action"], terminate["reason"]) == ("terminate", "preemption")

    def gcp_health() -> dict[str, Any]:
        [health] = agent.control({"op": "status"})["health"]
        return cast(dict[str, Any], health)

    eventually(lambda: gcp_health()["last_error"] == "state", 10, "the failed write reported")
    assert "cannot write" in agent.output() and str(notices_file) in agent.output()
    # A good poll clears last_error; the standing condition stays in status until written.
    [(kind, why)] = gcp_health()["conditions"].items()
    assert kind == f"state {ACTIVE_FILE}" and str(notices_file) in why
    # Writable again: the next answer writes the notice in force, and the health recovers.
    notices_file.rmdir()
    eventually(notices_file.is_file, 10, "the notice file written on a later answer")
    assert json.loads(notices_file.read_text())["preempted"]["id"] == terminate["id"]
    eventually(lambda: gcp_health()["state"] == "healthy", 10, "the health recovered")
    assert gcp_health()["conditions"] == {}


def test_an_upcoming_window_escalates_to_terminate(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, FOREWARN_EXIT_MARGIN="30", **FAST_ENV)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent, _subscribed(agent) as sub:
        sim.raise_notice("upcoming", {"start_in": 31})
        drain = sub.notice(10)
        assert (drain["action"], drain["reason"]) == ("drain", "scheduled-maintenance")
        escalated = sub.notice(10)
        assert (escalated["action"], escalated["id"]) == ("terminate", drain["id"])


def test_gce_metadata_host_points_the_agent(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    host = server.url.removeprefix("http://")
    env = agent_env(tmp_path, GCE_METADATA_HOST=host, **FAST_ENV)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent, _subscribed(agent) as sub:
        sim.raise_notice("maintenance", {"type": "MIGRATE"})
        drain = sub.notice(10)
    assert drain["deadline"] is None and drain["detail"] == {
        "maintenance-event": "MIGRATE_ON_HOST_MAINTENANCE"
    }


def test_forewarn_drill_local_with_the_gcp_simulator(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    done = subprocess.run(
        forewarn_cmd("drill", "local", "--provider", "gcp", "--dir", str(tmp_path / "drill")),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps lost: 0" in done.stdout
    # The drain is a TERMINATE_ON_HOST_MAINTENANCE event, the terminate a preemption, and
    # the demo saved for each.
    assert "drain sent (gcp maintenance" in done.stdout, done.stdout
    assert "terminate sent (gcp preempt" in done.stdout, done.stdout
    assert "(drain) in" in done.stdout and "(terminate) in" in done.stdout, done.stdout


def test_an_escalated_window_moved_out_is_a_drain_again(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    # Issue 16 item 1 for GCP: the upcoming window inside the exit margin goes out as
    # terminate; rescheduled a week out, the same id is a drain again.
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, FOREWARN_EXIT_MARGIN="60", **FAST_ENV)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent, _subscribed(agent) as sub:
        sim.raise_notice("upcoming", {"start_in": 30})
        first = sub.notice(10)
        assert (first["action"], first["reason"]) == ("terminate", "scheduled-maintenance")
        sim.change_notice("upcoming-maintenance", {"start_in": 7 * 86400})
        again = sub.notice(10)
        assert (again["action"], again["id"]) == ("drain", first["id"])
        assert parse_time(again["deadline"]) > _now() + timedelta(days=6)


GCP_DOC = Path(__file__).resolve().parents[3] / "docs" / "gcp.md"


def _run_duration_block() -> str:
    """The docs/gcp.md block that raises the run-duration notice, as a user pastes it."""
    blocks = re.findall(r"```sh\n(.*?)\n```", GCP_DOC.read_text(), re.DOTALL)
    (block,) = [block for block in blocks if "gcp-max-run-duration" in block]
    return block


def test_the_documented_run_duration_notice_works_under_the_gcp_watcher_alone(
    tmp_path: Path, server: SimServer
) -> None:
    """docs/gcp.md: a run-duration limit has no metadata signal, so a boot script raises
    `forewarn notify drain --deadline <end> --id local/gcp-max-run-duration`. The block runs
    as written under an agent running gcp only: one drain, due 8 h after boot; the same line
    at the next boot moves it rather than adding a second notice, and the terminate (same
    id) comes at deadline - exit margin."""
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
    line = ("notify", "drain", "--reason", "reclaim", "--id", "local/gcp-max-run-duration")
    with (
        AgentProcess(tmp_path, providers=("gcp",), args=("--exit-margin", "1s"), env=env) as agent,
        _subscribed(agent) as sub,
    ):
        # `forewarn` on PATH, as the docs' venv has it.
        path = env.get("PATH", os.defpath)
        shell_env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{path}"}
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        hours = 8
        block = _run_duration_block()
        if uptime > 7 * 3600:
            # A machine up longer than the documented limit: the same line with a limit
            # still ahead, or the deadline would be past.
            hours = int(uptime // 3600) + 2
            block = block.replace("8 * 3600", f"{hours} * 3600")
        assert f"{hours} * 3600" in block
        first = subprocess.run(
            ["bash", "-e", "-c", block],
            env=shell_env,
            capture_output=True,
            text=True,
        )
        assert first.returncode == 0, first.stderr
        drain = sub.notice(10)
        assert (drain["id"], drain["action"], drain["reason"]) == (
            "local/gcp-max-run-duration",
            "drain",
            "reclaim",
        )
        boot = datetime.now(timezone.utc) - timedelta(seconds=uptime)
        assert abs(parse_time(drain["deadline"]) - (boot + timedelta(hours=hours))) < timedelta(
            seconds=5
        )
        # The next boot: a new planned end, the same notice.
        moved = subprocess.run(
            forewarn_cmd(*line, "--deadline", "3s"), env=env, capture_output=True, text=True
        )
        assert moved.returncode == 0, moved.stderr
        changed = sub.notice(10)
        assert (changed["id"], changed["action"]) == (drain["id"], "drain")
        assert parse_time(changed["deadline"]) < parse_time(drain["deadline"])
        escalated = sub.notice(10)
        assert (escalated["id"], escalated["action"]) == (drain["id"], "terminate")
        active = agent.control({"op": "status"})["active"]
        assert [n["id"] for n in active] == [drain["id"]]


def test_an_upcoming_window_open_stays_one_terminate_until_its_end(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """Inside its window the maintenance can begin at any moment until `window_end_time`
    (hours). The notice was retired at the window's start plus the grace and raised again at
    the next read, so every grace sent a clear in the middle of the window (a job started
    then had no notice until the re-raise). It now stays one terminate until the end."""
    key = "GET /computeMetadata/v1/instance/upcoming-maintenance"
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
    args = ("--set", "notice_grace=1", "--exit-margin", "1s")
    with (
        AgentProcess(tmp_path, providers=("gcp",), args=args, env=env) as agent,
        _subscribed(agent) as sub,
    ):
        sim.raise_notice("upcoming", {"start_in": 1, "window": 3600})
        raised = _now()
        first = sub.notice(10)
        assert first["reason"] == "scheduled-maintenance"
        # Past the window's start plus the grace (where it was retired), with several reads
        # of the window since then (each of which raised it again).
        reads = sim.requests[key]
        eventually(
            lambda: _now() - raised > timedelta(seconds=4) and sim.requests[key] >= reads + 5,
            20,
            "reads of the window past its start plus the grace",
        )
        seen = [(n["action"], n["id"]) for n in sub.drain(0.5)]
        assert ("clear", first["id"]) not in seen, seen
        active = agent.control({"op": "status"})["active"]
        assert [(n["id"], n["action"]) for n in active] == [(first["id"], "terminate")], active


def test_a_job_keeps_its_preemption_and_hears_unscheduled_maintenance(
    agent: AgentProcess, sim: GcpSimulator
) -> None:
    """What a job hears from the real agent: `preempted` back to FALSE is no clear of its
    terminate (a preemption is not withdrawn), and an ONGOING maintenance whose document has
    no `window_start_time` reaches it as a notice due now, where it was dropped unread."""
    document = {"type": "UNSCHEDULED", "maintenance_status": "ONGOING"}
    with _subscribed(agent) as sub:
        sim.raise_notice("preempt", {})
        terminate = sub.notice(10)
        assert (terminate["action"], terminate["reason"]) == ("terminate", "preemption")
        sim.withdraw("preempted")
        sim.raise_notice("upcoming", {"document": document})
        maintenance = sub.notice(10)
        assert maintenance["reason"] == "scheduled-maintenance", maintenance
        assert maintenance["detail"] == document
        assert parse_time(maintenance["deadline"]) <= _now()
        eventually(lambda: "went back to FALSE after TRUE" in agent.output(), what="FALSE read")
        later = sub.drain()
        status = agent.control({"op": "status"})
    assert [n for n in later if n["id"] == terminate["id"]] == []
    active = {notice["id"]: notice["action"] for notice in status["active"]}
    assert active[terminate["id"]] == "terminate"
    assert active[maintenance["id"]] in ("drain", "terminate")


def test_a_notice_whose_file_was_never_written_keeps_its_id_across_a_restart(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """The state directory's disk full (checkpoints beside it): the agent saved the drain in
    its state file, from its reserve, but the watcher's own gcp-notices.json was not written
    (or was lost). After a restart the watcher took the drain for a new notice: the agent
    cleared the one it restored ("not reported by gcp since the agent restarted") and sent a
    drain under another id, its deadline an hour after the restart, not after the notice:
    the terminate came after the VM stopped. The watcher takes up the notice the agent
    restored for a kind its file lacks."""
    env = agent_env(tmp_path, FOREWARN_GCP_URL=server.url, **FAST_ENV)
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent, _subscribed(agent) as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(10)
    (tmp_path / "state" / ACTIVE_FILE).unlink()
    keys = [f"GET /computeMetadata/v1/instance/{key}" for key in ("maintenance-event", "preempted")]
    polls = {key: sim.requests[key] for key in keys}
    with AgentProcess(tmp_path, providers=("gcp",), env=env) as again:
        # A long-poll's second request goes out once its first answer was taken in.
        eventually(
            lambda: all(sim.requests[key] >= polls[key] + 2 for key in keys),
            10,
            "every key answered after the restart",
        )
        status = again.control({"op": "status"})
    assert [notice["id"] for notice in status["active"]] == [drain["id"]], again.output()
    assert status["active"][0]["deadline"] == drain["deadline"]


def test_a_notice_raised_on_a_full_disk_is_saved_in_gcp_notices_from_the_reserve(
    tmp_path: Path, server: SimServer, sim: GcpSimulator
) -> None:
    """The state directory's disk filled by a checkpoint: the agent saved the drain in its
    state file from its reserve, but the watcher's write of gcp-notices.json failed ("cannot
    write ... No space left on device", a standing condition), and the drain was in it only
    once a later write found the room the state's had left. The watcher's file is written
    from the reserve too, at once."""
    with tmpfs_disk(tmp_path, "4m") as disk:
        state_dir = disk / "state"
        env = agent_env(
            tmp_path, FOREWARN_GCP_URL=server.url, FOREWARN_STATE_DIR=str(state_dir), **FAST_ENV
        )
        with AgentProcess(tmp_path, providers=("gcp",), env=env) as agent:
            with _subscribed(agent) as sub:
                fill_disk(disk)
                sim.raise_notice("maintenance", {"type": "TERMINATE"})
                drain = sub.notice(10)
            notices_file = state_dir / ACTIVE_FILE
            eventually(notices_file.is_file, 10, "gcp-notices.json written")
            saved = json.loads(notices_file.read_text())
            assert saved["maintenance-event"]["id"] == drain["id"], saved
        assert "cannot write" not in agent.output(), agent.output()


def test_a_terminate_that_lasted_100_ms_reaches_the_job_and_is_cleared(
    agent: AgentProcess, sim: GcpSimulator
) -> None:
    """A TERMINATE_ON_HOST_MAINTENANCE the server withdrew 100 ms later (the brief's case:
    flips closer than the agent's work between two long-polls) still reaches the job as a
    drain, then its clear under the same id: the job checkpointed for nothing, never missed
    a stop that came back."""
    with _subscribed(agent) as sub:
        for _ in range(3):
            sim.raise_notice("maintenance", {"type": "TERMINATE", "duration": 0.1})
            drain = sub.notice(10)
            assert (drain["action"], drain["reason"]) == ("drain", "host-maintenance")
            assert drain["detail"]["maintenance-event"] == "TERMINATE_ON_HOST_MAINTENANCE"
            clear = sub.notice(10)
            assert (clear["action"], clear["id"]) == ("clear", drain["id"])
    assert agent.control({"op": "status"})["active"] == []


def test_a_metadata_server_restart_reaches_the_job_as_nothing(
    agent: AgentProcess, sim: GcpSimulator
) -> None:
    """The metadata server restarts under a standing TERMINATE_ON_HOST_MAINTENANCE drain and
    forgets the ETag the agent's long-poll waits with: the job hears no clear and no second
    notice, the agent sends no stream of requests, and the end of the maintenance is
    heard at once, cleared under the drain's id."""
    long_poll = "GET /computeMetadata/v1/instance/maintenance-event"
    with _subscribed(agent) as sub:
        sim.raise_notice("maintenance", {"type": "TERMINATE"})
        drain = sub.notice(10)
        asked = sim.requests[long_poll]
        sim.restart()
        eventually(lambda: sim.requests[long_poll] > asked, what="the long-poll answered")
        assert sub.drain(quiet=1.0) == []
        # The answer at once, then one long-poll waiting (two at most: a value under a new
        # ETag is asked again once before pacing); a loop sends hundreds in that second.
        assert sim.requests[long_poll] - asked <= 2, sim.requests
        sim.withdraw("maintenance-event")
        clear = sub.notice(4)  # within the 5 s timeout_sec: the change woke the long-poll
    assert (clear["action"], clear["id"]) == ("clear", drain["id"])
