"""The control self-probe keeps one connection while control answers, and still sees what a
client arriving now would meet: a socket file removed or replaced, a handler that never
answers, a refusal."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import zmq
import zmq.asyncio
from forewarn.agent.selfprobe import ControlProbe, answered_ok
from hypothesis import example, given
from hypothesis import strategies as st
from support import free_port

TIMEOUT = 0.3


@asynccontextmanager
async def control(
    context: zmq.asyncio.Context, endpoint: str, reply: dict[str, object] | None
) -> AsyncIterator[list[dict[str, object]]]:
    """A REP socket on `endpoint` answering every request with `reply` (None: never)."""
    seen: list[dict[str, object]] = []
    sock = context.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)

    async def serve() -> None:
        while True:
            seen.append(json.loads(await sock.recv()))
            if reply is None:
                await asyncio.Event().wait()
            await sock.send(json.dumps(reply).encode())

    task = asyncio.create_task(serve())
    try:
        yield seen
    finally:
        task.cancel()
        sock.close(linger=0)


async def test_a_kept_connection_serves_every_probe_while_control_answers(
    tmp_path: Path,
) -> None:
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/control"
    probe = ControlProbe(context, endpoint)
    async with control(context, endpoint, {"ok": True}) as seen:
        assert all([await probe.answers(TIMEOUT) for _ in range(5)])
    probe.close()
    context.term()
    assert probe.connects == 1
    assert seen == [{"op": "status"}] * 5


async def test_a_removed_socket_file_fails_the_probe_although_the_kept_connection_works(
    tmp_path: Path,
) -> None:
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/control"
    probe = ControlProbe(context, endpoint)
    async with control(context, endpoint, {"ok": True}):
        assert await probe.answers(TIMEOUT)
        (tmp_path / "control").unlink()  # the listener lives on; new clients cannot reach it
        assert not await probe.answers(TIMEOUT)
        assert not await probe.answers(TIMEOUT)
    probe.close()
    context.term()


async def test_a_replaced_socket_file_is_probed_on_a_new_connection(tmp_path: Path) -> None:
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/control"
    probe = ControlProbe(context, endpoint)
    async with control(context, endpoint, {"ok": True}) as first:
        assert await probe.answers(TIMEOUT)
        (tmp_path / "control").unlink()
        async with control(context, endpoint, {"ok": True}) as second:
            assert await probe.answers(TIMEOUT)
    probe.close()
    context.term()
    assert probe.connects == 2
    assert len(first) == 1 and len(second) == 1


async def test_an_unanswered_or_refused_request_drops_the_connection(tmp_path: Path) -> None:
    context = zmq.asyncio.Context()
    probe = ControlProbe(context, f"ipc://{tmp_path}/stuck")
    async with control(context, f"ipc://{tmp_path}/stuck", None):
        assert not await probe.answers(TIMEOUT)
        # REQ cannot send twice without an answer: the next probe needs its own socket.
        assert not await probe.answers(TIMEOUT)
    assert probe.connects == 2
    refused = ControlProbe(context, f"ipc://{tmp_path}/refusing")
    async with control(context, f"ipc://{tmp_path}/refusing", {"ok": False, "error": "token"}):
        assert not await refused.answers(TIMEOUT, token="wrong")
        assert not await refused.answers(TIMEOUT, token="wrong")
    assert refused.connects == 2
    probe.close()
    refused.close()
    context.term()


async def test_a_tcp_endpoint_is_probed_with_its_token() -> None:
    context = zmq.asyncio.Context()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    probe = ControlProbe(context, endpoint)
    async with control(context, endpoint, {"ok": True}) as seen:
        assert await probe.answers(TIMEOUT, token="t0k")
        assert await probe.answers(TIMEOUT, token="t0k")
    probe.close()
    context.term()
    assert probe.connects == 1
    assert seen == [{"op": "status", "token": "t0k"}] * 2


NESTED = b"[" * 100_000 + b"]" * 100_000  # json.loads raises RecursionError, not ValueError


@given(st.binary(max_size=64))
@example(NESTED)
@example(b'{"ok": true}')
@example(b'{"ok": 1}')
@example(b"\xff\xfe")
def test_a_reply_is_an_answer_only_as_an_ok_object(raw: bytes) -> None:
    try:
        reply = json.loads(raw)
    except (ValueError, RecursionError):
        reply = None
    assert answered_ok(raw) is (isinstance(reply, dict) and reply.get("ok") is True)


async def test_a_reply_nested_past_the_parser_fails_the_probe_without_raising(
    tmp_path: Path,
) -> None:
    context = zmq.asyncio.Context()
    endpoint = f"ipc://{tmp_path}/nested"
    sock = context.socket(zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)

    async def serve() -> None:
        while True:
            await sock.recv()
            await sock.send(NESTED)

    task = asyncio.create_task(serve())
    probe = ControlProbe(context, endpoint)
    try:
        assert not await probe.answers(TIMEOUT)
        assert not await probe.answers(TIMEOUT)
        assert probe.connects == 2  # the connection that carried it is dropped
    finally:
        task.cancel()
        probe.close()
        sock.close(linger=0)
        context.term()
