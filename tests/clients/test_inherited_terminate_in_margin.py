"""A job restarted under a terminate that an earlier client already acted on, its deadline
already inside this job's exit margin: the guard says "saves and exits now", and the next `due`
answers it, not the guard's quarter-second ticker a step (or many) later. A real agent (its local
provider), in-process guards; the process start time is the seam (`process_started`, read by
the guard when it is made), moved past the first client's ack, as a restarted process's is."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import forewarn.clients.guard as guard_module
import pytest
from forewarn.clients import CheckpointGuard, Notices
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.proctime import steady_seconds
from forewarn.testing import RunningAgent, eventually

# The terminate's lead: past the test, well inside the second guard's exit margin.
LEAD = "5m"
MARGIN = 3600.0


class _Said(logging.Handler):
    """The step the guard had reached when it said it saves and exits now."""

    def __init__(self, guard: CheckpointGuard) -> None:
        super().__init__()
        self.guard = guard
        self.step: int | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if "saves and exits now" in record.getMessage() and self.step is None:
            self.step = self.guard._seen_step


@pytest.mark.timeout(120)
@pytest.mark.parametrize("drain_too", [False, True], ids=["terminate", "and-a-drain"])
def test_an_inherited_terminate_inside_the_margin_is_saved_at_the_next_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drain_too: bool
) -> None:
    """Found: H281's walk logged "saves and exits now" at resumed step 8 and saved at step 9,
    a full extra step of training, the exit left to the ticker. With a drain raised since
    (standing too when the job restarts), that one exit's save answers it as well."""
    store = CheckpointStore(str(tmp_path / "store"))
    with RunningAgent("local", set_env=True) as agent:
        terminate = agent.notify("terminate", LEAD, reason="manual")
        first = CheckpointGuard(store=store, handle_signals=False, flag_file=None)
        try:
            eventually(lambda: first.due(1), 30, "the terminate's save")
            saved = first.save(1, lambda gen: gen.write_bytes("state.bin", b"1"))
            assert saved.exit and saved.notices == (terminate,), saved
        finally:
            first.close()
        eventually(lambda: any(a.get("notice_id") == terminate for a in agent.acks), 30, "its ack")

        drain = agent.notify("drain", reason="manual") if drain_too else None
        # The restarted process: started after the terminate was raised and acted on.
        monkeypatch.setattr(guard_module, "process_started", time.time)
        monkeypatch.setattr(guard_module, "process_started_boot", steady_seconds)
        notices = Notices(start=False)
        second = CheckpointGuard(
            store=store,
            notices=notices,
            handle_signals=False,
            flag_file=None,
            exit_margin=MARGIN,
        )
        said = _Said(second)
        logger = logging.getLogger("forewarn.clients")
        logger.addHandler(said)
        saves = []
        try:
            second.resumed(1)
            notices.start()
            step = 1

            def exited() -> bool:
                nonlocal step
                step += 1
                if second.due(step):
                    saves.append(second.save(step, lambda gen: gen.write_bytes("state.bin", b"2")))
                time.sleep(0.002)  # a step of training
                return bool(saves) and saves[-1].exit

            eventually(exited, 30, "the restarted job's exit")
        finally:
            logger.removeHandler(said)
            second.close()
            notices.close()  # given to the guard, so not closed by it
    assert said.step is not None
    assert [s.step for s in saves] == [said.step + 1], (said.step, saves)
    assert set(saves[0].notices) == {terminate} | ({drain} if drain else set()), saves
