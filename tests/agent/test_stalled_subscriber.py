"""A subscriber of the events socket that stops reading (a job stopped by SIGSTOP or a
scheduler's suspend, a reader in another language stuck in its own work) over a real agent:
what the agent holds for it is bounded, and what it lost is found and replayed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent import publisher
from forewarn.agent.publisher import Publisher
from forewarn.protocol.notifydeadline import seconds_fields
from forewarn.protocol.wire import new_replay_token
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, examples

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


# A heartbeat at the bounds, topic and body: 64 notices of 195-character ids, each acked by 16
# clients of 200 bytes (`acked_by`), is 247 kB (measured from a real agent).
LARGEST_HEARTBEAT = 246_631


def _held_in_a_row(stalled: zmq.Socket[bytes]) -> tuple[int, int]:
    """(messages, bytes) a subscriber that did not read finds queued for it, up to the first
    gap in their numbers."""
    stalled.setsockopt(zmq.RCVTIMEO, 2_000)
    held = size = 0
    last = -1
    with contextlib.suppress(zmq.Again):
        while True:
            frames = stalled.recv_multipart()
            number = int(frames[1][:8])
            if last >= 0 and number != last + 1:
                break
            held, size, last = held + 1, size + len(frames[0]) + len(frames[1]), number
    return held, size


def test_a_stopped_subscriber_holds_a_bounded_number_of_bytes_not_a_thousand_of_the_largest(
    tmp_path: Path,
) -> None:
    """libzmq counts a subscriber's queue in messages: at 1,000 heartbeats of the largest the
    bounds allow (247 kB), one stopped subscriber took a real agent from 48 MB to 267 MB RSS,
    past the 128Mi of the Kubernetes manifests. The high-water mark now follows the largest
    message sent: what one stopped subscriber holds stays within EVENTS_QUEUE_BYTES, while
    messages of a typical size still get the 1,000."""

    async def run() -> list[tuple[int, int]]:
        sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
        sockets.bind()
        joined = asyncio.Event()
        reading = asyncio.ensure_future(
            sockets.subscriptions(lambda tokens: joined.set(), lambda client, on: None)
        )
        context = zmq.Context()
        stalled = [context.socket(zmq.SUB) for _ in range(3)]

        async def connect(sock: zmq.Socket[bytes]) -> None:
            joined.clear()
            sock.connect(f"ipc://{tmp_path}/events")
            await asyncio.wait_for(joined.wait(), 10)  # the agent has read its subscription

        async def send(size: int) -> None:
            for number in range(1_200):
                sockets._send("heartbeat", f"{number:08d}".encode().ljust(size, b" "))
                await asyncio.sleep(0)

        try:
            for sock in stalled:
                sock.setsockopt(zmq.LINGER, 0)
                # Its own queue holds one message: the rest stays in the agent (and the kernel).
                sock.setsockopt(zmq.RCVHWM, 1)
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            await connect(stalled[0])
            await send(200)
            found = [_held_in_a_row(stalled[0])]
            # One connected before the largest message, one after it lowered the mark.
            await connect(stalled[1])
            await send(LARGEST_HEARTBEAT)
            await connect(stalled[2])
            await send(LARGEST_HEARTBEAT)
            return [*found, _held_in_a_row(stalled[1]), _held_in_a_row(stalled[2])]
        finally:
            reading.cancel()
            for sock in stalled:
                sock.close()
            context.term()
            sockets.close()

    (small_held, _), *large = asyncio.run(run())
    # Small messages: the 1,000, and what the kernel's socket buffer holds of them.
    assert small_held >= 1_000, small_held
    for which, (held, size) in zip(("before", "after"), large, strict=True):
        assert size <= publisher.EVENTS_QUEUE_BYTES + 2 * LARGEST_HEARTBEAT, (
            f"{held} messages of {LARGEST_HEARTBEAT} bytes ({size} bytes) were queued for one "
            f"stopped subscriber connected {which} the first of them"
        )


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.integers(1, publisher.EVENTS_QUEUE_BYTES // publisher.EVENTS_SEND_HWM_FLOOR),
        max_size=2_000,
    )
)
def test_the_mark_set_from_the_largest_message_bounds_a_stopped_subscriber_s_bytes(
    sizes: list[int],
) -> None:
    """Whatever the order of the sizes the agent sends (heartbeats growing with acks, then a
    burst of small ones), a subscriber that reads none of them is queued at most
    EVENTS_QUEUE_BYTES, and at least as many messages as the largest's mark allows."""
    largest, hwm, queued = 0, publisher.EVENTS_SEND_HWM, []
    for size in sizes:
        if size > largest:  # as Publisher._send sets it before it sends
            largest, hwm = size, publisher.events_send_hwm(size)
        if len(queued) < hwm:
            queued.append(size)
    assert sum(queued) <= publisher.EVENTS_QUEUE_BYTES
    assert len(queued) >= min(len(sizes), hwm)
    assert publisher.EVENTS_SEND_HWM_FLOOR <= hwm <= publisher.EVENTS_SEND_HWM


def test_the_documented_events_queue_bounds_are_the_codes() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    most = f"{publisher.EVENTS_SEND_HWM:,}"
    size = f"{publisher.EVENTS_QUEUE_BYTES // 2**20} MiB"
    assert f"queue at most {most} messages for it, and at most {size} of them" in text
    assert f"never below {publisher.EVENTS_SEND_HWM_FLOOR}," in text
    assert f"{publisher.events_send_hwm(LARGEST_HEARTBEAT)} heartbeats of the largest" in text
