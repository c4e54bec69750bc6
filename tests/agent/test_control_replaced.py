"""The control socket file unlinked, or unlinked and bound again by another process, while
the agent runs: the agent takes it back at its next probe, over a real agent subprocess."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
import zmq
from support import AgentProcess, control, eventually

pytestmark = pytest.mark.usefixtures("forked_agents")

PROBE_INTERVAL = 0.5


def _the_agents_answer(endpoint: str, pid: int) -> bool:
    try:
        reply = control(endpoint, {"op": "status"}, timeout=1.0)
    except TimeoutError:
        return False
    return reply.get("agent", {}).get("pid") == pid


def test_a_control_socket_another_process_took_is_taken_back_though_it_answers_ok(
    tmp_path: Path,
) -> None:
    """Another process unlinked the control socket file and bound its own there, answering
    every request `{"ok": true}`: the agent's probe, connecting anew to the file it saw
    replaced, got ok answers and took control for healthy, for as long as that process ran,
    while every `notify` and ack went to it. Now a socket file that is not the one the agent
    bound is rebound at the next probe, answered or not."""
    args = ("--set", f"control_probe_interval={PROBE_INTERVAL}")
    with AgentProcess(tmp_path, args=args) as agent:
        assert agent.proc is not None
        path = agent.control_endpoint.removeprefix("ipc://")
        impostor = zmq.Context.instance().socket(zmq.REP)
        impostor.setsockopt(zmq.LINGER, 0)
        os.unlink(path)
        impostor.bind(agent.control_endpoint)
        stop = threading.Event()
        answered = [0]

        def answer() -> None:
            while not stop.is_set():
                if impostor.poll(50):
                    impostor.recv()
                    impostor.send(json.dumps({"ok": True}).encode())
                    answered[0] += 1

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        replaced = time.monotonic()
        try:
            eventually(
                lambda: _the_agents_answer(agent.control_endpoint, agent.proc.pid),
                timeout=20,
                what="the agent's own answer on its control endpoint",
            )
            took = time.monotonic() - replaced
        finally:
            stop.set()
            thread.join(timeout=5)
            impostor.close()
        assert "socket file gone or replaced" in agent.output(), agent.output()[-2000:]
        # The next probe, not three unanswered ones (a file unlinked alone took 9 s).
        print(f"taken back in {took:.2f}s")
