"""A state directory on a disk that fills up (checkpoints written beside it): the agent keeps a
small reserve there, and spends it on its state when nothing else is left. A real tmpfs, so
root only (skipped otherwise)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import AgentProcess, agent_env, eventually, fill_disk, run_forewarn, tmpfs_disk

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py).
pytestmark = pytest.mark.usefixtures("forked_agents")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_disk(tmp_path, "4m") as mount:
        yield mount


def test_a_notice_raised_on_a_full_disk_outlives_a_restart(
    tmp_path: Path, small_disk: Path
) -> None:
    """The disk filled by a checkpoint: a `notify drain` said "not saved", and a restart
    (`systemctl restart`, an upgrade) before anyone freed space started without the drain,
    which nothing raises again. The reserve taken at the start is given up for the state's
    write, and taken back once it is written: the notify is saved, so is the next, and the
    next start, on the disk still full, restores both."""
    state_dir = small_disk / "state"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir))
    with AgentProcess(tmp_path, env=env) as agent:
        assert (state_dir / "state.reserve").stat().st_blocks > 0
        fill_disk(small_disk)
        for notice_id in ("local/full", "local/second"):
            reply = agent.control({"op": "notify", "action": "drain", "id": notice_id})
            assert reply["ok"] and reply.get("unsaved") is None, reply
    output = agent.output()
    assert output.count("gave up the space of") == 1, output
    assert f"{state_dir / 'state.reserve'} to save the state" in output, output
    with AgentProcess(tmp_path, env=env) as again:
        active = again.control({"op": "status"})["active"]
        assert sorted(notice["id"] for notice in active) == ["local/full", "local/second"]


def test_a_disk_full_at_the_start_is_said_and_stops_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    """No room for the reserve at the start: a warning names it, and the agent runs."""
    fill_disk(small_disk)
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(small_disk))
    with AgentProcess(tmp_path, env=env) as agent:
        assert agent.control({"op": "status"})["ok"]
        assert f"cannot reserve 65536 bytes for the state in {small_disk}" in agent.output()


def test_a_reserve_spent_is_taken_back_once_the_disk_has_room(
    tmp_path: Path, small_disk: Path
) -> None:
    """The disk filled, a notice's state was saved from the reserve, then the job's old
    checkpoints were deleted: the reserve was taken back only at the next state write, and
    none came while the agent sat idle. The checkpoints filled the disk again, and the next
    notice was "not saved": a restart started without it. The reserve is taken back as soon
    as the disk has room for it."""
    state_dir = small_disk / "state"
    reserve = state_dir / "state.reserve"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir), FOREWARN_HEARTBEAT_INTERVAL="0.1")
    with AgentProcess(tmp_path, env=env) as agent:
        fill_disk(small_disk)
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/first"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
        assert not reserve.exists() or reserve.stat().st_blocks == 0
        (small_disk / "checkpoint.pt").unlink()  # old checkpoints deleted
        eventually(
            lambda: reserve.exists() and reserve.stat().st_blocks * 512 >= 65536,
            5,
            "the reserve taken back",
        )
        fill_disk(small_disk)
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/second"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
    with AgentProcess(tmp_path, env=env) as again:
        active = again.control({"op": "status"})["active"]
        assert sorted(notice["id"] for notice in active) == ["local/first", "local/second"]


def test_a_reserve_is_not_taken_back_where_it_would_fill_the_disk(small_disk: Path) -> None:
    """A disk at the edge (a little more free than the reserve): taken back, the reserve
    left the state's next write no room, which gave it up again with a warning, and the
    heartbeat took it back: a warning at every state write. It waits for twice its size."""
    from forewarn.agent.reserve import MIN_RESERVE_BYTES, SpaceReserve

    room = small_disk / "room"
    fd = os.open(room, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, 3 * MIN_RESERVE_BYTES // 2)
    finally:
        os.close(fd)
    fill_disk(small_disk)
    room.unlink()  # 96 KiB free: room for the reserve, not twice
    reserve = SpaceReserve(small_disk / "state.reserve")
    assert not reserve.take_back()
    assert not reserve.path.exists() or reserve.path.stat().st_blocks == 0


def test_the_seq_mark_is_saved_on_a_full_disk_from_the_reserve(
    tmp_path: Path, small_disk: Path
) -> None:
    """Only state.json used the reserve: an agent restarted on a disk a checkpoint filled
    logged "cannot save seq" at every start, and a second restart could number its messages
    below the first's (`seq` must only grow across restarts). The mark is written from the
    reserve too."""
    state_dir = small_disk / "state"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir))
    with AgentProcess(tmp_path, env=env):
        pass
    first_mark = int((state_dir / "seq").read_text())
    fill_disk(small_disk)
    with AgentProcess(tmp_path, env=env) as agent:
        assert "seq" not in agent.control({"op": "status"})["agent"]["conditions"]
    output = agent.output()
    assert "cannot save seq" not in output, output
    assert f"{state_dir / 'state.reserve'} to save seq" in output, output
    assert int((state_dir / "seq").read_text()) > first_mark


def test_a_clear_that_cannot_be_saved_says_so(tmp_path: Path, small_disk: Path) -> None:
    """A restart on a disk a checkpoint filled spent the reserve (on the `seq` mark), and the
    checkpoint took the room it left: `forewarn notify clear` printed "cleared: local/first"
    and nothing else, the clear was not saved, and the next restart sent the drain again to
    every job. The reply names why, and the command warns, as a notify's does."""
    state_dir = small_disk / "state"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir))
    with AgentProcess(tmp_path, env=env) as agent:
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/first"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
    fill_disk(small_disk)
    with AgentProcess(tmp_path, env=env) as agent:
        fill_disk(small_disk)  # the checkpoint takes the room the reserve left
        cleared = run_forewarn("notify", "clear", "--id", "local/first", env=env)
        assert cleared.returncode == 0, cleared.stderr
        assert "cleared: local/first" in cleared.stdout
        assert "warning: the clear is sent but not saved: cannot write" in cleared.stderr
        assert "No space left on device" in cleared.stderr, cleared.stderr
    with AgentProcess(tmp_path, env=env) as again:
        # What the warning said: the clear was not saved.
        assert [notice["id"] for notice in again.control({"op": "status"})["active"]] == [
            "local/first"
        ]


