"""What a subscriber can tell from the join replay: a subscription to `replay/<token>` (after
`notice`) makes the agent replay, and the heartbeat that starts that replay lists the token in
`replay_for`; every other heartbeat carries `replay_for` empty. Without it a periodic heartbeat
with nothing active could not be told from the replay of nothing, and a subscriber that took
it for its answer received a notice raised a moment later twice (then its late replay)."""

from __future__ import annotations

import json
import time
from typing import Any

import zmq
from support import AgentProcess


def _next(sock: zmq.Socket[bytes], deadline: float) -> tuple[str, dict[str, Any]]:
    left = deadline - time.monotonic()
    assert left > 0 and sock.poll(int(left * 1000)), "nothing from the agent"
    topic, payload = sock.recv_multipart()
    return topic.decode(), json.loads(payload)


def _joined(agent: AgentProcess, token: str) -> zmq.Socket[bytes]:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    for topic in ("heartbeat", "notice", f"replay/{token}"):
        sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sock.connect(agent.events)
    return sock


def test_the_heartbeat_of_a_subscriber_s_replay_names_its_token(tmp_path: Any) -> None:
    with AgentProcess(tmp_path) as agent:
        empty = _joined(agent, "first-0")
        try:
            deadline = time.monotonic() + 10
            while True:  # periodic heartbeats may come first: they list no token
                topic, message = _next(empty, deadline)
                assert topic == "heartbeat" and message["active"] == []
                if message["replay_for"]:
                    break
                assert message["replay_for"] == []
            assert message["replay_for"] == ["first-0"]
            reply = agent.control({"op": "notify", "action": "drain", "id": "local/manual-1"})
            assert reply["ok"]
            full = _joined(agent, "second.1")
            try:
                replay: list[tuple[str, Any]] = []
                while True:
                    topic, message = _next(full, deadline)
                    if topic == "heartbeat" and message["replay_for"] == ["second.1"]:
                        seq = message["seq"]
                        assert message["active"] == ["local/manual-1"]
                        break
                topic, message = _next(full, deadline)
                replay.append((topic, message["id"]))
                assert message["seq"] == seq + 1
                assert replay == [("notice", "local/manual-1")]
            finally:
                full.close()
            # The first subscriber saw the second one's replay too: its token is not its own.
            while (topic, message.get("replay_for")) != ("heartbeat", ["second.1"]):
                topic, message = _next(empty, deadline)
        finally:
            empty.close()
