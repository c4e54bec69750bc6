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
