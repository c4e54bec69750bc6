"""Multi-rank commits: two gloo ranks on CPU through torch.distributed, and ranks that meet
through the store when no process group exists."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from forewarn.clients.checkpoint import (
    CheckpointStore,
    CommitError,
    CommitTimeout,
    GenerationWriter,
)
from forewarn.clients.checkpoint.testing import free_port
from forked_ranks import RankLauncher
from support import requires

WORKER = Path(__file__).with_name("rank_worker.py")


def run_two_ranks(
    launcher: RankLauncher, urls: list[str], extra_env: dict[str, str]
) -> list[list[dict[str, Any]]]:
    env = {**os.environ, **extra_env}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), GLOO_SOCKET_IFNAME="lo")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    # Each rank is a process forked from a launcher that imported torch once.
    processes = [launcher.start(WORKER, [str(rank), "2", *urls], env) for rank in (0, 1)]
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err[-3000:]
        outputs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    return outputs


def check_two_rank_run(store: CheckpointStore, outputs: list[list[dict[str, Any]]]) -> None:
    for rank, events in enumerate(outputs):
        by_event = {event["event"]: event for event in events}
        assert by_event["committed"]["step"] == 10
        assert by_event["committed"]["files"] == [
            "shard-0.bin",
            "shard-1.bin",
            "training_state.rank00000.pt",
            "training_state.rank00001.pt",
        ]
        assert "disk full on rank 1" in by_event["failed"]["error"]
        assert "'same.bin' written by ranks 0 and 1" in by_event["collision"]["error"]
        assert by_event["resumed"] == {
            "url": by_event["resumed"]["url"],
            "event": "resumed",
            "rank": rank,
            "step": 10,
            "extra": {"rank": rank},
            "weights_match": True,
        }
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 10 and latest.world_size == 2
    assert latest.read_bytes("shard-1.bin") == b"\x01" * 1001
    assert latest.files["shard-1.bin"].rank == 1
    assert store.verify(20).problems == ("not committed",)
    assert store.verify(30).problems == ("not committed",)


@requires("torch")  # found without importing it: only the ranks import torch
def test_two_gloo_ranks_commit_on_local_disk_and_s3(
    tmp_path: Path, bucket: str, s3_env: dict[str, str], rank_launcher: RankLauncher
) -> None:
    # One pair of processes runs the same script against both backends: torch starts once.
    urls = [str(tmp_path / "store"), f"s3://{bucket}/ranks"]
    outputs = run_two_ranks(rank_launcher, urls, s3_env)
    for url in urls:
        check_two_rank_run(
            CheckpointStore(url), [[e for e in events if e["url"] == url] for events in outputs]
        )


def rank_thread(
    url: str,
    rank: int,
    step: int,
    results: dict[int, Any],
    gate: threading.Event | None = None,
    fail: bool = False,
    timeout: float = 30.0,
) -> threading.Thread:
    def run() -> None:
        store = CheckpointStore(url, commit_timeout=timeout, poll_interval=0.02)

        def write(gen: GenerationWriter) -> None:
            gen.write_bytes(f"rank-{rank}.bin", bytes([rank]) * 10)
            if gate is not None:
                assert gate.wait(30)
            if fail:
                raise RuntimeError(f"rank {rank} broke")

        try:
            result = store.flush(step, write, rank=rank, world_size=2)
            assert result.seconds > 0
            results[rank] = result.generation
        except Exception as exc:
            results[rank] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_ranks_meet_through_the_store(store_url: str) -> None:
    results: dict[int, Any] = {}
    gate = threading.Event()
    zero = rank_thread(store_url, 0, 5, results)
    one = rank_thread(store_url, 1, 5, results, gate=gate)
    store = CheckpointStore(store_url)
    # Rank 0 has written its part but must not commit while rank 1's part is missing.
    deadline = time.monotonic() + 10
    while "parts/rank-00000.json" not in store.backend.list_sizes("step-000000000005"):
        assert time.monotonic() < deadline, "rank 0 never wrote its part"
        time.sleep(0.02)
    time.sleep(0.3)
    assert store.latest() is None
    gate.set()
    zero.join(30)
    one.join(30)
    assert results[0].step == 5 and results[1].step == 5
    latest = store.latest(verify="checksums")
    assert latest is not None and sorted(latest.files) == ["rank-0.bin", "rank-1.bin"]


def test_a_failed_rank_stops_the_commit(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    results: dict[int, Any] = {}
    threads = [rank_thread(url, 0, 5, results), rank_thread(url, 1, 5, results, fail=True)]
    for thread in threads:
        thread.join(30)
    assert isinstance(results[0], CommitError) and "rank 1 broke" in str(results[0])
    assert isinstance(results[1], RuntimeError)
    assert CheckpointStore(url).latest() is None


def test_a_missing_rank_times_out(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    results: dict[int, Any] = {}
    rank_thread(url, 0, 5, results, timeout=0.5).join(30)
    assert isinstance(results[0], CommitTimeout)
    assert "every rank's part of step-000000000005" in str(results[0])
    rank_thread(url, 1, 6, results, timeout=0.5).join(30)
    assert isinstance(results[1], CommitTimeout)
    assert CheckpointStore(url).latest() is None
