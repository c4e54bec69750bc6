"""The ages `forewarn wait` reads from the agent's status (`cli._status_ages`): how long ago
each notice was noticed, on the boot clock."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import zmq
from forewarn.agent import cli

REPLY = {
    "ok": True,
    "agent": {},
    "active": [
        {"id": "aws/first", "noticed_at": "2026-12-05T10:09:58Z"},
        {"id": "aws/again", "noticed_at": "2026-12-05T10:00:00Z"},
    ],
    "ages": {"aws/first": 2.0, "aws/again": 2.0},
    # Retired past its deadline and raised again 10 min after it was first noticed.
    "raised": {"aws/again": "2026-12-05T10:10:00Z"},
}


def _answer_once(socket: Any, reply: dict[str, Any]) -> None:
    if socket.poll(10_000):
        socket.recv()
        socket.send(json.dumps(reply).encode())


def test_a_notice_raised_again_is_aged_from_its_noticed_at(tmp_path: Path) -> None:
    """The agent ages a notice from its raise, and one raised again after it expired keeps
    its first `noticed_at`: read as is, a terminate an earlier job acted on, raised again
    after a `wait` began, was taken for one raised since, and `wait --for terminate && kill
    "$JOB"` killed a job the library lets train on."""
    endpoint = f"ipc://{tmp_path}/control"
    rep = zmq.Context.instance().socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    rep.bind(endpoint)
    answering = threading.Thread(target=_answer_once, args=(rep, REPLY), daemon=True)
    answering.start()
    try:
        ages = cli._status_ages(endpoint, tmp_path)
    finally:
        answering.join(timeout=10)
        rep.close()
    assert ages == {"aws/first": 2.0, "aws/again": 602.0}
