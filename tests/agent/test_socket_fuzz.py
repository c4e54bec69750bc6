"""Whatever a peer of the agent's two sockets sends (any frame count, frames of any bytes and
size, JSON of any shape and type, a protocol version ahead or behind), a real agent answers
each control request with an error naming what was wrong, never crashes, and never stops
publishing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import AgentProcess, Subscriber, examples

OPS = ("status", "notify", "clear", "ack", "hold")
FIELDS = (
    "op",
    "v",
    "action",
    "reason",
    "deadline",
    "note",
    "id",
    "notice_id",
    "client",
    "step",
    "flush_seconds",
    "outcome",
    "restore_seconds",
    "steps_lost",
    "stall_seconds",
    "durable_seconds",
    "choice",
    "token",
)
# What a frame the agent could not take as a request is answered with, naming why.
FRAME_PROBLEMS = (
    "a request is one frame",
    "request is not UTF-8",
    "request is not JSON",
    "request too large",
    "request refused: the key",
    "request refused: a whole number of",
)

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_VALUES = st.one_of(
    _JSON,
    st.sampled_from([*OPS, "drain", "terminate", "clear", "manual", "saved", "local/x", "2h"]),
    st.sampled_from(["2026-11-30T03:12:00Z", "2099-01-01T00:00:00Z", "local/fuzz/1"]),
    st.integers(-2, 3),  # protocol versions behind and ahead
)
_REQUESTS = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), _VALUES, max_size=6)


def _as_frame(request: dict[str, Any]) -> bytes:
    return json.dumps(request).encode()


_FRAMES = st.one_of(
    _REQUESTS.map(_as_frame),
    st.builds(lambda op, rest: _as_frame({"op": op, **rest}), st.sampled_from(OPS), _REQUESTS),
    st.binary(max_size=64),
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5000).map(lambda n: b'{"op":' * n + b"1" + b"}" * n),
    st.sampled_from([65_535, 65_536, 65_537, 300_000]).map(lambda n: b" " * n),
    # Past the digits Python converts (4300 by default), anywhere in the request.
    st.integers(4290, 6000).map(lambda n: b'{"op":"ack","step":-' + b"9" * n + b"}"),
)
_MESSAGES = st.lists(_FRAMES, min_size=0, max_size=3)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    with AgentProcess(tmp_path_factory.mktemp("fuzz")) as running:
        yield running


@pytest.fixture(scope="module")
def dealer(agent: AgentProcess) -> Iterator[zmq.Socket[bytes]]:
    """A DEALER speaking the REQ envelope by hand, so that any frame count can be sent."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(agent.control_endpoint)
    yield sock
    sock.close()


def _answer(dealer: zmq.Socket[bytes], frames: list[bytes]) -> dict[str, Any]:
    dealer.send_multipart([b"", *frames])
    assert dealer.poll(10_000), f"no answer to {[frame[:60] for frame in frames]}"
    delimiter, reply = dealer.recv_multipart()
    assert delimiter == b""
    answer = json.loads(reply)
    assert isinstance(answer, dict) and isinstance(answer.get("ok"), bool), answer
    return answer


def _escaped(key: str) -> str:
    return "".join(char if char.isprintable() else json.dumps(char)[1:-1] for char in key)


def _keys(frame: bytes) -> set[str]:
    try:
        request = json.loads(frame)
    except (ValueError, RecursionError):
        return set()
    return set(request) if isinstance(request, dict) else set()


@settings(max_examples=examples(150))
@given(frames=_MESSAGES)
@example(frames=[])
@example(frames=[b'{"op": "status", "v": 2}'])
@example(frames=[b'{"op": "status", "v": 0}'])
@example(frames=[b'{"op": "status"}', b'{"op": "status"}'])
@example(frames=[b'{"op": "ack", "step": "1"}'])
@example(frames=[b'{"op": "ack", "notice_id": {"a": 1}}'])
@example(frames=[b'{"op": "notify", "action": "drain", "deadline": 5}'])
@example(frames=[b'{"op": "status"}\xff'])
@example(frames=[b"\xef\xbb\xbf" + b"[" * 100_000])
@example(frames=[b'{"op":"status","\\f":""}'])
@example(frames=[b'{"op":"status","\\u001b[2J\\n":""}'])
@example(frames=[b'{"op":"' + b"\\n" * 30_000 + b'"}'])
@example(frames=[b'{"op":"ack","' + b"k" * 60_000 + b'":1}'])
@example(frames=[b'{"op":"status","v":' + b"9" * 5000 + b"}"])
@example(frames=[b'{"op":"notify","action":"drain","deadline":1e308}'])
def test_every_request_gets_an_answer_naming_what_was_wrong(
    agent: AgentProcess, dealer: zmq.Socket[bytes], frames: list[bytes]
) -> None:
    answer = _answer(dealer, frames)
    assert agent.proc is not None and agent.proc.poll() is None, agent.output()[-2000:]
    if answer["ok"]:
        assert len(frames) == 1
        return
    error = answer["error"]
    # One line of text that a client prints or logs as it is: a key or value of the request
    # echoed raw (a newline, an escape sequence) forged lines on the terminal of `forewarn
    # notify` or in a client's log, and one of 60 KB made an error of 60 KB.
    assert isinstance(error, str) and error and error.isprintable(), answer
    assert len(error) <= 2000, len(error)
    assert "internal error" not in error, agent.output()[-2000:]
    # In the client's words: not pydantic's name of an exception class ("Value error, "),
    # nor advice for the agent's Python ("use sys.set_int_max_str_digits()") under "request
    # is not JSON" of valid JSON.
    assert "Value error" not in error and "sys." not in error, answer
    # It names the key it refused, or says what was wrong with the frame as a whole.
    keys = {_escaped(key)[:60] for key in _keys(frames[0])} if frames else set()
    named = [key for key in {*FIELDS, *keys} if key and f"{key}" in error]
    assert named or any(problem in error for problem in FRAME_PROBLEMS), answer


_SUBSCRIPTION_FRAMES = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.builds(lambda t: b"\x01" + t, st.binary(max_size=40)),
        st.builds(lambda t: b"\x00" + t, st.binary(max_size=40)),
        st.builds(lambda t: b"\x01client/" + t, st.binary(max_size=250)),
        st.just(b"\x01" + b"x" * 2000),
    ),
    min_size=1,
    max_size=3,
)


def test_any_subscription_frames_leave_the_agent_publishing(agent: AgentProcess) -> None:
    """An XSUB sends the agent's XPUB whatever frames it is given as subscriptions: frame
    counts, first bytes other than 0 and 1, client ids not UTF-8, frames past the size cap.
    Heartbeats go on, a second apart, and control answers."""
    xsub = zmq.Context.instance().socket(zmq.XSUB)
    xsub.setsockopt(zmq.LINGER, 0)
    xsub.connect(agent.events)

    @settings(max_examples=examples(100))
    @given(frames=_SUBSCRIPTION_FRAMES)
    @example(frames=[b"\x01notice"])
    @example(frames=[b"\x00client/job"])
    @example(frames=[b"\x01client/job\xff", b"more"])
    @example(frames=[b"", b"\x00tv\xee\xfd"])
    def send(frames: list[bytes]) -> None:
        xsub.send_multipart(frames)

    try:
        with Subscriber(agent.events, ("heartbeat",)).ready() as watching:
            send()
            assert agent.control({"op": "status"})["ok"]
            first = watching.recv(timeout=5)[1]["seq"]
            assert watching.recv(timeout=5)[1]["seq"] > first
    finally:
        xsub.close()
    assert agent.proc is not None and agent.proc.poll() is None, agent.output()[-2000:]
