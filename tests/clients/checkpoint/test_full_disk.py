"""A disk that holds `keep` generations but not one more: a save that finds it full deletes
what retention would delete once it commits, and saves again (a real tmpfs, real torch)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from support import fill_disk, requires, tmpfs_disk

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


def test_a_full_disk_names_the_file_it_could_not_write(small_disk: Path) -> None:
    """The documented `with store.save(step) as gen:` on a full disk raised the bare `OSError:
    [Errno 28] No space left on device`, naming no file, store or disk (found: a 40 MiB tmpfs
    store, a 30 MiB save, and a disk filled by another process after the files landed, at
    the manifest): the error names the path it could not write; nothing of the save is
    left, and the generation before restores."""
    root = small_disk / "store"
    store = CheckpointStore(root)
    store.flush(1, lambda gen: gen.write_bytes("model.bin", os.urandom(1 << 20)))
    with pytest.raises(OSError) as failed, store.save(2) as gen:
        gen.write_bytes("model.bin", os.urandom(4 << 20))  # more than the disk holds
    assert str(failed.value) == (
        f"[Errno 28] No space left on device: '{root}/step-000000000002/model.bin'"
    )
    assert store.steps() == [1]
    with pytest.raises(OSError) as failed, store.save(3) as gen:
        gen.write_bytes("model.bin", os.urandom(64 << 10))
        fill_disk(small_disk)  # another process takes the rest: the manifest fails
    assert str(failed.value) == (
        f"[Errno 28] No space left on device: '{root}/step-000000000003/MANIFEST.json'"
    )
    (small_disk / "checkpoint.pt").unlink()
    assert store.steps() == [1]
    assert sorted(os.listdir(root)) == ["LATEST", "step-000000000001"]  # no temp, no lock
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 1


def test_a_disk_already_full_at_the_saves_claim_names_its_lock_file(small_disk: Path) -> None:
    """A guard's exit save on a disk already full failed at its claim (the writer's name in
    the step's lock file) with the bare `OSError: [Errno 28] No space left on device`, and
    left that lock file behind (found: a guard's SIGTERM save on a filled 40 MiB tmpfs:
    `the checkpoint of step 25 was NOT saved (OSError: [Errno 28] No space left on
    device)`, `.step-000000000025.lock` left). The error names the lock file; it goes."""
    root = small_disk / "store"
    store = CheckpointStore(root)
    store.flush(1, lambda gen: gen.write_bytes("model.bin", os.urandom(64 << 10)))
    fill_disk(small_disk)
    with pytest.raises(OSError) as failed, store.save(2) as gen:
        gen.write_bytes("model.bin", b"weights")
    assert str(failed.value) == (
        f"[Errno 28] No space left on device: '{root}/.step-000000000002.lock'"
    )
    assert sorted(os.listdir(root)) == ["LATEST", "step-000000000001"]
    (small_disk / "checkpoint.pt").unlink()
    store.flush(2, lambda gen: gen.write_bytes("model.bin", b"weights"))  # space is back
    assert store.steps() == [1, 2]


# A writer killed mid-save (a reclaim's SIGKILL at the deadline): its step committed before,
# then its next save's file half written when the kill came.
KILLED_WRITER = """
import os, sys, time
from forewarn.clients.checkpoint import CheckpointStore

store = CheckpointStore(sys.argv[1], keep=1)
store.flush(10, lambda gen: gen.write_bytes("blob", os.urandom(1200 << 10)))
with store.save(20) as gen:
    with gen.open("blob") as stream:
        stream.write(os.urandom(1200 << 10))
        stream.flush()
        print("writing", flush=True)
        time.sleep(300)
"""


def test_a_full_disk_makes_room_by_removing_a_killed_writers_unfinished_save(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job before was SIGKILLed at a reclaim's deadline mid-save: its unfinished step 20
    (1.2 MiB of temp file) stayed beside its committed step 10, and the resumed job's saves
    (step 15 here) found the disk full: retention had nothing older than step 10 to delete,
    so every save failed until the job reached step 20 again, whose save removes the
    leftover, and an exit's save in between was lost. Found: a local store after a reclaim
    kill mid-save held `step-000000000180/.state.pt.tmp-…` (195 MB) that `forewarn checkpoint
    prune --keep 1` left ("deleted nothing"). A save that runs out of space removes a killed
    writer's unfinished saves (no live claim holds them) before it tries again."""
    root = small_disk / "store"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    finally:
        writer.kill()  # the platform's SIGKILL at the deadline
        writer.wait(30)
    assert (root / "step-000000000020").is_dir()
    caplog.set_level(logging.WARNING, "forewarn.checkpoint")
    store = CheckpointStore(root, keep=1)
    latest = store.latest()
    assert latest is not None and latest.step == 10
    store.flush(15, lambda gen: gen.write_bytes("blob", os.urandom(1200 << 10)))
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 15
    assert not (root / "step-000000000020").exists()
    assert "no space to save step-000000000015" in caplog.text
    assert "step-000000000020, an unfinished save whose writer is gone" in caplog.text
