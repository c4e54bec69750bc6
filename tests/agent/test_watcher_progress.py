"""A watcher that hangs without crashing (a request whose answer never completes) is a dead
part: past its progress bound (from its own settings) the runner restarts it, logs it,
counts it (`watcher-stalled`), and `status` and `/healthz` show it, so the systemd watchdog
stops being pinged."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from forewarn.providers.digitalocean.simulate import make_simulator
from forewarn.providers.simulator import SimServer
from forewarn.testing.waiting import eventually, free_port
from support import AgentProcess, SimControl, agent_env, refused_port


def _healthz(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _digitalocean(status: dict[str, Any]) -> dict[str, Any]:
    (health,) = [h for h in status["health"] if h["name"] == "digitalocean"]
    return health


def test_a_watcher_hung_in_a_request_is_restarted_and_shown_dead(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    server = SimServer(make_simulator()).start()
    try:
        # Droplet metadata that sends its headers and then a byte every 1.7 s: the watcher's
        # HTTP client times out single reads (2 s), not the whole answer, so it waits on, with
        # neither an answer nor an error (a body of 9 bytes takes 15 s, a longer one longer).
        SimControl(server.url).fault("slow", path="/metadata/v1/", rate=0.6)
        credentials = tmp_path / "imap.env"
        credentials.write_text("FOREWARN_IMAP_USER=u\nFOREWARN_IMAP_PASSWORD=p\n")
        credentials.chmod(0o600)
        metrics = f"127.0.0.1:{free_port()}"
        with refused_port() as imap_port:
            env = agent_env(
                tmp_path,
                FOREWARN_DIGITALOCEAN_URL=server.url,
                FOREWARN_DIGITALOCEAN_IMAP_HOST="127.0.0.1",
                FOREWARN_DIGITALOCEAN_IMAP_PORT=str(imap_port),
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
        server.stop()
