"""A subscriber of the events socket that stops reading (a job stopped by SIGSTOP or a
scheduler's suspend, a reader in another language stuck in its own work) over a real agent:
what the agent holds for it is bounded, and what it lost is found and replayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.protocol.notifydeadline import seconds_fields
from forewarn.protocol.wire import new_replay_token
from support import AgentProcess, eventually

pytestmark = pytest.mark.usefixtures("forked_agents")

NOTICES = 64
# Bursts of replays another subscriber asks for, each a heartbeat and the 64 notices: 13,000
# messages, past the old high-water mark of 10,000.
BURSTS = 200


def _seq(frames: list[bytes]) -> int:
    value = json.loads(frames[1])["seq"]
    assert isinstance(value, int)
    return value


def _ask_replays(endpoint: str, bursts: int) -> None:
    """`bursts` replays, one after the other: each waited for (its heartbeat names the
    token), so that none is coalesced with the next."""
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.setsockopt(zmq.SUBSCRIBE, b"heartbeat")
    sock.connect(endpoint)
    try:
        for _ in range(bursts):
            token = new_replay_token()
            sock.setsockopt(zmq.SUBSCRIBE, f"replay/{token}".encode())
            while token not in json.loads(sock.recv_multipart()[1]).get("replay_for", []):
                pass
            sock.setsockopt(zmq.UNSUBSCRIBE, f"replay/{token}".encode())
    finally:
        sock.close()


def test_a_subscriber_that_stops_reading_holds_a_thousand_messages_not_ten_thousand(
    tmp_path: Path,
) -> None:
    """The events socket's send high-water mark was 10,000 messages per subscriber: one that
    stopped reading made the agent hold 10,000 heartbeats (111 MB more RSS with 64 notices of
    180-character ids, 2.8 hours of heartbeats). Now 1,000: past them a stopped reader loses
    messages, which the seq gap and the heartbeats' `active` tell it, and one subscription
    more has them replayed."""
    with AgentProcess(tmp_path) as agent:
        for n in range(NOTICES):
            reply = agent.control(
                {"op": "notify", "action": "drain", "id": f"local/n{n}", **seconds_fields(7200)}
            )
            assert reply["ok"], reply
        stalled = zmq.Context.instance().socket(zmq.SUB)
        stalled.setsockopt(zmq.LINGER, 0)
        # Its own queue holds one message: the rest stays in the agent (and the kernel).
        stalled.setsockopt(zmq.RCVHWM, 1)
        stalled.setsockopt(zmq.SUBSCRIBE, b"")
        stalled.connect(agent.events)
        try:
            first = _seq(stalled.recv_multipart())
            _ask_replays(agent.events, BURSTS)
            # Read what was queued, up to the first message after a gap: a heartbeat sent
            # once the queue has room again.
            held, last = 1, first
            stalled.setsockopt(zmq.RCVTIMEO, 10_000)
            while True:
                seq = _seq(stalled.recv_multipart())
                if seq != last + 1:
                    break
                held, last = held + 1, seq
            # The agent's 1,000, and what the kernel's socket buffer (about 200 kB) holds of
            # notices of about 300 bytes.
            assert held < 2_500, f"{held} messages were queued for one stopped subscriber"
            # What it lost is replayed when it subscribes once more.
            token = new_replay_token()
            stalled.setsockopt(zmq.SUBSCRIBE, f"replay/{token}".encode())
            replayed: set[str] = set()

            def replay_read() -> bool:
                frames = stalled.recv_multipart()
                body: dict[str, Any] = json.loads(frames[1])
                if frames[0] == b"notice":
                    replayed.add(body["id"])
                return len(replayed) == NOTICES

            eventually(replay_read, timeout=30, what="the 64 notices replayed")
        finally:
            stalled.close()
        assert agent.control({"op": "status"})["ok"]
