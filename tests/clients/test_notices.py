"""Notices in-process: late join, reconnect after an agent restart, a dead agent noticed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from forewarn.clients import Notices
from support import AgentProcess


def wait_for(predicate, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_late_join_reconnect_and_dead_agent(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    agent = AgentProcess(tmp_path).start()
    raised = agent.control({"op": "notify", "action": "drain"})["notice"]
    notices = Notices(agent.events, agent.control_endpoint, heartbeat_timeout=1.5)
    try:
        assert wait_for(lambda: raised["id"] in notices.active)
        assert notices.alive and notices.latest is not None
        assert notices.latest.action == "drain"
        agent.kill()
        assert wait_for(lambda: not notices.alive, timeout=4), "a dead agent must be noticed"
        again = AgentProcess(tmp_path, env=agent.env).start()
        try:
            assert wait_for(lambda: notices.alive, timeout=5), "reconnects to a new agent"
            again.control({"op": "notify", "action": "terminate", "id": "local/after"})
            assert wait_for(lambda: "local/after" in notices.active)
            event = notices.wait(("terminate",), timeout=1)
            assert event is not None and event.id == "local/after"
        finally:
            again.stop()
    finally:
        notices.close()


def test_importing_the_client_loads_no_agent_runtime() -> None:
    import subprocess

    probe = (
        "import sys, forewarn.clients; "
        "bad = [m for m in ('pydantic', 'httpx', 'boto3', 'forewarn.agent.runner') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
