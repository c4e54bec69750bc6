"""A control client that pipelines requests and never reads the replies (a DEALER with the
REQ envelope, a client stuck in its own work), over a real agent: the replies the agent
holds for it are bounded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent import publisher
from forewarn.agent.publisher import CONTROL_SEND_HWM, Publisher
from forewarn.protocol.notifydeadline import seconds_fields
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, examples, with_token

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


# A `status` at the bounds: 64 notices with notes of 2,000 characters outside the BMP, each
# escaped as 12 bytes of JSON (measured from a real agent: 1,594,087 bytes).
LARGEST_STATUS = 1_594_087


def test_the_bytes_of_replies_a_control_client_never_reads_are_bounded(tmp_path: Path) -> None:
    """128 replies a peer are 200 MB when each is a `status` of 1.6 MB: a real agent with 64
    notes of 2,000 emoji went from 49 MB to 243 MB RSS under one DEALER that pipelined
    `status` without reading. The mark now follows the largest reply sent, so what one such
    peer holds stays within CONTROL_QUEUE_BYTES, one connected after the mark was lowered
    too."""
    served = 0

    async def handle(request: dict[str, Any]) -> dict[str, Any]:
        nonlocal served
        served += 1
        return {"ok": True, "pad": "x" * (LARGEST_STATUS if request["op"] == "big" else 10)}

    async def run() -> list[tuple[int, int]]:
        sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
        sockets.bind()
        serving = asyncio.ensure_future(sockets.serve_control(handle))
        context = zmq.Context()
        peers = [context.socket(zmq.DEALER) for _ in range(2)]
        try:
            found = []
            for peer in peers:
                peer.setsockopt(zmq.LINGER, 0)
                peer.setsockopt(zmq.SNDHWM, 0)
                peer.setsockopt(zmq.RCVHWM, 1)  # what it does not read stays with the agent
                peer.connect(f"ipc://{tmp_path}/control")
                asked = served + REQUESTS // 4
                for _ in range(REQUESTS // 4):
                    peer.send_multipart([b"", b'{"op": "big"}'])
                while served < asked:
                    await asyncio.sleep(0.01)  # until every request was answered
                await asyncio.sleep(0.2)  # the answers written out to the socket
                held = size = 0
                while peer.poll(1000):  # what was queued for it comes at once
                    size += len(peer.recv_multipart()[-1])
                    held += 1
                found.append((held, size))
            return found
        finally:
            serving.cancel()
            for peer in peers:
                peer.close()
            context.term()
            sockets.close()

    for which, (held, size) in zip(("first", "second"), asyncio.run(run()), strict=True):
        assert size <= publisher.CONTROL_QUEUE_BYTES + 2 * LARGEST_STATUS, (
            f"{held} replies of {LARGEST_STATUS} bytes ({size} bytes) were held for the {which} "
            "peer that did not read them"
        )


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.integers(1, publisher.CONTROL_QUEUE_BYTES // publisher.CONTROL_SEND_HWM_FLOOR),
        max_size=500,
    )
)
def test_the_mark_set_from_the_largest_reply_bounds_an_unread_peer_s_bytes(
    sizes: list[int],
) -> None:
    """Whatever the order of the reply sizes, a peer that reads none of them is queued at
    most CONTROL_QUEUE_BYTES, and at least as many as the largest's mark allows."""
    largest, hwm, queued = 0, publisher.CONTROL_SEND_HWM, []
    for size in sizes:
        if size > largest:  # as serve_control sets it before it replies
            largest, hwm = size, publisher.control_send_hwm(size)
        if len(queued) < hwm:
            queued.append(size)
    assert sum(queued) <= publisher.CONTROL_QUEUE_BYTES
    assert len(queued) >= min(len(sizes), hwm)
    assert publisher.CONTROL_SEND_HWM_FLOOR <= hwm <= publisher.CONTROL_SEND_HWM


def test_the_documented_control_queue_bounds_are_the_codes() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    size = f"{publisher.CONTROL_QUEUE_BYTES // 2**20} MiB"
    assert (
        f"has at most {publisher.CONTROL_SEND_HWM} of them queued for it, and at most {size}"
        in text
    )
    assert f"never fewer than {publisher.CONTROL_SEND_HWM_FLOOR}" in text
