"""The `seq` gap rule as its three readers apply it: the client library (`Notices`),
`forewarn wait`/`watch` (`agent.cli._Unreceived`) and the C subscriber. The agent numbers every
message it sends one after the other; a reader that finds numbers skipped asks for the active
notices again, except for the jump a restarted agent makes to its reserved mark. One table,
every case read by all three: a case where one reader asks and another does not is a notice
(a drain's escalation to terminate) one of them never hears again."""

from __future__ import annotations

import itertools
import json
import logging
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.agent.cli import _Unreceived
from forewarn.clients.notices import Notices, parse_heartbeat
from forewarn.protocol.seqgap import SeqGaps
from hypothesis import given
from hypothesis import strategies as st
from support import eventually

# A message: ("n", seq, notice id, action) or ("h", seq, agent, active ids).
Message = tuple[str, Any, str, Any]


def n(seq: Any, notice_id: str = "local/x", action: str = "drain") -> Message:
    return ("n", seq, notice_id, action)


def h(seq: Any, *active: str, agent: str = "host/1/a") -> Message:
    return ("h", seq, agent, list(active))


BIG = 2**63 - 1  # the largest seq a 64-bit reader keeps


class Raw:
    """A seq written into the JSON as given (`1e1`: json.dumps writes no exponent)."""

    def __init__(self, text: str) -> None:
        self.text = text


