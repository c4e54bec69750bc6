"""The agent asking itself: one `status` request on its own control endpoint, as a client
would send it. A control task that is alive but answers nobody (its socket file removed, a
request handler stuck) looks healthy from inside; only a request from outside the loop
that serves it shows it."""

from __future__ import annotations

import json

import zmq
import zmq.asyncio

PROBE_REQUEST = json.dumps({"op": "status"}).encode()


async def control_answers(
    context: zmq.asyncio.Context, endpoint: str, timeout: float, token: str | None = None
) -> bool:
    """True when `endpoint` answers a status request with an ok reply within `timeout`;
    `token`, the control token when the endpoint needs one (a refusal is not an answer)."""
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        probe = {"op": "status", "token": token} if token is not None else None
        await sock.send(PROBE_REQUEST if probe is None else json.dumps(probe).encode())
        if not await sock.poll(int(timeout * 1000)):  # POLLIN by default
            return False
        reply = json.loads(await sock.recv())
        return isinstance(reply, dict) and reply.get("ok") is True
    except (zmq.ZMQError, ValueError):
        return False
    finally:
        sock.close(linger=0)


__all__ = ["PROBE_REQUEST", "control_answers"]
