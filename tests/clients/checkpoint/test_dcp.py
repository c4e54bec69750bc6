"""Sharded saves through torch.distributed.checkpoint into the store (issue 20): real gloo
ranks as subprocesses, on local disk and on the moto S3 server; resume onto 1, 2 and 4 ranks
with bit-identical tensors; a rank SIGKILLed during a background (async) save leaves no
partial generation."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore, CommitTimeout, ObjectWriter
from forewarn.clients.checkpoint.testing import DelegatingBackend, free_port
from forked_ranks import RankLauncher, RankProcess
from support import requires

pytestmark = requires("torch")  # found without importing it: collection stays torch-free
WORKER = Path(__file__).with_name("dcp_worker.py")


def start(launcher: RankLauncher, world: int, *argv: str) -> list[RankProcess]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    # Each rank is a process forked from a launcher that imported torch once.
    return [launcher.start(WORKER, [str(rank), str(world), *argv], env) for rank in range(world)]


def finish(processes: list[RankProcess]) -> list[dict[str, Any]]:
    said = []
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err[-3000:]
        said += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return said


# Each rank is a forked process: gloo, DCP and the store in every one, on a loaded machine.
@pytest.mark.timeout(900)
def test_two_ranks_save_through_dcp_and_resume_on_1_2_and_4(
    store_url: str, rank_launcher: RankLauncher
) -> None:
    said = finish(start(rank_launcher, 2, "save", store_url, "100"))
    assert {line["rank"] for line in said} == {0, 1}
    store = CheckpointStore(store_url)
    generation = store.latest(verify="checksums")
    assert generation is not None and generation.step == 100 and generation.world_size == 2
    # Every shard and the metadata are in the manifest with a checksum, each from its rank.
    shards = {name: entry for name, entry in generation.files.items() if name.endswith(".distcp")}
    assert {entry.rank for entry in shards.values()} == {0, 1}
    assert "dcp/.metadata" in generation.files
    assert all(entry.checksum.startswith("sha256") for entry in generation.files.values())

    for world in (1, 2, 4):
        loaded = finish(start(rank_launcher, world, "load", store_url))
        assert len(loaded) == world
        for line in loaded:
            assert line["loaded"] == 100 and line["step_value"] == 100
            assert line["identical"], (world, line)
        assert sum(line["local_rows"] for line in loaded) == 96  # resharded onto `world`


@pytest.mark.timeout(900)
def test_async_saves_go_on_beside_the_training_loops_collectives(
    tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """DCP's thread ran its collectives on the default group beside the loop's all_reduce,
    in a different order on each rank: both ranks hung until gloo's timeout (30 min)."""
    processes = start(rank_launcher, 2, "train", str(tmp_path / "store"))
    try:
        said = []
        for process in processes:
            # A hang fails in the ranks, at a collective that waited a minute (the worker's
            # TRAIN_COLLECTIVE_TIMEOUT): 120 s for the whole run, 600 all_reduces and three
            # saves, ran out beside busy loops on ranks that were doing nothing wrong.
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, err[-3000:]
            said += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    finally:
        for process in processes:
            process.kill()
    assert [(line["saved"], line["sums_ok"]) for line in said] == [([10, 20, 30], True)] * 2
    assert CheckpointStore(str(tmp_path / "store")).latest(verify="checksums").step == 30  # type: ignore[union-attr]


