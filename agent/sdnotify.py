"""systemd's notify protocol (sd_notify), with the standard library only.

Under `Type=notify` systemd hands the service a datagram socket in `NOTIFY_SOCKET` (a path, or
an abstract socket when it starts with `@`) and waits for `READY=1` before it counts the
service as started. With `WatchdogSec=` it also sets `WATCHDOG_USEC` and restarts the service
when no `WATCHDOG=1` arrives within that time. Outside systemd every call is a quiet no-op.
"""

from __future__ import annotations

import logging
import os
import socket

from .throttle import WarningThrottle

log = logging.getLogger("forewarn.agent")

# The agent pings the watchdog every second: a socket that is gone (systemd re-executing, a
# container that inherited NOTIFY_SOCKET without the socket) fails each ping, and a warning per
# ping flooded the journal. Each kind of failure is said at most this often, with a count.
FAILURE_LOG_INTERVAL = 60.0
_failures: dict[str, WarningThrottle] = {}


def _warn(kind: str, message: str, *args: object) -> None:
    throttle = _failures.setdefault(kind, WarningThrottle(FAILURE_LOG_INTERVAL))
    held = throttle.due()
    if held is None:
        return
    since = f" ({held} times since the last warning)" if held > 1 else ""
    log.warning(message + "%s", *args, since)


ENV_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"


def _address(value: str) -> str | bytes | None:
    if value.startswith("@"):
        # An abstract socket: a leading NUL byte instead of the `@` systemd writes.
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None


def notify(state: str) -> bool:
    """Send `state` (one or more `KEY=VALUE` lines) to systemd; True when it was sent.

    Never raises: a service must not fail because its supervisor went away.
    """
    target = os.environ.get(ENV_SOCKET)
    if not target:
        return False
    address = _address(target)
    if address is None:
        _warn(
            "address", "%s=%r is neither a path nor an abstract socket; ignored", ENV_SOCKET, target
        )
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as error:
        kind = state.split("=", 1)[0]
        _warn(kind, "sd_notify %s to %s failed: %s", kind, target, error)
        return False
    return True


def ready(status: str | None = None) -> bool:
    """Tell systemd the service is serving (ends the start-up of a `Type=notify` unit)."""
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""))


def stopping() -> bool:
    """Tell systemd the service is shutting down on purpose."""
    return notify("STOPPING=1")


def watchdog() -> bool:
    """One keep-alive ping for `WatchdogSec=`."""
    return notify("WATCHDOG=1")


def watchdog_interval() -> float | None:
    """Seconds between watchdog pings (half of `WATCHDOG_USEC`, as sd_watchdog_enabled(3)
    advises), or None when systemd asks for none or asks another process."""
    usec = os.environ.get(ENV_WATCHDOG_USEC)
    if not usec:
        return None
    pid = os.environ.get(ENV_WATCHDOG_PID)
    if pid and pid.strip() != str(os.getpid()):
        return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("%s=%r is not an integer; watchdog pings disabled", ENV_WATCHDOG_USEC, usec)
        return None
    if value <= 0:
        return None
    return value / 2 / 1_000_000


__all__ = ["notify", "ready", "stopping", "watchdog", "watchdog_interval"]
