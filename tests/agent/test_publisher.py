"""The publisher's sockets on their own, in this process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from forewarn.agent import publisher
from forewarn.agent.publisher import Publisher
from forewarn.agent.throttle import WarningThrottle
from forewarn.protocol import jsontext
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import AgentProcess, eventually, forewarn_cmd


def test_a_socket_file_is_never_open_to_others_even_before_its_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under umask 0 the file used to be 0777 from bind to chmod: another uid that connected
    in between kept its connection (to control, with no token on a socket file)."""
    modes: dict[str, int] = {}
    chmod = os.chmod

    def record(path: str | Path, mode: int) -> None:
        modes[Path(path).resolve().name] = stat.S_IMODE(os.stat(path).st_mode)
        chmod(path, mode)

    monkeypatch.setattr(publisher.os, "chmod", record)
    previous = os.umask(0)
    try:
        sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
        try:
            sockets.bind()
        finally:
            sockets.close()
        assert os.umask(0) == 0  # the process umask is back
    finally:
        os.umask(previous)
    assert modes == {"events": 0o770, "control": 0o770}


def test_a_link_swapped_in_for_the_socket_file_right_after_bind_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mode and group were set with chmod/stat on the path after bind: whoever could write
    the runtime directory (its group) and swapped the socket file for a link in between had a
    root agent chmod the link's target to 0660."""
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    victim.chmod(0o600)
    bind = zmq.asyncio.Socket.bind

    def bind_then_swap(sock: zmq.asyncio.Socket, endpoint: str) -> Any:
        bound = bind(sock, endpoint)
        path = Path(endpoint.removeprefix("ipc://"))
        path.rename(path.with_name(path.name + ".moved"))
        path.symlink_to(victim)
        return bound

    monkeypatch.setattr(zmq.asyncio.Socket, "bind", bind_then_swap)
    sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
    refused: publisher.BindError | None = None
    try:
        sockets.bind()
    except publisher.BindError as error:
        refused = error
    finally:
        sockets.close()
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert refused is not None and "replaced by another file right after bind" in str(refused)
    assert (tmp_path / "events").is_symlink()  # a link this agent did not make is left alone


def test_without_proc_the_bind_is_refused_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket file's mode is set through /proc/self/fd: where /proc is not mounted that
    chmod raised FileNotFoundError out of the agent's start, a traceback, not an exit 2."""
    chmod = os.chmod

    def no_proc(path: Any, mode: int, **kwargs: Any) -> None:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory")
        chmod(path, mode, **kwargs)

    monkeypatch.setattr(publisher.os, "chmod", no_proc)
    sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
    try:
        with pytest.raises(publisher.BindError, match="is /proc mounted"):
            sockets.bind()
    finally:
        sockets.close()


def test_the_events_file_check_sees_it_removed_or_replaced_and_only_that(tmp_path: Path) -> None:
    """The watchdog's check each second: the events socket file bound, and nothing else at its
    path (a /tmp cleaner removed it, or a file took its place), counts."""
    path = tmp_path / "events"
    sockets = Publisher(f"ipc://{path}", f"ipc://{tmp_path}/control")
    try:
        assert not sockets.events_file_ours()  # not bound yet
        sockets.bind()
        assert sockets.events_file_ours() and sockets.events_file_ours()
        moved = path.with_name("events.moved")
        path.rename(moved)
        assert not sockets.events_file_ours()  # removed
        path.write_text("")
        assert not sockets.events_file_ours()  # another file at its path
        path.unlink()
        moved.rename(path)
        assert sockets.events_file_ours()  # the very file, back (same device and inode)
    finally:
        sockets.close()
    assert not path.exists() and not sockets.events_file_ours()
    tcp = Publisher("tcp://127.0.0.1:0", f"ipc://{tmp_path}/control2")
    try:
        tcp.bind()
        assert tcp.events_file_ours()  # no file to lose
    finally:
        tcp.close()


@pytest.fixture(scope="module")
def sockets() -> Iterator[Publisher]:
    unbound = Publisher("ipc:///nonexistent/events", "ipc:///nonexistent/control")
    yield unbound
    unbound.close()


async def _echo(request: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "echo": request}


