"""The tests' raw subscriber (`support.Subscriber.ready`) against a publisher that plays the
agent's side of a join: a notice the agent sends between the moment a new subscription is in
force and its answer to it (the replay) reaches the subscriber twice, and is read once."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import zmq
from forewarn.protocol.wire import TOPIC_REPLAY_PREFIX
from hypothesis import given
from hypothesis import strategies as st
from support import Subscriber, wire_heartbeat, wire_notice


def _send(xpub: zmq.Socket[bytes], topic: str, message: dict[str, Any]) -> None:
    xpub.send_multipart([topic.encode(), json.dumps(message).encode()])


def _answer_late(xpub: zmq.Socket[bytes], drain: dict[str, Any]) -> None:
    """The agent's side: every subscription read (its filter in force), the drain goes out
    live before the replay that answers the subscription, as a loaded agent's watcher sent
    it between the two; the replay repeats it, then the clear follows."""
    token = None
    while token is None:
        frame = xpub.recv()
        if frame[:1] == b"\x01" and frame[1:].startswith(TOPIC_REPLAY_PREFIX.encode()):
            token = frame[1 + len(TOPIC_REPLAY_PREFIX) :].decode()
    _send(xpub, "notice", {**drain, "seq": 2})
    _send(xpub, "heartbeat", wire_heartbeat(seq=3, active=[drain["id"]], replay_for=[token]))
    _send(xpub, "notice", {**drain, "seq": 4, "sent_at": "2026-11-30T03:10:01Z"})
    _send(xpub, "notice", {**drain, "seq": 5, "action": "clear"})


def test_a_notice_sent_live_before_the_replay_that_repeats_it_is_read_once(
    tmp_path: Path,
) -> None:
    # Beside busy loops the agent sent a flag's drain live between the subscription taking
    # effect and its replay: ready() kept both, and test_flag_file.py read the replayed drain
    # where it waited for the clear (`('drain', id) == ('clear', id)`).
    endpoint = f"ipc://{tmp_path}/events"
    context = zmq.Context.instance()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
    xpub.bind(endpoint)
    drain = wire_notice(id="local/flag/1", provider="local", reason="manual", action="drain")
    agent = threading.Thread(target=_answer_late, args=(xpub, drain), daemon=True)
    agent.start()
    try:
        with Subscriber(endpoint).ready() as sub:
            first = sub.notice(timeout=5)
            assert (first["action"], first["seq"]) == ("drain", 2)
            cleared = sub.notice(timeout=5)
            assert (cleared["action"], cleared["id"]) == ("clear", drain["id"])
    finally:
        agent.join(5)
        xpub.close()


_FIELDS = st.dictionaries(
    st.sampled_from(["action", "deadline", "reason", "note"]),
    st.one_of(st.none(), st.text(max_size=5), st.integers()),
)


@given(
    changed=_FIELDS,
    seq=st.integers(0, 2**40),
    clock_ahead=st.one_of(st.none(), st.floats(allow_nan=False)),
)
def test_a_replay_is_kept_again_only_when_it_says_something_new(
    changed: dict[str, Any], seq: int, clock_ahead: float | None
) -> None:
    kept = wire_notice(detail={"clock_ahead_seconds": 0.0})
    replay = {**kept, **changed, "seq": seq, "sent_at": "2026-12-01T00:00:00Z"}
    replay["detail"] = {} if clock_ahead is None else {"clock_ahead_seconds": clock_ahead}
    sub = Subscriber.__new__(Subscriber)
    sub._early = [("heartbeat", wire_heartbeat()), ("notice", kept)]
    news = any(kept[key] != value for key, value in changed.items() if key in kept) or any(
        key not in kept for key in changed
    )
    assert sub._kept_already(replay) is not news
