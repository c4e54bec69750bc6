"""Who this process is in a multi-rank save, and how the ranks meet at commit time.

torch.distributed is used when the program already imported torch and initialised a process
group (an all_gather of the part-manifests, then a broadcast of rank 0's outcome). Otherwise
the ranks meet through the store: rank 0 polls for every part-manifest, the others poll for
the commit marker. torch is never imported here.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .errors import CommitTimeout, StoreConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int
    world_size: int
    dist: Any = None  # the torch.distributed module when its collectives are used
    group: Any = None

    def all_gather(self, value: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.world_size
        self.dist.all_gather_object(gathered, value, group=self.group)
        return gathered

    def broadcast_from_zero(self, value: Any) -> Any:
        box = [value]
        src = 0 if self.group is None else self.dist.get_global_rank(self.group, 0)
        self.dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]


def initialised_dist() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def resolve(rank: int | None, world_size: int | None, group: Any = None) -> Ranks:
    """Explicit arguments, else the initialised process group, else RANK/WORLD_SIZE, else 0/1."""
    dist = initialised_dist()
    if dist is not None:
        dist_rank, dist_world = dist.get_rank(group), dist.get_world_size(group)
        if rank in (None, dist_rank) and world_size in (None, dist_world):
            return Ranks(dist_rank, dist_world, dist if dist_world > 1 else None, group)
    if rank is None:
        rank = _env_int("RANK", 0)
    if world_size is None:
        world_size = _env_int("WORLD_SIZE", 1)
    if world_size < 1 or not 0 <= rank < world_size:
        raise StoreConfigError(f"rank {rank} is not within world size {world_size}")
    return Ranks(rank, world_size)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise StoreConfigError(f"environment {name}={raw!r} is not an integer") from None


def poll(check: Callable[[], T | None], *, timeout: float, interval: float, what: str) -> T:
    """Call `check` until it returns something other than None, backing off up to 2 s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommitTimeout(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(min(interval, remaining))
        interval = min(interval * 1.5, 2.0)
