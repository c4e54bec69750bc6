"""A drain whose background save is refused at once (two saves given up on a hung mount still
hold their copies of the state): the agent hears `failed` for that drain, saying why, and the
drain stays owed a save, so the save after the mount recovers acks it `saved` (a real agent
subprocess with its local provider, a local store whose writes block). And drains at the edge
of a reclaim on that store: two during one upload, a terminate a second after a drain."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import forewarn.clients.checkpoint.background as background_module
import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import BackgroundSaveError
from hung_mount import HungMount, stuck_saves, two_saves_stuck
from support import AgentProcess, LazyModule, agent_env, eventually, requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")

# The stall bound (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL_BOUND = 0.3


def _acks(env: dict[str, str]) -> list[dict[str, Any]]:
    """The acks the agent wrote to its telemetry, oldest first."""
    from forewarn.agent.telemetry import FILE_NAME, read_records

    path = Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME
    return [r for r in read_records(path) if r["kind"] == "ack"] if path.exists() else []


def _wait_saved_ack(env: dict[str, str], notice: str, step: int) -> None:
    """Wait for the agent's record of the drain `notice` acked `saved` at `step`."""
    eventually(
        lambda: (
            (notice, step, "saved")
            in [(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env)]
        ),
        what="the drain's saved ack",
    )


def _terminate_in(agent: AgentProcess, seconds: float) -> str:
    """A terminate notified through the agent's control socket, its deadline `seconds` on:
    its id."""
    deadline = (datetime.now(timezone.utc) + timedelta(seconds=seconds)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    notice = agent.control({"op": "notify", "action": "terminate", "deadline": deadline})
    return str(notice["notice"]["id"])


def _guard(store: CheckpointStore, agent: AgentProcess) -> Any:
    """A background-saving guard on `store` that hears `agent`, once its first heartbeat came
    (saves only when asked: every 1,000 steps)."""
    from forewarn.clients import CheckpointGuard

    guard = CheckpointGuard(
        store=store,
        background=True,
        handle_signals=False,
        flag_file=None,
        every_steps=1000,
        events=agent.events,
        control=agent.control_endpoint,
    )
    eventually(lambda: guard.notices.alive, what="the agent's first heartbeat")
    return guard


@pytest.fixture
def hung_mount(tmp_path: Path) -> Iterator[HungMount]:
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    try:
        yield backend
    finally:
        backend.recover.set()
        eventually(lambda: not stuck_saves(), timeout=30, what="the stuck saves to end")


def test_a_drain_whose_save_is_refused_for_stuck_copies_is_acked_failed_then_saved(
    tmp_path: Path, hung_mount: HungMount, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = _guard(store, agent)
        # Two saves stuck in their writes, each given up as stalled by the save after it.
        two_saves_stuck(guard, state)
        assert len(stuck_saves()) == 2
        before = len(_acks(agent.env))
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(3), what="the drain")
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(3, state)
        # The agent must not believe the drain saved, nor wait on it with no word: it hears
        # `failed` for this notice, with why.
        refused = eventually(
            lambda: [a for a in _acks(env)[before:] if a["notice_id"] == notice],
            timeout=10,
            what="the drain's failed ack",
        )
        assert [a["outcome"] for a in refused] == ["failed"], refused
        assert "still stuck in their writes" in (refused[0]["note"] or ""), refused
        # The drain is held back for the refusal's back-off; once it is over the drain asks
        # again and is refused again: the agent was told once, and hears no more of it.
        assert not guard.due(4), "held back for the refusal's back-off"
        monkeypatch.setattr(guard, "_retry_at", 0.0)
        assert guard.due(4), "the drain is still owed a save"
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(4, state)
        assert [a["step"] for a in _acks(env)[before:] if a["notice_id"] == notice] == [3]
        # The mount recovers: the drain is still owed a save, and the next one answers it.
        hung_mount.recover.set()
        eventually(lambda: not stuck_saves(), timeout=30, what="the stuck saves to end")
        assert guard.due(5), "the drain is still owed a save"
        saved = guard.save_state(5, state)
        assert notice in saved.notices, saved
        assert guard.saver.wait() is not None
        guard.close()
        _wait_saved_ack(env, notice, 5)
    store.close()


def test_two_drains_during_one_upload_are_both_answered_by_the_next_save(
    tmp_path: Path, hung_mount: HungMount
) -> None:
    """Two drains faster than a save: both arrive while step 1 still uploads; the first save
    after it answers both, and the agent hears `saved` for each (a real agent subprocess)."""

    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = _guard(store, agent)
        guard.save_state(1, state)  # stuck in its write until the mount recovers
        first = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        second = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        assert first != second
        eventually(lambda: {first, second} <= guard._notice_ids, what="both drains")
        assert not guard.due(2), "a drain's save waits for the upload in flight"
        hung_mount.recover.set()
        assert guard.saver.wait() is not None
        assert guard.due(3)
        saved = guard.save_state(3, state)
        assert set(saved.notices) == {first, second}, saved
        assert guard.saver.wait() is not None
        guard.close()
        eventually(
            lambda: (
                {(first, 3, "saved"), (second, 3, "saved")}
                <= {(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env)}
            ),
            what="both drains' saved acks",
        )
    store.close()


def test_a_drain_then_a_terminate_a_second_later_exits_on_a_generation_of_its_own(
    tmp_path: Path, hung_mount: HungMount
) -> None:
    """The drain's save is still uploading (stuck) when a terminate comes a second later, its
    deadline 30 s off: the exit's save cancels that upload, commits a generation of its own
    that the store's latest names, and the drain and the terminate are both acked `saved` by
    it; the drain's cancelled generation is never committed (a real agent subprocess)."""
    from forewarn.clients.checkpoint.manifest import generation_name

    hung_mount.only = generation_name(1)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = _guard(store, agent)
        drain = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(1), what="the drain")
        assert guard.save_state(1, state).notices == (drain,)
        terminate = _terminate_in(agent, 30)
        eventually(lambda: guard.due(2), what="the terminate")
        final = guard.save_state(2, state)
        assert final.exit and final.generation is not None and final.generation.step == 2
        assert store.latest_hint() == 2 and [g.step for g in store.generations()] == [2]
        guard.close()
        hung_mount.recover.set()
        eventually(lambda: not stuck_saves(), timeout=30, what="the cancelled save to end")
        # The drain's cancelled save never commits, even once its write returns: a resume
        # takes the exit's generation.
        assert [g.step for g in store.generations()] == [2]
        latest = store.latest()
        assert latest is not None and latest.step == 2
        answered = {(drain, 2, "saved"), (terminate, 2, "saved")}
        eventually(
            lambda: answered <= {(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env)},
            what="the exit save's acks of the drain and the terminate",
        )
        assert all(a["outcome"] == "saved" for a in _acks(env)), _acks(env)
    store.close()


