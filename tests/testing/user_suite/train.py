"""The user's training loop: the shape the forewarn README gives, recording its saves."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from forewarn.clients import CheckpointGuard


@dataclass
class Run:
    steps: int = 0
    saves: list[tuple[int, tuple[str, ...], bool]] = field(default_factory=list)
    exited_early: bool = False


def train(
    guard: CheckpointGuard,
    total_steps: int = 1_000_000,
    stop: threading.Event | None = None,
    run: Run | None = None,
) -> Run:
    """Train until `total_steps`, until `stop` is set, or until the guard says exit."""
    run = run or Run()
    step = 0
    while step < total_steps and not (stop and stop.is_set()):
        time.sleep(0.002)  # stands for one training step
        step += 1
        run.steps = step
        if guard.due(step):
            result = guard.saved(step, 0.001)  # the user's save took a millisecond
            run.saves.append((step, result.reasons, result.exit))
            if result.exit:
                run.exited_early = True
                break
    return run


class Background:
    """`train` on a thread, so the test can raise notices while it runs."""

    def __init__(self, guard: CheckpointGuard) -> None:
        self.run = Run()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=train, args=(guard, 1_000_000, self.stop, self.run))
        self.thread.start()

    def finish(self) -> Run:
        self.stop.set()
        self.thread.join(60)
        return self.run
