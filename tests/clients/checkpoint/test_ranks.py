"""Multi-rank commits: two gloo ranks on CPU through torch.distributed, and ranks that meet
through the store when no process group exists."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import (
    CheckpointStore,
    CommitError,
    CommitTimeout,
    GenerationWriter,
)
from forewarn.clients.checkpoint.testing import DelegatingBackend, free_port
from forked_ranks import RankLauncher
from support import eventually, requires

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
    leave_open: bool = False,
) -> threading.Thread:
    def run() -> None:
        store = CheckpointStore(url, commit_timeout=timeout, poll_interval=0.02)

        def write(gen: GenerationWriter) -> None:
            if leave_open:
                gen.open(f"rank-{rank}.bin").write(bytes([rank]) * 10)  # never closed
            else:
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
    # The scenario: a window in which rank 0 could commit if it wrongly did; that nothing
    # happens cannot be waited for, so the window is a fixed 0.3 s.
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


@pytest.mark.parametrize("careless", [0, 1])
def test_a_rank_that_leaves_a_file_open_stops_the_commit_at_once(
    tmp_path: Path, careless: int
) -> None:
    # `torch.save(state, gen.open(name))` never closes its file: that rank's commit raised
    # "files still open" without handing in its part, and the other rank waited for it
    # until commit_timeout (600 s by default), past any notice deadline.
    url = str(tmp_path / "store")
    results: dict[int, Any] = {}
    started = time.monotonic()
    threads = [
        rank_thread(url, rank, 5, results, timeout=60, leave_open=rank == careless)
        for rank in (0, 1)
    ]
    for thread in threads:
        thread.join(60)
    assert time.monotonic() - started < 30
    for rank in (0, 1):
        assert isinstance(results[rank], CommitError), results[rank]
        assert not isinstance(results[rank], CommitTimeout), results[rank]
        assert f"files still open: rank-{careless}.bin" in str(results[rank])
    assert CheckpointStore(url).latest() is None


def test_a_single_rank_save_that_leaves_a_file_open_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(CommitError, match=r"files still open: model\.pt"), store.save(5) as gen:
        gen.open("model.pt").write(b"weights")
    # Its files and its lock are gone: another process may save the step at once.
    assert store.steps() == []
    assert sorted(os.listdir(tmp_path / "store")) == []
    with store.save(5) as gen:
        gen.write_bytes("model.pt", b"weights")
    assert store.latest() is not None


def test_a_missing_rank_times_out(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    results: dict[int, Any] = {}
    rank_thread(url, 0, 5, results, timeout=0.5).join(30)
    assert isinstance(results[0], CommitTimeout)
    assert "every rank's part of step-000000000005" in str(results[0])
    # Which rank, and the usual cause: a save on rank 0 only, under torchrun's RANK and
    # WORLD_SIZE, waited 10 minutes for a part no rank would write, without saying so.
    assert "no part from rank 1 of 2" in str(results[0])
    assert "rank=0, world_size=1" in str(results[0])
    rank_thread(url, 1, 6, results, timeout=0.5).join(30)
    assert isinstance(results[1], CommitTimeout)
    assert CheckpointStore(url).latest() is None


class Watched(DelegatingBackend):
    """Counts the reads of each key: the test knows when a rank has looked at a part."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.reads: dict[str, int] = {}

    def get_small(self, key: str) -> bytes | None:
        self.reads[key] = self.reads.get(key, 0) + 1
        return super().get_small(key)


def save_thread(store: CheckpointStore, rank: int, results: dict[int, Any]) -> threading.Thread:
    """Rank `rank` of a 2-rank job saving step 100 (attempt "0") through the store."""

    def run() -> None:
        try:
            with store.save(100, rank=rank, world_size=2, attempt="0") as gen:
                gen.write_bytes(f"shard-{rank}.bin", f"new{rank}".encode() * 10)
            results[rank] = gen.committed
        except Exception as exc:
            results[rank] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def check_new_job_committed(url: str, results: dict[int, Any]) -> None:
    assert results[0].step == 100 and results[1].step == 100, results
    latest = CheckpointStore(url).latest(verify="checksums")
    assert latest is not None and latest.step == 100
    assert {name: latest.read_bytes(name) for name in latest.files} == {
        "shard-0.bin": b"new0" * 10,
        "shard-1.bin": b"new1" * 10,
    }


