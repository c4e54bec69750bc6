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
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .guard import CheckpointGuard

CHECKPOINT = "checkpoint.json"


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def advance(state: str, step: int) -> str:
    """One training step: the state after `step` depends on every step before it, so a resume
    from the wrong generation shows up as a different state."""
    return hashlib.sha256(f"{state}:{step}".encode()).hexdigest()


def save(directory: Path, step: int, state: str) -> None:
    payload = json.dumps({"step": step, "state": state}).encode()
    record = json.dumps({"sha256": hashlib.sha256(payload).hexdigest(), "data": payload.decode()})
    tmp = directory / f".{CHECKPOINT}.tmp"
    with tmp.open("w") as handle:
        handle.write(record)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, directory / CHECKPOINT)


def timed_save(directory: Path, step: int, state: str) -> float:
    started = time.monotonic()
    save(directory, step, state)
    return time.monotonic() - started


def load(directory: Path) -> tuple[int, str]:
    """The saved (step, state), verified against its checksum; (0, "") when there is none."""
    path = directory / CHECKPOINT
    if not path.exists():
        return 0, ""
    record = json.loads(path.read_text())
    payload = record["data"].encode()
    if hashlib.sha256(payload).hexdigest() != record["sha256"]:
        raise SystemExit(f"demo: checkpoint {path} does not verify")
    data = json.loads(payload)
    return int(data["step"]), str(data["state"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forewarn.clients.demo")
    parser.add_argument("--dir", type=Path, required=True, help="checkpoint directory")
    parser.add_argument("--steps", type=int, default=400, help="train until this step")
    parser.add_argument("--step-time", type=float, default=0.02, help="seconds per step")
    parser.add_argument("--every-steps", type=int, default=None, help="periodic checkpoints")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    step, state = load(args.dir)
    restore_seconds = time.monotonic() - started
    say("resumed" if step else "fresh", step=step, state=state[:12])

    guard = CheckpointGuard(every_steps=args.every_steps)
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
                result = guard.saved(step, timed_save(args.dir, step, state))
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
        save(args.dir, step, state)
        say("done", step=step, state=state[:12])
        return 0
    finally:
        guard.close()


if __name__ == "__main__":
    sys.exit(main())
