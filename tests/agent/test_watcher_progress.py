"""A watcher that hangs without crashing (a request whose answer never completes) is a dead
part: past its progress bound (from its own settings) the runner restarts it, logs it,
counts it (`watcher-stalled`), and `status` and `/healthz` show it, so the systemd watchdog
stops being pinged."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from forewarn.testing.waiting import eventually, free_port
from support import AgentProcess, agent_env


def _healthz(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _digitalocean(status: dict[str, Any]) -> dict[str, Any]:
    (health,) = [h for h in status["health"] if h["name"] == "digitalocean"]
    return health


class _StuckInIdle:
    """An IMAP server on loopback that answers everything at once, until IDLE: then it sends
    a byte every 0.1 s of a line that never ends. Each read keeps within imap_timeout, and the
    IDLE wait, bounded by idle_renew and the reads, has no deadline of its own: the watcher
    waits on with neither an answer nor an error (the line's 1 MB limit is a day away)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn, conn.makefile("rb") as lines:
            conn.sendall(b"* OK [CAPABILITY IMAP4rev1 IDLE] ready\r\n")
            for line in lines:
                tag, _, command = line.decode().strip().partition(" ")
                verb = command.upper()
                if verb.startswith("CAPABILITY"):
                    conn.sendall(b"* CAPABILITY IMAP4rev1 IDLE\r\n")
                elif verb.startswith("EXAMINE"):
                    conn.sendall(b"* 0 EXISTS\r\n* OK [UIDVALIDITY 3] ok\r\n")
                elif verb.startswith("UID SEARCH"):
                    conn.sendall(b"* SEARCH\r\n")
                elif verb.startswith("IDLE"):
                    conn.sendall(b"+ idling\r\n* ")
                    while True:
                        conn.sendall(b"x")
                        time.sleep(0.1)
                conn.sendall(f"{tag} OK done\r\n".encode())

    def close(self) -> None:
        self.listener.close()


def test_a_watcher_hung_in_a_request_is_restarted_and_shown_dead(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    server = _StuckInIdle()
    try:
        credentials = tmp_path / "imap.env"
        credentials.write_text("FOREWARN_IMAP_USER=u\nFOREWARN_IMAP_PASSWORD=p\n")
        credentials.chmod(0o600)
        metrics = f"127.0.0.1:{free_port()}"
        env = agent_env(
            tmp_path,
            FOREWARN_DIGITALOCEAN_DROPLET_ID="424242424",
            FOREWARN_DIGITALOCEAN_DROPLET_NAME="gpu-spot-1",
            FOREWARN_DIGITALOCEAN_IMAP_HOST="127.0.0.1",
            FOREWARN_DIGITALOCEAN_IMAP_PORT=str(server.port),
            FOREWARN_DIGITALOCEAN_IMAP_TLS="none",
            FOREWARN_DIGITALOCEAN_CREDENTIALS_FILE=str(credentials),
            FOREWARN_DIGITALOCEAN_IMAP_TIMEOUT="0.2",
            FOREWARN_DIGITALOCEAN_POLL_INTERVAL="0.2",
            FOREWARN_DIGITALOCEAN_IDLE_RENEW="0.2",
            FOREWARN_DIGITALOCEAN_RETRY_MAX="0.2",
            FOREWARN_METRICS_ADDRESS=metrics,
        )
        with AgentProcess(tmp_path, ("local", "digitalocean"), env=env) as agent:
            stalled = eventually(
                lambda: (
                    (h := _digitalocean(agent.control({"op": "status"})))["last_error"]
                    == "watcher-stalled"
                    and h
                ),
                timeout=15,
                what="the hung watcher reported as stalled",
            )
            assert stalled["state"] == "degraded", stalled
            code, body = _healthz(f"http://{metrics}/healthz")
            assert (code, body["parts"]["watcher/digitalocean"]) == (503, False), body
            assert body["parts"]["watcher/local"] is True, body
            assert "digitalocean: no progress" in agent.output()
    finally:
        server.close()
