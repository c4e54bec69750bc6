"""`seq` strictly increases across quick restarts of the agent on a state disk that is full
with no reserve left: the mark the state directory could not take is kept in the runtime
directory too. A real tmpfs for the state disk, so root only (skipped otherwise)."""

from __future__ import annotations

import shutil
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support import (
    AgentProcess,
    Subscriber,
    agent_env,
    fill_disk,
    shifted_wall_clock,
    tmpfs_disk,
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs_disk(tmp_path, "4m") as mount:
        yield mount


@contextmanager
def checkpoint_writer(disk: Path) -> Iterator[None]:
    """A checkpoint written on `disk` all along, as in the field: it takes every block freed
    there (a mark replaced, the reserve given up) before the agent takes its reserve back."""
    done = threading.Event()

    def write() -> None:
        while not done.wait(0.005):
            fill_disk(disk)

    fill_disk(disk)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        done.set()
        writer.join()


def _seqs_until_stopped(agent: AgentProcess, sig: int) -> list[int]:
    """The `seq` of every message a subscriber got from `agent` (its replay's heartbeat and
    a few beats after), then `agent` stopped by `sig`."""
    with Subscriber(agent.events, topics=("heartbeat",)) as sub:
        sub.ready()
        seqs = [sub.recv()[1]["seq"] for _ in range(3)]
    agent.stop(sig)
    return seqs


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_seq_grows_across_quick_restarts_on_a_full_disk_without_reserve(
    tmp_path: Path, small_disk: Path, sig: int
) -> None:
    """Field run: on a state disk a checkpoint had filled, the reserve spent, rounds 4 and 5
    both started at the same seq (...480834): the mark could not be written, and each start
    within the ~10 s the mark runs ahead of the clock numbered from the last mark again."""
    state_dir = small_disk / "state"
    env = agent_env(tmp_path, FOREWARN_STATE_DIR=str(state_dir), FOREWARN_HEARTBEAT_INTERVAL="0.1")
    with AgentProcess(tmp_path, env=env):
        pass  # the state directory's mark, ~10 s ahead of the clock
    last = 0
    with checkpoint_writer(small_disk):
        for _ in range(3):
            agent = AgentProcess(tmp_path, env=env).start()
            try:
                seqs = _seqs_until_stopped(agent, sig)
            finally:
                agent.stop()
            assert seqs == sorted(set(seqs)), seqs
            assert seqs[0] > last, f"restart numbered from {seqs[0]}, at or below {last} before"
            last = seqs[-1]


def test_seq_grows_across_restarts_after_a_clock_step_back_on_a_full_disk(
    tmp_path: Path, small_disk: Path
) -> None:
    """The clock stepped back an hour (NTP correcting one that ran ahead) while the state
    disk is full: the clock gives no floor then, and the runtime directory's mark is what
    keeps each restart above the last; a reboot after (the runtime directory emptied) with
    room on the disk again numbers from the state directory's mark."""
    clock, offset = shifted_wall_clock(tmp_path)
    env = agent_env(
        tmp_path, FOREWARN_STATE_DIR=str(small_disk / "state"), FOREWARN_HEARTBEAT_INTERVAL="0.1"
    )
    env.update(clock)
    with AgentProcess(tmp_path, env=env) as agent:
        last = _seqs_until_stopped(agent, signal.SIGTERM)[-1]
    offset.write_text("-3600")
    with checkpoint_writer(small_disk):
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
            agent = AgentProcess(tmp_path, env=env).start()
            try:
                seqs = _seqs_until_stopped(agent, sig)
            finally:
                agent.stop()
            assert seqs[0] > last, f"restart numbered from {seqs[0]}, at or below {last} before"
            last = seqs[-1]
    (small_disk / "checkpoint.pt").unlink()  # the job cleared its old checkpoints
    with AgentProcess(tmp_path, env=env) as agent:
        last = _seqs_until_stopped(agent, signal.SIGTERM)[-1]
    runtime = Path(env["FOREWARN_RUNTIME_DIR"])
    shutil.rmtree(runtime)
    runtime.mkdir()
    with AgentProcess(tmp_path, env=env) as agent:
        first = _seqs_until_stopped(agent, signal.SIGTERM)[0]
    assert first > last, f"after a reboot numbered from {first}, at or below {last} before"


def test_seq_grows_across_restarts_after_a_clock_step_back_with_both_marks_unwritable(
    tmp_path: Path, small_disk: Path
) -> None:
    """The clock stepped back an hour, the state disk full with its reserve spent, and the
    runtime directory's file system full too: neither copy of the mark can be replaced. Each
    start numbered from the last mark written, the previous run's numbers again."""
    (tmp_path / "run").mkdir()
    with tmpfs_disk(tmp_path / "run", "1m") as run_disk:
        clock, offset = shifted_wall_clock(tmp_path)
        env = agent_env(
            tmp_path,
            FOREWARN_STATE_DIR=str(small_disk / "state"),
            FOREWARN_RUNTIME_DIR=str(run_disk / "forewarn"),
            FOREWARN_HEARTBEAT_INTERVAL="0.1",
        )
        env.update(clock)
        with AgentProcess(tmp_path, env=env) as agent:
            last = _seqs_until_stopped(agent, signal.SIGTERM)[-1]
        offset.write_text("-3600")
        fill_disk(run_disk)
        with checkpoint_writer(small_disk):
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
                agent = AgentProcess(tmp_path, env=env).start()
                try:
                    seqs = _seqs_until_stopped(agent, sig)
                finally:
                    agent.stop()
                assert seqs[0] > last, f"restart numbered from {seqs[0]}, at or below {last}"
                last = seqs[-1]