STEP_100 = "step-000000000100"


class Reclaimed(DelegatingBackend):
    """The machine goes away as rank 0 writes the manifest: nothing past the parts lands."""

    def put_small(self, key: str, data: bytes) -> None:
        if key.endswith("MANIFEST.json"):
            raise OSError("machine reclaimed")
        super().put_small(key, data)


def dead_job(url: str) -> None:
    """Job 1 got as far as both parts of step 100 (attempt "0", the OLD bytes on rank 1)."""
    results: dict[int, Any] = {}
    stores = [
        CheckpointStore(backend=Reclaimed(CheckpointStore(url).backend), poll_interval=0.02),
        CheckpointStore(url, poll_interval=0.02),
    ]

    def run(rank: int) -> None:
        try:
            with stores[rank].save(100, rank=rank, world_size=2, attempt="0") as gen:
                gen.write_bytes(f"shard-{rank}.bin", b"OLD" * 10)
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert isinstance(results[0], OSError) and isinstance(results[1], CommitError), results
    assert {"parts/rank-00000.json", "parts/rank-00001.json"} <= set(
        CheckpointStore(url).backend.list_sizes(STEP_100)
    )


@pytest.mark.parametrize("first", [0, 1], ids=["rank-0-first", "rank-1-first"])
def test_a_dead_jobs_parts_and_failure_never_enter_the_next_jobs_commit(
    tmp_path: Path, first: int
) -> None:
    """Job 1 died at step 100 with both ranks' parts written, rank 0's naming its failure. Job 2
    (no torchrun, or torchrun's restart count back at 0 on a fresh machine: the same attempt)
    reaches step 100 again.
    - Rank 0 first: it must wait for job 2's rank 1, not commit job 1's shard beside its own
      (which then made job 2's rank 1 fail with GenerationExistsError).
    - Rank 1 first: job 1's rank 0 recorded its failure in its part, and that failure is not
      job 2's."""
    url = str(tmp_path / "store")
    dead_job(url)
    watched = Watched(CheckpointStore(url).backend)
    # The part the first rank reads: the other rank's, left by job 1.
    left = f"{STEP_100}/parts/rank-{1 - first:05d}.json"
    results: dict[int, Any] = {}
    early = save_thread(CheckpointStore(backend=watched, poll_interval=0.02), first, results)
    eventually(lambda: watched.reads.get(left, 0) >= 1, what=f"rank {first} reading {left}")
    late = save_thread(CheckpointStore(url, poll_interval=0.02), 1 - first, results)
    early.join(30)
    late.join(30)
    check_new_job_committed(url, results)


class LostPeers:
    """A process group whose other ranks hand in their parts (`gathered`) and then die: the
    broadcast of rank 0's outcome fails, as gloo fails it once a peer's socket is closed."""

    def __init__(self, rank: int, gathered: list[Any]) -> None:
        self.rank = rank
        self.gathered = gathered

    def all_gather_object(self, out: list[Any], value: Any, group: Any = None) -> None:
        out[:] = [value if rank == self.rank else part for rank, part in enumerate(self.gathered)]

    def broadcast_object_list(self, box: list[Any], src: int = 0, group: Any = None) -> None:
        raise RuntimeError("Connection closed by peer [127.0.0.1]:29500")


class GoneBefore(LostPeers):
    """A process group whose other ranks died before the parts were gathered."""

    def all_gather_object(self, out: list[Any], value: Any, group: Any = None) -> None:
        raise RuntimeError("Connection reset by peer")


