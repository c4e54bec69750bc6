"""A job whose train() raises (the Trainer's own save at step 5 finds a full disk, or the
model's forward fails at step 7), that handles the error and then gets a SIGTERM: the
platform's, while the job is still cleaning up.

    trainer_raises_job.py save|forward OUTPUT_DIR

Prints `raised <type>` once train() has raised; a SIGTERM should end it then (exit -15)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import transformers_models as models
from forewarn.clients.frameworks.transformers import ForewarnTrainerCallback
from transformers import Trainer


def main(failing: str, output: str) -> None:
    callback = ForewarnTrainerCallback(notices=False, flag_file=None)  # signals handled
    args = models.arguments(Path(output), save_strategy="steps", save_steps=5)
    model = models.FailsAt(7) if failing == "forward" else models.Tiny()
    trainer = Trainer(model=model, args=args, train_dataset=models.Points(), callbacks=[callback])
    if failing == "save":

        def full_disk(*args: Any, **kwargs: Any) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        trainer.save_model = full_disk  # type: ignore[method-assign]
    try:
        trainer.train()
    except (OSError, RuntimeError) as error:
        print(f"raised {type(error).__name__}", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    print("still running after the SIGTERM", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
