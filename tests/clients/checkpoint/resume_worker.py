"""One rank of a job resuming on the gloo backend (run by test_ranks.py): where it resumes.

    resume_worker.py RANK WORLD URL LISTED GO

Rank 0 touches LISTED once it has listed the store's generations; the other ranks look for
their generation only once GO exists (the test commits a newer one in between, as a straggler
of the job before would). Prints one JSON line per event.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist
from forewarn.clients.checkpoint import CheckpointStore
from forewarn.clients.checkpoint.manifest import LATEST
from forewarn.clients.checkpoint.testing import DelegatingBackend


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Listing(DelegatingBackend):
    """Tells the test once this rank has listed the generations and read the LATEST hint
    after it (`latest()` takes a hint newer than the listing: told after the listing alone,
    the test committed step 20 before the hint was read, and rank 0 rightly picked 20, check
    29c); fails when told to."""

    def __init__(self, inner: object, listed: Path | None) -> None:
        super().__init__(inner)  # type: ignore[arg-type]
        self.listed = listed
        self.has_listed = False
        self.fail = False

    def list_children(self, prefix: str) -> list[str]:
        if self.fail:
            raise PermissionError(13, "Access Denied")
        children = self.inner.list_children(prefix)
        self.has_listed = True
        return children

    def get_small(self, key: str) -> bytes | None:
        found = self.inner.get_small(key)
        if key == LATEST and self.has_listed and self.listed is not None:
            self.listed.touch()
            self.listed = None
        return found


def main() -> None:
    rank, world, url = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    listed, go = Path(sys.argv[4]), Path(sys.argv[5])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    backend = Listing(CheckpointStore(url).backend, listed if rank == 0 else None)
    store = CheckpointStore(backend=backend)
    if rank != 0:
        while not go.exists():
            time.sleep(0.01)
    generation = store.latest(verify="checksums")
    assert generation is not None
    say(
        rank=rank,
        step=generation.step,
        checksummed=generation.checksummed,
        weights=generation.read_bytes("model.bin").decode(),
    )
    if rank == 0:
        alone = store.latest(rank=0, world_size=1)  # no collective: the others are not in it
        say(rank=rank, alone=alone.step if alone is not None else None)
    # Rank 0 cannot list the store: every rank raises its error, none waits for the others.
    backend.fail = rank == 0
    try:
        store.latest()
    except Exception as exc:
        say(rank=rank, error=f"{type(exc).__name__}: {exc}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    os._exit(0)  # see dcp_worker.py: gloo's teardown at interpreter exit
