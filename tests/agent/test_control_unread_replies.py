"""A control client that pipelines requests and never reads the replies (a DEALER with the
REQ envelope, a client stuck in its own work), over a real agent: the replies the agent
holds for it are bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zmq
from forewarn.agent.publisher import CONTROL_SEND_HWM
from forewarn.protocol.notifydeadline import seconds_fields
from support import AgentProcess, eventually, with_token

pytestmark = pytest.mark.usefixtures("forked_agents")

REQUESTS = 600


def test_replies_a_control_client_never_reads_are_not_all_held_by_the_agent(
    tmp_path: Path,
) -> None:
    """libzmq's default send high-water mark, 1,000 messages a peer, let one DEALER that
    pipelined `status` requests and read no reply make the agent hold 1,000 replies: with
    64 notices of 2,000-character notes (a status of 179 kB) its RSS went from 44 MB to
    215 MB, and stayed there. A REQ client has one request in flight; now the agent queues
    at most 128 replies a peer and drops the rest, as it drops a reply to a peer gone."""
    with AgentProcess(tmp_path) as agent:
        for n in range(8):
            notice = {"op": "notify", "action": "drain", "id": f"local/n{n}", "note": "x" * 2000}
            assert agent.control({**notice, **seconds_fields(7200)})["ok"]
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 1)  # what it does not read stays with the agent
        sock.connect(agent.control_endpoint)
        try:
            status = json.dumps(with_token(agent.control_endpoint, {"op": "status"}, agent.runtime))
            for _ in range(REQUESTS):
                sock.send_multipart([b"", status.encode()])
            # Answered in order: once this ack is logged, every status before it was answered.
            last = {"op": "ack", "notice_id": None, "client": "the-last-request", "step": 1}
            last = with_token(agent.control_endpoint, last, agent.runtime)
            sock.send_multipart([b"", json.dumps(last).encode()])
            eventually(
                lambda: "from the-last-request" in agent.output(),
                timeout=60,
                what="the last request answered",
            )
            held = 0
            while sock.poll(1000):  # what was queued for it comes at once
                sock.recv_multipart()
                held += 1
        finally:
            sock.close()
        # The agent's CONTROL_SEND_HWM, and what the kernel's socket buffer holds of 25 kB
        # replies.
        assert held < CONTROL_SEND_HWM + 50, f"{held} of {REQUESTS + 1} replies were held"
        assert agent.control({"op": "status"})["ok"]
