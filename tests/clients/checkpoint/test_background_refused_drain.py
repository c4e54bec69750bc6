"""A drain whose background save is refused at once (two saves given up on a hung mount still
hold their copies of the state): the agent hears `failed` for that drain, saying why, and the
drain stays owed a save, so the save after the mount recovers acks it `saved` (a real agent
subprocess with its local provider, a local store whose writes block). And drains at the edge
of a reclaim on that store: two during one upload, a terminate a second after a drain."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forewarn.clients.checkpoint.background as background_module
import pytest
from forewarn.clients.checkpoint import CheckpointStore, ObjectWriter
from forewarn.clients.checkpoint.background import BackgroundSaveError
from forewarn.clients.checkpoint.testing import DelegatingBackend
from support import AgentProcess, LazyModule, agent_env, eventually, requires

pytestmark = [requires("torch"), pytest.mark.usefixtures("forked_agents")]
torch = LazyModule("torch")

# The stall bound (EXIT_STALL_SECONDS, 120 s in use), scaled down.
STALL_BOUND = 0.3


class HungMount(DelegatingBackend):
    """Every write of a state file (under `only`, when set) blocks until `recover` is set, as
    on a hung NFS mount."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.recover = threading.Event()
        self.only = ""

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not key.endswith("state.pt") or not key.startswith(self.only):
            return inner
        original, recover = inner.write, self.recover

        def write(data: Any) -> int:
            if not recover.wait(60):
                raise TimeoutError("the test never let the mount recover")
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def _stuck_saves() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("forewarn-background-save-")]


def _acks(env: dict[str, str]) -> list[dict[str, Any]]:
    """The acks the agent wrote to its telemetry, oldest first."""
    from forewarn.agent.telemetry import FILE_NAME, read_records

    path = Path(env["FOREWARN_STATE_DIR"]) / FILE_NAME
    return [r for r in read_records(path) if r["kind"] == "ack"] if path.exists() else []


@pytest.fixture
def hung_mount(tmp_path: Path) -> Iterator[HungMount]:
    backend = HungMount(CheckpointStore(str(tmp_path / "store")).backend)
    try:
        yield backend
    finally:
        backend.recover.set()
        eventually(lambda: not _stuck_saves(), timeout=30, what="the stuck saves to end")


def test_a_drain_whose_save_is_refused_for_stuck_copies_is_acked_failed_then_saved(
    tmp_path: Path, hung_mount: HungMount, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forewarn.clients import CheckpointGuard

    monkeypatch.setattr(background_module, "EXIT_STALL_SECONDS", STALL_BOUND)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
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
        # Two saves stuck in their writes, each given up as stalled by the save after it.
        guard.save_state(1, state)
        with pytest.raises(BackgroundSaveError):
            guard.save_state(2, state)
        guard.save_state(2, state)
        with pytest.raises(BackgroundSaveError):
            guard.save_state(3, state)
        assert len(_stuck_saves()) == 2
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
        # The drain still asks at the next step, and is refused again: the agent was told
        # once (the step's own failed ack goes out, naming no notice).
        assert guard.due(4), "the drain is still owed a save"
        with pytest.raises(BackgroundSaveError, match="still stuck in their writes"):
            guard.save_state(4, state)
        eventually(
            lambda: any(a["step"] == 4 for a in _acks(env)[before:]), what="step 4's failed ack"
        )
        assert [a["step"] for a in _acks(env)[before:] if a["notice_id"] == notice] == [3]
        # The mount recovers: the drain is still owed a save, and the next one answers it.
        hung_mount.recover.set()
        eventually(lambda: not _stuck_saves(), timeout=30, what="the stuck saves to end")
        assert guard.due(5), "the drain is still owed a save"
        saved = guard.save_state(5, state)
        assert notice in saved.notices, saved
        assert guard.saver.wait() is not None
        guard.close()
        eventually(
            lambda: (
                (notice, 5, "saved")
                in [(a["notice_id"], a["step"], a["outcome"]) for a in _acks(env)]
            ),
            what="the drain's saved ack",
        )
    store.close()


def test_two_drains_during_one_upload_are_both_answered_by_the_next_save(
    tmp_path: Path, hung_mount: HungMount
) -> None:
    """Two drains faster than a save: both arrive while step 1 still uploads; the first save
    after it answers both, and the agent hears `saved` for each (a real agent subprocess)."""
    from forewarn.clients import CheckpointGuard

    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
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
    from datetime import datetime, timedelta, timezone

    from forewarn.clients import CheckpointGuard
    from forewarn.clients.checkpoint.manifest import generation_name

    hung_mount.only = generation_name(1)
    store = CheckpointStore(backend=hung_mount)
    state = {"w": torch.zeros(64, 64)}
    env = agent_env(tmp_path)
    with AgentProcess(tmp_path, env=env) as agent:
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
        drain = agent.control({"op": "notify", "action": "drain"})["notice"]["id"]
        eventually(lambda: guard.due(1), what="the drain")
        assert guard.save_state(1, state).notices == (drain,)
        deadline = (datetime.now(timezone.utc) + timedelta(seconds=30)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
        terminate = agent.control({"op": "notify", "action": "terminate", "deadline": deadline})[
            "notice"
        ]["id"]
        eventually(lambda: guard.due(2), what="the terminate")
        final = guard.save_state(2, state)
        assert final.exit and final.generation is not None and final.generation.step == 2
        assert store.latest_hint() == 2 and [g.step for g in store.generations()] == [2]
        guard.close()
        hung_mount.recover.set()
        eventually(lambda: not _stuck_saves(), timeout=30, what="the cancelled save to end")
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