def _two_stuck_saves(guard: Any, state: Any) -> None:
    """Two saves stuck in their writes, each given up as stalled by the save after it."""
    two_saves_stuck(guard, state)
    assert len(stuck_saves()) == 2


def test_a_drain_on_a_mount_that_stays_hung_is_refused_once_per_back_off_not_every_step(
    tmp_path: Path,
    hung_mount: HungMount,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A drain pending while saves given up still hold their copies: tried at every step, it
    was refused at every step, one ERROR line and one `failed` ack naming no notice each (a
    job at 10 steps/s on a mount hung for an hour: 36,000 of each). Now the refusal is said
    once per back-off step, with the steps held back, no ack goes out without a new notice,
    and the first step after the mount recovers saves the drain (a real agent subprocess)."""
    import logging

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = _guard(store, agent)
        _two_stuck_saves(guard, state)
        before = len(_acks(agent.env))
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(3), what="the drain")
        caplog.clear()
        caplog.set_level(logging.ERROR, logger="forewarn.clients")
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(3, state)
        eventually(
            lambda: [a for a in _acks(env)[before:] if a["notice_id"] == notice],
            what="the drain's failed ack",
        )
        # 200 training steps on the hung mount, far within the first back-off step (5 s).
        refused = 0
        for step in range(4, 204):
            if guard.due(step):
                with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
                    guard.save_state(step, state)
                refused += 1
        assert refused == 0, f"{refused} refusals in 200 steps within the back-off"
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 1, lines
        assert "0.0 MiB" not in lines[0] and "32.0 KiB of copies" in lines[0], lines[0]
        assert "saving again at" not in lines[0], lines[0]
        assert "first step after one of those saves ends saves" in lines[0], lines[0]
        # The agent heard the drain's `failed` once, and nothing naming no notice since (the
        # given-up saves' own acks, of steps 1 and 2, may reach it after `before`).
        acks = [(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env) if a["step"] >= 3]
        assert acks == [(notice, 3, "failed")], acks
        # The back-off is over: tried once more, refused, and said once with the steps held.
        monkeypatch.setattr(guard, "_retry_at", 0.0)
        assert guard.due(204)
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(204, state)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(lines) == 2 and "200 steps held back" in lines[1], lines
        assert not guard.due(205), "held again for the next back-off step"
        # A new drain is not held: it hears its `failed` at once, the first drain no more.
        second = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(205), what="the second drain")
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(205, state)
        eventually(
            lambda: [a for a in _acks(env) if a["notice_id"] == second],
            what="the second drain's failed ack",
        )
        assert not guard.due(205), "held again for the next back-off step"
        # The mount recovers: the first step after the stuck saves end saves the drain, with
        # no wait for the back-off (up to 300 s).
        hung_mount.recover.set()
        eventually(lambda: not stuck_saves(), timeout=30, what="the stuck saves to end")
        assert guard.due(206), "the drain is saved at the first step after the recovery"
        saved = guard.save_state(206, state)
        assert set(saved.notices) == {notice, second}, saved
        assert guard.saver.wait() is not None
        guard.close()
        _wait_saved_ack(env, notice, 206)
        acks = [(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env) if a["step"] >= 3]
        assert sorted(acks, key=str) == sorted(
            [
                (notice, 3, "failed"),
                (second, 205, "failed"),
                (notice, 206, "saved"),
                (second, 206, "saved"),
            ],
            key=str,
        ), acks
    store.close()


def test_a_terminate_while_refusals_are_held_back_gets_its_exit_save(
    tmp_path: Path, hung_mount: HungMount, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain refused and held back on a hung mount, then a terminate: its step is due at
    once, and the exit's save is made (never refused), answering both (a real agent)."""

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
        guard = _guard(store, agent)
        _two_stuck_saves(guard, state)
        drain = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(3), what="the drain")
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(3, state)
        assert not guard.due(4), "the drain is held back for the refusal's back-off"
        hung_mount.only = "nothing"  # the exit's own generation writes; the stuck ones stay
        terminate = _terminate_in(agent, 30)
        eventually(lambda: guard.due(5), what="the terminate, not held back")
        final = guard.save_state(5, state)
        assert final.exit and final.generation is not None and final.generation.step == 5
        guard.close()
        answered = {(drain, 5, "saved"), (terminate, 5, "saved")}
        eventually(
            lambda: answered <= {(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env)},
            what="the exit save's acks of the drain and the terminate",
        )
    store.close()
