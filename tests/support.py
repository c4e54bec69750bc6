"""Helpers shared by the tests: the agent as a real subprocess, real ZeroMQ peers, and an
environment that can never reach a real metadata address."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import zmq

FORBIDDEN_HOSTS = ("169.254.169.254", "metadata.google.internal", "fd00:ec2::254", "metadata.goog")
# An address nothing listens on: a watcher pointed here fails fast instead of leaving loopback.
DEAD_LOOPBACK = "127.0.0.1:9"

_URL_KEYS = (
    "FOREWARN_AWS_URL",
    "FOREWARN_GCP_URL",
    "FOREWARN_AZURE_URL",
    "FOREWARN_DIGITALOCEAN_URL",
    "FOREWARN_KUBERNETES_URL",
)


def _assert_loopback(key: str, value: str) -> None:
    host = urlsplit(value if "//" in value else f"http://{value}").hostname or ""
    if host in FORBIDDEN_HOSTS or not (
        host == "localhost" or host.startswith("127.") or host == "::1"
    ):
        raise AssertionError(f"{key}={value!r} is not loopback: tests never leave this machine")


def wait_until(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll `predicate` until it is true; TimeoutError after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(0.01)


def agent_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for an agent or client under test: its own runtime and state
    directories, no proxies, Google's metadata variables on a dead loopback port, and every
    provider URL checked to be loopback."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("FOREWARN_")
        and key.lower() not in ("http_proxy", "https_proxy")
        # Inside a pod, `auto` would otherwise find the real API server.
        and not key.startswith("KUBERNETES_SERVICE")
    }
    runtime = tmp_path / "run"
    state = tmp_path / "state"
    runtime.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    env.update(
        FOREWARN_RUNTIME_DIR=str(runtime),
        FOREWARN_STATE_DIR=str(state),
        GCE_METADATA_HOST=DEAD_LOOPBACK,
        GCE_METADATA_IP=DEAD_LOOPBACK,
        NO_GCE_CHECK="true",
        NO_PROXY="*",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    for key in (*_URL_KEYS, "GCE_METADATA_HOST", "GCE_METADATA_IP"):
        if key in env:
            _assert_loopback(key, env[key])
    return env


def forewarn_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "forewarn.agent.cli", *args]


def run_forewarn(
    *args: str, env: dict[str, str], timeout: float = 30, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        forewarn_cmd(*args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
    )


def control(endpoint: str, request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
    """One request on the control socket; raises TimeoutError when nothing answers."""
    context = zmq.Context.instance()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout * 1000))
    sock.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
    try:
        sock.connect(endpoint)
        sock.send(json.dumps(request).encode())
        try:
            return json.loads(sock.recv())
        except zmq.Again:
            raise TimeoutError(f"no answer from {endpoint} within {timeout}s") from None
    finally:
        sock.close()


class Subscriber:
    """A raw SUB socket on the events endpoint, as any language would use it."""

    def __init__(self, endpoint: str, topics: tuple[str, ...] = ("notice",)) -> None:
        self.sock = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        for topic in topics:
            self.sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sock.connect(endpoint)

    def recv(self, timeout: float = 5.0) -> tuple[str, dict[str, Any]]:
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError(f"no message within {timeout}s")
        topic, payload = self.sock.recv_multipart()
        return topic.decode(), json.loads(payload)

    def notice(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next message on the `notice` topic, skipping heartbeats."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no notice within {timeout}s")
            topic, message = self.recv(left)
            if topic == "notice":
                return message

    def drain(self, quiet: float = 0.3) -> list[dict[str, Any]]:
        """Every notice that arrives until `quiet` seconds pass with none."""
        found = []
        while True:
            try:
                found.append(self.notice(quiet))
            except TimeoutError:
                return found

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AgentProcess:
    """`forewarn agent` as a real subprocess, ready once its control socket answers."""

    def __init__(
        self,
        tmp_path: Path,
        providers: tuple[str, ...] = ("local",),
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.tmp_path = tmp_path
        self.env = env if env is not None else agent_env(tmp_path)
        runtime = Path(self.env["FOREWARN_RUNTIME_DIR"])
        self.events = self.env.get("FOREWARN_EVENTS", f"ipc://{runtime}/events")
        self.control_endpoint = self.env.get("FOREWARN_CONTROL", f"ipc://{runtime}/control")
        provider_args = [arg for name in providers for arg in ("--provider", name)]
        self.argv = forewarn_cmd("agent", *provider_args, *args)
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = tmp_path / f"agent-{int(time.time() * 1000)}.log"

    def start(self, timeout: float = 10.0) -> AgentProcess:
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if self.control({"op": "status"}, timeout=0.5).get("ok"):
                    return self
            except TimeoutError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"agent not ready within {timeout}s:\n{self.output()}")

    def control(self, request: dict[str, Any], timeout: float = 2.0) -> dict[str, Any]:
        return control(self.control_endpoint, request, timeout)

    def subscriber(self, topics: tuple[str, ...] = ("notice",)) -> Subscriber:
        return Subscriber(self.events, topics)

    def output(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def __enter__(self) -> AgentProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_agent(tmp_path: Path, **kwargs: Any) -> Iterator[AgentProcess]:
    agent = AgentProcess(tmp_path, **kwargs).start()
    try:
        yield agent
    finally:
        agent.stop()


__all__ = [
    "DEAD_LOOPBACK",
    "AgentProcess",
    "Subscriber",
    "agent_env",
    "control",
    "forewarn_cmd",
    "run_forewarn",
    "running_agent",
    "wait_until",
]
