"""`every="auto"` with background saves: the guard feeds `AdaptiveInterval` each save's
upload (durable less stall), so the interval counts it as `forewarn plan` does. Before, it
was fed the stall only and planned as if every save were durable once training resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.clients import CheckpointGuard
from forewarn.clients.adaptive import AdaptiveInterval
from forewarn.clients.checkpoint import CheckpointStore
from support import eventually, requires

pytestmark = requires("torch")


def test_a_background_saves_upload_reaches_the_adaptive_interval(tmp_path: Path) -> None:
    import torch

    adaptive = AdaptiveInterval(mtbi_seconds=3600, min_seconds=0.05, max_seconds=60)
    store = CheckpointStore(str(tmp_path / "run"))
    guard = CheckpointGuard(
        notices=False,
        handle_signals=False,
        flag_file=None,
        store=store,
        background=True,
        every="auto",
        adaptive=adaptive,
    )
    try:
        guard.save_state(1, {"w": torch.zeros(1024), "step": 1})
        eventually(lambda: guard.durable_step == 1, 10, "the background save to be durable")
        eventually(lambda: adaptive.upload_seconds > 0, 10, "the upload to be recorded")
        assert adaptive.scenario is not None
        assert adaptive.scenario.upload_seconds == adaptive.upload_seconds
        assert guard.every_seconds == pytest.approx(adaptive.seconds)
    finally:
        guard.close()
        store.close()
