"""A fit whose validation pass is long (200 batches of 50 ms, two DataLoader workers), heard
by a real agent: a terminate sent mid-validation is saved from the validation hook.

    lightning_long_validation_job.py CHECKPOINT_DIR EVENTS CONTROL

Prints `validating` at the pass's fifth batch and `validation batches after the save: N`
as fit() returns; exits with the callback's exit code."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import lightning_models as models
import torch
from forewarn.clients.frameworks.lightning import ForewarnCallback


class LongValidation(models.Tiny):
    def __init__(self, callback: ForewarnCallback) -> None:
        super().__init__()
        self.callback = callback
        self.after_save = 0

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], idx: int) -> None:
        if self.callback.saved_paths:
            self.after_save += 1
        if idx == 5:
            print("validating", flush=True)
        time.sleep(0.05)  # the scenario: a validation pass of 10 s, longer than the lead


def main(folder: str, events: str, control: str) -> None:
    callback = ForewarnCallback(Path(folder), events=events, control=control, flag_file=None)
    data = torch.utils.data.TensorDataset(torch.randn(800, 4), torch.randn(800, 1))
    trainer = models.trainer(callback, val_check_interval=20, num_sanity_val_steps=0)
    model = LongValidation(callback)
    trainer.fit(
        model,
        torch.utils.data.DataLoader(data, batch_size=4, num_workers=2),
        torch.utils.data.DataLoader(data, batch_size=4, num_workers=2),
    )
    print(f"validation batches after the save: {model.after_save}", flush=True)
    sys.exit(callback.exit_code)


if __name__ == "__main__":
    main(*sys.argv[1:])