def test_a_clear_that_cannot_be_saved_says_which_notices_a_restart_brings_back(
    tmp_path: Path, small_disk: Path
) -> None:
    """`forewarn notify clear` on a full disk warned that a restart "sends the notice again"
    of every notice it cleared, those never saved either among them: a restart brings back
    only what the last saved state holds. The warning names which."""
    state_dir = small_disk / "state"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir))
    with AgentProcess(tmp_path, env=env) as agent:
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/saved"})
        assert reply["ok"] and reply.get("unsaved") is None, reply
    fill_disk(small_disk)
    with AgentProcess(tmp_path, env=env) as agent:
        fill_disk(small_disk)  # the checkpoint takes the room the reserve left
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/never"})
        assert reply["ok"] and reply.get("unsaved"), reply
        cleared = run_forewarn("notify", "clear", env=env)
        assert cleared.returncode == 0, cleared.stderr
        assert "cleared: local/saved, local/never" in cleared.stdout, cleared.stdout
        (warning,) = cleared.stderr.strip().splitlines()
        assert "warning: the clear is sent but not saved: cannot write" in warning, warning
        assert "an agent restart before its state can be written sends local/saved again" in warning
        assert "local/never: it was never saved either" in warning, warning
        assert "sends local/never" not in warning, warning
    with AgentProcess(tmp_path, env=env) as again:
        # What the warning said: the one saved comes back, the other does not.
        active = again.control({"op": "status"})["active"]
        assert [notice["id"] for notice in active] == ["local/saved"]
