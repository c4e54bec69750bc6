"""A build done once per test session and shared by its xdist workers."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol


class TempPathFactory(Protocol):
    def getbasetemp(self) -> Path: ...


def shared_build(factory: TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The directory `build(directory)` filled, once per test session: under xdist the first
    worker to get here builds it while holding a file lock, and the others wait for the lock
    and reuse what it built. Only a build that returned is marked done: after a failed one
    the next worker starts again from an empty directory."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's directory, shared by all its workers
    target = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / f"{name}.done"
        if not done.exists():
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            build(target)
            done.touch()
    return target


__all__ = ["shared_build"]
