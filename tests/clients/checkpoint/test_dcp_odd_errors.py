"""A rank's exception inside a DCP save or load that cannot cross ranks as DCP sends it
(pickled, gathered to rank 0, then the verdict sent to every rank) fails the save or load on
every rank, never hangs one: DCP gathered rank 1's exception whose unpickle raised `TypeError`
on rank 0 only, out of DCP's collective, and rank 1 waited in the next one for good (last
session's `StorageError`, fixed for that class alone; any library's or user's class could
still do it). Two gloo ranks, local store; the failing library is odd_errors' classes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.testing import free_port
from forked_ranks import RankLauncher
from support import requires

pytestmark = requires("torch")
WORKER = Path(__file__).with_name("dcp_worker.py")
# A save or a load of this small state takes a few seconds on a loaded machine; a rank left
# waiting in a collective waits gloo's 30 minutes.
BOUND = 120.0


def run_ranks(launcher: RankLauncher, *argv: str) -> dict[int, dict[str, Any]]:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    ranks = [launcher.start(WORKER, [str(rank), "2", *argv], env) for rank in (0, 1)]
    said: dict[int, dict[str, Any]] = {}
    try:
        for rank, process in enumerate(ranks):
            try:
                out, err = process.communicate(timeout=BOUND)
            except subprocess.TimeoutExpired:
                for other in ranks:
                    other.kill()
                tails = [other.communicate(timeout=30) for other in ranks]
                pytest.fail(f"rank {rank} still waiting after {BOUND} s: {tails}")
            assert process.returncode == 0, err[-3000:]
            for line in out.splitlines():
                if line.startswith("{"):
                    said[rank] = json.loads(line)
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    return said


CASES = [
    # how, kind, faulty rank, file, phase
    ("save", "unpickle", "1", ".distcp", "data"),
    ("save", "lock", "1", ".distcp", "data"),
    ("save", "huge", "1", ".distcp", "data"),
    # a class that exists on the raising rank only: rebuilt there, not on rank 0
    ("save", "rankonly", "1", ".distcp", "data"),
    ("save", "unpickle", "0", ".metadata", "finish"),
    ("save", "lock", "0", ".metadata", "finish"),
    ("async", "unpickle", "1", ".distcp", "data"),
    ("load", "unpickle", "1", ".distcp", "data"),
    ("load", "lock", "1", ".distcp", "data"),
    # load_dcp checks a local generation's files on every rank before DCP's collectives
    ("verify", "unpickle", "1", ".distcp", "check"),
    ("verify", "lock", "1", ".distcp", "check"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("how", "kind", "faulty", "suffix", "phase"), CASES)
def test_a_rank_whose_storage_raises_an_odd_error_fails_every_rank(
    tmp_path: Path,
    rank_launcher: RankLauncher,
    how: str,
    kind: str,
    faulty: str,
    suffix: str,
    phase: str,
) -> None:
    _run(rank_launcher, str(tmp_path / "store"), how, kind, faulty, suffix)


@pytest.mark.timeout(600)
def test_a_rank_whose_copy_of_an_s3_generation_fails_fails_every_rank(
    bucket: str, rank_launcher: RankLauncher
) -> None:
    """`load_dcp` copies an S3 generation's files before DCP's collectives: a rank whose
    copy failed raised alone, and the other waited in DCP's first collective."""
    _run(rank_launcher, f"s3://{bucket}/runs/job-1", "fetch", "lock", "1", "dcp")


def _run(
    rank_launcher: RankLauncher, url: str, how: str, kind: str, faulty: str, suffix: str
) -> None:
    if how in ("load", "verify", "fetch"):
        assert set(run_ranks(rank_launcher, "save", url, "3")) == {0, 1}
    said = run_ranks(rank_launcher, "odd", url, "5", how, kind, faulty, suffix)
    assert set(said) == {0, 1}, said
    bad = int(faulty)
    if how in ("verify", "fetch"):
        # Not DCP's to gather: the faulty rank raises its own exception, the other a
        # RankError naming that rank, its class and its words.
        assert said[bad]["failed"].startswith("Error"), said[bad]
        other = said[1 - bad]["failed"]
        assert other.startswith(f"RankError: rank {bad}: odd_errors.Error"), other
        assert "the library failed writing" in other
        return
    for line in said.values():
        # Every rank is told that the faulty rank failed, by what class, with what words.
        assert line.get("failed", "").startswith("CheckpointException"), line
        assert f"ranks:dict_keys([{bad}])" in line["failed"], line
        module = "rank_only_errors." if kind == "rankonly" else "odd_errors."
        assert module in line["failed"] and "the library failed writing" in line["failed"]
        assert f"rank {bad}" in line["failed"], line
    # The faulty rank keeps the original exception, with its traceback, as the cause.
    cause = said[bad]["cause"]
    assert cause is not None and "the library failed writing" in cause, said[bad]
    store = CheckpointStore(url)
    if how == "load":
        assert store.latest() is not None and store.latest().step == 3  # type: ignore[union-attr]
    else:
        assert store.latest() is None


STATEFUL_CASES = [
    # how, kind of the error the user's state_dict() raises on rank 1
    ("save", "plain"),
    ("save", "lock"),
    ("async", "plain"),
    ("load", "plain"),
]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("how", "kind"), STATEFUL_CASES)
def test_a_statefuls_state_dict_raising_on_one_rank_fails_every_rank(
    tmp_path: Path, rank_launcher: RankLauncher, how: str, kind: str
) -> None:
    """DCP calls each Stateful's `state_dict()` itself, before its first collective: one
    raising on rank 1 left rank 1 alone, and rank 0 waited in DCP's collective for good. The
    faulty rank raises its own exception; the other a `RankError` naming the rank, the class
    and the words; nothing is committed (a load leaves the store as it was)."""
    url = str(tmp_path / "store")
    if how == "load":
        assert set(run_ranks(rank_launcher, "stateful", url, "3", "save", "none", "-1")) == {0, 1}
    said = run_ranks(rank_launcher, "stateful", url, "5", how, kind, "1")
    assert set(said) == {0, 1}, said
    assert "the user's state_dict()" in said[1]["failed"], said[1]
    other = said[0]["failed"]
    assert other.startswith("RankError: rank 1: "), other
    assert "the user's state_dict()" in other, other
    kinds = {"plain": "builtins.RuntimeError", "lock": "odd_errors.ErrorHoldingALock"}
    assert kinds[kind] in other, other
    latest = CheckpointStore(url).latest()
    assert (latest and latest.step) == (3 if how == "load" else None), latest
