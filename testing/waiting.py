"""Waiting on conditions, never on fixed sleeps, and ports the kernel picks."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now: the kernel's pick, so parallel tests differ.
    It is let go before it is returned, so another process can bind it first: where a
    server can bind port 0 and say the address it bound, prefer that."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def eventually(
    check: Callable[[], Any],
    timeout: float = 30.0,
    what: str = "condition",
    interval: float = 0.01,
) -> Any:
    """Call `check` until it returns something true and return that. After `timeout` seconds
    raise AssertionError naming `what`: a test waits on a condition, never on a sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any] | None, grace: float) -> None:
    """End `proc` if it still runs: SIGTERM, and SIGKILL when it has not exited `grace`
    seconds later; reaped either way (None, or one that has exited: nothing to do)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


__all__ = ["eventually", "free_port", "stop_process"]
