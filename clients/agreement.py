"""Rank agreement: every rank takes the same save decision at the same step.

A notice reaches one node's agent, a SIGTERM one process, a timer fires at slightly different
moments on each rank; a collective save needs all ranks at the same step. Every `every`
steps each rank contributes its local decision to one all-reduce (MAX) of two integers
through torch.distributed, never a channel of our own. torch is used only when the training
process has already imported and initialised it.
"""

from __future__ import annotations

import sys
from typing import Any

DEFAULT_AGREE_EVERY = 8


class RankAgreement:
    def __init__(self, every: int, dist: Any, torch: Any) -> None:
        if every <= 0:
            raise ValueError(f"agree_every must be a positive number of steps, got {every}")
        self.every = every
        self._dist = dist
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        device = "cpu"
        if dist.get_backend() == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        # Reused for every agreement: no allocation on the hot path.
        self._flags = torch.zeros(2, dtype=torch.int32, device=device)

    @classmethod
    def detect(cls, every: int = DEFAULT_AGREE_EVERY) -> RankAgreement | None:
        """An agreement when torch.distributed is initialised with more than one rank."""
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        return cls(every, dist, torch)

    def decide(self, save: bool, exit: bool) -> tuple[bool, bool]:
        """(save, exit) for every rank: true when any rank wants it."""
        self._flags[0] = int(save)
        self._flags[1] = int(exit)
        self._dist.all_reduce(self._flags, op=self._dist.ReduceOp.MAX)
        values = self._flags.tolist()
        return bool(values[0]), bool(values[1])


__all__ = ["DEFAULT_AGREE_EVERY", "RankAgreement"]
