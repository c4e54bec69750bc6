"""The tiny Lightning modules of test_lightning.py, in their own module so that collecting the
tests does not import lightning."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from typing import Any

import lightning.pytorch as pl
import torch
from forewarn.clients.frameworks.lightning import ForewarnCallback


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        time.sleep(0.005)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Evaluating(Tiny):
    """Asks for an exit in the middle of its first validation pass (a SIGTERM or terminate
    arriving there)."""

    def __init__(self, callback: ForewarnCallback) -> None:
        super().__init__()
        self.callback = callback
        self.validation_batches = 0

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self.validation_batches += 1
        if self.trainer.sanity_checking:
            return
        if idx == 3:
            self.callback.guard.request("signal", exit=True)


class ExitsInTraining(Tiny):
    """Asks for an exit during training step `exit_at` (a terminate arriving there); counts
    the validation batches run after that."""

    def __init__(self, callback: ForewarnCallback, exit_at: int) -> None:
        super().__init__()
        self.callback = callback
        self.exit_at = exit_at
        self.validation_after_exit = 0

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        if self.global_step == self.exit_at:
            self.callback.guard.request("signal", exit=True)
        return super().training_step(batch, idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        if self.callback.guard.should_exit:
            self.validation_after_exit += 1


def trainer(callback: Any, **options: Any) -> pl.Trainer:
    """The tests' Trainer: CPU, `callback` only, no logger, checkpoints, progress bar or
    summary of Lightning's own, 1,000 steps; `options` change or add settings."""
    settings: dict[str, Any] = {
        "max_steps": 1_000,
        "callbacks": [callback],
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    return pl.Trainer(**(settings | options))


class Batches:
    """A resumable DataLoader stand-in (`state_dict`/`load_state_dict`, which Lightning saves
    and restores): `count` fixed batches of 2 samples, so a resumed run sees exactly the
    batches an uninterrupted one would."""

    def __init__(self, count: int = 32) -> None:
        self.count = count
        self.position = 0
        generator = torch.Generator().manual_seed(7)
        self.x = torch.randn(count, 2, 4, generator=generator)
        self.y = torch.randn(count, 2, 1, generator=generator)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Any:
        while self.position < self.count:
            index = self.position
            self.position += 1
            yield self.x[index], self.y[index]
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class ExitsAtBatch(Tiny):
    """Seeded weights; asks for an exit while training batch `exit_at` of the first epoch
    (with gradient accumulation: a batch inside an optimizer step)."""

    def __init__(self, callback: ForewarnCallback | None = None, exit_at: int = -1) -> None:
        torch.manual_seed(0)
        super().__init__()
        self.callback = callback
        self.exit_at = exit_at

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        if self.callback is not None and idx == self.exit_at:
            self.callback.guard.request("signal", exit=True)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)


class SigtermAtStart(Tiny):
    """Sends itself a SIGTERM in the first sanity-check validation batch (`where="sanity"`) or
    in the first training step (`where="first step"`), before any batch has ended."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        if self.where == "first step" and self.global_step == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, idx)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        if self.where == "sanity" and self.trainer.sanity_checking and idx == 0:
            os.kill(os.getpid(), signal.SIGTERM)


class SigtermInDataSetup(Tiny):
    """Sends itself a SIGTERM while fit() sets up its training data (`train_dataloader`, with
    its worker processes started right after), after Lightning installed its SIGTERM handler
    and before the training's first hook: a resumed fit runs no sanity check, so that is
    where a SIGTERM during a restarted job's start-up lands."""

    def train_dataloader(self) -> torch.utils.data.DataLoader[Any]:
        os.kill(os.getpid(), signal.SIGTERM)
        data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
        return torch.utils.data.DataLoader(data, batch_size=4)


class CountsSteps(Tiny):
    """Counts the training steps it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        self.steps += 1
        return super().training_step(batch, idx)


class RaisesAt(Tiny):
    """Its training_step raises at step `at`, as a CUDA error does, once `before_raising()`
    (a notice arriving in that step) has run; `guard` is the callback's, made inside fit."""

    def __init__(self, callback: ForewarnCallback, at: int, before_raising: Any = None) -> None:
        super().__init__()
        self.callback = callback
        self.at = at
        self.before_raising = before_raising
        self.guard: Any = None

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        self.guard = self.callback.guard
        if self.global_step == self.at:
            if self.before_raising is not None:
                self.before_raising()
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().training_step(batch, idx)


class TerminatedInEvaluation(Tiny):
    """An agent sends a terminate during the fourth batch of a validation, test or predict
    pass, which waits until the callback's guard has it (`wait`; not asking the callback for
    a guard, which would make one, when not)."""

    def __init__(self, agent: Any, callback: ForewarnCallback, wait: bool = True) -> None:
        super().__init__()
        self.agent = agent
        self.callback = callback
        self.wait = wait
        self.batches = 0

    def _evaluate(self, idx: int) -> None:
        from support import eventually

        self.batches += 1
        if idx == 3:
            self.agent.control({"op": "notify", "action": "terminate", "id": "local/t"})
            if self.wait:
                eventually(lambda: self.callback.guard.should_exit, 10, "the terminate")

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self._evaluate(idx)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self._evaluate(idx)

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        self._evaluate(idx)
        return self.layer(batch[0])


class SigtermInEvaluation(Tiny):
    """Sends itself a SIGTERM in the fourth batch of a validation, test or predict pass."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def _evaluate(self, idx: int) -> None:
        self.batches += 1
        if idx == 3:
            os.kill(os.getpid(), signal.SIGTERM)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self._evaluate(idx)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self._evaluate(idx)

    def predict_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        self._evaluate(idx)
        return self.layer(batch[0])


class Validates(Tiny):
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        pass


class WorkersTerminated(Tiny):
    """At training step `exit_at`, the job-wide SIGTERM of systemd's `KillMode=control-group`
    or of torchrun (which signals each rank's whole process group): its DataLoader workers get
    it from another process (`kill`), and this process's guard asks for the exit as its own
    SIGTERM handler would."""

    def __init__(self, callback: ForewarnCallback, exit_at: int) -> None:
        super().__init__()
        self.callback = callback
        self.exit_at = exit_at

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> torch.Tensor:
        if self.global_step == self.exit_at:
            workers = [str(child.pid) for child in multiprocessing.active_children()]
            assert workers, "no DataLoader workers"
            subprocess.run(["kill", "-TERM", *workers], check=True)
            self.callback.guard.request("signal", exit=True)
        return super().training_step(batch, idx)


class RankedOnValidation(Tiny):
    """Logs `val_loss` as each validation batch's index, so a pass cut short scores better
    (lower) than a whole one; asks for an exit at batch 1 of its validation pass `exit_in`
    (counted from 1, the sanity check not counted)."""

    def __init__(self, callback: ForewarnCallback, exit_in: int) -> None:
        super().__init__()
        self.callback = callback
        self.exit_in = exit_in
        self.passes = 0

    def on_validation_epoch_start(self) -> None:
        if not self.trainer.sanity_checking:
            self.passes += 1

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        self.log("val_loss", float(idx), on_epoch=True)
        if not self.trainer.sanity_checking and self.passes == self.exit_in and idx == 1:
            self.callback.guard.request("signal", exit=True)


class ExitsInTrainingLogged(ExitsInTraining):
    """ExitsInTraining that logs `val_loss` (each validation batch's index) for a
    ModelCheckpoint with a `monitor`."""

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        super().validation_step(batch, idx)
        self.log("val_loss", float(idx), on_epoch=True)
