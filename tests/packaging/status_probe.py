"""The `forewarn status` health checks of the image and the manifests, run as their runtime
runs them: killed when their own time limit passes. A check that calls status must give
status's one-line answer first, or the runtime only records that it was killed."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import zmq
from forewarn.protocol.timefmt import parse_duration
from support import forewarn_cmd


def runs_status(argv: list[str]) -> bool:
    return argv[:2] == ["forewarn", "status"]


def status_timeout(argv: list[str]) -> float:
    """The seconds a `forewarn status` command waits for its answer (its --timeout)."""
    assert runs_status(argv), argv
    for index, word in enumerate(argv):
        if word == "--timeout":
            return parse_duration(argv[index + 1])
        if word.startswith("--timeout="):
            return parse_duration(word.partition("=")[2])
    raise AssertionError(f"{argv}: no --timeout, so it waits status's default 30 s")


def run_check(
    argv: list[str], env: dict[str, str], limit: float
) -> subprocess.CompletedProcess[str]:
    """`argv` with this checkout's forewarn, killed after `limit` seconds as the container
    runtime kills a check (raises subprocess.TimeoutExpired then)."""
    assert argv[0] == "forewarn", argv
    return subprocess.run(
        [*forewarn_cmd(), *argv[1:]], env=env, capture_output=True, text=True, timeout=limit
    )


@contextmanager
def silent_agent(runtime: Path) -> Iterator[str]:
    """A control socket at the agent's place in `runtime` that takes requests and never
    answers: an agent whose event loop hangs."""
    context = zmq.Context.instance()
    sock = context.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{runtime}/control"
    sock.bind(endpoint)
    try:
        yield endpoint
    finally:
        sock.close()


__all__ = ["run_check", "runs_status", "silent_agent", "status_timeout"]
