"""Rank processes forked from one launcher that imported torch once.

A rank script (dcp_worker.py, rank_worker.py, dist_train.py) started as `python script.py`
pays torch's import in every rank: ~2-3 CPU-s each, nine ranks in one DCP resume test. Here a
launcher process (this file run as a script) imports the scripts' modules ONCE and then
`os.fork()`s each rank on request: every rank is still its own OS process, with its own pid
(the test can SIGKILL it), its own gloo process group, its own stdout/stderr pipes and its own
exit status, and runs the unchanged script as `__main__` with its own argv and environment.

Forking after `import torch` is safe while the launcher runs no torch op (no intra-op thread
pool exists yet) and starts no Python thread: it only imports, forks and waits. Its one other
thread is OpenBLAS's pool (numpy, loaded by torch), which OpenBLAS shuts down before a fork
(pthread_atfork), as for DataLoader's forked workers. The pipes of each rank are made by the
test and passed to the launcher over a Unix socket (SCM_RIGHTS); the launcher reports each
rank's pid and, when it ends, its exit status (negative: the signal that killed it, as
`subprocess.Popen.returncode`).

    with RankLauncher(preload=("torch",)) as launcher:
        ranks = [launcher.start(SCRIPT, [str(rank), "2"], env) for rank in (0, 1)]
        out, err = ranks[0].communicate(timeout=60)

The suite shares one launcher per pytest process (the `rank_launcher` fixture, tests/
conftest.py): the ranks' CPU time reaches the pytest process's children when that launcher
is waited for, at the end of the session, not at the end of each test. Another launcher, with
forewarn's command line loaded, forks `python -m forewarn.agent.cli` for the many bad-input
cases of one command (the `run_forewarn_forked` fixture).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import IO, Any

_MAX_MESSAGE = 1 << 20


class LauncherGone(RuntimeError):
    """The launcher process ended or stopped answering."""


class RankProcess:
    """One forked rank, used like the `subprocess.Popen` (text pipes) it replaces."""

    def __init__(
        self, launcher: RankLauncher, pid: int, stdout: IO[str] | None, stderr: IO[str] | None
    ):
        self.launcher = launcher
        self.pid = pid
        self.stdout: IO[str] | None = stdout
        self.stderr: IO[str] | None = stderr
        self.returncode: int | None = None

    def __enter__(self) -> RankProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        """As `with subprocess.Popen(...)`: close the pipes, wait for the exit."""
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.stdout = self.stderr = None
        self.wait()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.launcher._pump(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.launcher._pump(0.0)
                if self.returncode is None:
                    raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
                break
            self.launcher._pump(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read stdout and stderr to their end, then wait for the exit status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        texts: dict[str, str] = {"out": "", "err": ""}

        def drain(name: str, stream: IO[str]) -> None:
            texts[name] = stream.read()

        readers = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(f"rank pid {self.pid}", timeout or 0.0)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.stdout = self.stderr = None
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return texts["out"], texts["err"]


class RankLauncher:
    """The test's side of one launcher process: start ranks, learn their exit statuses."""

    def __init__(self, preload: tuple[str, ...] = (), env: dict[str, str] | None = None):
        """`preload`: the modules the ranks' scripts import, and those they would import
        lazily (torch._dynamo, ...), imported once in the launcher (a path ending in .py is
        run as a module, not as __main__, to load its imports)."""
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        theirs.set_inheritable(True)
        # What the launcher itself started with: a rank's interpreter set-up is this one's.
        self.env = dict(os.environ if env is None else env)
        self._process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno()), *preload],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self._sock = ours
        self._buffer = b""
        self._ranks: dict[int, RankProcess] = {}
        self._exits: dict[int, int] = {}
        self._replies: list[dict[str, Any]] = []
        ready = self._reply(240)
        if "ready" not in ready:
            raise LauncherGone(f"the launcher failed to start: {ready}\n{self.log()}")
        self.threads = ready["threads"]

    def __enter__(self) -> RankLauncher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-3000:]

    def alive(self) -> bool:
        return self._process.poll() is None

    def start(
        self,
        script: Path | str,
        argv: list[str],
        env: dict[str, str],
        stderr: bool = True,
        *,
        output: int | None = None,
        cwd: Path | None = None,
        session: bool = False,
    ) -> RankProcess:
        """Fork one rank running `script` as `__main__` with `argv` and exactly `env`;
        its stdout (and stderr, unless `stderr=False`: then it goes to the launcher's log)
        is a pipe to this process, or both are the open file `output` (a descriptor, left
        open here). It runs in `cwd`, or the launcher's working directory. A `script` of the
        form `-m package.module` runs that module as `python -m` does. With `session` it
        starts a session and process group of its own (`start_new_session`), for a test that
        signals the job's whole group as systemd, Slurm and torchrun do."""
        pipes = [] if output is not None else [os.pipe() for _ in range(2 if stderr else 1)]
        sent = [output, output] if output is not None else [write for _, write in pipes]
        request = {
            "script": str(script),
            "argv": argv,
            "env": env,
            "cwd": cwd and str(cwd),
            "session": session,
        }
        message = json.dumps(request).encode() + b"\n"
        try:
            socket.send_fds(self._sock, [message], sent)
        finally:
            for _, write in pipes:
                os.close(write)
        reply = self._reply(60)
        if "pid" not in reply:
            for read, _ in pipes:
                os.close(read)
            raise LauncherGone(f"launcher could not fork: {reply}\n{self.log()}")
        streams = [open(read, encoding="utf-8", errors="replace") for read, _ in pipes]  # noqa: SIM115
        rank = RankProcess(
            self,
            reply["pid"],
            streams[0] if streams else None,
            streams[1] if stderr and len(streams) > 1 else None,
        )
        self._ranks[rank.pid] = rank
        if rank.pid in self._exits:
            rank.returncode = self._exits.pop(rank.pid)
        return rank

    def cleanup(self) -> None:
        """Kill the ranks still running, wait for every rank's exit and close its pipes:
        between two tests that share this launcher."""
        for rank in self._ranks.values():
            rank.kill()
        for rank in self._ranks.values():
            rank.wait(60)
            for stream in (rank.stdout, rank.stderr):
                if stream is not None:
                    stream.close()
            rank.stdout = rank.stderr = None
        self._ranks.clear()
        self._exits.clear()

    def close(self) -> None:
        """Kill the ranks still running, end the launcher and wait for it."""
        for rank in self._ranks.values():
            rank.kill()
        self._sock.close()  # the launcher reads EOF: it kills and reaps its ranks, then exits
        try:
            self._process.wait(60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(30)
        for rank in self._ranks.values():
            for stream in (rank.stdout, rank.stderr):
                if stream is not None:
                    stream.close()
        self._log.close()

    def _reply(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self._replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LauncherGone(f"no answer from the launcher in {timeout} s\n{self.log()}")
            self._pump(left)
        return self._replies.pop(0)

    def _pump(self, timeout: float | None) -> None:
        """Read what the launcher said within `timeout`: replies, and exit statuses."""
        if b"\n" not in self._buffer:
            self._sock.settimeout(timeout)
            try:
                data = self._sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                return
            if not data:
                raise LauncherGone(f"the launcher ended\n{self.log()}")
            self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exited" in message:
                pid, status = message["exited"], message["status"]
                if pid in self._ranks:
                    self._ranks[pid].returncode = status
                else:
                    self._exits[pid] = status
            else:
                self._replies.append(message)


# ---------------------------------------------------------------------------------------------
# The launcher process.


def _run_rank(
    script: str,
    argv: list[str],
    env: dict[str, str],
    fds: list[int],
    cwd: str | None,
    session: bool = False,
) -> None:
    """In the forked child: become the rank, run the script as __main__, never return.

    Leaves as `python script.py` would, but for the C-level teardown: after the script it
    waits for non-daemon threads and runs the atexit handlers (the Python part of interpreter
    finalization, where a rank's own code could hang or fail), flushes, then `os._exit`s."""
    code = 1
    try:
        if session:
            os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for target, fd in zip((1, 2), fds, strict=False):
            os.dup2(fd, target)
        for fd in (null, *fds):
            os.close(fd)
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        _as_interpreter_startup_would(env)
        module = script.removeprefix("-m ") if script.startswith("-m ") else None
        sys.argv = [script, *argv]
        # As `python script.py` has it, or `python -m module` (the working directory).
        sys.path[0] = os.getcwd() if module else str(Path(script).parent)
        try:
            if module:  # argv[0] becomes the module's file, as `-m` makes it
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        getattr(threading, "_shutdown")()  # noqa: B009 (private: what the interpreter calls)
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _as_interpreter_startup_would(env: dict[str, str]) -> None:
    """What a fresh interpreter takes from the two PYTHON* variables the ranks are given
    (the launcher itself starts without them)."""
    if env.get("PYTHONWARNINGS"):
        getattr(warnings, "_processoptions")(env["PYTHONWARNINGS"].split(","))  # noqa: B009
    if env.get("PYTHONUNBUFFERED"):
        for name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, name)
            raw = io.FileIO(fd, "w", closefd=False)
            unbuffered = io.TextIOWrapper(
                raw, encoding=stream.encoding, errors=stream.errors, write_through=True
            )
            setattr(sys, name, unbuffered)


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def launcher_main(fd: int, preload: list[str]) -> None:
    sock = socket.socket(fileno=fd)
    for module in preload:
        if module.endswith(".py"):
            sys.path[0] = str(Path(module).parent)
            runpy.run_path(module, run_name="__forked_ranks_preload__")
        else:
            importlib.import_module(module)
    _send(sock, {"ready": True, "threads": _threads()})
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, None)
    children: dict[int, int] = {}  # pidfd -> pid
    pending: list[int] = []
    buffer = b""
    try:
        while True:
            for key, _ in selector.select():
                if key.data is None:  # a request from the test, or its end
                    data, received, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 2)
                    if not data:
                        return
                    pending += received
                    buffer += data
                    # The test sends one request at a time and waits for its pid: the pipes
                    # received since the last request are this one's.
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        request = json.loads(line)
                        fds, pending = pending, []
                        sys.stdout.flush()
                        sys.stderr.flush()
                        pid = os.fork()
                        if pid == 0:
                            selector.close()
                            sock.close()
                            for pidfd in children:
                                os.close(pidfd)
                            _run_rank(
                                request["script"],
                                request["argv"],
                                request["env"],
                                fds,
                                request.get("cwd"),
                                bool(request.get("session")),
                            )
                        for fd in fds:
                            os.close(fd)
                        pidfd = os.pidfd_open(pid)
                        children[pidfd] = pid
                        selector.register(pidfd, selectors.EVENT_READ, pid)
                        _send(sock, {"pid": pid})
                else:  # a rank ended
                    pidfd = key.fd
                    selector.unregister(pidfd)
                    os.close(pidfd)
                    pid = children.pop(pidfd)
                    _, status = os.waitpid(pid, 0)
                    _send(sock, {"exited": pid, "status": os.waitstatus_to_exitcode(status)})
    finally:
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children.values():
            os.waitpid(pid, 0)


if __name__ == "__main__":
    launcher_main(int(sys.argv[1]), sys.argv[2:])