def test_a_commit_whose_peer_dies_after_handing_in_its_part_is_committed_on_every_rank(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 1 of two gloo ranks SIGKILLed right after the all_gather of the parts: rank 0
    wrote the marker, then its broadcast raised the gloo error, so the save made for a
    terminate was reported as failed (no exit line, no ack) although it was committed."""
    from forewarn.clients.checkpoint.ranks import Ranks

    store = CheckpointStore(str(tmp_path / "store"))
    writers = []
    for rank in (0, 1):
        writer = store.save(12, rank=rank, world_size=2)
        writer.write_bytes(f"shard-{rank}.bin", bytes([rank]) * 10)
        writers.append(writer)
    parts = [writer._request(None).part.to_json() for writer in writers]
    zero, one = writers
    zero.ranks = Ranks(0, 2, LostPeers(0, parts))
    with caplog.at_level("WARNING", logger="forewarn.checkpoint"):
        generation = zero.commit()
    assert generation.step == 12 and sorted(generation.files) == ["shard-0.bin", "shard-1.bin"]
    assert "step-000000000012 is committed" in caplog.text and "Connection closed" in caplog.text
    assert store.latest(verify="checksums").step == 12  # type: ignore[union-attr]
    # A surviving rank other than 0 whose broadcast failed finds the marker rank 0 wrote.
    one.ranks = Ranks(1, 2, LostPeers(1, parts))
    assert one.commit().step == 12

    # Rank 0 died before its marker: the survivor says nothing was committed, as a CommitError.
    dead = store.save(13, rank=0, world_size=2)
    survivor = store.save(13, rank=1, world_size=2)
    survivor.write_bytes("shard-1.bin", b"x")
    survivor.ranks = Ranks(1, 2, LostPeers(1, [dead._request(None).part.to_json(), None]))
    with pytest.raises(CommitError, match=r"step-000000000013 was not committed: rank 1 lost"):
        survivor.commit()
    assert store.latest().step == 12  # type: ignore[union-attr]

    early = store.save(14, rank=0, world_size=2)
    early.ranks = Ranks(0, 2, GoneBefore(0, []))
    with pytest.raises(CommitError, match=r"rank 0 lost the other ranks while handing in"):
        early.commit()
    assert store.verify(14).problems == ("not committed",)


def test_a_failed_rank_whose_peers_are_gone_raises_its_own_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A rank whose block failed (a full disk) while a peer was lost: the abort's collectives
    raised gloo's error in place of the rank's own, which named what went wrong."""
    from forewarn.clients.checkpoint.ranks import Ranks

    store = CheckpointStore(str(tmp_path / "store"))
    with pytest.raises(OSError, match="No space left"), store.save(15, rank=0, world_size=2) as gen:
        gen.ranks = Ranks(0, 2, GoneBefore(0, []))
        raise OSError(28, "No space left on device")
    assert "step-000000000015 aborted; the other ranks could not be told" in caplog.text


RESUME_WORKER = Path(__file__).with_name("resume_worker.py")


@requires("torch")  # found without importing it: only the ranks import torch
@pytest.mark.timeout(300)
def test_ranks_resume_from_the_generation_rank_0_picked(
    store_url: str, tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """Each rank called latest() on its own: a generation committed between two ranks' calls
    (a straggler of the job before still committing its final save, or a listing that one
    rank saw stale) resumed the ranks from different steps, silently."""
    store = CheckpointStore(store_url)
    store.flush(10, lambda gen: gen.write_bytes("model.bin", b"step 10"))
    listed, go = tmp_path / "listed", tmp_path / "go"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(GLOO_SOCKET_IFNAME="lo")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    argv = [store_url, str(listed), str(go)]
    ranks = [rank_launcher.start(RESUME_WORKER, [str(rank), "2", *argv], env) for rank in (0, 1)]
    try:
        eventually(lambda: listed.exists() or ranks[0].poll() is not None, timeout=120)
        # Rank 0 has picked; rank 1 has not looked yet: a newer generation commits now.
        store.flush(20, lambda gen: gen.write_bytes("model.bin", b"step 20"))
        go.touch()
        said = []
        for process in ranks:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-3000:]
            said.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    finally:
        for process in ranks:
            process.kill()
    for rank, lines in enumerate(said):
        assert lines[0] == {"rank": rank, "step": 10, "checksummed": True, "weights": "step 10"}
        assert lines[-1]["rank"] == rank
        assert "PermissionError" in lines[-1]["error"] and "Access Denied" in lines[-1]["error"]
    assert said[0][1] == {"rank": 0, "alone": 20}
    assert "rank 0 could not" in said[1][-1]["error"]


RESTORE_WORKER = Path(__file__).with_name("restore_worker.py")


@requires("torch")  # found without importing it: only the ranks import torch
@pytest.mark.timeout(300)
def test_ranks_restore_together_past_a_generation_one_rank_finds_corrupt(
    store_url: str, rank_launcher: RankLauncher
) -> None:
    """Two ranks resuming with `latest()` and `load_training_state`: rank 1's file of the
    newest generation had a flipped byte (sizes right), so rank 1 raised and rank 0 went on
    from that step alone (in training, into a collective no other rank enters). `restore`
    moves every rank to the older generation together, with the model and optimizer of that
    step."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(GLOO_SOCKET_IFNAME="lo")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    ranks = [
        rank_launcher.start(RESTORE_WORKER, [str(rank), "2", store_url], env) for rank in (0, 1)
    ]
    said = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-3000:]
            said.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
            assert "step-000000000020" in err and "does not load" in err, err[-3000:]
            assert "rank 1: step-000000000020 does not verify" in err, err[-3000:]
    finally:
        for process in ranks:
            process.kill()
    for rank, lines in enumerate(said):
        assert lines == [{"rank": rank, "step": 10, "state_step": 10, "weights_match": True}]


class FailsToMakeDurable(DelegatingBackend):
    """The storage of one rank failing to make its files durable (an fsync's EIO)."""

    def make_durable(self, prefix: str) -> None:
        raise OSError(5, "Input/output error")


def test_a_rank_whose_files_cannot_be_made_durable_stops_the_commit_at_once(
    tmp_path: Path,
) -> None:
    """Ranks meeting through the store: a rank whose files could not be made durable raised
    without handing in its part, and rank 0 polled for it until commit_timeout (600 s by
    default), past any notice's deadline (the collectives' path hands it in since ea3ed11b).
    It is handed in now, failed: every rank stops at once."""
    url = str(tmp_path / "store")
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        store = CheckpointStore(url, commit_timeout=60, poll_interval=0.02)
        if rank == 1:
            store = CheckpointStore(
                backend=FailsToMakeDurable(store.backend), commit_timeout=60, poll_interval=0.02
            )
        try:
            with store.save(5, rank=rank, world_size=2) as gen:
                gen.write_bytes(f"rank-{rank}.bin", bytes([rank]) * 10)
            results[rank] = gen.committed
        except Exception as exc:
            results[rank] = exc

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    took = time.monotonic() - started
    assert not any(thread.is_alive() for thread in threads), f"still waiting after {took:.0f} s"
    assert took < 20
    assert isinstance(results[1], OSError), results[1]
    assert isinstance(results[0], CommitError), results[0]
    assert not isinstance(results[0], CommitTimeout), results[0]
    assert "rank 1" in str(results[0]) and "Input/output error" in str(results[0])
    assert CheckpointStore(url).latest() is None


def test_an_exit_save_of_several_ranks_waits_for_a_missing_rank_only_its_time(
    tmp_path: Path,
) -> None:
    """A save with a deadline (`requests_within`, what an exit's save of several ranks gets
    from `flush(timeout=)`) whose other rank never comes (dead, or failed before its save
    began, which it cannot hand in): rank 0 polled for its part for commit_timeout
    (600 s by default), where its requests were bounded by the time left."""
    store = CheckpointStore(str(tmp_path / "store"), commit_timeout=60, poll_interval=0.02)
    started = time.monotonic()
    with (
        pytest.raises(CommitTimeout, match="no part from rank 1 of 2"),
        store.save(5, rank=0, world_size=2, requests_within=1.0) as gen,
    ):
        gen.write_bytes("rank-0.bin", b"0" * 10)
    took = time.monotonic() - started
    assert took < 10, f"rank 0 waited {took:.1f} s for a save of 1 s"
