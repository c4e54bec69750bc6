"""sd_notify: the datagrams systemd would receive, from the module and from a real agent."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from forewarn.agent import sdnotify
from forewarn.agent.throttle import WarningThrottle
from support import AgentProcess, agent_env


class NotifySocket:
    """A unix datagram socket bound the way systemd binds NOTIFY_SOCKET."""

    def __init__(self, abstract: bool) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dir: str | None = None
        if abstract:
            name = f"forewarn-test-{uuid.uuid4().hex}"
            self.sock.bind(b"\0" + name.encode())
            self.env_value = "@" + name
        else:
            # A short directory: unix socket paths are limited to about 107 bytes.
            self.dir = tempfile.mkdtemp(prefix="fw-sd-")
            path = os.path.join(self.dir, "notify")
            self.sock.bind(path)
            self.env_value = path

    def messages(self, until: str, timeout: float = 10.0) -> list[str]:
        """Every datagram until one containing `until` arrives."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {until!r} within {timeout}s; got {got}")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            got.append(data)
            if until in data.splitlines():
                return got

    def close(self) -> None:
        self.sock.close()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(params=[False, True], ids=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest) -> Iterator[NotifySocket]:
    sock = NotifySocket(abstract=request.param)
    yield sock
    sock.close()


def test_functions_send_each_state(notify_socket: NotifySocket, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.env_value)
    assert sdnotify.ready("serving")
    assert notify_socket.messages("READY=1") == ["READY=1\nSTATUS=serving"]
    assert sdnotify.watchdog()
    assert notify_socket.messages("WATCHDOG=1") == ["WATCHDOG=1"]
    assert sdnotify.stopping()
    assert notify_socket.messages("STOPPING=1") == ["STOPPING=1"]


def test_no_socket_is_a_quiet_no_op(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify("READY=1") is False


def test_gone_or_bad_socket_does_not_raise(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert sdnotify.ready() is False
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    assert sdnotify.ready() is False


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        (None, None, None),
        ("20000000", None, 10.0),
        ("500000", "self", 0.25),
        ("500000", "1", None),  # the watchdog is another process's job
        ("0", None, None),
        ("soon", None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
):
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, str(os.getpid()) if value == "self" else value)
    assert sdnotify.watchdog_interval() == expected


def test_agent_sends_ready_watchdog_and_stopping(notify_socket: NotifySocket, tmp_path: Path):
    env = agent_env(tmp_path, NOTIFY_SOCKET=notify_socket.env_value, WATCHDOG_USEC="200000")
    agent = AgentProcess(tmp_path, providers=("local",), env=env).start()
    try:
        before_ready = notify_socket.messages("READY=1")
        assert not any("WATCHDOG=1" in message for message in before_ready[:-1])
        # Pings keep coming at half of WATCHDOG_USEC: at least two in a row.
        notify_socket.messages("WATCHDOG=1")
        notify_socket.messages("WATCHDOG=1")
    finally:
        code = agent.stop()
    assert code == 0
    notify_socket.messages("STOPPING=1")


ROOT = Path(__file__).resolve().parents[2]


def test_under_the_units_watchdog_the_agent_pings_each_second_as_documented(tmp_path: Path):
    """The docs said every 15 s (half of WatchdogSec=30s); the agent pings each second, at
    most half of WATCHDOG_USEC apart, so a stall is seen within seconds, not half a minute."""
    notify_socket = NotifySocket(abstract=False)
    env = agent_env(tmp_path, NOTIFY_SOCKET=notify_socket.env_value, WATCHDOG_USEC="30000000")
    agent = AgentProcess(tmp_path, providers=("local",), env=env).start()
    try:
        notify_socket.messages("READY=1")
        notify_socket.messages("WATCHDOG=1")
        started = time.monotonic()
        notify_socket.messages("WATCHDOG=1", timeout=5.0)
        assert time.monotonic() - started < 5.0
    finally:
        agent.stop()
        notify_socket.close()
    row = next(
        line
        for line in (ROOT / "docs" / "operations.md").read_text().splitlines()
        if line.startswith("| `WatchdogSec=30s`")
    )
    assert "every second" in row and "15 s" not in row, row
    unit = (ROOT / "packaging" / "systemd" / "forewarn-agent.service").read_text()
    assert "WatchdogSec/2" not in unit


def test_a_gone_socket_is_logged_once_a_minute_not_at_every_ping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """Under the shipped unit (WatchdogSec=30) the agent pings every second: with the notify
    socket gone (systemd re-executing, a container that inherited NOTIFY_SOCKET without the
    socket) each ping logged a warning, 86,400 lines a day. Now one a minute per state, with
    how many failed since."""
    now = [1000.0]
    monkeypatch.setattr(
        sdnotify, "_failures", {"WATCHDOG": WarningThrottle(60.0, clock=lambda: now[0])}
    )
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    caplog.set_level("WARNING", logger="forewarn.agent")
    for _ in range(50):
        assert sdnotify.watchdog() is False
        now[0] += 1.0
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 1 and "sd_notify WATCHDOG" in warnings[0], warnings
    now[0] += 10.0
    assert sdnotify.watchdog() is False
    assert len(caplog.records) == 2 and "50 times" in caplog.records[1].getMessage()
    # Another state is another warning: READY is not hidden behind the pings.
    assert sdnotify.ready() is False
    assert "sd_notify READY" in caplog.records[-1].getMessage()
    # A NOTIFY_SOCKET of the wrong form is said once too.
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    for _ in range(5):
        assert sdnotify.watchdog() is False
    assert sum("neither a path" in r.getMessage() for r in caplog.records) == 1
