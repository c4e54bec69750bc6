"""Another uid for permission tests: a system user made with useradd (tests skip when not
root), and code run as that user in a forked child.

A fork, not an exec: the interpreter may live where another uid cannot read it (a pyenv under
/root), while a forked child keeps the loaded interpreter and drops only its privileges.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

USER_NAME = "forewarn-test"


def other_user(name: str = USER_NAME) -> tuple[int, int]:
    """(uid, gid) of a system user other than the caller, made on first use; skips the test
    when that cannot be done (not root, or no useradd)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create and become another user")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
        )  # a parallel worker may have made it first: look again either way
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def shared_tmp(uid: int, gid: int) -> Path:
    """A fresh directory under /tmp that the other user owns (pytest's own is 0700), removed
    when the process that made it exits (no fixture owns it)."""
    path = Path(tempfile.mkdtemp(prefix="forewarn-uid-", dir="/tmp"))
    os.chown(path, uid, gid)
    atexit.register(_remove_if_made_here, path, os.getpid())
    return path


def _remove_if_made_here(path: Path, maker: int) -> None:
    # A forked child inherits the exit handler; one that exits normally while its parent
    # still uses the directory must leave it be.
    if os.getpid() == maker:
        shutil.rmtree(path, ignore_errors=True)


def _become(uid: int, gid: int, groups: tuple[int, ...] = ()) -> None:
    os.setgroups(list(groups))
    os.setgid(gid)
    os.setuid(uid)


def call_as(
    uid: int,
    gid: int,
    fn: Callable[[], Any],
    timeout: float = 20.0,
    groups: tuple[int, ...] = (),
) -> Any:
    """Run `fn` as (uid, gid), with supplementary `groups`, in a forked child and return what
    it returned (JSON-able), or raise RuntimeError with the child's traceback."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            _become(uid, gid, groups)
            payload = {"ok": True, "value": fn()}
        except BaseException:
            payload = {"ok": False, "error": traceback.format_exc()}
        os.write(write, json.dumps(payload, default=str).encode())
        os._exit(0)
    os.close(write)
    chunks = []
    end = time.monotonic() + timeout
    with os.fdopen(read, "rb") as pipe:
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            chunks.append(chunk)
            if time.monotonic() > end:
                break
    os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks) or b'{"ok": false, "error": "no answer"}')
    if not result["ok"]:
        raise RuntimeError(result["error"])
    return result["value"]


# What the agent imports lazily, loaded while the child can still read the interpreter's files.
PRELOAD = (
    "asyncio",
    "ctypes",
    "ctypes.util",
    "email.policy",
    "zmq.asyncio",
    "forewarn.agent.cli",
    "forewarn.agent.config",
    "forewarn.agent.runner",
    "forewarn.agent.sdnotify",
    "forewarn.agent.telemetry",
    "forewarn.agent.logsetup",
    "forewarn.providers.local.watch",
)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


class ForkedAgent:
    """`forewarn agent` in a forked child running as another uid, its output in a file."""

    def __init__(
        self,
        uid: int,
        gid: int,
        env: dict[str, str],
        args: list[str],
        log: Path,
        groups: tuple[int, ...] = (),
    ):
        self.uid, self.gid, self.env, self.args, self.log = uid, gid, env, args, log
        self.groups = groups
        self.pid = 0

    def start(self) -> ForkedAgent:
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                _preload()
                from forewarn.agent.cli import main

                _become(self.uid, self.gid, self.groups)
                os.environ.clear()
                os.environ.update(self.env)
                code = main(["agent", *self.args])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pid = pid
        return self

    def alive(self) -> bool:
        done, _ = os.waitpid(self.pid, os.WNOHANG)
        return done == 0

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if not self.pid:
            return 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.02)
        os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        return os.waitstatus_to_exitcode(status)


__all__ = ["USER_NAME", "ForkedAgent", "call_as", "other_user", "shared_tmp"]
