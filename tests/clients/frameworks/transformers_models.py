"""The tiny model and datasets of test_transformers.py, in their own module so that collecting
the tests does not import transformers."""

from __future__ import annotations

import time

import torch
from forewarn.clients.frameworks.transformers import ForewarnTrainerCallback
from torch.utils.data import Dataset


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


class FewPoints(Points):
    def __len__(self) -> int:
        return 64
