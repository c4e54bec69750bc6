"""Batch inference: a job killed part-way and restarted skips exactly the committed items."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import BatchProgress, CheckpointStore

ITEMS = [f"doc-{i:03d}" for i in range(50)]


def infer(item: str) -> dict[str, Any]:
    return {"length": len(item), "upper": item.upper()}


def run_job(url: str, log: Path, stop_after: int | None) -> None:
    """Process the remaining items, flushing every 7; stop dead after `stop_after` items."""
    progress = BatchProgress(CheckpointStore(url, keep=2), flush_every=7)
    with log.open("a") as handle:
        for count, item in enumerate(progress.remaining(ITEMS)):
            if stop_after is not None and count == stop_after:
                os.kill(os.getpid(), signal.SIGKILL)
            handle.write(item + "\n")
            handle.flush()
            progress.add(item, infer(item))
    progress.flush()


def test_a_restarted_job_skips_exactly_the_done_items(
    make_store: Any, store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "processed.txt"
    context = multiprocessing.get_context("fork")
    first = context.Process(target=run_job, args=(store_url, log, 24))
    first.start()
    first.join(60)
    assert first.exitcode == -signal.SIGKILL
    processed_first = log.read_text().split()
    assert processed_first == ITEMS[:24]

    progress = BatchProgress(make_store())
    # Flushes of 7 committed 21 items; the 3 after the last flush were lost with the process.
    assert progress.done == frozenset(ITEMS[:21])
    assert progress.resumed_from is not None and progress.resumed_from.step == 21

    log.write_text("")
    run_job(store_url, log, None)
    assert log.read_text().split() == ITEMS[21:]

    final = BatchProgress(make_store())
    assert len(final) == len(ITEMS)
    assert dict(final.outputs()) == {item: infer(item) for item in ITEMS}
    assert final.output("doc-007") == infer("doc-007")


def test_batch_progress_rules(tmp_path: Path) -> None:
    progress = BatchProgress(CheckpointStore(tmp_path))
    progress.add(5, [1, 2])
    assert 5 in progress and "5" in progress and progress.pending == 1
    with pytest.raises(ValueError, match="already done"):
        progress.add("5")
    with pytest.raises(TypeError, match="str or int"):
        progress.add(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        progress.add("x", object())
    assert progress.flush() is not None
    assert progress.flush() is None
    with pytest.raises(KeyError, match="no committed output"):
        progress.output("missing")
    assert BatchProgress(CheckpointStore(tmp_path)).output(5) == [1, 2]


def _flush_twice_and_corrupt_the_second(make_store: Any) -> None:
    """14 items flushed as steps 7 and 14, then one bit of step 14's done.json flipped."""
    first = BatchProgress(make_store(), flush_every=7)
    for item in ITEMS[:14]:
        first.add(item, infer(item))
    store = make_store()
    newest = store.get(14)
    raw = bytearray(newest.open("done.json").read())
    raw[len(raw) // 2] ^= 0x01  # same size: only the checksum tells
    with store.backend.writer(f"{newest.name}/done.json") as stream:
        stream.write(bytes(raw))


def test_a_corrupt_done_manifest_falls_back_to_the_flush_before_it(
    make_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _flush_twice_and_corrupt_the_second(make_store)

    with caplog.at_level("WARNING", logger="forewarn.checkpoint"):
        resumed = BatchProgress(make_store(), flush_every=7)
    assert resumed.resumed_from is not None and resumed.resumed_from.step == 7
    assert resumed.done == frozenset(ITEMS[:7])
    assert "step-000000000014" in caplog.text and "done.json does not match" in caplog.text
    # The items of the lost flush are redone; step 14 is taken, so the flushes go above it.
    for item in resumed.remaining(ITEMS):
        resumed.add(item, infer(item))
    resumed.flush()
    final = BatchProgress(make_store())
    assert final.resumed_from is not None and final.resumed_from.step > 14
    assert dict(final.outputs()) == {item: infer(item) for item in ITEMS}


def test_a_job_resumed_above_a_passed_over_flush_keeps_its_outputs(make_store: Any) -> None:
    """After a fallback the flushes commit one step above the items done (14 items in
    generation 15); the next job resumed from there flushed its first item at step 15 again:
    it rewrote that generation's output shard (the outputs of 7 committed items gone), then
    failed with GenerationExistsError."""
    _flush_twice_and_corrupt_the_second(make_store)
    second = BatchProgress(make_store(), flush_every=7)
    for item in second.remaining(ITEMS[:14]):
        second.add(item, infer(item))  # the 7 items of the lost flush, committed as step 15

    third = BatchProgress(make_store(), flush_every=7)
    assert third.resumed_from is not None and third.resumed_from.step == 15
    third.add(ITEMS[14], infer(ITEMS[14]))
    committed = third.flush()
    assert committed is not None and committed.step > 15
    final = BatchProgress(make_store())
    assert dict(final.outputs()) == {item: infer(item) for item in ITEMS[:15]}


@pytest.mark.parametrize("rank", ["0", "1"])
def test_each_rank_of_a_torchrun_job_flushes_into_its_own_store(
    make_store: Any, monkeypatch: pytest.MonkeyPatch, rank: str
) -> None:
    """torchrun sets RANK and WORLD_SIZE: a flush took them for a multi-rank save, and in a
    store of one rank's own (as the docs say) rank 1 waited for a commit of rank 0 that never
    came, rank 0 for a part of rank 1 that never came, both until `commit_timeout`."""
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    progress = BatchProgress(make_store(commit_timeout=5), flush_every=2)
    for item in ITEMS[:4]:
        progress.add(item, infer(item))
    assert progress.pending == 0
    assert len(BatchProgress(make_store())) == 4
