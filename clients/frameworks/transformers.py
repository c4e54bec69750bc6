"""A Hugging Face transformers TrainerCallback that wires CheckpointGuard into the Trainer's
own checkpointing.

    trainer = Trainer(..., callbacks=[ForewarnTrainerCallback()])

At the end of each step it asks the guard; when a save is due it sets `control.should_save`, so
the Trainer writes its usual `checkpoint-<step>` (model, optimizer, scheduler, RNG states).
Once that save is done (`on_save`) it acks the agent with the measured seconds, and on
terminate or SIGTERM it stops training. An exit pending at the end of a step skips the
evaluation due at that step, so the save comes first. During an evaluation it asks
`guard.due_in_eval` after each prediction step (`on_prediction_step`): the Trainer cannot be
interrupted mid-evaluation from a callback, so the save and the stop are scheduled for the
moment that evaluation returns, and the notice is not left for the next training step.
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..guard import CheckpointGuard


class ForewarnTrainerCallback(TrainerCallback):
    def __init__(self, guard: CheckpointGuard | None = None, **guard_options: Any) -> None:
        self._guard = guard
        self._guard_options = guard_options
        self._requested_at: float | None = None
        self.saved_steps: list[int] = []

    @property
    def guard(self) -> CheckpointGuard:
        if self._guard is None:  # inside the trainer: torch.distributed is ready by then
            self._guard = CheckpointGuard(**self._guard_options)
        return self._guard

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self.guard.due(state.global_step):
            control.should_save = True
            self._requested_at = time.monotonic()
            if self.guard.should_exit:
                control.should_evaluate = False  # save first: the machine is going away
        return control

    def on_prediction_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._requested_at is None and self.guard.due_in_eval(state.global_step):
            control.should_save = True
            control.should_training_stop = True
            self._requested_at = time.monotonic()
        return control

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._requested_at is None:
            return control  # the Trainer's own periodic save: nothing of ours is pending
        seconds = time.monotonic() - self._requested_at
        self._requested_at = None
        where = f"{args.output_dir}/checkpoint-{state.global_step}"
        result = self.guard.saved(state.global_step, seconds, where=where)
        self.saved_steps.append(state.global_step)
        if result.exit:
            control.should_training_stop = True
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._guard is not None:
            self._guard.close()
            self._guard = None
        return control


__all__ = ["ForewarnTrainerCallback"]
