"""A writer killed with SIGKILL at random points: `latest()` never returns a partial
generation, and no commit marker ever stands before its data."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, S3Options

# Sizes straddle the store's thresholds: inline and threaded hashing, and on S3 a single PUT
# against a 5 MiB-part multipart upload.
LOCAL_SIZES = (10, 100_000, 1_500_000)
S3_SIZES = (10, 100_000, (5 << 20) + 4096)


def content(step: int, index: int, size: int) -> bytes:
    seed = f"{step}:{index}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def writer(url: str, sizes: tuple[int, ...]) -> None:
    """Save generation after generation, as a restarted training job would."""
    store = (
        CheckpointStore(url, keep=3, s3=S3Options(part_size=5 << 20))
        if url.startswith("s3://")
        else (CheckpointStore(url, keep=3))
    )
    latest = store.latest()
    step = latest.step + 1 if latest else 1
    while True:
        with store.save(step, metadata={"step": step}) as gen:
            for index, size in enumerate(sizes):
                with gen.open(f"part-{index}.bin") as stream:
                    data = content(step, index, size)
                    # Several writes per file, so kills land inside files too.
                    for start in range(0, size, 512 * 1024):
                        stream.write(data[start : start + 512 * 1024])
        step += 1


def run_trials(url: str, sizes: tuple[int, ...], trials: int, max_delay: float) -> None:
    context = multiprocessing.get_context("fork")
    chooser = random.Random(20261130)
    store = CheckpointStore(url)
    partial_seen = 0
    advanced = 0
    committed_seen: set[int] = set()
    dry = 0  # kills in a row that came before the writer committed anything new
    for _trial in range(trials):
        process = context.Process(target=writer, args=(url, sizes), daemon=True)
        process.start()
        if not committed_seen:
            # Wait for the first commit before the first kill, so there is something to keep.
            # How long that took (start-up and one save) scales the kill delays, so on a
            # loaded machine the kills still land anywhere within about one save.
            started = time.monotonic()
            deadline = started + 60
            while store.latest() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            max_delay = max(max_delay, 1.5 * (time.monotonic() - started))
        process.join(chooser.uniform(0, max_delay))
        assert process.pid is not None and process.is_alive()
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)

        latest = store.latest()
        assert latest is not None
        new = latest.step not in committed_seen
        advanced += new
        committed_seen.add(latest.step)
        # The load beside the test changes during its run: five kills in a row before any
        # commit mean a save takes longer now than the first one did (check 30a: 3 of 100
        # advanced, where about a third do on a steady machine). The delays follow it.
        dry = 0 if new else dry + 1
        if dry == 5:
            max_delay, dry = 1.5 * max_delay, 0
        assert latest.metadata == {"step": latest.step}
        for index, size in enumerate(sizes):
            assert latest.read_bytes(f"part-{index}.bin") == content(latest.step, index, size)
        for generation in store.generations():
            assert store.verify(generation, checksums=True).ok, generation
        if any(step > latest.step for step in store.steps()):
            partial_seen += 1
    # The kills must really have landed mid-save, and the writer must have made progress.
    print(f"{trials} kills: {partial_seen} left a partial generation, {advanced} advanced")
    assert partial_seen >= trials // 10, f"only {partial_seen} trials left a partial generation"
    assert advanced >= trials // 10, f"the writer advanced in only {advanced} trials"


# 12 s alone; its kill delays scale with how long one save takes, so on a machine loaded
# four-fold or more its 100 trials outgrew the suite's 120 s (a clean-clone run with other
# work beside it). A hang still fails, at 300 s.
@pytest.mark.timeout(300)
@pytest.mark.slow(12)
def test_sigkill_local_disk_100_trials(tmp_path: Any) -> None:
    run_trials(str(tmp_path / "store"), LOCAL_SIZES, trials=100, max_delay=0.12)


# Its kill delays scale the same way: a clean-clone run beside helpers at work (load 14) spent
# its 120 s on a first S3 save that took over 15 s. A hang still fails, at 300 s.
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("s3_env")
def test_sigkill_s3_8_trials(bucket: str) -> None:
    run_trials(f"s3://{bucket}/kill", S3_SIZES, trials=8, max_delay=0.5)
