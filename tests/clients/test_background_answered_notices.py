"""Background saves (`save_state` with `background=True`) name the notices they answered in
their generation's metadata (`forewarn_notices`), as synchronous saves do: a drain's save, and a
later periodic one while that drain stands. A job resumed from either acks the drain at the
resumed step and writes nothing. A real agent (its local provider), a local store, real torch
tensors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.guard_state import ANSWERED_NOTICES
from forewarn.testing import RunningAgent, eventually
from support import LazyModule, requires

pytestmark = requires("torch")
torch = LazyModule("torch")


@pytest.mark.timeout(120)
def test_background_drain_and_periodic_saves_name_the_drain_and_a_resume_saves_nothing(
    tmp_path: Path,
) -> None:
    """Found: H281 left the BackgroundSaver path writing no `forewarn_notices`, so a job
    resumed from a background save saved again for a drain that checkpoint answered."""
    store = CheckpointStore(str(tmp_path / "store"))
    with RunningAgent("local", set_env=True) as agent:
        drain = agent.notify("drain", reason="manual")
        first = CheckpointGuard(store=store, handle_signals=False, flag_file=None, background=True)
        try:
            eventually(lambda: first.due(1), 30, "the drain's save")
            saved = first.save_state(1, {"w": torch.zeros(4)})
            assert saved.notices == (drain,) and not saved.exit, saved
            # A save the loop makes later by itself (its periodic one), the drain still standing.
            first.save_state(2, {"w": torch.ones(4)})
        finally:
            first.close()
        answered = {g.step: g.metadata.get(ANSWERED_NOTICES) for g in store.generations()}
        assert {step: sorted(a or {}) for step, a in answered.items()} == {
            1: [drain],
            2: [drain],
        }, answered

        restored = store.restore(lambda gen: gen.step)
        assert restored is not None and restored[0].step == 2
        notices = Notices(start=False)
        second = CheckpointGuard(
            store=store, notices=notices, handle_signals=False, flag_file=None, background=True
        )
        saves = []
        try:
            second.resumed(2)
            notices.start()
            step = 2

            def acked() -> bool:
                nonlocal step
                step += 1
                if second.due(step):
                    saves.append(second.save_state(step, {"w": torch.full((4,), float(step))}))
                time.sleep(0.01)  # a step of training
                return any(
                    a.get("client") == notices.client_id and a.get("notice_id") == drain
                    for a in agent.acks
                )

            eventually(acked, 30, "the resumed job's ack of the drain")
        finally:
            second.close()
            notices.close()  # given to the guard, so not closed by it
        ack = next(
            a
            for a in agent.acks
            if a.get("client") == notices.client_id and a.get("notice_id") == drain
        )
    assert [(s.step, s.reasons) for s in saves] == [], saves
    assert [g.step for g in store.generations()] == [1, 2]
    assert ack["step"] == 2, ack


@pytest.mark.timeout(120)
def test_a_background_guards_exit_save_names_the_drain_and_the_terminate(tmp_path: Path) -> None:
    """The exit's save of a background-saving guard (its final save, synchronous) names every
    notice it answered: the terminate, and the drain standing with it."""
    store = CheckpointStore(str(tmp_path / "store"))
    with RunningAgent("local", set_env=True) as agent:
        drain = agent.notify("drain", reason="manual")
        terminate = agent.notify("terminate", "20m", reason="manual")
        guard = CheckpointGuard(store=store, handle_signals=False, flag_file=None, background=True)
        try:
            step, results = 0, []
            while not (results and results[-1].exit):
                step += 1
                if guard.due(step):
                    results.append(guard.save_state(step, {"w": torch.full((4,), float(step))}))
                time.sleep(0.002)  # a step of training
                assert step < 20_000, "no exit"
        finally:
            guard.close()
    assert results[-1].exit, results
    exit_step = results[-1].step
    answered = {g.step: sorted(g.metadata.get(ANSWERED_NOTICES) or {}) for g in store.generations()}
    assert answered[exit_step] == sorted([drain, terminate]), answered
