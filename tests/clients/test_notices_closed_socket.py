"""A job whose user may not connect to the agent's socket (the agent run as root, the job as a
user outside the sockets' group): the client's warning says so, not that no agent runs."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path

from forewarn.clients import Notices
from other_user import call_as, other_user
from support import eventually


def _warnings_of_a_client(events: str, control: str) -> str:
    """As the other user: the client's warnings once it has given up hearing an agent."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("forewarn.clients")
    logger.addHandler(Keep())
    notices = Notices(events, control, heartbeat_timeout=0.3)
    try:
        eventually(lambda: lines, timeout=10, what="the client's warning")
    finally:
        notices.close()
    return "\n".join(lines)


def test_a_socket_this_user_may_not_connect_to_is_said_as_such() -> None:
    """Found: a torch job run as another user, its agent started by root in a runtime
    directory of group root, logged `no agent on ipc://.../events`, though the agent ran
    there, and trained through its terminate."""
    uid, gid = other_user()
    runtime = Path(tempfile.mkdtemp(prefix="forewarn-closed-", dir="/tmp"))
    runtime.chmod(0o755)
    bound = []
    try:
        for name in ("events", "control"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(runtime / name))
            os.chmod(runtime / name, 0o660)  # root's, group root: as an agent run by root makes it
            bound.append(sock)
        text = call_as(
            uid,
            gid,
            lambda: _warnings_of_a_client(f"ipc://{runtime}/events", f"ipc://{runtime}/control"),
        )
    finally:
        for sock in bound:
            sock.close()
        for name in ("events", "control"):
            (runtime / name).unlink(missing_ok=True)
        runtime.rmdir()
    assert "no agent on" not in text, text
    assert f"may not connect to {runtime}/events" in text, text
    assert "group root" in text, text
