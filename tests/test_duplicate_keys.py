"""A JSON object that names a key twice is refused, naming the key, wherever wire JSON is read:
Python's `json` kept the last of them and the C subscriber the first, so
`{"action": "clear", ..., "action": "terminate"}` was a clear to one subscriber and a terminate
to the next (the C side is in tests/clients/test_c_subscriber.py)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent.protocol import decode_heartbeat, decode_notice
from forewarn.agent.publisher import Publisher
from forewarn.clients.event import Event
from forewarn.clients.notices import parse_heartbeat
from forewarn.protocol import jsontext
from forewarn.protocol.wire import ReplyError, request
from hypothesis import example, given
from hypothesis import strategies as st
from support import wire_heartbeat, wire_notice

NOTICE = wire_notice(action="clear", detail={"action": "terminate"})
HEARTBEAT = wire_heartbeat(active=["aws/spot-itn/1"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


def with_duplicate(
    message: dict[str, Any], key: str, value: Any, at: int, escaped: bool, nested: bool
) -> str:
    """`message` as JSON text with `key` named once more (holding `value`) at position `at`
    of its members, or of its `detail`'s when `nested`; `escaped` writes the extra one as
    `\\uXXXX` escapes, which name the same key."""
    if nested:
        detail = {**message["detail"], key: message["detail"].get(key, 0)}
        inner = members(detail, key, value, at, escaped)
        return members({**message, "detail": None}, None, None, 0, escaped).replace(
            '"detail":null', f'"detail":{inner}'
        )
    return members(message, key, value, at, escaped)


def members(obj: dict[str, Any], key: str | None, value: Any, at: int, escaped: bool) -> str:
    pairs = [f"{json.dumps(name)}:{json.dumps(item)}" for name, item in obj.items()]
    if key is not None:
        name = "".join(f"\\u{ord(char):04x}" for char in key) if escaped else key
        spelled = f'"{name}"' if escaped else json.dumps(key)
        pairs.insert(at % (len(pairs) + 1), f"{spelled}:{json.dumps(value)}")
    return "{" + ",".join(pairs) + "}"


@given(
    key=st.sampled_from(sorted(NOTICE)),
    value=JSON,
    at=st.integers(0, 20),
    escaped=st.booleans(),
    nested=st.booleans(),
)
@example(key="action", value="terminate", at=20, escaped=False, nested=False)
@example(key="v", value=2, at=0, escaped=False, nested=False)
@example(key="action", value="stop", at=0, escaped=True, nested=True)
def test_a_notice_naming_a_key_twice_is_refused_naming_it(
    key: str, value: Any, at: int, escaped: bool, nested: bool
) -> None:
    text = with_duplicate(NOTICE, key, value, at, escaped, nested)
    said = f"notice refused: the key {key!r} appears twice in one object"
    with pytest.raises(ValueError, match=said):
        Event.from_json(text)
    with pytest.raises(ValueError, match=f"the key {key!r} appears twice"):
        decode_notice(text.encode())


@given(
    key=st.sampled_from(sorted(HEARTBEAT)),
    value=JSON,
    at=st.integers(0, 20),
    escaped=st.booleans(),
)
@example(key="active", value=[], at=20, escaped=False)
def test_a_heartbeat_naming_a_key_twice_is_refused_naming_it(
    key: str, value: Any, at: int, escaped: bool
) -> None:
    text = with_duplicate(HEARTBEAT, key, value, at, escaped, nested=False)
    with pytest.raises(ValueError, match=f"heartbeat refused: the key {key!r} appears twice"):
        parse_heartbeat(text.encode())
    with pytest.raises(ValueError, match=f"the key {key!r} appears twice"):
        decode_heartbeat(text.encode())


@given(JSON)
def test_json_without_a_duplicated_key_reads_as_json_reads_it(document: Any) -> None:
    text = json.dumps(document)
    assert jsontext.loads(text) == json.loads(text)


def test_the_messages_without_duplicates_still_parse() -> None:
    assert Event.from_json(json.dumps(NOTICE)).action == "clear"
    assert parse_heartbeat(json.dumps(HEARTBEAT).encode())["active"] == ["aws/spot-itn/1"]
    assert decode_notice(json.dumps(NOTICE).encode()).action == "clear"
    assert decode_heartbeat(json.dumps(HEARTBEAT).encode()).seq == 18


async def _echo(request: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "echo": request}


REQUESTS: list[dict[str, Any]] = [
    {"op": "ack", "notice_id": "aws/1", "outcome": "saved"},
    {"op": "notify", "action": "drain", "reason": "manual"},
    {"op": "status"},
]


@given(
    message=st.sampled_from(REQUESTS),
    which=st.integers(0, 2),
    value=JSON,
    at=st.integers(0, 5),
    escaped=st.booleans(),
)
@example(message=REQUESTS[0], which=2, value="failed", at=5, escaped=False)
@example(message=REQUESTS[1], which=0, value="terminate", at=5, escaped=False)
def test_a_control_request_naming_a_key_twice_is_refused_naming_it(
    message: dict[str, Any], which: int, value: Any, at: int, escaped: bool
) -> None:
    key = sorted(message)[which % len(message)]
    text = members(message, key, value, at, escaped)
    sockets = Publisher("ipc:///nonexistent/events", "ipc:///nonexistent/control")
    try:
        reply = asyncio.run(sockets._answer([text.encode()], _echo))
    finally:
        sockets.close()
    assert reply == {
        "ok": False,
        "error": f"request refused: the key {key!r} appears twice in one object",
    }


@pytest.fixture
def duplicating_agent(tmp_path: Path) -> Iterator[str]:
    """A control socket whose every reply names `ok` twice, true then false."""
    endpoint = f"ipc://{tmp_path}/control"
    rep = zmq.Context.instance().socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    rep.bind(endpoint)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            if rep.poll(50):
                rep.recv()
                rep.send(b'{"ok": true, "ok": false, "error": "which one?"}')

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        stop.set()
        thread.join(5)
        rep.close(linger=0)


def test_a_reply_naming_a_key_twice_is_refused_naming_it(duplicating_agent: str) -> None:
    with pytest.raises(ReplyError, match="reply refused here: the key 'ok' appears twice"):
        request(duplicating_agent, {"op": "status"}, 5.0)
