"""An exit's DCP save of two gloo ranks, one of which writes to storage that stopped answering:
every rank fails before the terminate's deadline (less a margin), says so, and commits
nothing. The save is made as the framework callbacks and a loop of its own (the DCP example in
docs/checkpoint.md) make it for an exit: `save_dcp` with the guard's `exit_save_timeout()`,
public since a loop of its own had no way to bound its exit's save (it hung to the SIGKILL).

Measured before: both ranks raised DCP's `CheckpointException` only after 365 s (botocore's
six 60 s attempts of rank 1's one stalled PUT), far past any reclaim's 30-120 s."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.background import EXIT_SAVE_MARGIN_SECONDS
from forewarn.clients.checkpoint.testing import free_port
from forked_ranks import RankLauncher
from s3_proxy import Reply, Request, S3Proxy
from support import requires

pytestmark = requires("torch")
WORKER = Path(__file__).with_name("dcp_worker.py")
LEAD = 25.0  # the terminate's deadline, from when each rank is told of it
WITHIN = LEAD - EXIT_SAVE_MARGIN_SECONDS  # the save fails by then: its job can still say so


class StalledShards(S3Proxy):
    """Takes every request, and answers none from the first PUT of a DCP shard on: an
    endpoint that stopped answering mid-save (each of botocore's retries is taken and held
    too, and so is whatever the save sends after: its abort, its claim's release)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.let_go = threading.Event()
        self.stopped = False
        self.held = 0

    def answer(self, request: Request) -> Reply | None:
        if request.command == "PUT" and ".distcp" in request.path:
            self.stopped = True
        if self.stopped:
            self.held += 1
            self.let_go.wait(600)
            return Reply(503, [], b"")
        return None


@pytest.mark.timeout(300)
def test_an_exit_dcp_save_of_two_ranks_fails_within_its_time_on_a_stalled_store(
    bucket: str, moto_endpoint: str, rank_launcher: RankLauncher
) -> None:
    url = f"s3://{bucket}/runs/job-1"
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    base.update(GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore")
    base.pop("RANK", None)
    base.pop("WORLD_SIZE", None)
    with StalledShards(moto_endpoint) as proxy:
        try:
            # Rank 0 reaches the storage directly; rank 1 through the proxy that stalls.
            envs = [{**base, "AWS_ENDPOINT_URL": moto_endpoint}]
            envs.append({**base, "AWS_ENDPOINT_URL": proxy.url})
            processes = [
                rank_launcher.start(WORKER, [str(rank), "2", "exit", url, "7", str(LEAD)], env)
                for rank, env in enumerate(envs)
            ]
            said: list[dict[str, Any]] = []
            for process in processes:
                # Before the fix the save ended after 365 s: a hang fails here.
                out, err = process.communicate(timeout=LEAD + 100)
                # Both ended their save and met at the final barrier: no rank left waiting.
                assert process.returncode == 0, err[-3000:]
                said += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        finally:
            proxy.let_go.set()
    assert proxy.held >= 1
    assert sorted(line["rank"] for line in said) == [0, 1]
    for line in said:
        assert "failed" in line, line
        # By the time the save was given (the stalled rank's claim release waits up to it),
        # before the deadline, not 365 s after; the second is the guard's and DCP's own.
        assert line["seconds"] < WITHIN + 1.0, line
    # Every rank is told it failed for rank 1's storage (DCP gathers rank 1's error).
    for line in said:
        assert "ranks:dict_keys([1])" in line["failed"], line
        assert "Read timeout on endpoint" in line["failed"] and "__1_0.distcp" in line["failed"]
    store = CheckpointStore(url)
    assert store.latest() is None
    assert 7 not in store.steps() or store.verify(7).problems == ("not committed",)


@pytest.mark.timeout(300)
def test_a_rank_that_cannot_hand_in_its_part_fails_the_commit_on_every_rank_at_once(
    bucket: str, moto_endpoint: str, rank_launcher: RankLauncher
) -> None:
    """Rank 1's part of the commit could not be written (its storage stopped answering after
    the shards, now that an exit's requests fail in time): it raised before the commit's
    collectives, and rank 0 waited in them for the process group's timeout (30 min)."""
    url = f"s3://{bucket}/runs/job-1"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONWARNINGS="ignore", AWS_ENDPOINT_URL=moto_endpoint)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    processes = [
        rank_launcher.start(WORKER, [str(rank), "2", "partfail", url, "9"], env) for rank in (0, 1)
    ]
    said: list[dict[str, Any]] = []
    for process in processes:
        out, err = process.communicate(timeout=120)  # a rank left waiting fails here
        assert process.returncode == 0, err[-3000:]
        said += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    by_rank = {line["rank"]: line for line in said}
    assert "the storage refused" in by_rank[1]["failed"], by_rank  # its own error, not hidden
    assert "rank 1 failed" in by_rank[0]["failed"], by_rank  # told why, at once
    assert CheckpointStore(url).latest() is None
