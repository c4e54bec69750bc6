"""A small demo training loop that uses CheckpointGuard, for `forewarn drill local`.

It "trains" by folding each step into a running state, saves that state when the guard says
so, and resumes from the last save. It prints one JSON object per line on stdout (the drill
reads them): `fresh` or `resumed`, `step`, `notice`, `saved`, `exit`, `done`. It exits 0 once
its steps are done and 143 (`CheckpointGuard.exit_code`) after an exit's save.

    python -m forewarn.clients.demo --dir /tmp/demo --steps 400 --step-time 0.02

With `--background` it saves through `CheckpointGuard(background=True)`: periodic and drain
saves upload on a thread (`--upload-delay S` makes every file take S seconds more to write, a
slow link) and say `durable` when committed; a terminate's save is synchronous and says what it
did about an upload in flight (`choice`, `choice_reason`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import pickle
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .checkpoint import Backend, CheckpointStore, Generation, GenerationWriter, ObjectWriter
from .guard import CheckpointGuard

STATE_FILE = "state.json"
BACKGROUND_FILE = "state.pt"  # what BackgroundSaver writes (pickled: torch is not needed)


_say_lock = threading.Lock()


def say(event: str, **fields: Any) -> None:
    # Notices are said from the guard's thread: one write per whole line, under a lock, or
    # print() could put another thread's line between this one's text and its newline.
    line = json.dumps({"event": event, "t": time.time(), **fields}) + "\n"
    with _say_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def advance(state: str, step: int) -> str:
    """One training step: the state after `step` depends on every step before it, so a resume
    from the wrong generation shows up as a different state."""
    return hashlib.sha256(f"{state}:{step}".encode()).hexdigest()


def writer(step: int, state: str) -> Callable[[GenerationWriter], object]:
    def write(gen: GenerationWriter) -> None:
        gen.write_bytes(STATE_FILE, json.dumps({"step": step, "state": state}).encode())

    return write


class _PlainData(pickle.Unpickler):
    """The demo's state is a dict of str and int: pickled, it names no class, and one that
    does is refused rather than imported."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the demo's state holds no {module}.{name}")


def slow_link(inner: Backend, delay: float) -> Backend:
    """`inner` with every write of a file taking `delay` seconds more, as over a slow link to
    object storage (the drill's background-upload scenario)."""
    from .checkpoint.testing import DelegatingBackend

    class SlowLink(DelegatingBackend):
        def writer(self, key: str, on_done: Any = None) -> ObjectWriter:
            writer = self.inner.writer(key, on_done)
            original = writer.write

            def write(data: Any) -> int:
                time.sleep(delay)
                return original(data)

            writer.write = write  # type: ignore[method-assign]
            return writer

    return SlowLink(inner)


def load(store: CheckpointStore) -> tuple[int, str, str | None]:
    """(step, state, generation name) of the newest generation that verifies with checksums;
    (0, "", None) when there is none. Through `restore()`: the store times it, and the
    guard's `resumed(step)` reports that time, and no step lost after an exit's save."""

    def read(generation: Generation) -> tuple[int, str]:
        verification = store.verify(generation, checksums=True)
        if not verification.ok:
            raise SystemExit(f"demo: {generation.name} does not verify: {verification.problems}")
        if BACKGROUND_FILE in generation.files:
            data = _PlainData(io.BytesIO(generation.read_bytes(BACKGROUND_FILE))).load()
        else:
            data = json.loads(generation.read_bytes(STATE_FILE))
        return int(data["step"]), str(data["state"])

    restored = store.restore(read, verify="checksums")
    if restored is None:
        return 0, "", None
    generation, (step, state) = restored
    return step, state, generation.name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forewarn.clients.demo")
    parser.add_argument(
        "--dir", required=True, help="checkpoint store: a path or s3://bucket/prefix"
    )
    parser.add_argument("--steps", type=int, default=400, help="train until this step")
    parser.add_argument("--step-time", type=float, default=0.02, help="seconds per step")
    parser.add_argument("--every-steps", type=int, default=None, help="periodic checkpoints")
    parser.add_argument(
        "--exit-margin",
        type=float,
        default=30.0,
        help="seconds before the deadline of a terminate inherited from before the start at "
        "which to save and exit (default 30)",
    )
    parser.add_argument(
        "--background",
        action="store_true",
        help="save through CheckpointGuard(background=True): uploads on a thread",
    )
    parser.add_argument(
        "--upload-delay",
        type=float,
        default=0.0,
        help="seconds added to every file written (a slow link; default 0)",
    )
    args = parser.parse_args(argv)
    if args.upload_delay < 0:
        parser.error("--upload-delay must not be negative")
    if not 0 <= args.exit_margin < math.inf:
        parser.error("--exit-margin must be a number of seconds, zero or more")
    store = CheckpointStore(args.dir, keep=3)
    if args.upload_delay:
        store = CheckpointStore(backend=slow_link(store.backend, args.upload_delay), keep=3)

    step, state, generation = load(store)
    say(
        "resumed" if step else "fresh",
        step=step,
        state=state[:12],
        generation=generation,
        verified="checksums" if generation else None,
    )

    guard = CheckpointGuard(
        every_steps=args.every_steps,
        store=store,
        exit_margin=args.exit_margin,
        background=args.background,
    )
    if guard.saver is not None:
        told = guard.saver.on_done

        def durable(timing: Any, generation: Any, error: BaseException | None) -> None:
            if told is not None:
                told(timing, generation, error)
            if error is None:
                say(
                    "durable",
                    saved_step=timing.step,
                    stall=timing.stall_seconds,
                    seconds=timing.durable_seconds,
                )
            else:
                say("failed", saved_step=timing.step, error=str(error))

        guard.saver.on_done = durable
    if guard.notices is not None:
        guard.notices.add_listener(
            lambda event: say(
                "notice",
                action=event.action,
                id=event.id,
                reason=event.reason,
                deadline=event.deadline.timestamp() if event.deadline else None,
            )
        )

    def save(step: int) -> bool:
        """Save `step` as the guard asked; true when the demo is to exit."""
        if args.background:
            in_flight = guard.saver.in_flight if guard.saver is not None else None
            result = guard.save_state(step, {"step": step, "state": state})
        else:
            in_flight = None
            result = guard.save(step, writer(step, state))
        say(
            "saved",
            step=step,
            reasons=list(result.reasons),
            exit=result.exit,
            state=state[:12],
            seconds=result.flush_seconds,
            background=args.background and not result.exit,
            in_flight=in_flight,
            choice=result.choice,
            choice_reason=result.choice_reason,
        )
        if result.exit:
            say("exit", step=step)
        return result.exit

    if step:
        # Not on a fresh start: the agent would log a resume from step 0 (as the Lightning
        # and transformers callbacks, which report one only from a checkpoint).
        # The restore time and steps lost are the store's (see `load`).
        guard.resumed(step)
    try:
        # As the README's loop: a terminate or SIGTERM that came during the restore is
        # answered at the resume point (nothing new written), not after one more step
        # trained inside the lead.
        if guard.due(step) and save(step):
            return guard.exit_code
        while step < args.steps:
            time.sleep(args.step_time)
            state = advance(state, step)
            step += 1
            say("step", step=step)
            # As the README's loop: 143, not 0, so the platform restarts the job.
            if guard.due(step) and save(step):
                return guard.exit_code
        if guard.saver is not None:
            guard.saver.wait()  # the last background save, if one is in flight
        if step not in store.steps():
            store.flush(step, writer(step, state))
        say("done", step=step, state=state[:12])
        return 0
    finally:
        guard.close()


if __name__ == "__main__":
    sys.exit(main())