@pytest.mark.timeout(900)
def test_a_rank_killed_during_a_background_save_leaves_no_partial_generation(
    store_url: str, rank_launcher: RankLauncher, tmp_path: Path
) -> None:
    finish(start(rank_launcher, 2, "save", store_url, "100"))
    hold = tmp_path / "rank-0-may-write"
    processes = start(rank_launcher, 2, "async", store_url, "200", "96", str(hold))
    try:
        # Kill rank 1 once the async save has returned and its background write has put its
        # shard of generation 200 in place. Rank 0 writes no shard until `hold` exists, so
        # nothing can be committed before the kill (rank 0 commits only after gathering rank
        # 1's part): with both free, everything could land between two listings under load.
        stdout = processes[1].stdout
        assert stdout is not None
        line = stdout.readline()
        assert json.loads(line) == {"rank": 1, "started": 200}, line
        store = CheckpointStore(store_url)
        deadline = time.monotonic() + 180
        while not (written := store.backend.list_sizes("step-000000000200")):
            assert time.monotonic() < deadline, "the background save wrote nothing"
            time.sleep(0.02)
        assert all("__0_" not in name for name in written), written  # rank 0 held
        os.kill(processes[1].pid, signal.SIGKILL)
        processes[1].wait(30)
        hold.touch()  # rank 0 writes its shard beside a dead rank 1, then cannot gather
        while not any("__0_" in name for name in store.backend.list_sizes("step-000000000200")):
            assert time.monotonic() < deadline, "rank 0 wrote no shard once let go"
            if processes[0].poll() is not None:
                break
            time.sleep(0.02)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=60)
    assert 200 in store.steps()  # the kill landed mid-save: files without a commit
    assert store.verify(200).problems == ("not committed",)
    latest = store.latest(verify="checksums")
    assert latest is not None and latest.step == 100
    for generation in store.generations():
        assert store.verify(generation, checksums=True).ok
    loaded = finish(start(rank_launcher, 2, "load", store_url))
    assert all(line["loaded"] == 100 and line["identical"] for line in loaded)


