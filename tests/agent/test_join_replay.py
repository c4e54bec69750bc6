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


def _beat(xpub: zmq.Socket[bytes], seq: int, active: list[str], replay_for: list[str]) -> None:
    body = {"v": 1, "seq": seq, "agent": "host/1/a", "version": "0", "providers": ["local"]}
    body |= {"active": active, "sent_at": "2026-11-30T03:10:00Z", "replay_for": replay_for}
    xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])


def test_subscriber_ready_waits_for_the_heartbeat_naming_its_token(tmp_path: Any) -> None:
    """The tests' `Subscriber.ready()` took a periodic heartbeat with nothing active for the
    replay of nothing: with an agent reading subscriptions late, four client-id tests found
    their `client/<id>` not yet counted, and a notice raised then came twice."""
    from support import Subscriber

    context = zmq.Context.instance()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.bind(f"ipc://{tmp_path}/events")
    try:
        with Subscriber(f"ipc://{tmp_path}/events", ("notice", "client/job")) as sub:
            wanted = f"replay/{sub.token}".encode()
            subscribed: list[bytes] = []
            while b"\x01" + wanted not in subscribed:
                assert xpub.poll(5000), "the subscriber never subscribed its token"
                subscribed.append(xpub.recv())
            _beat(xpub, 10, [], [])  # periodic: nothing active, no token
            _beat(xpub, 11, [], ["someone-else"])
            try:
                sub.ready(timeout=0.3)
            except TimeoutError:
                pass
            else:
                raise AssertionError("ready() took a heartbeat not naming its token")
            _beat(xpub, 12, ["local/a"], [sub.token])
            body = {"v": 1, "id": "local/a", "seq": 13, "action": "drain", "reason": "manual"}
            xpub.send_multipart([b"notice", json.dumps(body).encode()])
            assert sub.ready(timeout=5) is sub
            assert sub.notice(timeout=1)["seq"] == 13
    finally:
        xpub.close()
