"""Two jobs given one store with `keep`: one job's retention must leave alone a save of an
older step another process is still writing (a slower job, a job restarted from an older
checkpoint while the old one still flushes), on local disk and on S3."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from support import eventually

# Saves step 100: writes a.bin, says so, waits for the go file, writes b.bin and commits.
SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from forewarn.clients.checkpoint import CheckpointStore

    url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    with CheckpointStore(url) as store, store.save(100) as gen:
        gen.write_bytes("a.bin", b"a" * 1000)
        ready.touch()
        while not go.exists():
            time.sleep(0.01)
        gen.write_bytes("b.bin", b"b" * 1000)
    print("committed", flush=True)
    """
)


def test_retention_spares_an_older_step_another_process_is_saving(
    store_url: str, tmp_path: Path
) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, store_url, str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        eventually(lambda: ready.exists() or child.poll() is not None, timeout=60)
        assert child.poll() is None, child.communicate()
        with CheckpointStore(store_url, keep=1) as store:
            store.flush(200, lambda gen: gen.write_bytes("model.bin", b"m" * 100))
            # Before, this commit's retention deleted step 100's files under the other job:
            # its save failed (or committed without a.bin).
            assert store.prune(dry_run=True) == []
            go.touch()
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            assert "committed" in out
            report: Any = store.verify(100, checksums=True)
            assert report.ok, report
            assert store.latest() is not None
    finally:
        child.kill()
        child.wait()


# One rank of a two-rank save of step 100 (the ranks meet through the store): writes its
# first file, says so, waits for the go file, writes its second file and commits.
SLOW_RANK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from forewarn.clients.checkpoint import CheckpointStore

    url, rank, ready, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    with CheckpointStore(url, poll_interval=0.02) as store:
        with store.save(100, rank=rank, world_size=2) as gen:
            gen.write_bytes(f"a{rank}.bin", b"a" * 1000)
            ready.touch()
            while not go.exists():
                time.sleep(0.01)
            gen.write_bytes(f"b{rank}.bin", b"b" * 1000)
    print("committed", flush=True)
    """
)


def test_retention_spares_an_older_step_another_job_saves_on_several_ranks(
    store_url: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    readies = [tmp_path / f"ready{rank}" for rank in (0, 1)]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", SLOW_RANK, store_url, str(rank), str(readies[rank]), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for rank in (0, 1)
    ]
    try:
        eventually(lambda: all(ready.exists() for ready in readies) or any_ended(ranks), timeout=60)
        for rank in ranks:
            assert rank.poll() is None, rank.communicate()
        with CheckpointStore(store_url, keep=1) as store:
            store.flush(200, lambda gen: gen.write_bytes("model.bin", b"m" * 100))
            # Before, this commit's retention deleted step 100's files under the other job's
            # ranks: its commit failed with `a0.bin is missing from storage`.
            assert store.prune(dry_run=True) == []
            go.touch()
            for rank in ranks:
                out, err = rank.communicate(timeout=60)
                assert rank.returncode == 0, err
                assert "committed" in out
            report: Any = store.verify(100, checksums=True)
            assert report.ok, report
            assert store.get(100).world_size == 2
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()


def any_ended(processes: list[subprocess.Popen[str]]) -> bool:
    return any(process.poll() is not None for process in processes)


def test_retention_spares_a_step_whose_other_rank_writes_before_rank_0_saves(
    store_url: str, tmp_path: Path
) -> None:
    # Rank 1 of the other job reached its save first (rank 0 still gathering its state):
    # rank 0's claim did not exist yet, and this job's retention deleted rank 1's files.
    go = tmp_path / "go"
    readies = [tmp_path / f"ready{rank}" for rank in (0, 1)]

    def start(rank: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", SLOW_RANK, store_url, str(rank), str(readies[rank]), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )

    ranks = [start(1)]
    try:
        eventually(lambda: readies[1].exists() or any_ended(ranks), timeout=60)
        assert ranks[0].poll() is None, ranks[0].communicate()
        with CheckpointStore(store_url, keep=1) as store:
            store.flush(200, lambda gen: gen.write_bytes("model.bin", b"m" * 100))
            assert store.prune(dry_run=True) == []
            ranks.append(start(0))
            eventually(lambda: readies[0].exists() or any_ended(ranks), timeout=60)
            go.touch()
            for rank in ranks:
                out, err = rank.communicate(timeout=60)
                assert rank.returncode == 0, err
                assert "committed" in out
            report: Any = store.verify(100, checksums=True)
            assert report.ok, report
            assert store.get(100).world_size == 2
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()


# Rank 1 of a two-rank save of step 7, killed in it (its claim's renewal dies with it).
KILLED_RANK = textwrap.dedent(
    """
    import os, sys
    from forewarn.clients.checkpoint import CheckpointStore

    writer = CheckpointStore(sys.argv[1]).save(7, rank=1, world_size=2)
    writer.write_bytes("a1.bin", b"killed")
    os._exit(9)
    """
)


def claims(store: CheckpointStore, url: str) -> list[str]:
    if url.startswith("s3://"):
        from test_s3_two_writers import root_keys

        return [key for key in root_keys(store) if key.endswith(".claim")]
    return sorted(name for name in os.listdir(url) if name.endswith(".lock"))


def test_a_killed_ranks_claim_is_swept_as_rank_0s_is(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank claims its step: the claim a killed rank other than 0 left is a dead
    writer's like rank 0's, and goes with the sweep of stale claims (not one per killed rank
    left in the store's root for ever)."""
    from forewarn.clients.checkpoint import s3claim

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RANK, store_url],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
    )
    assert killed.returncode == 9, killed.stderr
    with CheckpointStore(store_url) as store:
        suffix = ".claim" if store_url.startswith("s3://") else ".lock"
        assert claims(store, store_url) == [f".step-000000000007.rank-1{suffix}"]
        # On S3 a claim is stale a lease after its last write, whoever wrote it.
        monkeypatch.setattr(s3claim, "LEASE", 0.0)
        assert store.backend.remove_stale_claims() == 1
        assert claims(store, store_url) == []


