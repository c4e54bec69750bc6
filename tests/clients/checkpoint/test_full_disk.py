"""A disk that holds `keep` generations but not one more: a save that finds it full deletes
what retention would delete once it commits, and saves again (a real tmpfs, real torch)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from support import requires, tmpfs_disk

pytestmark = requires("torch")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs: two checkpoints of the model below fit, three do not."""
    with tmpfs_disk(tmp_path, "3m") as mount:
        yield mount


def _train(store: CheckpointStore, background: bool) -> tuple[list[str], dict[str, Any]]:
    """60 steps of a real torch loop (about 1.1 MiB of state), a checkpoint every 10; a
    failed save is noted and training goes on, as a job does."""
    import torch
    from forewarn.clients.checkpoint import BackgroundSaver

    torch.manual_seed(0)
    model = torch.nn.Linear(512, 544)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    failures: list[str] = []
    saver = BackgroundSaver(store) if background else None
    for step in range(1, 61):
        loss = model(torch.randn(8, 512)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10:
            continue
        state = {"model": model.state_dict(), "step": step}
        try:
            if saver is not None:
                saver.save(step, state)
            else:

                def write(gen: Any, state: dict[str, Any] = state) -> None:
                    with gen.open("state.pt") as stream:
                        torch.save(state, stream)

                store.flush(step, write)
        except Exception as exc:
            failures.append(f"step {step}: {type(exc).__name__}: {exc}")
    if saver is not None:
        try:
            saver.close()
        except Exception as exc:
            failures.append(f"close: {type(exc).__name__}: {exc}")
    return failures, {key: value.clone() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("background", [False, True], ids=["flush", "background"])
def test_a_disk_that_holds_keep_generations_but_not_one_more_keeps_saving(
    small_disk: Path, background: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import torch
    from forewarn.clients.checkpoint import load_state

    caplog.set_level(logging.WARNING, "forewarn.checkpoint")
    store = CheckpointStore(small_disk / "store", keep=2)
    failures, final = _train(store, background)
    # Without room made, every save from step 30 on failed and step 20 stayed the newest.
    assert failures == []
    assert store.steps() == [50, 60]
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 60
    loaded = load_state(latest)
    assert loaded["step"] == 60
    for key, value in final.items():
        assert torch.equal(loaded["model"][key], value)
    # What was deleted early, and why, is in the log.
    assert "no space to save step-000000000030" in caplog.text
    assert "deleting step-000000000010 now, which retention (keep=2)" in caplog.text


def test_a_full_disk_without_retention_to_run_still_fails_and_deletes_nothing(
    small_disk: Path,
) -> None:
    """keep=None, or keep=1 with one generation: nothing retention would delete, so the
    save fails as before and the one generation there stays."""
    for keep in (None, 1):
        root = small_disk / f"store-{keep}"
        store = CheckpointStore(root, keep=keep)
        store.flush(1, lambda gen: gen.write_bytes("blob", os.urandom(2 << 20)))
        with pytest.raises(OSError, match="No space left") as failed:
            store.flush(2, lambda gen: gen.write_bytes("blob", os.urandom(2 << 20)))
        # The bare `[Errno 28] No space left on device` named neither the store nor the
        # step, nor said whether the checkpoint before it was still there.
        assert getattr(failed.value, "__notes__", []) == [
            f"forewarn: saving step-000000000002 into {store.url} ran out of space: nothing "
            "of it was committed, and the newest committed generation is still "
            "step-000000000001"
        ]
        assert store.steps() == [1]
        latest = store.latest(verify="checksums")
        assert latest is not None and latest.step == 1
        store.delete(1)
