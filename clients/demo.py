"""A small demo training loop that uses CheckpointGuard, for `forewarn drill local`.

It "trains" by folding each step into a running state, saves that state when the guard says
so, and resumes from the last save. It prints one JSON object per line on stdout (the drill
reads them): `fresh` or `resumed`, `step`, `notice`, `saved`, `exit`, `done`.

    python -m forewarn.clients.demo --dir /tmp/demo --steps 400 --step-time 0.02
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .checkpoint import CheckpointStore, GenerationWriter
from .guard import CheckpointGuard

STATE_FILE = "state.json"


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


def load(store: CheckpointStore) -> tuple[int, str, str | None]:
    """(step, state, generation name) of the newest generation that verifies with checksums;
    (0, "", None) when there is none."""
    generation = store.latest(verify="checksums")
    if generation is None:
        return 0, "", None
    verification = store.verify(generation, checksums=True)
    if not verification.ok:
        raise SystemExit(f"demo: {generation.name} does not verify: {verification.problems}")
    data = json.loads(generation.read_bytes(STATE_FILE))
    return int(data["step"]), str(data["state"]), generation.name


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
    args = parser.parse_args(argv)
    store = CheckpointStore(args.dir, keep=3)

    started = time.monotonic()
    step, state, generation = load(store)
    restore_seconds = time.monotonic() - started
    say(
        "resumed" if step else "fresh",
        step=step,
        state=state[:12],
        generation=generation,
        verified="checksums" if generation else None,
    )

    guard = CheckpointGuard(every_steps=args.every_steps, store=store, exit_margin=args.exit_margin)
    if guard.notices is not None:
        guard.notices.add_listener(
            lambda event: say("notice", action=event.action, id=event.id, reason=event.reason)
        )
    if step:
        guard.resumed(step, restore_seconds=restore_seconds)
    try:
        while step < args.steps:
            time.sleep(args.step_time)
            state = advance(state, step)
            step += 1
            say("step", step=step)
            if guard.due(step):
                result = guard.save(step, writer(step, state))
                say(
                    "saved",
                    step=step,
                    reasons=list(result.reasons),
                    exit=result.exit,
                    state=state[:12],
                    seconds=result.flush_seconds,
                )
                if result.exit:
                    say("exit", step=step)
                    return 0
        if step not in store.steps():
            store.flush(step, writer(step, state))
        say("done", step=step, state=state[:12])
        return 0
    finally:
        guard.close()


if __name__ == "__main__":
    sys.exit(main())