@given(frame=st.binary(max_size=64) | st.text(max_size=32).map(str.encode))
@example(frame=b"\xff\xfe{}")  # what json.loads took for UTF-16: "Expecting value"
@example(frame='{"op": "status"}'.encode("utf-16"))
@example(frame=b'{"op": "status", "x": "\xe9"}')
@example(frame=b'\xef\xbb\xbf{"op": "status"}')
@example(frame=b'{"op": "status", "op": "ack"}')
def test_a_request_frame_is_utf8_json_or_a_clear_error(sockets: Publisher, frame: bytes) -> None:
    """Any bytes as a request's frame get a reply: the request as decoded, or an error that
    says what is wrong; bytes that are not UTF-8 are named so, with the first bad byte."""
    reply = asyncio.run(sockets._answer([frame], _echo))
    try:
        text = frame.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        assert reply["ok"] is False
        assert reply["error"].startswith("request is not UTF-8: ")
        assert f"0x{frame[error.start]:02x} at offset {error.start}" in reply["error"]
        return
    try:
        expected = jsontext.loads(text)
    except jsontext.DuplicateKeyError:
        assert reply["ok"] is False and reply["error"].startswith("request refused: the key ")
        return
    except (ValueError, RecursionError):
        assert reply["ok"] is False and reply["error"].startswith("request is not JSON"), reply
        return
    if isinstance(expected, dict):
        assert reply == {"ok": True, "echo": expected}
    else:
        assert reply == {"ok": False, "error": "request is not JSON: a request is a JSON object"}


@given(client=st.binary(max_size=260) | st.text(max_size=210).map(str.encode))
@example(client=b"")
@example(client=b"job\xff")
@example(client=b"two\nlines")
@example(client=b"x" * 201)
@example(client=b"host/123/abcdef")
def test_a_client_subscription_is_tracked_exactly_when_an_ack_can_name_it(
    sockets: Publisher, client: bytes
) -> None:
    from forewarn.agent.protocol import AckRequest
    from pydantic import ValidationError

    try:
        AckRequest(op="ack", client=client.decode())
        nameable = bool(client)
    except (UnicodeDecodeError, ValidationError):
        nameable = False
    seen: list[tuple[str, bool]] = []
    sockets.clients.clear()
    sockets._subscription(b"\x01client/" + client, lambda c, joined: seen.append((c, joined)))
    assert (seen == [(client.decode(errors="replace"), True)]) is nameable
    assert (len(sockets.clients) == 1) is nameable
    sockets._subscription(b"\x00client/" + client, lambda c, joined: seen.append((c, joined)))
    assert not sockets.clients
    assert len(seen) == (2 if nameable else 0)