# (name, messages, what the readers say they ask for: ("gap", first, last), ("unreplayed",))
CASES: list[tuple[str, list[Message], list[tuple[Any, ...]]]] = [
    ("in order", [h(10), n(11), h(12, "local/x")], []),
    ("lost between two notices", [h(10), n(11), n(14, action="terminate"), h(15, "local/x")],
     [("gap", 12, 13)]),
    ("lost before a heartbeat", [h(10), n(11), h(15, "local/x")], [("gap", 12, 14)]),
    ("two gaps before a heartbeat are one range",
     [h(10), n(11), n(13), n(15), h(16, "local/x")], [("gap", 12, 14)]),
    ("a seq that goes back is no gap",
     [h(10), n(11), h(5, "local/x"), h(6, "local/x")], []),
    ("a restarted agent's jump to its mark is no gap",
     [h(10), n(11), h(12, "local/x"), n(899), h(900, "local/x", agent="host/2/b"),
      h(901, "local/x", agent="host/2/b")], []),
    ("a second gap before a restarted agent's first heartbeat is one",
     [h(10), n(11), h(12, "local/x"), n(899), n(901, "local/y"),
      h(902, "local/x", "local/y", agent="host/2/b")], [("gap", 13, 900)]),
    ("a restarted agent's replay lost",
     [h(10), n(11), h(12, "local/x"), h(900, "local/x", agent="host/2/b"),
      h(901, "local/x", agent="host/2/b")], [("unreplayed",)]),
    ("a gap after a restart",
     [h(10), n(11), h(12, "local/x"), n(899), h(900, "local/x", agent="host/2/b"),
      h(905, "local/x", agent="host/2/b")], [("gap", 901, 904)]),
    ("a heartbeat's seq written as a string is passed over",
     [h(10), n(11), h("30", "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("a heartbeat's seq written as a fraction is passed over",
     [h(10), n(11), h(1.5, "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("a heartbeat's seq written with an exponent is passed over",
     [h(10), n(11), h(Raw("1e1"), "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("a negative seq is passed over",
     [h(10), n(11), h(-3, "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("a seq true is passed over",
     [h(10), n(11), h(True, "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("a seq past 64 bits is passed over",
     [h(10), n(11), h(BIG + 1, "local/x"), n(12, "local/y"), h(13, "local/x", "local/y")], []),
    ("the largest 64-bit seq counts",
     [h(BIG - 5), n(BIG - 4), h(BIG - 1, "local/x")], [("gap", BIG - 3, BIG - 2)]),
]  # fmt: skip


def _payload(message: Message) -> tuple[bytes, bytes]:
    kind, seq, name, rest = message
    if kind == "n":
        body = {"v": 1, "id": name, "seq": seq, "action": rest, "reason": "manual"}
        body |= {"provider": "local", "deadline": None, "detail": {}}
        body |= {"noticed_at": "2026-11-30T03:10:00Z", "sent_at": "2026-11-30T03:10:00Z"}
        return b"notice", json.dumps(body).encode()
    beat = {"v": 1, "seq": 0, "agent": name, "active": rest, "acked": []}
    text = json.dumps({**beat, "sent_at": "2026-11-30T03:10:00Z"})
    written = seq.text if isinstance(seq, Raw) else json.dumps(seq)
    return b"heartbeat", text.replace('"seq": 0', f'"seq": {written}', 1).encode()


def _asked(text: str) -> list[tuple[Any, ...]]:
    said: list[tuple[Any, ...]] = []
    for line in text.splitlines():
        if gap := re.search(r"never arrived here \(seq (-?\d+) to (-?\d+)\)", line):
            said.append(("gap", int(gap.group(1)), int(gap.group(2))))
        elif "whose replay never arrived" in line:
            said.append(("unreplayed",))
        elif "never received here" in line:
            said.append(("missed",))
    return said


def _by_notices(messages: list[Message], caplog: pytest.LogCaptureFixture) -> list[Any]:
    notices = Notices("ipc:///nonexistent/events", "ipc:///nonexistent/control", start=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="forewarn.clients"):
        for message in messages:
            assert notices._message(list(_payload(message))), message
    return _asked(caplog.text)


class _Socket:
    def setsockopt(self, option: int, value: bytes) -> None:
        assert option == zmq.SUBSCRIBE and value == b"notice"


def _by_wait_and_watch(messages: list[Message], capsys: pytest.CaptureFixture[str]) -> list[Any]:
    unreceived = _Unreceived("watch", "ipc:///nonexistent/events", "token-0")
    capsys.readouterr()
    for message in messages:
        topic, body = _payload(message)
        if topic == b"notice":
            unreceived.notice(json.loads(body))
        else:
            unreceived.heartbeat(parse_heartbeat(body), _Socket())
    return _asked(capsys.readouterr().err)


def _by_c_subscriber(messages: list[Message], binary: Path, tmp_path: Path) -> list[Any]:
    endpoint = f"ipc://{tmp_path}/events"
    context = zmq.Context()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.bind(endpoint)
    sub = subprocess.Popen(
        [str(binary), endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        eventually(lambda: xpub.poll(0) and xpub.recv() == b"\x01heartbeat", what="subscribed")
        for message in messages:
            xpub.send_multipart(list(_payload(message)))
        # Messages come in order: once this one is printed, every heartbeat before it was read.
        xpub.send_multipart(list(_payload(n(0, "local/end"))))
        assert sub.stdout is not None
        while json.loads(sub.stdout.readline())["id"] != "local/end":
            pass
    finally:
        sub.kill()
        _, err = sub.communicate(timeout=10)
        xpub.close()
        context.term()
    return _asked(err)


@pytest.mark.parametrize(
    ("messages", "expected"),
    [pytest.param(messages, expected, id=name) for name, messages, expected in CASES],
)
def test_the_three_readers_ask_again_for_the_same_gaps(
    messages: list[Message],
    expected: list[tuple[Any, ...]],
    c_subscriber_binary: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    said = {
        "Notices": _by_notices(messages, caplog),
        "wait/watch": _by_wait_and_watch(messages, capsys),
        "C subscriber": _by_c_subscriber(messages, c_subscriber_binary, tmp_path),
    }
    assert said == dict.fromkeys(said, expected)


SEQ_VALUES = (
    st.integers(min_value=-5, max_value=40)
    | st.integers(min_value=BIG - 3, max_value=BIG + 3)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.booleans()
    | st.text(max_size=3)
    | st.none()
)


@given(values=st.lists(SEQ_VALUES, max_size=20))
def test_the_gap_asked_for_runs_from_the_first_number_skipped_to_the_last(
    values: list[Any],
) -> None:
    """Whatever a peer writes as `seq`: only integers from 0 to 2**63 - 1 count, and the range
    asked for spans every number skipped among them (one range, as every reader says it)."""
    gaps = SeqGaps()
    said = [gaps.note(value) for value in values]
    numbers = [v for v in values if type(v) is int and 0 <= v <= BIG]
    skipped = [(a + 1, b - 1) for a, b in itertools.pairwise(numbers) if b > a + 1]
    assert sum(said) == len(skipped) == gaps.gaps
    assert gaps.take() == ((skipped[0][0], skipped[-1][1]) if skipped else None)
    assert gaps.take() is None and gaps.last == (numbers[-1] if numbers else None)
