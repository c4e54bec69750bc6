"""A PyTorch Lightning Callback that wires CheckpointGuard into Lightning's own checkpointing.

    trainer = L.Trainer(callbacks=[ForewarnCallback(dirpath="ckpt/")])

After each training batch it asks the guard; when a save is due it calls
`trainer.save_checkpoint` (Lightning's collective save, every rank at the same step thanks to
the guard's rank agreement), acks the agent, and stops the trainer on terminate or SIGTERM.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl  # type: ignore[no-redef]

from ..guard import CheckpointGuard


class ForewarnCallback(pl.Callback):
    def __init__(
        self,
        dirpath: str | Path,
        guard: CheckpointGuard | None = None,
        filename: str = "step-{step:08d}.ckpt",
        **guard_options: Any,
    ) -> None:
        self.dirpath = Path(dirpath)
        self.filename = filename
        self._guard = guard
        self._guard_options = guard_options
        self.saved_paths: list[Path] = []

    @property
    def guard(self) -> CheckpointGuard:
        # Made on first use, inside the trainer: torch.distributed is initialised by then,
        # so the guard's rank agreement sees it.
        if self._guard is None:
            self._guard = CheckpointGuard(**self._guard_options)
        return self._guard

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if not self.guard.due(step):
            return
        path = self.dirpath / self.filename.format(step=step)
        started = time.monotonic()
        trainer.save_checkpoint(path)
        self.saved_paths.append(path)
        result = self.guard.saved(step, time.monotonic() - started)
        if result.exit:
            trainer.should_stop = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._guard is not None:
            self._guard.close()
            self._guard = None


__all__ = ["ForewarnCallback"]
