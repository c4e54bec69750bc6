"""`AgentProcess.start` as the suite's tests meet it on a loaded node."""

from __future__ import annotations

import sys
from pathlib import Path

from support import AgentProcess

# A stand-in for an agent whose every answer takes 0.8 s (a loaded node: 2 cores, load 20).
SLOW_AGENT = """
import json, sys, time, zmq
sock = zmq.Context().socket(zmq.REP)
sock.bind(sys.argv[1])
while True:
    sock.recv()
    time.sleep(0.8)
    sock.send(json.dumps({"ok": True}).encode())
"""


def test_an_agent_slower_to_answer_than_the_first_try_is_still_found_ready(
    tmp_path: Path,
) -> None:
    """Each status request waited 0.5 s and no more: an agent that had logged "serving" 13 s
    before, on a node at load 20, answered none of them in time, and
    test_fault_matrix[digitalocean] said "agent not ready within 20s"."""
    agent = AgentProcess(tmp_path)
    agent.argv = [sys.executable, "-c", SLOW_AGENT, agent.control_endpoint]
    try:
        agent.start(timeout=8)
    finally:
        agent.kill()