@given(token=st.binary(max_size=80) | st.text(max_size=70).map(str.encode))
@example(token=b"")
@example(token=b"0123456789abcdef0123456789abcdef")
@example(token=b"x" * 64)
@example(token=b"x" * 65)
@example(token=b"two words")
@example(token=b"job\xff")
@example(token="caf\u00e9".encode())
def test_a_replay_subscription_asks_for_a_replay_naming_its_token_when_it_is_one(
    sockets: Publisher, token: bytes
) -> None:
    """`replay/<token>` asks for a replay whose heartbeat lists the token: only a token every
    reader takes as it is (it goes to every subscriber), and never on an unsubscription."""
    from forewarn.protocol.wire import MAX_REPLAY_TOKEN_LENGTH

    text = token.decode(errors="replace")
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
    valid = 0 < len(token) <= MAX_REPLAY_TOKEN_LENGTH and set(text) <= allowed
    sockets._replay_due, sockets._replay_tokens = False, []
    sockets._subscription(b"\x00replay/" + token, lambda c, joined: None)
    assert (sockets._replay_due, sockets._replay_tokens) == (False, [])
    for _ in range(2):  # the same again (XPUB_VERBOSE passes repeats): listed once
        sockets._subscription(b"\x01replay/" + token, lambda c, joined: None)
    assert sockets._replay_due is valid
    assert sockets._replay_tokens == ([text] if valid else [])
    assert not sockets.clients


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bound publisher answering control requests (echo) in a thread of its own: the
    endpoint."""
    where = tmp_path_factory.mktemp("serving")
    endpoint = f"ipc://{where}/control"
    ready = threading.Event()
    loop = asyncio.new_event_loop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        sockets = Publisher(f"ipc://{where}/events", endpoint)
        sockets.bind()
        task = loop.create_task(sockets.serve_control(_echo))
        loop.call_soon(ready.set)
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)
        sockets.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield endpoint
    loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)])
    thread.join(10)


@settings(max_examples=40)
@given(size=st.integers(-256, 256).map(lambda d: publisher.MAX_CONTROL_BYTES + d))
@example(size=publisher.MAX_CONTROL_BYTES)
@example(size=publisher.MAX_CONTROL_BYTES + 1)
@example(size=publisher.MAX_CONTROL_FRAME_BYTES)
def test_a_request_over_the_size_limit_gets_an_error_naming_it(serving: str, size: int) -> None:
    """Over 64 KiB, ZeroMQ dropped the peer: a REQ client waited for an answer that never
    came. Up to the frame cap, a request gets an answer either way."""
    prefix = b'{"op": "status", "pad": "'
    body = prefix + b"x" * (size - len(prefix) - 2) + b'"}'
    assert len(body) == size
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(serving)
        sock.send(body)
        assert sock.poll(5000), f"no answer to a request of {size} bytes"
        reply = json.loads(sock.recv())
    finally:
        sock.close()
    if size <= publisher.MAX_CONTROL_BYTES:
        assert reply["ok"] is True and len(reply["echo"]["pad"]) == size - len(prefix) - 2
    else:
        assert reply == {
            "ok": False,
            "error": f"request too large: {size} bytes, over the limit of 65536 bytes (64 KiB)",
        }


@pytest.mark.parametrize("size", [publisher.MAX_CONTROL_BYTES + 1, 2 * 1024 * 1024])
def test_forewarns_request_over_the_limit_gets_the_error_at_once(serving: str, size: int) -> None:
    """Over 1 MiB ZeroMQ drops the connection unread: `request` waited out its timeout and
    said no agent was there. It now answers with the agent's error without sending."""
    from forewarn.protocol.wire import request

    started = time.monotonic()
    reply = request(serving, {"op": "status", "pad": "x" * size}, timeout=5)
    assert time.monotonic() - started < 1
    assert reply["ok"] is False
    assert reply["error"].startswith("request too large: ")
    assert "over the limit of 65536 bytes (64 KiB); not sent" in reply["error"]
    # The agent is not affected and still answers this socket's next request.
    assert request(serving, {"op": "status"}, timeout=5)["ok"]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@settings(max_examples=40, deadline=None)
@given(
    # Seconds between one refused client and the next: floods, pauses, and minutes between.
    gaps=st.lists(st.floats(0, 150, allow_nan=False) | st.just(0.0), min_size=1, max_size=400),
)
def test_clients_past_the_cap_are_counted_each_and_logged_at_most_once_a_minute(
    gaps: list[float],
) -> None:
    """Each acking client past MAX_CLIENTS logged a line of its own: one local peer
    subscribing to new `client/<id>` topics in a loop wrote the journal full at the rate it
    sent them. Now a line at most once a minute says how many were refused since the last,
    and each one is counted (the `forewarn_clients_refused_total` metric)."""
    now = [0.0]
    counted: list[None] = []
    sockets = Publisher(
        "ipc:///nonexistent/events",
        "ipc:///nonexistent/control",
        on_client_refused=lambda: counted.append(None),
    )
    sockets._over_cap = WarningThrottle(publisher.REFUSAL_LOG_INTERVAL, clock=lambda: now[0])
    sockets.clients = {f"job-{n}" for n in range(publisher.MAX_CLIENTS)}
    records = _Records()
    logger = logging.getLogger("forewarn.agent")
    logger.addHandler(records)
    logged: list[tuple[float, int, int]] = []  # (when, how many the line says, at which)
    try:
        for n, gap in enumerate(gaps):
            now[0] += gap
            before = len(records.messages)
            sockets._subscription(f"\x01client/late-{n}".encode(), lambda c, joined: None)
            for message in records.messages[before:]:
                assert "refused since this was last logged" in message, message
                logged.append((now[0], int(message.split()[0]), n))
    finally:
        logger.removeHandler(records)
        sockets.close()
    assert sockets.clients_refused == len(counted) == len(gaps)
    assert len(sockets.clients) == publisher.MAX_CLIENTS
    assert logged[0] == (gaps[0], 1, 0)
    for (earlier, _, _), (later, _, _) in itertools.pairwise(logged):
        assert later - earlier >= publisher.REFUSAL_LOG_INTERVAL
    # Every refusal is in one line's count but those after the last line, held for the next.
    since_last = len(gaps) - 1 - logged[-1][2]
    assert sum(count for _, count, _ in logged) + since_last == len(gaps)
    # And none is held back longer than the interval when another comes after it.
    times = list(itertools.accumulate(gaps))
    assert times[-1] - logged[-1][0] < publisher.REFUSAL_LOG_INTERVAL or since_last == 0