def test_dcp_hashes_the_tensors_it_writes_in_place_and_copies_what_it_must(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from forewarn.clients.checkpoint import hashing
    from forewarn.clients.checkpoint.dcp import load_dcp, save_dcp

    generator = torch.Generator().manual_seed(3)
    big = torch.randn(512, 1024, generator=generator)
    state = {
        "whole": torch.randn(256, 1024, generator=generator),  # written as it is: in place
        "view": big[100:300],  # a view of a larger storage: DCP writes a copy
        "transposed": torch.randn(1024, 128, generator=generator).t(),  # its whole storage
        "small": torch.arange(10),
        "extra": {"lr": 0.1},
    }
    stable_bytes = 0
    real_feed = hashing.StreamHasher.feed

    def feed(self: Any, data: Any, write: Any, *, stable: bool = False) -> None:
        nonlocal stable_bytes
        if stable:
            stable_bytes += memoryview(data).nbytes
        real_feed(self, data, write, stable=stable)

    monkeypatch.setattr(hashing.StreamHasher, "feed", feed)
    store = CheckpointStore(tmp_path / "store")
    save_dcp(store, 1, state)
    # "whole" and "transposed" were hashed in place; the copy of "view" was not.
    assert stable_bytes == (256 + 128) * 1024 * 4
    generation = store.get(1, verify="checksums")
    restored = {
        "whole": torch.zeros(256, 1024),
        "view": torch.zeros(200, 1024),
        "transposed": torch.zeros(128, 1024),
        "small": torch.zeros(10, dtype=torch.int64),
        "extra": {"lr": 0.0},
    }
    load_dcp(generation, restored)
    for key in ("whole", "view", "transposed", "small"):
        assert torch.equal(restored[key], state[key]), key
    assert restored["extra"] == {"lr": 0.1}


class HeldShards(DelegatingBackend):
    """Writes of DCP's shard files wait until released (a slow disk or upload)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.writing = threading.Event()

    def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
        inner = self.inner.writer(key, on_done)
        if not key.endswith(".distcp"):
            return inner
        original = inner.write

        def write(data: Any) -> int:
            self.writing.set()
            if not self.release.wait(60):
                raise TimeoutError("the test never released the write")
            return original(data)

        inner.write = write  # type: ignore[method-assign]
        return inner


def test_an_async_commit_that_times_out_leaves_the_save_in_flight_and_says_so(
    tmp_path: Path,
) -> None:
    """The timeout used to abort the generation under DCP's still-running thread: its files
    were closed under it, and with two gloo ranks the abort's collectives went beside DCP's
    own (gloo killed rank 0 with a collective mismatch, or both ranks hung)."""
    import torch
    from forewarn.clients.checkpoint.dcp import async_save_dcp, load_dcp

    backend = HeldShards(CheckpointStore(tmp_path / "store").backend)
    store = CheckpointStore(backend=backend)
    state = {"w": torch.randn(64, 32, generator=torch.Generator().manual_seed(5))}
    pending = async_save_dcp(store, 1, state)
    assert backend.writing.wait(60), "DCP never started writing"
    with pytest.raises(CommitTimeout, match=r"step-000000000001: .*still writing.*in flight"):
        pending.commit(timeout=0.05)
    assert store.latest() is None  # nothing committed
    backend.release.set()
    generation = pending.commit(timeout=60)  # the same save, waited for again
    assert generation.step == 1 and store.verify(1, checksums=True).ok
    restored = {"w": torch.zeros(64, 32)}
    load_dcp(store.get(1), restored)
    assert torch.equal(restored["w"], state["w"])


def test_a_flipped_byte_in_a_local_dcp_shard_is_refused_not_loaded(tmp_path: Path) -> None:
    import torch
    from forewarn.clients.checkpoint import CorruptGenerationError
    from forewarn.clients.checkpoint.dcp import load_dcp, save_dcp

    store = CheckpointStore(tmp_path / "store")
    save_dcp(store, 1, {"weight": torch.arange(4096, dtype=torch.float32)})
    generation = store.latest()  # by sizes, the default
    assert generation is not None
    shard = next(name for name in generation.files if name.endswith(".distcp"))
    path = generation.path(shard)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    restored = {"weight": torch.zeros(4096)}
    with pytest.raises(CorruptGenerationError, match=r"\.distcp does not match its checksum"):
        load_dcp(store.latest(), restored)  # type: ignore[arg-type]
    assert torch.equal(restored["weight"], torch.zeros(4096))


def test_loading_a_generation_saved_without_dcp_says_so(store_url: str) -> None:
    """The newest generation of a store DCP saves into was written another way (a job that
    moved to DCP, a save through save_training_state): on local disk load_dcp raised torch's
    `AssertionError: metadata is None; global metadata read failed: ...`."""
    import torch
    from forewarn.clients.checkpoint import save_training_state
    from forewarn.clients.checkpoint.dcp import load_dcp

    store = CheckpointStore(store_url)
    model = torch.nn.Linear(2, 2)
    with store.save(1) as gen:
        save_training_state(gen, model=model, rng=False)
    with pytest.raises(FileNotFoundError, match=r"step-000000000001 holds no DCP save .*\.pt"):
        load_dcp(store.latest(), {"model": model.state_dict()})  # type: ignore[arg-type]


@pytest.mark.timeout(900)
def test_ranks_loading_a_local_generation_share_its_checksums(
    tmp_path: Path, rank_launcher: RankLauncher
) -> None:
    """latest() checked sizes only: the load hashes every DCP file once across the ranks."""
    url = str(tmp_path / "store")
    finish(start(rank_launcher, 2, "save", url, "100"))
    generation = CheckpointStore(url).latest()
    assert generation is not None
    files = sorted(name for name in generation.files if name.startswith("dcp/"))
    loaded = finish(start(rank_launcher, 2, "load", url, "sizes"))
    assert all(line["identical"] for line in loaded)
    hashed = sorted(Path(path).name for line in loaded for path in line["hashed"])
    assert hashed == sorted(Path(name).name for name in files)


def test_a_dcp_generation_restored_through_the_store_hands_its_metadata_to_resumed(
    tmp_path: Path,
) -> None:
    """What docs/checkpoint.md tells a loop of its own that loads DCP saves (the framework
    callbacks' among them): restored with `store.restore(lambda g: load_dcp(g, state))`,
    the generation's exit mark and answered notices reach `guard.resumed`."""
    import torch
    from forewarn.clients import CheckpointGuard
    from forewarn.clients.checkpoint import load_dcp, save_dcp
    from forewarn.clients.guard_state import ANSWERED_NOTICES, EXIT_SAVE

    store = CheckpointStore(str(tmp_path / "store"))
    answered = {"local/d-drain": "2026-12-07T23:00:00Z"}
    saved = {"w": torch.arange(4.0)}
    save_dcp(store, 7, saved, metadata={EXIT_SAVE: True, ANSWERED_NOTICES: answered})
    state = {"w": torch.zeros(4)}
    restored = store.restore(lambda generation: load_dcp(generation, state))
    assert restored is not None and restored[0].step == 7
    assert torch.equal(state["w"], saved["w"])
    guard = CheckpointGuard(store=store, notices=False, handle_signals=False, flag_file=None)
    try:
        guard.resumed(7)
        assert guard._answered_at_resume == answered
        assert guard.durable_step == 7
    finally:
        guard.close()