def test_a_two_rank_save_killed_is_saved_again_at_once_by_the_job_restarted_here(
    store_url: str, tmp_path: Path
) -> None:
    """Every rank's claim, not only rank 0's, is a killed writer's as soon as its process is
    gone from this machine: the job restarted at once here (torchrun restarting its workers)
    saves the step its ranks were SIGKILLed in without waiting out a lease."""
    held = [tmp_path / f"held{rank}" for rank in (0, 1)]
    go = tmp_path / "never"
    killed = [
        subprocess.Popen(
            [sys.executable, "-c", SLOW_RANK, store_url, str(rank), str(held[rank]), str(go)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in (0, 1)
    ]
    try:
        eventually(lambda: all(path.exists() for path in held) or any_ended(killed), timeout=60)
        for rank in killed:
            assert rank.poll() is None
    finally:
        for rank in killed:
            rank.kill()
            rank.wait()
    go.touch()
    again = [
        subprocess.Popen(
            [sys.executable, "-c", SLOW_RANK, store_url, str(rank), str(tmp_path / "r"), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for rank in again:
        out, err = rank.communicate(timeout=60)
        assert rank.returncode == 0, err
        assert "committed" in out
    with CheckpointStore(store_url) as store:
        assert store.get(100).world_size == 2


def test_a_single_rank_save_leaves_a_step_another_jobs_rank_is_saving(
    store_url: str, tmp_path: Path
) -> None:
    """A job restarted with one rank (fewer nodes left) saving the step the old two-rank job
    still flushes, whose rank 1 reached its save first: the single-rank save took rank 1's
    files for a dead writer's leftovers and deleted them under it. Now it is refused, naming
    that writer, and touches nothing."""
    from forewarn.clients.checkpoint import CommitError

    ready, go = tmp_path / "ready1", tmp_path / "go"
    rank1 = subprocess.Popen(
        [sys.executable, "-c", SLOW_RANK, store_url, "1", str(ready), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: ready.exists() or rank1.poll() is not None, timeout=60)
        assert rank1.poll() is None, rank1.communicate()
        with CheckpointStore(store_url) as store:
            with pytest.raises(CommitError, match="another process is saving it"):
                store.save(100)
            assert "a1.bin" in store.backend.list_sizes("step-000000000100")
    finally:
        rank1.kill()
        rank1.wait()