def test_the_documented_client_cap_is_the_codes() -> None:
    root = Path(__file__).resolve().parents[2]
    cap = f"{publisher.MAX_CLIENTS:,}"
    assert f"At most {cap} acking clients" in " ".join((root / "README.md").read_text().split())
    row = "`forewarn_clients_refused_total` | counter | | acking clients refused because"
    operations = (root / "docs" / "operations.md").read_text()
    assert f"{row} {cap} are tracked already" in operations


def test_the_documented_replay_tokens_per_heartbeat_are_the_codes() -> None:
    from forewarn.protocol.wire import MAX_REPLAY_TOKEN_LENGTH

    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    most = publisher.SUBSCRIPTION_BATCH + 1  # the frame awaited, then the batch taken with it
    assert f"at most {most} of {MAX_REPLAY_TOKEN_LENGTH} characters each" in text


def _ipv6_loopback_port() -> int:
    """A free TCP port on ::1; the test is skipped on a kernel without IPv6."""
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            return int(probe.getsockname()[1])
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")


def test_an_agent_on_ipv6_loopback_serves_events_and_control(tmp_path: Path) -> None:
    """`tcp://[::1]:PORT` passes the endpoint check (loopback) but ZeroMQ binds or connects an
    IPv6 address only on a socket with ZMQ_IPV6 set: the agent exited 2, `cannot bind
    tcp://[::1]:...: No such device`, and neither the CLI nor a raw subscriber could reach it."""
    from support import AgentProcess, agent_env, run_forewarn

    events = f"tcp://[::1]:{_ipv6_loopback_port()}"
    control = f"tcp://[::1]:{_ipv6_loopback_port()}"
    env = agent_env(tmp_path, FOREWARN_EVENTS=events, FOREWARN_CONTROL=control)
    with AgentProcess(tmp_path, env=env):
        watch = subprocess.Popen(
            [*forewarn_cmd("watch", "--json", "--count", "1"), "--timeout", "30"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        raw = zmq.Context.instance().socket(zmq.SUB)
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.IPV6, 1)  # what a client in any language sets for an IPv6 address
        raw.setsockopt(zmq.SUBSCRIBE, b"notice")
        raw.connect(events)
        try:
            notify = run_forewarn("notify", "drain", "--id", "local/v6", env=env)
            assert notify.returncode == 0, notify.stderr
            assert raw.poll(10_000), "no notice on the IPv6 events socket"
            topic, body = raw.recv_multipart()
            assert topic == b"notice" and json.loads(body)["id"] == "local/v6"
            out, err = watch.communicate(timeout=30)
            assert watch.returncode == 0, err
            assert json.loads(out)["id"] == "local/v6"
            status = run_forewarn("status", "--json", env=env)
            assert status.returncode == 0, status.stderr
        finally:
            raw.close()
            if watch.poll() is None:
                watch.kill()
                watch.wait()


def test_a_peer_leaving_a_client_topic_that_is_not_utf8_leaves_the_tracked_client_alone(
    tmp_path: Path,
) -> None:
    """The agent reads a subscription's topic with each byte that is not UTF-8 made U+FFFD.
    A peer of `client/job\\xff` is not counted (no ack can name it), but when it left, its
    unsubscription read as `client/job\\ufffd` removed the tracked client of that name, still
    connected: the notices it had not acked counted as flushed by every client."""
    from support import AgentProcess, eventually

    with AgentProcess(tmp_path) as agent:

        def subscribers() -> int:
            return int(agent.control({"op": "status"})["agent"]["subscribers"])

        context = zmq.Context.instance()
        tracked = context.socket(zmq.SUB)
        stranger = context.socket(zmq.SUB)
        try:
            # The stranger holds a valid id too: both its unsubscriptions are read together
            # when it leaves, so the count is 1 at once, or 0 when the tracked client went too.
            topics = {
                tracked: ["client/job\ufffd".encode()],
                stranger: [b"client/job\xff", b"client/stranger"],
            }
            for sock, subscribed in topics.items():
                sock.setsockopt(zmq.LINGER, 0)
                for topic in (*subscribed, b"heartbeat"):
                    sock.setsockopt(zmq.SUBSCRIBE, topic)
                sock.connect(agent.events)
                assert sock.poll(10_000), "no heartbeat"  # its subscriptions are in place
            eventually(lambda: subscribers() == 2, 10, "the two clients with valid ids")
            stranger.close()
            eventually(lambda: subscribers() < 2, 10, "the stranger gone")
            assert subscribers() == 1
        finally:
            tracked.close()
            stranger.close()


def test_a_control_message_of_many_frames_is_read_between_the_loops_other_work(
    tmp_path: Path,
) -> None:
    """ZeroMQ caps a frame's size, not how many frames one message has: read in one call
    (recv_multipart), two million empty frames held the event loop for seconds, no heartbeat
    nor escalation meanwhile. Read a batch at a time, the loop's other tasks run in between:
    counted here as the ticks of a task beside the read, not timed."""
    frames = 20 * publisher.CONTROL_FRAME_BATCH

    async def read() -> tuple[list[bytes], int, int]:
        sockets = Publisher(f"ipc://{tmp_path}/events", f"ipc://{tmp_path}/control")
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        ticks = 0
        reading = True

        async def beside() -> None:
            nonlocal ticks
            while reading:
                ticks += 1
                await asyncio.sleep(0)

        try:
            sockets.bind()
            dealer.connect(sockets.control_endpoint)
            dealer.send_multipart([b"", *([b"x"] * frames)])
            first = await sockets.router.poll(10_000)  # the whole message is there
            assert first
            ticker = asyncio.get_running_loop().create_task(beside())
            await asyncio.sleep(0)  # the ticker starts
            before = ticks
            sync = zmq.Socket.shadow(sockets.router.underlying)
            kept, dropped = await sockets._receive(sync)
            during = ticks - before
            reading = False
            await ticker
            return kept, dropped, during
        finally:
            dealer.close()
            sockets.close()

    kept, dropped, during = asyncio.run(read())
    assert len(kept) == publisher.MAX_CONTROL_FRAMES
    assert len(kept) + dropped == frames + 2  # the routing id, the empty frame, the rest
    # A pause per batch of frames dropped, 19 here (a read in one call gave the ticker none).
    assert during >= 10, (during, dropped)


def test_two_control_clients_given_one_routing_id_never_get_each_other_s_replies(
    tmp_path: Path,
) -> None:
    """ZeroMQ's ROUTER keeps the first peer of a routing id and refuses a second while the
    first is connected (the agent does not set ROUTER_HANDOVER, which would hand the id, and
    the replies in flight, to the newcomer): the second one's request is never delivered, so
    it is neither answered nor acted on, and the first goes on getting its own answers. Once
    the first has gone, the id is free again."""

    def req() -> zmq.Socket[bytes]:
        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, b"one-id")
        sock.connect(agent.control_endpoint)
        return sock

    with AgentProcess(tmp_path) as agent:
        first = req()
        first.send_json({"op": "status"})
        assert first.poll(5000) and first.recv_json()["ok"]
        second = req()
        second.send_json({"op": "notify", "action": "drain", "id": "local/second"})
        first.send_json({"op": "status"})
        assert first.poll(5000)
        assert "agent" in first.recv_json(), "the first client got another's reply"
        assert not second.poll(500)
        assert agent.control({"op": "status"})["active"] == []
        first.close()
        second.close()

        def answered() -> bool:
            sock = req()
            sock.send_json({"op": "status"})
            try:
                return bool(sock.poll(300))
            finally:
                sock.close()

        eventually(answered, what="the id free once its first peer left", interval=0)
