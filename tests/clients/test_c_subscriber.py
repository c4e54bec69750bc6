"""The C subscriber, compiled here against libzmq, prints a notice raised with `forewarn notify`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import zmq
from forewarn.clients.event import Event
from forewarn.protocol.timefmt import time_or_none
from hypothesis import given, settings
from hypothesis import strategies as st
from support import AgentProcess, agent_env, eventually, examples, forewarn_cmd, shifted_wall_clock

# Its agents fork from a launcher that loaded the agent once (`forked_agents`,
# tests/conftest.py); the C subscriber is what these tests check.
pytestmark = pytest.mark.usefixtures("forked_agents")


SOURCE = Path(__file__).resolve().parents[2] / "clients" / "c"


@pytest.fixture(scope="session")
def binary(c_subscriber_binary: Path) -> Path:
    return c_subscriber_binary


def test_c_subscriber_prints_a_notice_from_forewarn_notify(tmp_path: Path, binary: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        sub = subprocess.Popen(
            [str(binary), "--count", "2"],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert sub.stderr is not None
        assert "listening" in sub.stderr.readline()
        notify = subprocess.run(
            forewarn_cmd("notify", "drain", "--deadline", "2h"),
            env=agent.env,
            capture_output=True,
            text=True,
        )
        assert notify.returncode == 0, notify.stderr
        notify = subprocess.run(
            forewarn_cmd("notify", "terminate"), env=agent.env, capture_output=True, text=True
        )
        out, _ = sub.communicate(timeout=15)
        assert sub.returncode == 0
        notices = [json.loads(line) for line in out.splitlines()]
        assert [n["action"] for n in notices] == ["drain", "terminate"]
        assert all(n["v"] == 1 and n["provider"] == "local" for n in notices)


def test_c_subscriber_gets_the_replay_when_it_joins_late(tmp_path: Path, binary: Path) -> None:
    with AgentProcess(tmp_path) as agent:
        agent.control({"op": "notify", "action": "drain", "id": "local/early"})
        out = subprocess.run(
            [str(binary), "--count", "1"], env=agent.env, capture_output=True, text=True, timeout=15
        ).stdout
        assert json.loads(out)["id"] == "local/early"


def test_c_subscriber_prints_a_notice_whose_detail_holds_a_delete_character(
    tmp_path: Path, binary: Path
) -> None:
    """U+007F is a control character JSON need not escape: sent raw, the C subscriber (which
    takes a raw control character for a broken message) dropped the notice, and each replay
    it asked for again."""
    with AgentProcess(tmp_path) as agent:
        note = "typed at a terminal\x7f"
        reply = agent.control({"op": "notify", "action": "drain", "id": "local/d", "note": note})
        assert reply["ok"], reply
        done = subprocess.run(
            [str(binary), "--count", "1"], env=agent.env, capture_output=True, timeout=15
        )
        assert done.returncode == 0, done.stderr
        assert b"\x7f" not in done.stdout
        notice = json.loads(done.stdout)
        assert notice["id"] == "local/d" and notice["detail"]["note"] == note


def test_c_subscriber_survives_any_message_and_prints_the_next_notice(
    tmp_path: Path, binary: Path
) -> None:
    """Fuzz the C subscriber's socket input: a publisher of our own sends messages of any
    shape (one frame, three, empty, binary, a foreign topic that still matches "notice"),
    each followed by a well-formed notice, which must be printed: no shape may stop or
    desynchronise the reader."""
    import select

    import zmq
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    endpoint = f"ipc://{tmp_path}/events"
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(endpoint)
    sub = subprocess.Popen([str(binary), endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert sub.stdout is not None
    marks = iter(range(1_000_000))
    pending = bytearray()  # read from its stdout, not yet split into lines

    def next_marker_line(mark: int, timeout: float) -> bool:
        """Read lines until the marker's own line; False when it did not come in time."""
        assert sub.stdout is not None
        wanted = _marker_notice(mark)
        ends = time.monotonic() + timeout
        while True:
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                if line == wanted:
                    return True
            left = ends - time.monotonic()
            if left <= 0 or not select.select([sub.stdout], [], [], left)[0]:
                return False
            chunk = os.read(sub.stdout.fileno(), 65536)
            if not chunk:
                return False
            pending.extend(chunk)

    def send_marker(mark: int) -> None:
        pub.send_multipart([b"notice", _marker_notice(mark)])

    try:
        # Until the subscription has reached the publisher, messages are dropped.
        joined = False
        for _ in range(100):
            mark = next(marks)
            send_marker(mark)
            if next_marker_line(mark, 0.1):
                joined = True
                break
        assert joined, "the C subscriber never received a message"

        # What it parses (a notice's id and action, a heartbeat's active list), cut and
        # spliced anywhere, nested deeply, or with thousands of ids.
        well_formed = st.sampled_from(
            [
                b'{"v":1,"seq":1,"id":"local/a","action":"drain","detail":{"id":["x",{"a":"\\""}]}}',
                b'{"v": 1, "agent": "a", "active": ["local/a", "local/\\"b", 7, null]}',
                b'{"active":' + b"[" * 200 + b"]" * 200 + b"}",
                b'{"active":[' + b",".join(b'"local/%d"' % i for i in range(3000)) + b"]}",
                b'{"active":["' + b"x" * 5000 + b'"]}',
            ]
        )
        mangled = st.tuples(well_formed, st.integers(0, 100_000), st.integers(0, 100_000)).map(
            lambda t: t[0][: t[1]] + t[0][t[2] :]
        )
        frame = st.one_of(st.binary(max_size=64), well_formed, mangled)
        topic = st.one_of(
            st.just(b"notice"),
            st.just(b"heartbeat"),
            st.binary(max_size=8).map(lambda b: b"notice" + b),
        )

        @settings(
            max_examples=examples(60),
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(st.tuples(topic, st.lists(frame, max_size=3)))
        def survives(message: tuple[bytes, list[bytes]]) -> None:
            head, rest = message
            pub.send_multipart([head, *rest])
            mark = next(marks)
            send_marker(mark)
            assert next_marker_line(mark, 10), f"no notice after {message!r}"
            assert sub.poll() is None

        survives()
    finally:
        sub.terminate()
        sub.wait(10)
        pub.close()
        context.term()


class _Verbose:
    """An XPUB of the test's that sees every subscription (as the agent's does), with the C
    subscriber on it: `subscribed(topic)` counts the subscriptions to `topic` so far."""

    def __init__(self, tmp_path: Path, binary: Path, count: int) -> None:
        import zmq

        endpoint = f"ipc://{tmp_path}/events"
        self.context = zmq.Context()
        self.xpub = self.context.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.xpub.bind(endpoint)
        self.sub = subprocess.Popen(
            [str(binary), endpoint, "--count", str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.subscriptions: list[bytes] = []

    def subscribed(self, topic: bytes) -> int:
        while self.xpub.poll(0):
            self.subscriptions.append(self.xpub.recv())
        return self.subscriptions.count(b"\x01" + topic)

    def close(self) -> None:
        if self.sub.poll() is None:
            self.sub.kill()
            self.sub.wait(10)
        self.xpub.close()
        self.context.term()


def test_c_subscriber_takes_a_join_replay_not_sent_yet_for_no_loss(
    tmp_path: Path, binary: Path
) -> None:
    """An agent slow to read subscriptions beat for seconds listing a notice in force before
    the C subscriber joined: it said "never received here" and asked again, though the
    replay was only late. An agent with `replay_for` in its heartbeats names the subscriber's
    `replay/<token>` in the heartbeat of its replay; until then nothing listed is lost."""
    agent = _Verbose(tmp_path, binary, count=1)
    xpub, sub, subscribed = agent.xpub, agent.sub, agent.subscribed
    seq = [10]

    def beat(replay_for: list[str]) -> None:
        body = {"v": 1, "seq": seq[0], "agent": "host/1/a", "active": ["local/standing"]}
        seq[0] += 1
        body |= {"acked": [], "replay_for": replay_for}
        xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    def token() -> str | None:
        subscribed(b"notice")
        prefix = b"\x01replay/"
        named = [s[len(prefix) :] for s in agent.subscriptions if s.startswith(prefix)]
        return named[0].decode() if named else None

    try:
        eventually(lambda: token() is not None, what="a replay/<token> subscription")
        assert re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", token() or ""), token()
        for _ in range(4):
            beat([])
        beat(["another", token() or ""])
        xpub.send_multipart([b"notice", _notice("local/standing", "drain", seq=seq[0])])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        assert [json.loads(line)["id"] for line in out.splitlines()] == ["local/standing"]
        assert "never received here" not in err, err
        assert subscribed(b"notice") == 1, "asked for a replay that was only late"
    finally:
        agent.close()


def test_c_subscriber_asks_again_for_a_notice_the_heartbeats_list_but_it_never_got(
    tmp_path: Path, binary: Path
) -> None:
    """A notice dropped on the way (a reader that stopped reading filled the high-water marks)
    is listed by the heartbeats: after two of them in a row the C subscriber subscribes to
    `notice` again, which makes the agent replay, and prints the notice then. One it received
    (and one cleared since) never makes it ask."""
    agent = _Verbose(tmp_path, binary, count=4)
    xpub, sub, subscribed = agent.xpub, agent.sub, agent.subscribed

    def notice(notice_id: str, action: str) -> bytes:
        return _notice(notice_id, action)

    def beat(*active: str) -> None:
        body = {"v": 1, "seq": 2, "agent": "host/1/a", "active": list(active), "acked": []}
        xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    try:
        eventually(lambda: subscribed(b"notice") == 1 and subscribed(b"heartbeat") == 1)
        xpub.send_multipart([b"notice", notice("local/got", "drain")])
        xpub.send_multipart([b"notice", notice("local/gone", "drain")])
        xpub.send_multipart([b"notice", notice("local/gone", "clear")])
        for _ in range(3):
            beat("local/got")
        beat("local/got", "local/lost")
        assert subscribed(b"notice") == 1, "asked again after one heartbeat"

        def asked_again() -> bool:
            beat("local/got", "local/lost")
            return subscribed(b"notice") == 2

        eventually(asked_again, what="a second subscription to notice", interval=0.2)
        xpub.send_multipart([b"notice", notice("local/lost", "terminate")])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [json.loads(line) for line in out.splitlines()]
        assert [(n["id"], n["action"]) for n in printed] == [
            ("local/got", "drain"),
            ("local/gone", "drain"),
            ("local/gone", "clear"),
            ("local/lost", "terminate"),
        ]
        asked = [line for line in err.splitlines() if "never received here" in line]
        assert len(asked) == 1 and "local/lost" in asked[0], err
    finally:
        agent.close()


def _notice(notice_id: str, action: str, **fields: Any) -> bytes:
    """A whole notice: the tests that compare the C subscriber with `Event.from_json` need
    one the Python client reads (without its times, no "v" was v1 to it)."""
    body = {"v": 1, "id": notice_id, "seq": 1, "action": action, "reason": "manual"}
    body |= {"provider": "local", "deadline": None, "detail": {}}
    body |= {"noticed_at": "2026-11-30T03:10:00Z", "sent_at": "2026-11-30T03:10:00Z"}
    return json.dumps({**body, **fields}).encode()


def _marker_notice(mark: int) -> bytes:
    """A whole notice (one the Python client reads) that says which marker it is."""
    return _notice(f"local/marker-{mark}", "drain", seq=mark, marker=mark)


@contextlib.contextmanager
def _published_to(
    tmp_path: Path, binary: Path, count: int
) -> Iterator[tuple[Any, subprocess.Popen[str]]]:
    """An XPUB socket of the test's, and the C subscriber on it (`--count count`), subscribed."""
    import zmq

    endpoint = f"ipc://{tmp_path}/events"
    context = zmq.Context()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.bind(endpoint)
    sub = subprocess.Popen(
        [str(binary), endpoint, "--count", str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(lambda: xpub.poll(0) and xpub.recv() == b"\x01heartbeat", what="subscribed")
        yield xpub, sub
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(10)
        xpub.close()
        context.term()


def test_c_subscriber_drops_a_notice_or_heartbeat_whose_v_is_not_the_integer_1(
    tmp_path: Path, binary: Path
) -> None:
    """The C subscriber never looked at "v": a notice of another protocol version (or `"v":
    "1"`, `1.0`, `true`, none) was printed as a v1 one, and such a heartbeat listing nothing
    printed a clear for the drain in force. Both are dropped now, with one line on stderr
    (one a minute, counting the others)."""
    with _published_to(tmp_path, binary, 2) as (xpub, sub):
        xpub.send_multipart([b"notice", _notice("local/keep", "drain")])
        for version in (2, "1", 1.0, True, None, 10):
            xpub.send_multipart([b"notice", _notice("local/other", "terminate", v=version)])
            beat = {"v": version, "seq": 2, "agent": "host/1/a", "active": [], "acked": []}
            xpub.send_multipart([b"heartbeat", json.dumps(beat).encode()])
        xpub.send_multipart([b"notice", b'{"id": "local/none", "action": "terminate"}'])
        xpub.send_multipart([b"notice", b'{"v": 1e0, "id": "local/e", "action": "terminate"}'])
        xpub.send_multipart([b"notice", _notice("local/last", "terminate")])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
        assert printed == [("local/keep", "drain"), ("local/last", "terminate")], err
        dropped = [line for line in err.splitlines() if "dropped a" in line]
        assert dropped == [
            'forewarn_sub: dropped a notice whose "v" is not the integer 1, got 2'
        ], err


def test_c_subscriber_prints_a_notice_the_python_client_takes_whatever_its_spacing(
    tmp_path: Path, binary: Path
) -> None:
    """JSON allows tab, newline and carriage return between tokens, and a raw DEL in a string:
    the Python client took such a notice and the C subscriber dropped it in silence (the agent
    sends neither, another publisher may). It prints it now, on one line; a raw control
    character in a string, which is not JSON, is dropped by both, and said on stderr."""
    from forewarn.clients.event import Event

    spaced = _notice("local/spaced", "drain").replace(b", ", b",\n\t").replace(b": ", b":\r\n ")
    deleted = _notice("local/del", "drain", detail={"note": "typed\x7f"}).replace(
        b"\\u007f", b"\x7f"
    )
    broken = _notice("local/raw", "terminate", detail={"note": "a\x01b"}).replace(
        b"\\u0001", b"\x01"
    )
    for body, taken in ((spaced, True), (deleted, True), (broken, False)):
        try:
            Event.from_json(body)
            assert taken, body
        except ValueError:
            assert not taken, body
    with _published_to(tmp_path, binary, 3) as (xpub, sub):
        for body in (spaced, deleted, broken, _notice("local/last", "terminate")):
            xpub.send_multipart([b"notice", body])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
    lines = out.splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["local/spaced", "local/del", "local/last"]
    assert json.loads(lines[0]) == json.loads(spaced)
    assert json.loads(lines[1])["detail"]["note"] == "typed\x7f"
    dropped = [line for line in err.splitlines() if "dropped a" in line]
    assert dropped == [
        "forewarn_sub: dropped a notice that is not JSON: it holds a raw control character"
    ], err


def test_c_subscriber_drops_a_notice_or_heartbeat_that_names_a_key_twice(
    tmp_path: Path, binary: Path
) -> None:
    """The C subscriber read the first of two keys of one name, Python's json the last: a
    notice `"action": "clear", ..., "action": "terminate"` was a clear here and a terminate to
    the Python client. Both now drop it (at any depth, the key written escaped or not), and
    one line on stderr names the key."""
    with _published_to(tmp_path, binary, 2) as (xpub, sub):
        xpub.send_multipart([b"notice", _notice("local/keep", "drain")])
        twice = _notice("local/two", "clear")[:-1] + b', "action": "terminate"}'
        escaped = _notice("local/esc", "terminate")[:-1] + b', "\\u0061ction": "clear"}'
        nested = _notice("local/nest", "terminate").replace(
            b'"detail": {}', b'"detail": {"a": [{"k": 1, "k": 2}]}'
        )
        version = b'{"v": 1, "v": 2, ' + _notice("local/v", "terminate")[len(b'{"v": 1, ') :]
        beat = b'{"v": 1, "agent": "a", "active": [], "active": ["local/keep"]}'
        for body in (twice, escaped, nested, version):
            xpub.send_multipart([b"notice", body])
        xpub.send_multipart([b"heartbeat", beat])  # its first "active" printed a clear
        xpub.send_multipart([b"notice", _notice("local/last", "terminate")])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
        assert printed == [("local/keep", "drain"), ("local/last", "terminate")], err
        dropped = [line for line in err.splitlines() if "dropped a" in line]
        assert dropped == ['forewarn_sub: dropped a notice that names the key "action" twice'], err


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=4,
)


def _spelled(key: str, ascii_only: bool) -> str:
    return json.dumps(key, ensure_ascii=ascii_only)


def _object(pairs: list[tuple[str, Any]], ascii_only: list[bool]) -> str:
    """`pairs` as one JSON object, each key written escaped (\\uXXXX) or as UTF-8."""
    members = [
        f"{_spelled(key, ascii)}: {json.dumps(value, ensure_ascii=False)}"
        for (key, value), ascii in zip(pairs, ascii_only[: len(pairs)], strict=True)
    ]
    return "{" + ", ".join(members) + "}"


def _one_line(text: str) -> bytes:
    """What the C subscriber prints of `text`: JSON's whitespace between tokens as spaces (in
    these texts no string holds a raw one)."""
    return text.translate({ord("\t"): " ", ord("\n"): " ", ord("\r"): " "}).encode()


class _MarkedSubscriber:
    """The C subscriber on a PUB socket of the test's, read up to a marker notice: whatever
    it printed before the marker is what it made of the messages sent before it."""

    def __init__(self, tmp_path: Path, binary: Path) -> None:
        import zmq

        endpoint = f"ipc://{tmp_path}/events"
        self._context = zmq.Context()
        self.pub = self._context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(endpoint)
        self.sub = subprocess.Popen(
            [str(binary), endpoint], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self._marks = iter(range(1_000_000))
        self._pending = bytearray()

    def __enter__(self) -> _MarkedSubscriber:
        # A PUB socket drops what it sends before the subscriber has joined: wait for a marker.
        joined = any(self.lines_until_marker(self.marker(), 0.1) is not None for _ in range(100))
        if not joined:
            self.__exit__()
        assert joined, "the C subscriber never received a message"
        return self

    def __exit__(self, *_: object) -> None:
        self.sub.terminate()
        self.sub.wait(10)
        self.pub.close()
        self._context.term()

    def next_mark(self) -> int:
        return next(self._marks)

    def marker(self) -> int:
        mark = self.next_mark()
        self.pub.send_multipart([b"notice", _notice(f"local/marker-{mark}", "drain")])
        return mark

    def lines_until_marker(self, mark: int, timeout: float) -> list[bytes] | None:
        """The lines printed before the marker's own, or None when it did not come in time."""
        import select

        assert self.sub.stdout is not None
        before: list[bytes] = []
        ends = time.monotonic() + timeout
        while True:
            while b"\n" in self._pending:
                line, _, rest = bytes(self._pending).partition(b"\n")
                self._pending[:] = rest
                if (
                    line.startswith(b'{"v": 1, "id": "local/marker-')
                    and json.loads(line).get("id") == f"local/marker-{mark}"
                ):
                    return before
                before.append(line)
            left = ends - time.monotonic()
            if left <= 0 or not select.select([self.sub.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.sub.stdout.fileno(), 65536)
            if not chunk:
                return None
            self._pending.extend(chunk)


def test_c_subscriber_prints_a_notice_only_when_the_python_client_reads_it_too(
    tmp_path: Path, binary: Path
) -> None:
    """Any notice with or without a key named twice (at the top or in its detail, written
    escaped or as UTF-8, non-BMP characters included): the C subscriber prints it exactly when
    `Event.from_json` takes it, so no message means one thing to one and another to the
    other."""
    from forewarn.clients.event import Event
    from hypothesis import HealthCheck, given, settings

    keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), max_size=3)
    with _MarkedSubscriber(tmp_path, binary) as marked:

        @settings(
            max_examples=examples(80),
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(
            detail=st.dictionaries(keys, JSON_VALUES, max_size=3),
            where=st.sampled_from(["none", "top", "detail"]),
            pick=st.integers(0, 20),
            at=st.integers(0, 20),
            value=JSON_VALUES,
            ascii_only=st.lists(st.booleans(), min_size=16, max_size=16),
            spacing=st.sampled_from([" ", "", "\n", "\t ", "\r\n"]),
        )
        def agrees_with_python(
            detail: dict[str, Any],
            where: str,
            pick: int,
            at: int,
            value: Any,
            ascii_only: list[bool],
            spacing: str,
        ) -> None:
            body = json.loads(_notice(f"local/d-{marked.next_mark()}", "drain"))
            inner = list(detail.items())
            if where == "detail" and inner:
                inner.insert(at % (len(inner) + 1), (inner[pick % len(inner)][0], value))
            body["detail"] = None
            top = list(body.items())
            if where == "top":
                top.insert(at % (len(top) + 1), (top[pick % len(top)][0], value))
            text = _object(top, ascii_only).replace(
                '"detail": null', '"detail": ' + _object(inner, ascii_only[8:])
            )
            text = text.replace(', "', "," + spacing + '"')  # a quote in a string is escaped
            try:
                Event.from_json(text)
                taken = True
            except ValueError:
                taken = False
            marked.pub.send_multipart([b"notice", text.encode()])
            printed = marked.lines_until_marker(marked.marker(), 10)
            assert printed is not None, f"no marker after {text!r}"
            assert (printed == [_one_line(text)]) == taken, (text, printed)
            assert marked.sub.poll() is None

        agrees_with_python()


def test_c_subscriber_prints_a_notice_only_when_its_v_is_the_integer_1(
    tmp_path: Path, binary: Path
) -> None:
    """Any "v" (any JSON value, written with any spacing, or none): the C subscriber prints
    the notice exactly when the Python client reads it as protocol v1."""
    from forewarn.clients.event import Event
    from hypothesis import HealthCheck, example, given, settings

    with _MarkedSubscriber(tmp_path, binary) as marked:
        # JSON's whitespace: printed as spaces, one line.
        spacing = st.sampled_from(["", " ", "   ", "\n", "\t", "\r\n "])

        @settings(
            max_examples=examples(80),
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(st.none() | JSON_VALUES, spacing, spacing)
        @example(1, "", "")
        def prints_only_v1(version: Any, before: str, after: str) -> None:
            notice_id = f"local/v-{marked.next_mark()}"
            body = json.loads(_notice(notice_id, "drain"))
            del body["v"]
            text = json.dumps(body)
            if version is not None or before:
                # "v" first, with the space a hand-written JSON text may have around it.
                text = '{"v":' + before + json.dumps(version) + after + "," + text[1:]
            try:
                Event.from_json(text)
                v1 = True
            except ValueError:
                v1 = False
            marked.pub.send_multipart([b"notice", text.encode()])
            printed = marked.lines_until_marker(marked.marker(), 10)
            assert printed is not None, f"no marker after {text!r}"
            assert (printed == [_one_line(text)]) == v1, (text, printed)
            assert marked.sub.poll() is None

        prints_only_v1()


@pytest.mark.parametrize(
    "case",
    [
        "xdg",
        "tmp",
        "system",
        "runtime-home",
        "runtime-blank",
        "events",
        # A ConfigMap's YAML block ends a value with a newline; the agent drops it.
        "runtime-newline",
        "events-newline",
        "events-blank",
        # The agent and the Python client read FOREWARN_* names in any case.
        "runtime-lower",
        "events-lower",
    ],
)
def test_c_subscriber_connects_where_the_python_client_does(
    case: str, tmp_path: Path, binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without FOREWARN_RUNTIME_DIR the agent of a user without root listens in
    $XDG_RUNTIME_DIR/forewarn or /tmp/forewarn-<uid>; the C subscriber went to
    /run/forewarn/events and waited there in silence. Its default is the Python client's."""
    from forewarn.protocol import wire

    system = tmp_path / ("run" if case in ("system", "runtime-blank") else "missing") / "forewarn"
    if case in ("system", "runtime-blank"):
        system.parent.mkdir()
    build = tmp_path / "build"
    build.mkdir()
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(SOURCE / name, build / name)
    flags = f'-O2 -Wall -Wextra -Werror -DFOREWARN_SYSTEM_RUNTIME_DIR=\\"{system}\\"'
    done = subprocess.run(["make", "-C", str(build), f"CFLAGS={flags}"], capture_output=True)
    assert done.returncode == 0, done.stderr
    (tmp_path / "xdg").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    env |= {
        "xdg": {"XDG_RUNTIME_DIR": str(tmp_path / "xdg")},
        "tmp": {},
        "system": {"XDG_RUNTIME_DIR": str(tmp_path / "xdg")},
        "runtime-home": {"FOREWARN_RUNTIME_DIR": "~/rt"},
        "runtime-blank": {"FOREWARN_RUNTIME_DIR": "  "},
        "events": {"FOREWARN_EVENTS": "tcp://127.0.0.1:1"},
        "runtime-newline": {"FOREWARN_RUNTIME_DIR": "~/rt\r\n"},
        "events-newline": {"FOREWARN_EVENTS": " tcp://127.0.0.1:1\n"},
        "events-blank": {"FOREWARN_EVENTS": " \n", "FOREWARN_RUNTIME_DIR": "~/rt"},
        "runtime-lower": {"forewarn_runtime_dir": "~/rt"},
        "events-lower": {"Forewarn_Events": "tcp://127.0.0.1:1"},
    }[case]
    for name in list(os.environ):
        if name.upper() in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONFIG"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(wire, "SYSTEM_RUNTIME_DIR", system)
    monkeypatch.setattr(wire, "DEFAULT_CONFIG_FILE", tmp_path / "no-config.toml")
    expected = wire.default_endpoints()[0]

    sub = subprocess.Popen(
        [str(build / "forewarn_sub")], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert sub.stderr is not None
        assert sub.stderr.readline() == f"forewarn_sub: listening on {expected}\n"
    finally:
        sub.terminate()
        sub.wait(10)


def test_c_subscriber_started_before_the_system_agent_hears_it_when_it_starts(
    tmp_path: Path, binary: Path
) -> None:
    """Started before the agent (at boot, or while an upgrade restarts it with /run/forewarn
    removed), the C subscriber took $XDG_RUNTIME_DIR/forewarn for good and waited there while
    the agent started in /run/forewarn (here a directory of the test's: its parent is made
    only when the agent starts). It now works its default out again while it hears none."""
    import queue
    import threading

    system = tmp_path / "run" / "forewarn"
    build = tmp_path / "build"
    build.mkdir()
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(SOURCE / name, build / name)
    flags = f'-O2 -Wall -Wextra -Werror -DFOREWARN_SYSTEM_RUNTIME_DIR=\\"{system}\\"'
    done = subprocess.run(["make", "-C", str(build), f"CFLAGS={flags}"], capture_output=True)
    assert done.returncode == 0, done.stderr
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(xdg)}
    sub = subprocess.Popen(
        [str(build / "forewarn_sub")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: queue.Queue[str] = queue.Queue()
    printed: queue.Queue[str] = queue.Queue()
    for stream, into in ((sub.stderr, said), (sub.stdout, printed)):
        threading.Thread(target=lambda s=stream, q=into: [q.put(x) for x in s], daemon=True).start()
    try:
        assert said.get(timeout=10) == f"forewarn_sub: listening on ipc://{xdg}/forewarn/events\n"
        system.mkdir(parents=True, mode=0o750)
        env = {**AgentProcess(tmp_path).env, "FOREWARN_RUNTIME_DIR": str(system)}
        with AgentProcess(tmp_path, env=env) as agent:
            agent.control({"op": "notify", "action": "drain", "id": "local/boot"})
            try:
                notice = json.loads(printed.get(timeout=15))
            except queue.Empty:
                pytest.fail("the subscriber never heard the agent's drain")
        assert notice["id"] == "local/boot"
    finally:
        sub.terminate()
        sub.wait(10)
    lines = []
    while not said.empty():
        lines.append(said.get())
    assert f"listening on ipc://{system}/events\n" in "".join(lines), lines


def test_c_subscriber_says_when_no_agent_is_heard_and_when_one_is(
    tmp_path: Path, binary: Path
) -> None:
    """With no agent at its endpoint (a wrong one, or none started yet) the C subscriber
    waited in silence; now stderr says so after 5 s, says when an agent is heard, and says
    when that agent's heartbeats stop."""
    import queue
    import threading

    agent = AgentProcess(tmp_path)
    sub = subprocess.Popen(
        [str(binary)], env=agent.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert sub.stderr is not None
        for line in sub.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()

    def next_line(containing: str, timeout: float = 20) -> str:
        ends = time.monotonic() + timeout
        while True:
            line = lines.get(timeout=max(0.0, ends - time.monotonic()))
            if containing in line:
                return line

    try:
        assert "listening" in next_line("")
        assert "(is `forewarn agent` running?)" in next_line("no heartbeat on")
        with agent:
            name = agent.control({"op": "status"})["agent"]["agent"]
            assert name in next_line(" heard on ")
        assert name in next_line("no heartbeat from agent")
        assert sub.poll() is None
    finally:
        sub.terminate()
        sub.wait(10)


class _Lines:
    """The notices a subscriber process prints, read from its stdout's descriptor: a
    buffered `readline()` may hold lines that `communicate()` then never sees."""

    def __init__(self, sub: subprocess.Popen[bytes]) -> None:
        self.sub = sub
        self.seen: list[dict[str, Any]] = []
        self._pending = bytearray()

    def until(self, notice_id: str, action: str, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Every line up to `notice_id`'s with `action`; AssertionError if it does not come."""
        import select

        assert self.sub.stdout is not None
        ends = time.monotonic() + timeout
        while True:
            while b"\n" in self._pending:
                line, _, rest = bytes(self._pending).partition(b"\n")
                self._pending[:] = rest
                self.seen.append(json.loads(line))
                if (self.seen[-1]["id"], self.seen[-1]["action"]) == (notice_id, action):
                    return self.seen
            left = ends - time.monotonic()
            ready = left > 0 and select.select([self.sub.stdout], [], [], left)[0]
            chunk = os.read(self.sub.stdout.fileno(), 65536) if ready else b""
            assert chunk, f"no {action} of {notice_id} printed; printed: {self.seen}"
            self._pending.extend(chunk)


@pytest.mark.parametrize("replays", [False, True])
def test_c_subscriber_prints_a_replay_only_with_replays(
    replays: bool, tmp_path: Path, binary: Path
) -> None:
    """The agent sends every active notice again to every subscriber when one joins: the C
    subscriber printed each such replay, so a handler reading its lines flushed again
    whenever another job (or `forewarn watch`) started. A new action on the same id, and its
    clear, are printed. (Its own join may replay the drain too, when its subscription reaches
    the agent after the drain went out: with --replays that is one more line, so the test
    reads up to the clear instead of counting lines.)"""
    with AgentProcess(tmp_path) as agent:
        sub = subprocess.Popen(
            [str(binary), "--count", "100", *(["--replays"] if replays else [])],
            env=agent.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        lines = _Lines(sub)
        try:
            agent.control({"op": "notify", "action": "drain", "id": "local/a"})
            lines.until("local/a", "drain")
            with agent.subscriber():  # the agent has replayed local/a to every subscriber
                pass
            agent.control({"op": "notify", "action": "terminate", "id": "local/a"})
            if not replays:
                with agent.subscriber():
                    pass
            agent.control({"op": "clear", "id": "local/a"})
            actions = [notice["action"] for notice in lines.until("local/a", "clear")]
        finally:
            sub.terminate()
            sub.wait(10)
        if replays:
            # The replay for the other subscriber's join, printed: one drain more at least.
            assert actions.count("drain") >= 2, actions
            assert actions[actions.count("drain") :] == ["terminate", "clear"], actions
        else:
            assert actions == ["drain", "terminate", "clear"]


def test_c_subscriber_prints_a_clear_for_a_notice_withdrawn_while_the_agent_was_down(
    tmp_path: Path, binary: Path
) -> None:
    """A notice withdrawn while no agent ran never gets a clear from the agent (here the
    restarted agent has lost its state; a provider's notice gone by then is the same): the
    C subscriber printed nothing, so a handler kept the drain forever. Once the restarted
    agent's heartbeats (after 5 s) no longer list it, it prints the clear the Python client
    makes, valid under the schema."""
    import jsonschema  # installed with kubernetes-validate, a test extra

    first = AgentProcess(tmp_path).start()
    sub = subprocess.Popen(
        [str(binary), "--count", "2"],
        env=first.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert sub.stdout is not None
    try:
        first.control({"op": "notify", "action": "drain", "id": "local/a"})
        drain = json.loads(sub.stdout.readline())
        first.stop()
        second_env = {**first.env, "FOREWARN_STATE_DIR": str(tmp_path / "other-state")}
        with AgentProcess(tmp_path, env=second_env):
            restarted = time.monotonic()
            out, err = sub.communicate(timeout=30)
        assert time.monotonic() - restarted > 3, "withdrawn before the restart settled"
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(10)
    assert sub.returncode == 0, err
    clear = json.loads(out)
    assert clear["action"] == "clear"
    assert clear["detail"] == {"withdrawn": "no longer listed by the agent's heartbeat"}
    assert {k: clear[k] for k in ("id", "reason", "provider", "deadline")} == {
        k: drain[k] for k in ("id", "reason", "provider", "deadline")
    }
    # Numbered as the heartbeat that showed it gone: with the drain's own seq, a handler
    # keeping the highest seq of each id kept the drain.
    assert clear["seq"] > drain["seq"], (clear, drain)
    schema = json.loads((SOURCE.parent / "schema" / "protocol-v1.json").read_text())
    jsonschema.validate(clear, schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("std", ["c99", "c11"])
def test_c_subscriber_builds_under_a_strict_c_standard(
    std: str, tmp_path: Path, binary: Path
) -> None:
    """Built with -std=c99 (as some build systems do) it needs the POSIX declarations of
    clock_gettime, gmtime_r and lstat, which a strict standard hides."""
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(SOURCE / name, tmp_path / name)
    flags = f"-std={std} -pedantic -O2 -Wall -Wextra -Werror"
    done = subprocess.run(
        ["make", "-C", str(tmp_path), f"CFLAGS={flags}"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_c_subscriber_prints_a_notice_from_an_agent_on_ipv6_loopback(
    tmp_path: Path, binary: Path
) -> None:
    """`tcp://[::1]:PORT` is a loopback endpoint the agent takes; ZeroMQ connects to an IPv6
    address only with ZMQ_IPV6 set, so the C subscriber waited on it in silence."""
    import socket

    from support import agent_env

    ports = []
    for _ in range(2):
        try:
            with socket.socket(socket.AF_INET6) as probe:
                probe.bind(("::1", 0))
                ports.append(probe.getsockname()[1])
        except OSError as error:
            pytest.skip(f"no IPv6 loopback here: {error}")
    env = agent_env(
        tmp_path,
        FOREWARN_EVENTS=f"tcp://[::1]:{ports[0]}",
        FOREWARN_CONTROL=f"tcp://[::1]:{ports[1]}",
    )
    with AgentProcess(tmp_path, env=env) as agent:
        agent.control({"op": "notify", "action": "drain", "id": "local/v6"})
        done = subprocess.run(
            [str(binary), "--count", "1"], env=env, capture_output=True, text=True, timeout=15
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["id"] == "local/v6"


@pytest.fixture(scope="session")
def sanitized_binary(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C subscriber built with AddressSanitizer and UndefinedBehaviorSanitizer, every
    finding fatal; skipped where the compiler cannot link them."""
    build = tmp_path_factory.mktemp("c-sanitized")
    for name in ("forewarn_sub.c", "Makefile"):
        shutil.copy(SOURCE / name, build / name)
    flags = (
        "-g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer "
        "-fsanitize=address,undefined -fno-sanitize-recover=all"
    )
    done = subprocess.run(["make", "-C", str(build), f"CFLAGS={flags}"], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot build with sanitizers: {done.stderr.decode()[-300:]}")
    return build / "forewarn_sub"


def _hostile_messages() -> list[list[bytes]]:
    """What no agent sends but a broken or hostile publisher can: huge, deeply nested, many
    keys, escapes cut short, surrogates, ids past what it tracks, frame counts other than 2,
    and the heartbeats that make it print clears and ask for replays."""

    def beat(active: list[str], agent: str = "host/1/a") -> bytes:
        return json.dumps({"v": 1, "seq": 1, "agent": agent, "active": active}).encode()

    head = b'{"v":1,"id":"local/h","action":"drain","detail":'
    messages = [
        [b"notice", b'{"v":1,"id":"' + b"x" * 100_000 + b'","action":"drain"}'],
        [b"notice", head + b'{"a":' * 5000 + b"1" + b"}" * 5001],
        [b"notice", head + b"[" * 100_000 + b"]" * 100_000 + b"}"],
        [b"notice", head + b"{" + b",".join(b'"k%d":1' % i for i in range(50_000)) + b"}}"],
        [b"notice", head + b'{"a\\u0000":1,"a\\u0000":2,"\\ud800":3,"\\ud800\\udc00":4}}'],
        [b"notice", head + b'{"\\u00":1,"\xff\xfe":2,"\xf0":3,"\\'],
        [b"notice", b'{"v":1'],
        [b"notice", b'{"v"'],
        [b"notice"],
        [b"notice", b"", b"", b""],
        [b"heartbeat", beat(["x" * 1000] * 2000)],
        [b"heartbeat", beat([str(i) for i in range(20_000)])],
        [b"heartbeat", beat([], agent="a" * 100_000)],
        [b"heartbeat", b'{"v":1,"agent":"b","active":["\\'],
        [b"heartbeat", b'{"v":1,"agent":"b","active":["a\\"]'],
    ]
    # More notices than it tracks, with long escaped ids, then heartbeats that withdraw them.
    for i in range(300):
        notice_id = "local/" + '"' * 200 + str(i)
        messages.append([b"notice", _notice(notice_id, "drain", detail={"x": "é😀" * i})])
    messages.append([b"heartbeat", beat([f"local/{i}" for i in range(300)])])
    messages.append([b"heartbeat", beat([])])
    return messages


def test_c_subscriber_built_with_sanitizers_survives_hostile_messages(
    tmp_path: Path, sanitized_binary: Path
) -> None:
    """Under ASan and UBSan no message is a memory error or undefined behaviour: each batch is
    followed by a marker it prints, and it exits 0 on SIGTERM, without a leak."""
    with _MarkedSubscriber(tmp_path, sanitized_binary) as marked:
        for message in _hostile_messages():
            marked.pub.send_multipart(message)
            mark = marked.marker()
            assert marked.lines_until_marker(mark, 30) is not None, (
                f"no marker after {message!r:.200}"
            )
    assert marked.sub.returncode == 0


def test_c_subscriber_reads_a_heartbeat_listing_many_ids_in_linear_time(
    tmp_path: Path, binary: Path
) -> None:
    """Its ids were kept in a list scanned for each one: a heartbeat listing 100,000 ids took
    about 16 s (0.6 s for 20,000, quadratic; 4.4 s under ASan, and over 30 s in a loaded
    run), and a notice sent behind it waited all that time."""
    listed = json.dumps(
        {"v": 1, "seq": 1, "agent": "host/1/a", "active": [str(i) for i in range(100_000)]}
    ).encode()
    with _MarkedSubscriber(tmp_path, binary) as marked:
        started = time.monotonic()
        marked.pub.send_multipart([b"heartbeat", listed])
        marked.pub.send_multipart([b"notice", _notice("local/behind", "drain")])
        printed = marked.lines_until_marker(marked.marker(), 30)
        took = time.monotonic() - started
    assert printed is not None  # the heartbeat's clears of the markers, then the notice
    assert [json.loads(line)["id"] for line in printed][-1] == "local/behind"
    assert took < 5, f"a heartbeat listing 100,000 ids held the next notice {took:.1f} s"


def test_c_subscriber_withdraws_exactly_the_notices_a_heartbeat_no_longer_lists(
    tmp_path: Path, sanitized_binary: Path
) -> None:
    """Thousands of ids received, then a heartbeat listing every third: a clear for each
    other one, once, and none for those still listed (the set's removals move entries)."""
    ids = [f"local/n{i}" for i in range(3_000)]
    with _MarkedSubscriber(tmp_path, sanitized_binary) as marked:
        for batch in range(0, len(ids), 500):  # within the PUB socket's high-water mark
            for notice_id in ids[batch : batch + 500]:
                marked.pub.send_multipart([b"notice", _notice(notice_id, "drain")])
            printed = marked.lines_until_marker(marked.marker(), 30)
            assert printed is not None and len(printed) == 500
        kept = ids[::3]
        beat = {"v": 1, "seq": 1, "agent": "host/1/a", "active": kept}
        for _ in range(2):
            marked.pub.send_multipart([b"heartbeat", json.dumps(beat).encode()])
            printed = marked.lines_until_marker(marked.marker(), 30)
            assert printed is not None
            cleared = [json.loads(line) for line in printed]
            assert all(line["action"] == "clear" for line in cleared)
            withdrawn = sorted(line["id"] for line in cleared if line["id"] in set(ids))
            assert withdrawn == ([] if _ else sorted(set(ids) - set(kept)))
    assert marked.sub.returncode == 0


def test_c_subscriber_prints_a_deeply_nested_notice_only_when_the_python_client_reads_it(
    tmp_path: Path, binary: Path
) -> None:
    """The C subscriber looked for a key named twice 64 levels deep and no deeper: a notice
    with one deeper in its detail was printed, where the Python client (and the README: "at
    any depth") refuses it. Nested past what Python's json reads (some 980 levels), the
    Python client drops a notice as nested too deeply; the C subscriber printed it."""
    from forewarn.clients.event import Event

    def nested(depth: int, twice: bool, mark: int) -> bytes:
        inner = '{"a": 1, "a": 2}' if twice else '{"a": 1}'
        detail = '{"x": ' * depth + inner + "}" * depth
        return _notice(f"local/deep-{mark}", "drain").replace(
            b'"detail": {}', b'"detail": ' + detail.encode()
        )

    with _MarkedSubscriber(tmp_path, binary) as marked:
        for depth in (10, 62, 63, 64, 70, 200, 900, 1200, 5000, 100_000):
            for twice in (False, True):
                body = nested(depth, twice, marked.next_mark())
                try:
                    Event.from_json(body)
                    taken = True
                except ValueError:
                    taken = False
                marked.pub.send_multipart([b"notice", body])
                printed = marked.lines_until_marker(marked.marker(), 10)
                assert printed is not None, f"no marker after depth {depth}"
                assert (printed == [body]) == taken, (depth, twice, taken)


def test_c_subscriber_asks_again_when_the_agent_s_seq_skips_numbers(
    tmp_path: Path, binary: Path
) -> None:
    """A change of a notice it has (a drain escalated to terminate) dropped past the
    high-water marks leaves the heartbeats' `active` as it was: only the gap in `seq`, which
    the agent gives every message one after the other, tells. A restarted agent (another
    `agent`) numbers on from its reserved mark: no gap."""
    agent_process = _Verbose(tmp_path, binary, count=3)
    xpub, sub, subscribed = agent_process.xpub, agent_process.sub, agent_process.subscribed

    def beat(seq: int, agent: str = "host/1/a") -> None:
        body = {"v": 1, "seq": seq, "agent": agent, "active": ["local/slow"], "acked": []}
        xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    try:
        eventually(lambda: subscribed(b"notice") == 1 and subscribed(b"heartbeat") == 1)
        beat(10)
        xpub.send_multipart([b"notice", _notice("local/slow", "drain", seq=11)])
        beat(12)
        # Restarted: its replay to the client that reconnects, then its heartbeats.
        xpub.send_multipart([b"notice", _notice("local/slow", "drain", seq=899)])
        beat(900, agent="host/2/b")
        beat(901, agent="host/2/b")
        assert subscribed(b"notice") == 1, "a replay asked for with no gap"
        beat(950, agent="host/2/b")  # 902 to 949 never arrived
        eventually(lambda: subscribed(b"notice") == 2, what="a second subscription to notice")
        xpub.send_multipart([b"notice", _notice("local/slow", "terminate", seq=951)])
        xpub.send_multipart([b"notice", _notice("local/next", "drain", seq=952)])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
        assert printed == [
            ("local/slow", "drain"),
            ("local/slow", "terminate"),
            ("local/next", "drain"),
        ]
        gap = [line for line in err.splitlines() if "never arrived" in line]
        assert len(gap) == 1 and "seq 902 to 949" in gap[0], err
    finally:
        agent_process.close()


def test_c_subscriber_asks_a_restarted_agent_again_for_a_replay_that_never_came(
    tmp_path: Path, binary: Path
) -> None:
    """The drain received; its escalation to terminate dropped past the high-water marks; the
    agent restarted and its replay of the terminate dropped too. The restarted agent's first
    heartbeat wiped the gap, and its heartbeats list the id received: the handler never heard
    the terminate. A restarted agent replays every notice it lists to a client that
    reconnects, so one its second heartbeat lists that did not come is asked for."""
    agent_process = _Verbose(tmp_path, binary, count=2)
    xpub, sub, subscribed = agent_process.xpub, agent_process.sub, agent_process.subscribed

    def beat(seq: int, agent: str = "host/1/a") -> None:
        body = {"v": 1, "seq": seq, "agent": agent, "active": ["local/slow"], "acked": []}
        xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    try:
        eventually(lambda: subscribed(b"notice") == 1 and subscribed(b"heartbeat") == 1)
        beat(10)
        xpub.send_multipart([b"notice", _notice("local/slow", "drain", seq=11)])
        beat(12)
        # 13, the terminate, and 899, the restarted agent's replay of it: dropped.
        beat(900, agent="host/2/b")
        beat(901, agent="host/2/b")
        eventually(lambda: subscribed(b"notice") == 2, what="a second subscription to notice")
        xpub.send_multipart([b"notice", _notice("local/slow", "terminate", seq=902)])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
        assert printed == [("local/slow", "drain"), ("local/slow", "terminate")]
        assert "lists local/slow, whose replay never arrived" in err, err
    finally:
        agent_process.close()


def test_c_subscriber_takes_a_restarted_agent_s_replay_slow_to_come_for_no_loss(
    tmp_path: Path, binary: Path
) -> None:
    """A restarted agent slow to read the reconnected socket's subscriptions beat twice before
    its replay: at its second heartbeat the C subscriber said "whose replay never arrived" and
    asked again. An agent with `replay_for` names the socket's token in its replay's
    heartbeat, and the check waits for that."""
    agent_process = _Verbose(tmp_path, binary, count=2)
    xpub, sub, subscribed = agent_process.xpub, agent_process.sub, agent_process.subscribed

    def token() -> str | None:
        subscribed(b"notice")
        prefix = b"\x01replay/"
        named = [s[len(prefix) :] for s in agent_process.subscriptions if s.startswith(prefix)]
        return named[0].decode() if named else None

    def beat(seq: int, replay_for: list[str], agent: str = "host/1/a") -> None:
        body = {"v": 1, "seq": seq, "agent": agent, "active": ["local/slow"], "acked": []}
        body["replay_for"] = replay_for
        xpub.send_multipart([b"heartbeat", json.dumps(body).encode()])

    try:
        eventually(lambda: token() is not None, what="a replay/<token> subscription")
        mine = token() or ""
        beat(10, [mine])
        xpub.send_multipart([b"notice", _notice("local/slow", "drain", seq=11)])
        beat(12, [])
        for seq in range(900, 904):  # restarted, its replay not come yet
            beat(seq, [], agent="host/2/b")
        beat(904, [mine], agent="host/2/b")
        xpub.send_multipart([b"notice", _notice("local/slow", "drain", seq=905)])
        beat(906, [], agent="host/2/b")
        xpub.send_multipart([b"notice", _notice("local/new", "drain", seq=907)])
        out, err = sub.communicate(timeout=15)
        assert sub.returncode == 0, err
        printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
        assert printed == [("local/slow", "drain"), ("local/new", "drain")]
        assert "never arrived" not in err, err
        assert subscribed(b"notice") == 1, "asked for a replay that was only late"
    finally:
        agent_process.close()


def test_c_subscriber_past_256_active_notices_prints_no_false_clear_and_no_replay_twice(
    tmp_path: Path, binary: Path
) -> None:
    """The C subscriber kept at most 256 notice ids, in each heartbeat's `active` too: with 300
    active, the heartbeat's first 256 left out notices it had received, and it printed a clear
    for each of them (a handler took a terminate still in force for withdrawn), while the 44 it
    could not keep were asked for again every 10 s and each replay of them printed again. The
    agent itself caps only manual notices (64); providers' notices are not capped."""
    total = 300
    agent = _Verbose(tmp_path, binary, count=total + 1)
    xpub, sub, subscribed = agent.xpub, agent.sub, agent.subscribed
    ids = [f"local/n{n:03}" for n in range(total)]
    try:
        eventually(lambda: subscribed(b"notice") == 1 and subscribed(b"heartbeat") == 1)
        for seq, notice_id in enumerate(ids, start=1):
            xpub.send_multipart([b"notice", _notice(notice_id, "drain", seq=seq)])
        for seq in (total + 1, total + 2):
            beat = {"v": 1, "seq": seq, "agent": "host/1/a", "active": ids[::-1], "acked": []}
            xpub.send_multipart([b"heartbeat", json.dumps(beat).encode()])
        # A replay of one past the 256th (the agent's answer to another subscriber's join).
        xpub.send_multipart([b"notice", _notice(ids[280], "drain", seq=total + 3)])
        xpub.send_multipart([b"notice", _notice("local/marker", "drain", seq=total + 4)])
        out, err = sub.communicate(timeout=15)
        asked_again = subscribed(b"notice") - 1
    finally:
        agent.close()
    printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
    assert printed == [(notice_id, "drain") for notice_id in [*ids, "local/marker"]], err
    assert "never received here" not in err
    assert asked_again == 0


def test_c_subscriber_counts_a_restarts_settle_on_the_agent_s_clock_too(
    tmp_path: Path, binary: Path
) -> None:
    """Read a restarted agent's first heartbeat, then stopped past its own settle: the agent's
    heartbeats of its first seconds (which leave out a notice published the instant before the
    kill) were read after the subscriber's own settle, and it printed a clear for a notice in
    force. Counted on the agent's clock too (the heartbeats' `sent_at`), as the Python client
    and `forewarn watch` count it. `--settle` shortens the 5 s so no test waits that long."""
    settle = 0.2
    endpoint = f"ipc://{tmp_path}/events"
    context = zmq.Context()
    xpub = context.socket(zmq.XPUB)
    xpub.setsockopt(zmq.LINGER, 0)
    xpub.bind(endpoint)
    sub = subprocess.Popen(
        [str(binary), endpoint, "--count", "2", "--settle", str(settle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def beat(seq: int, agent: str, sent_at: str, *active: str) -> None:
        body = {"v": 1, "seq": seq, "agent": agent, "active": list(active), "acked": []}
        xpub.send_multipart([b"heartbeat", json.dumps({**body, "sent_at": sent_at}).encode()])

    try:
        eventually(lambda: xpub.poll(0) and xpub.recv() == b"\x01heartbeat", what="subscribed")
        beat(10, "h/1/a", "2026-11-30T03:10:00Z", "local/a")
        xpub.send_multipart([b"notice", _notice("local/a", "drain", seq=11)])
        assert sub.stdout is not None and json.loads(sub.stdout.readline())["id"] == "local/a"
        beat(900, "h/2/b", "2026-11-30T03:10:02Z")  # restarted: its first heartbeat
        # The subscriber's own settle passes (as under SIGSTOP) before it reads the rest: the
        # time is what is tested, so it is waited for.
        time.sleep(settle + 0.05)
        beat(901, "h/2/b", "2026-11-30T03:10:02.050Z")
        beat(902, "h/2/b", "2026-11-30T03:10:02.150Z")
        beat(903, "h/2/b", "2026-11-30T03:10:02.200Z")  # its settle past, by its clock
        out, err = sub.communicate(timeout=15)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(10)
        xpub.close()
        context.term()
    assert sub.returncode == 0, err
    clear = json.loads(out)
    assert (clear["id"], clear["action"]) == ("local/a", "clear")
    assert clear["seq"] == 903, "withdrawn before the restarted agent's settle, by its clock"


def test_c_subscriber_refuses_a_settle_that_is_no_time(binary: Path) -> None:
    for text in ("-1", "nan", "abc", "", "5s", "3601"):
        done = subprocess.run(
            [str(binary), "ipc:///nonexistent/events", "--settle", text],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert done.returncode == 2 and "--settle needs seconds" in done.stderr, (text, done)


# The C subscriber's reader of a time (a heartbeat's `sent_at`, a notice's deadline), called on
# each line of stdin taken as the raw text of a JSON string: the program itself, its main
# renamed, so the test reads the very function it runs.
TIME_HARNESS = r"""
#define main forewarn_sub_main
#include "forewarn_sub.c"
#undef main
int main(void) {
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = strcspn(line, "\n");
        double seconds;
        if (json_time_seconds(line, len, &seconds))
            printf("%.6f\n", seconds);
        else
            printf("none\n");
        fflush(stdout);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def time_reader(binary: Path) -> Iterator[Callable[[str], float | None]]:
    harness = binary.parent / "time_harness.c"
    harness.write_text(TIME_HARNESS)
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libzmq"], capture_output=True, text=True
    ).stdout.split() or ["-lzmq"]
    built = binary.parent / "time_harness"
    done = subprocess.run(
        ["cc", "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-I", str(binary.parent),
         "-o", str(built), str(harness), *flags],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    proc = subprocess.Popen(
        [str(built)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdin is not None and proc.stdout is not None

    def read(text: str) -> float | None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(text + "\n")
        answer = proc.stdout.readline().strip()
        return None if answer == "none" else float(answer)

    yield read
    proc.stdin.close()
    proc.wait(10)


def _python_reads(text: str) -> float | None:
    moment = time_or_none(text)
    return None if moment is None else moment.timestamp()


@settings(max_examples=examples(300), deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(None)
    ),
    fraction=st.sampled_from(["", ".5", ".050", ".123456789", "."]),
    zone=st.sampled_from(
        ["Z", "z", "+00:00", "-05:30", "+0530", "+23:59", "+24:00", "+05:99", "Q"]
    ),
    separator=st.sampled_from(["T", "t", " ", "_"]),
)
def test_c_subscriber_reads_a_sent_at_as_the_python_client_does(
    time_reader: Callable[[str], float | None],
    moment: datetime,
    fraction: str,
    zone: str,
    separator: str,
) -> None:
    text = moment.strftime("%Y-%m-%d") + separator + moment.strftime("%H:%M:%S") + fraction + zone
    expected, got = _python_reads(text), time_reader(text)
    assert (got is None) == (expected is None), text
    if expected is not None and got is not None:
        assert abs(got - expected) < 1e-5, text


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text(alphabet="0123456789-T:.Z+ ", max_size=32))
def test_c_subscriber_reads_no_time_where_the_python_client_reads_none(
    time_reader: Callable[[str], float | None], text: str
) -> None:
    expected, got = _python_reads(text), time_reader(text)
    assert (got is None) == (expected is None), text
    if expected is not None and got is not None:
        assert abs(got - expected) < 1e-5, text


SEQ_TEXTS = ['"12"', "1.5", "12.0", "1e3", "null", "true", "[1]", "-3", "0", "12", "-0", "1" * 30]


def test_c_subscriber_drops_a_notice_whose_seq_is_no_integer_as_the_python_client_does(
    tmp_path: Path, binary: Path
) -> None:
    """A notice whose `seq` is no JSON integer (`"12"`, `1.5`, `null`, none at all) is dropped
    by the client library (`Event.from_json`); the C subscriber printed it. Each is printed by
    both or by neither now, dropped with a line on stderr (one a minute)."""
    bodies = [
        _notice(f"local/s{i}", "drain").replace(b'"seq": 1', b'"seq": ' + text.encode())
        for i, text in enumerate(SEQ_TEXTS)
    ]
    bodies.append(_notice("local/none", "drain").replace(b'"seq": 1, ', b""))
    python_reads = []
    for body in bodies:
        with contextlib.suppress(ValueError):
            python_reads.append(Event.from_json(body).id)
    with _published_to(tmp_path, binary, len(python_reads) + 1) as (xpub, sub):
        for body in bodies:
            xpub.send_multipart([b"notice", body])
        xpub.send_multipart([b"notice", _notice("local/last", "drain", seq=99)])
        out, err = sub.communicate(timeout=15)
    assert sub.returncode == 0, err
    printed = [n["id"] for n in map(json.loads, out.splitlines())]
    assert printed == [*python_reads, "local/last"], err
    assert len(python_reads) == 5  # -3, 0, 12, -0 and the 30 digits: integers all
    dropped = [line for line in err.splitlines() if "dropped a" in line]
    assert dropped == ['forewarn_sub: dropped a notice whose "seq" is not an integer, got "12"']


# (what is changed in a whole notice, the field's new JSON text or None to remove it)
FIELD_CASES: list[tuple[str, str | None]] = [
    ("action", "7"),
    ("action", "null"),
    ("action", None),
    ("id", "7"),
    ("id", None),
    ("reason", "[]"),
    ("provider", "{}"),
    ("deadline", '"soon"'),
    ("deadline", "7"),
    ("deadline", '"2026-02-30T00:00:00Z"'),
    ("deadline", '"0001-01-01T00:00:00+01:00"'),
    ("deadline", "null"),
    ("deadline", None),
    ("deadline", '"2026-11-30T03:12:00Z"'),
    ("deadline", '" 2026-11-30T03:12:00+01:00 "'),
    ("noticed_at", None),
    ("noticed_at", '"x"'),
    ("noticed_at", "null"),
    ("sent_at", "1"),
    ("detail", "[]"),
    ("detail", '"x"'),
    ("detail", "null"),
    ("detail", None),
]


def _with_field(notice_id: str, key: str, text: str | None) -> bytes:
    body = json.loads(_notice(notice_id, "drain", deadline="2026-11-30T04:00:00Z"))
    body[key] = "\x00"  # a place kept in the order, its value written below
    written = json.dumps(body)
    value = json.dumps("\x00")
    if text is None:
        written = written.replace(f'"{key}": {value}, ', "").replace(f', "{key}": {value}', "")
    else:
        written = written.replace(value, text)
    return written.encode()


def test_c_subscriber_drops_a_notice_whose_fields_the_python_client_refuses(
    tmp_path: Path, binary: Path
) -> None:
    """A notice with `"action": 7`, `"deadline": "soon"` or no `noticed_at` is dropped by the
    client library (`Event.from_json`); the C subscriber, which checked `v` and `seq` only,
    printed it. Each case is printed by both or by neither, over real ZeroMQ."""
    bodies = [_with_field(f"local/f{i}", key, text) for i, (key, text) in enumerate(FIELD_CASES)]
    python_reads = []
    for body in bodies:
        with contextlib.suppress(ValueError):
            python_reads.append(Event.from_json(body).id)
    assert len(python_reads) == 6, python_reads  # null and missing where optional, good times
    with _published_to(tmp_path, binary, len(python_reads) + 1) as (xpub, sub):
        for body in bodies:
            xpub.send_multipart([b"notice", body])
        xpub.send_multipart([b"notice", _notice("local/last", "drain", seq=99)])
        out, err = sub.communicate(timeout=15)
    assert sub.returncode == 0, err
    printed = [n.get("id") for n in map(json.loads, out.splitlines())]
    assert printed == [*python_reads, "local/last"], err
    dropped = [line for line in err.splitlines() if "dropped a" in line]
    assert dropped == ['forewarn_sub: dropped a notice whose field "action" is not a string']


def _json_escaped(text: str, ways: list[int]) -> str:
    r"""`text` as the raw text of a JSON string, each character written one of the ways JSON
    allows (as itself where it may be, `\u00XX` in lower or upper case hex, or its short
    escape), as a publisher other than the agent may write it."""
    short = {"/": "\\/", "\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    short |= {"\r": "\\r", "\t": "\\t"}
    written = []
    for char, way in zip(text, ways[: len(text)], strict=True):
        plain = char >= " " and char not in '"\\' and char != "\x7f"
        if way == 1 and char in short:
            written.append(short[char])
        elif way == 2 or (way == 1 and not plain):
            written.append(f"\\u{ord(char):04x}")
        elif way == 3 or not plain:
            written.append(f"\\u{ord(char):04X}")
        else:
            written.append(char)
    return "".join(written)


TIME_ESCAPE_CASES = [
    ("2026-11-30T03:12:00\\u002b01:00", True),
    ("2026\\u002d11-30T03:12:00Z", True),
    ("2026-11-30T03:12:00\\u005A", True),
    ("\\t2026-11-30T03:12:00Z\\u00a0", True),
    ("2026-11-30\\u00a003:12:00Z", False),
    ("2026-11-30T03:12:00Z\\u0001", False),
    ("2026-11-30T03:12:00\\/00", False),
    ("\\u0662026-11-30T03:12:00Z", False),  # an Arabic-Indic 2: no digit to RFC 3339
]


@pytest.mark.parametrize(("raw", "python_reads"), TIME_ESCAPE_CASES)
def test_c_subscriber_reads_an_escaped_time_as_the_python_client_does(
    time_reader: Callable[[str], float | None], raw: str, python_reads: bool
) -> None:
    r"""A time the publisher wrote with JSON's escapes (`\u002b` for the `+` of its offset) was
    read as written: none to the C subscriber, which then dropped a notice whose deadline the
    Python client reads (and found no `sent_at` in such a heartbeat)."""
    expected = _python_reads(json.loads(f'"{raw}"'))
    assert (expected is not None) == python_reads, raw
    got = time_reader(raw)
    assert got == (None if expected is None else pytest.approx(expected, abs=1e-5)), raw


@settings(max_examples=examples(300), deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(None)
    ),
    zone=st.sampled_from(["Z", "z", "+00:00", "-05:30", "+0530", "+24:00"]),
    around=st.tuples(*[st.sampled_from(["", " ", "\t", "\n", "\xa0", "\u3000", "\x01", "x"])] * 2),
    data=st.data(),
)
def test_c_subscriber_reads_a_time_written_with_any_json_escapes_as_the_python_client_does(
    time_reader: Callable[[str], float | None],
    moment: datetime,
    zone: str,
    around: tuple[str, str],
    data: st.DataObject,
) -> None:
    text = around[0] + moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + zone + around[1]
    raw = _json_escaped(text, data.draw(st.lists(st.integers(0, 3), min_size=len(text))))
    expected, got = _python_reads(json.loads(f'"{raw}"')), time_reader(raw)
    assert (got is None) == (expected is None), raw
    if expected is not None and got is not None:
        assert abs(got - expected) < 1e-5, raw


def test_c_subscriber_prints_a_notice_whose_json_escapes_the_python_client_reads(
    tmp_path: Path, binary: Path
) -> None:
    r"""A notice whose deadline the publisher wrote with an escaped `+` (`\u002b01:00`), or
    whose key it escaped (`"dead\u006cine"`), is one the Python client reads and acts on: the C
    subscriber compared both as written and dropped the first ("deadline" is not an RFC 3339
    time) and, reading no "id" in `"\u0069d"`, the second. It prints them now, and takes an
    escaped `clear` as a clear."""
    escaped_zone = _with_field("local/zone", "deadline", '"2026-11-30T04:00:00\\u002b01:00"')
    escaped_key = _notice("local/key", "drain").replace(b'"id"', b'"\\u0069d"')
    escaped_clear = _notice("local/zone", "clear").replace(b'"clear"', b'"cl\\u0065ar"')
    bodies = [escaped_zone, escaped_key, escaped_clear, escaped_zone]
    python_reads = [Event.from_json(body) for body in bodies]
    assert python_reads[0].deadline is not None and python_reads[2].action == "clear"
    with _published_to(tmp_path, binary, len(bodies)) as (xpub, sub):
        for body in bodies:
            xpub.send_multipart([b"notice", body])
        out, err = sub.communicate(timeout=15)
    assert sub.returncode == 0, err
    printed = [(n["id"], n["action"]) for n in map(json.loads, out.splitlines())]
    # the last: the same notice again after its clear, printed (not a replay of one printed)
    assert printed == [(e.id, e.action) for e in python_reads], err
    assert "dropped" not in err, err


def test_c_subscriber_prints_no_replay_whose_detail_differs_only_in_its_skew(
    tmp_path: Path, binary: Path
) -> None:
    """After NTP's step on a node whose clock was 2 h behind the API server, the watcher's
    report of the new skew changed only Karpenter's drains' `clock_ahead_seconds`, which the
    agent keeps for replays and sends to no one. When another job joined, the replay carried
    it, and the C subscriber, hashing the detail as written, printed each drain again: a
    handler reading its lines took it for a changed notice."""
    import httpx
    from forewarn.providers.kubernetes.simulate import KubernetesSimulator
    from forewarn.providers.simulator import SimServer

    node = "agent-node"
    shifted, offset = shifted_wall_clock(tmp_path, -7200.0)
    sim = KubernetesSimulator(node=node, token="t1", max_watch_seconds=30, bookmark_interval=1)
    (tmp_path / "token").write_text("t1")
    with SimServer(sim) as server:
        env = agent_env(
            tmp_path,
            FOREWARN_KUBERNETES_URL=server.url,
            FOREWARN_KUBERNETES_TOKEN_FILE=str(tmp_path / "token"),
            NODE_NAME=node,
        )
        agent = AgentProcess(tmp_path, providers=("kubernetes", "local"), env={**env, **shifted})
        with agent:
            sub = subprocess.Popen(
                [str(binary), "--count", "100"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            lines = _Lines(sub)
            try:
                agent.control({"op": "notify", "action": "drain", "id": "local/first"})
                lines.until("local/first", "drain")  # the subscriber hears the agent
                termination = datetime.now().astimezone() + timedelta(minutes=30)
                raised = httpx.post(
                    f"{server.url}/_sim/notices",
                    json={"kind": "karpenter", "termination": termination.isoformat()},
                    trust_env=False,
                    timeout=5,
                )
                assert raised.status_code == 201, raised.text

                def skews() -> list[bool]:
                    active = agent.control({"op": "status"})["active"]
                    return [
                        "clock_ahead_seconds" in n["detail"]
                        for n in active
                        if n["provider"] == "kubernetes" and n["deadline"]
                    ]

                eventually(lambda: skews() == [True, True], what="the drains on the node's clock")
                offset.write_text("0")  # NTP's step: the agent's wall clock is 2 h on
                eventually(lambda: skews() == [False, False], timeout=20, what="the new skew")
                agent.control({"op": "notify", "action": "drain", "id": "local/mid"})
                before = len(lines.until("local/mid", "drain"))
                with agent.subscriber():  # another job joins: a replay to every subscriber
                    pass
                agent.control({"op": "notify", "action": "drain", "id": "local/last"})
                printed = lines.until("local/last", "drain")
            finally:
                sub.terminate()
                sub.wait(10)
        # The replay for the join: nothing new, nothing printed but the notice after it.
        assert [n["id"] for n in printed[before:]] == ["local/last"], printed[before:]
        assert {n["id"] for n in printed[:before] if n["provider"] == "kubernetes"} == {
            "kubernetes/agent-node/taint/karpenter.sh/disrupted",
            "kubernetes/agent-node/deleting",
        }


DETAIL_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=8,
)


def _reordered(value: Any, shuffle: Callable[[list[Any]], None], spacing: str) -> str:
    """`value` as JSON with every object's keys in another order, spaced otherwise."""
    if isinstance(value, dict):
        pairs = list(value.items())
        shuffle(pairs)
        inner = f",{spacing}".join(
            f"{json.dumps(k)}{spacing}:{spacing}{_reordered(v, shuffle, spacing)}" for k, v in pairs
        )
        return "{" + spacing + inner + spacing + "}"
    if isinstance(value, list):
        return "[" + f",{spacing}".join(_reordered(v, shuffle, spacing) for v in value) + "]"
    return json.dumps(value)


def test_c_subscriber_prints_a_notice_sent_again_with_its_detail_reordered_only_once(
    tmp_path: Path, binary: Path
) -> None:
    """The C subscriber hashed a notice's detail as written: the same notice sent again with
    its detail's keys in another order (at any depth) or spaced otherwise was printed again
    as changed, where the Python client's `Notices` compares the detail as a dict and heard
    nothing new. Whether the second is printed is what Python's comparison says, so a real
    change (`other`) is still printed."""
    from forewarn.clients.notices import _as_sent
    from hypothesis import HealthCheck

    with _MarkedSubscriber(tmp_path, binary) as marked:

        @settings(
            max_examples=examples(150),
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(
            detail=st.dictionaries(st.text(max_size=3), DETAIL_VALUES, max_size=4),
            other=st.none() | st.dictionaries(st.text(max_size=3), DETAIL_VALUES, max_size=4),
            skew=st.sampled_from([None, 12.5, -7200.0]),
            rand=st.randoms(use_true_random=False),
            spacing=st.sampled_from(["", " ", "\n", "\t ", "\r\n"]),
        )
        def printed_again_only_when_python_hears_news(
            detail: dict[str, Any],
            other: dict[str, Any] | None,
            skew: float | None,
            rand: Any,
            spacing: str,
        ) -> None:
            notice_id = f"local/r-{marked.next_mark()}"
            first = _notice(notice_id, "drain", detail=detail)
            second_detail = dict(other if other is not None else detail)
            if skew is not None:
                second_detail["clock_ahead_seconds"] = skew
            second = _notice(notice_id, "drain").replace(
                b'"detail": {}',
                b'"detail": ' + _reordered(second_detail, rand.shuffle, spacing).encode(),
            )
            news = _as_sent(Event.from_json(first)) != _as_sent(Event.from_json(second))
            marked.pub.send_multipart([b"notice", first])
            marked.pub.send_multipart([b"notice", second])
            printed = marked.lines_until_marker(marked.marker(), 10)
            assert printed is not None, f"no marker after {second!r}"
            assert len(printed) == (2 if news else 1), (first, second, printed)

        printed_again_only_when_python_hears_news()
