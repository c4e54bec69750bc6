"""The tiny model and datasets of test_transformers.py, in their own module so that collecting
the tests does not import transformers."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import torch
from forewarn.clients.frameworks.transformers import ForewarnTrainerCallback
from torch.utils.data import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_callback import CallbackHandler


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        time.sleep(0.005)
        return {"loss": torch.nn.functional.mse_loss(self.layer(x), labels)}


class Points(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 40_000

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.randn(4), "labels": torch.randn(1)}


class AsksToExitInEvaluation(Tiny):
    def __init__(self) -> None:
        super().__init__()
        self.callback: ForewarnTrainerCallback | None = None
        self.eval_calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if not self.training:
            self.eval_calls += 1
            if self.eval_calls == 3 and self.callback is not None:
                self.callback.guard.request("signal", exit=True)
        return super().forward(x, labels)


class TerminateWithdrawnInEvaluation(Tiny):
    """In the first evaluation an agent sends a terminate (which ends that pass at its
    batch), then clears it as the evaluation returns, before the save (`withdraws`, a
    TrainerCallback's `on_evaluate`)."""

    def __init__(self, agent: Any, callback: ForewarnTrainerCallback) -> None:
        super().__init__()
        self.agent = agent
        self.callback = callback
        self.eval_calls = 0
        self.sent = self.cleared = False

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        from support import eventually

        if not self.training:
            self.eval_calls += 1
            guard = self.callback.guard
            if self.eval_calls == 3:
                self.agent.control({"op": "notify", "action": "terminate", "id": "local/t"})
                eventually(lambda: guard.should_exit, 10, "the terminate")
                self.sent = True
        return super().forward(x, labels)

    def withdraws(self) -> TrainerCallback:
        from support import eventually

        model = self

        class Withdraws(TrainerCallback):  # type: ignore[misc]
            def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if model.sent and not model.cleared:
                    model.agent.control({"op": "clear", "id": "local/t"})
                    guard = model.callback.guard
                    eventually(lambda: not guard.should_exit, 10, "the clear")
                    model.cleared = True

        return Withdraws()


class TerminatedInEvaluation(Tiny):
    """An agent sends a terminate during the third batch of an evaluation."""

    def __init__(self, agent: Any) -> None:
        super().__init__()
        self.agent = agent
        self.eval_calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if not torch.is_grad_enabled():
            self.eval_calls += 1
            if self.eval_calls == 3:
                self.agent.control({"op": "notify", "action": "terminate", "id": "local/t"})
        return super().forward(x, labels)


class FewPoints(Points):
    def __len__(self) -> int:
        return 64


class ManyPoints(Points):
    """An evaluation pass of 200 batches of 4: long beside a notice's lead."""

    def __len__(self) -> int:
        return 800


class SeededPoints(Dataset):  # type: ignore[type-arg]
    """256 fixed samples: two runs over them train the same weights (Points draws anew)."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(3)
        self.x = torch.randn(256, 4, generator=generator)
        self.labels = torch.randn(256, 1, generator=generator)

    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "labels": self.labels[index]}


class SigtermInEvaluation(Tiny):
    """Sends itself a SIGTERM at the third batch of its first evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self.eval_calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if not torch.is_grad_enabled():
            self.eval_calls += 1
            if self.eval_calls == 3:
                os.kill(os.getpid(), signal.SIGTERM)
        return super().forward(x, labels)


class SigtermsTheWorkers(TrainerCallback):  # type: ignore[misc]
    """At step 20 a job-wide SIGTERM reaches the Trainer's DataLoader workers (from another
    process, as systemd's control-group kill sends it); at step 60 the job asks to exit."""

    def __init__(self, forewarn: ForewarnTrainerCallback) -> None:
        self.forewarn = forewarn
        self.workers: list[int] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 20:
            self.workers = [child.pid for child in multiprocessing.active_children() if child.pid]
            assert self.workers, "the Trainer's DataLoader has worker processes"
            subprocess.run(["kill", "-TERM", *map(str, self.workers)], check=True)
        if state.global_step == 60:
            self.forewarn.guard.request("signal", exit=True)


class SigtermsTheWorkersInEvaluation(Tiny):
    """At its third evaluation batch (`kill_at`) a job-wide SIGTERM reaches every DataLoader
    worker, the evaluation's included (from another process, as systemd's control-group kill
    sends it), and the job asks to exit."""

    def __init__(self) -> None:
        super().__init__()
        self.callback: ForewarnTrainerCallback | None = None
        self.eval_calls = 0
        self.kill_at = 3
        self.workers: list[int] = []

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        # Not self.training: after an evaluate() the Trainer's first step runs in eval mode.
        if not torch.is_grad_enabled():
            self.eval_calls += 1
            if self.eval_calls == self.kill_at and self.callback is not None:
                children = multiprocessing.active_children()
                self.workers = [child.pid for child in children if child.pid]
                subprocess.run(["kill", "-TERM", *map(str, self.workers)], check=True)
                self.callback.guard.request("signal", exit=True)
        return super().forward(x, labels)


def arguments(tmp_path: Path, **options: Any) -> TrainingArguments:
    """The tests' TrainingArguments: CPU, batches of 4, no saves, logs or workers of the
    Trainer's own, 1,000 steps; `options` change any of them."""
    settings: dict[str, Any] = {
        "output_dir": str(tmp_path / "out"),
        "max_steps": 1_000,
        "per_device_train_batch_size": 4,
        "save_strategy": "no",
        "report_to": [],
        "logging_strategy": "no",
        "use_cpu": True,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    return TrainingArguments(**(settings | options))


# An evaluation pass of FewPoints every 25 steps.
EVALUATE_EVERY_25 = {"per_device_eval_batch_size": 4, "eval_strategy": "steps", "eval_steps": 25}


def _callback_class() -> type[ForewarnTrainerCallback]:
    # Looked up at each call: a test reloads the module (a notebook re-running its imports),
    # and the class the tests' own `fw.ForewarnTrainerCallback` names is the new one.
    module = importlib.import_module("forewarn.clients.frameworks.transformers")
    return module.ForewarnTrainerCallback  # type: ignore[no-any-return]


def quiet_callback(**options: Any) -> ForewarnTrainerCallback:
    """A callback that hears no agent, handles no signal and writes no flag file: the test
    asks its guard itself; `options` add to those."""
    return _callback_class()(notices=False, handle_signals=False, flag_file=None, **options)


def listening_callback(agent: Any, **options: Any) -> ForewarnTrainerCallback:
    """A callback that hears `agent` (a tests' AgentProcess), with no signal handlers unless
    `options` say so, and no flag file."""
    settings: dict[str, Any] = {"handle_signals": False, "flag_file": None} | options
    return _callback_class()(events=agent.events, control=agent.control_endpoint, **settings)


def evaluated_trainer(
    model: Any, args: TrainingArguments, *callbacks: Any, eval_dataset: Any = None
) -> Trainer:
    """A Trainer of `model` over Points, evaluating on FewPoints (or `eval_dataset`)."""
    return Trainer(
        model=model,
        args=args,
        train_dataset=Points(),
        eval_dataset=FewPoints() if eval_dataset is None else eval_dataset,
        callbacks=list(callbacks),
    )


class AsksToExitAt(TrainerCallback):  # type: ignore[misc]
    """Asks the forewarn callback's guard to exit at step `at`; records every save and every
    evaluation the Trainer makes, with its step."""

    def __init__(self, forewarn: ForewarnTrainerCallback, at: int) -> None:
        self.forewarn = forewarn
        self.at = at
        self.events: list[tuple[str, int]] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.at:
            self.forewarn.guard.request("signal", exit=True)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append(("save", state.global_step))

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append(("evaluate", state.global_step))


class FailsAt(Tiny):
    """Its forward raises at call `at`, as a CUDA error does."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.calls = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return super().forward(x, labels)


class OwnAddCallback(Trainer):  # type: ignore[misc]
    """A Trainer subclass whose add_callback goes to the handler without the Trainer's."""

    def add_callback(self, callback: Any) -> None:
        self.callback_handler.add_callback(callback)


class OwnCallbackHandler(Trainer):  # type: ignore[misc]
    """A Trainer subclass that replaces the callback handler the Trainer made with its own,
    holding the callbacks it is given (which are never told on_init_end)."""

    def __init__(self, *args: Any, callbacks: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.callback_handler = CallbackHandler(
            [*self.callback_handler.callbacks, *callbacks],
            self.model,
            self.processing_class,
            self.optimizer,
            self.lr_scheduler,
        )


class IndexedPoints(Dataset):  # type: ignore[type-arg]
    """40 points whose label is their index: in batches of 4, a pass's `eval_loss` (the
    `RankedOnEvaluation` model's) is 19.5, one cut after its first 2 batches 3.5."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": torch.randn(4), "labels": torch.tensor([float(index)])}


class RankedOnEvaluation(Tiny):
    """Its evaluation loss is the batch's mean label; asks for an exit at the 2nd batch of its
    2nd evaluation pass."""

    def __init__(self) -> None:
        super().__init__()
        self.callback: ForewarnTrainerCallback | None = None
        self.passes = 0

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.training:
            return super().forward(x, labels)
        first = int(labels.min().item())
        self.passes += first == 0
        if self.passes == 2 and first == 4 and self.callback is not None:
            self.callback.guard.request("signal", exit=True)
        return {"loss": labels.mean() + 0 * self.layer(x).sum()}
