"""An ack to an agent older than the client: the agent image and the training image are
upgraded apart (a DaemonSet, a sidecar image pinned, a systemd agent on the machine), so the
client library is often newer than the agent it talks to.

An agent before 0b9022d refused a background save's ack whole ('bad request: stall_seconds:
Extra inputs are not permitted; durable_seconds: ...'): its flush seconds never reached the
agent, whose exit margin then stayed at its floor, so a drain of a job whose save takes
minutes became a terminate too late for the save. The client sends the ack again without the
fields the agent named, once, and says so once.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from forewarn.clients.notices import Notices
from hypothesis import given, settings
from hypothesis import strategies as st
from support import eventually, examples
from test_notices import FakeAgent

# The fields of an ack an agent of 2026-12-01 took (9326c6f's AckRequest).
OLD_ACK_FIELDS = {
    "op",
    "notice_id",
    "client",
    "step",
    "flush_seconds",
    "outcome",
    "note",
    "restore_seconds",
    "steps_lost",
}


class OlderAgent(FakeAgent):
    """Answers each request as that agent did: an ack with a field it does not know is
    refused, naming each such field as pydantic did."""

    def __init__(self, directory: Path) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__(directory)

    def _answer(self) -> None:
        while not self._stop.is_set():
            if self._rep.poll(50):
                request = json.loads(self._rep.recv())
                with self._lock:
                    self.requests.append(request)
                extra = [key for key in request if key not in OLD_ACK_FIELDS]
                if request.get("step", 0) < 0:
                    error = "step: Input should be greater than or equal to 0"
                    reply = {"ok": False, "error": f"bad request: {error}"}
                elif extra:
                    error = "; ".join(f"{key}: Extra inputs are not permitted" for key in extra)
                    reply = {"ok": False, "error": f"bad request: {error}"}
                else:
                    reply = {"ok": True}
                self._rep.send(json.dumps(reply).encode())

    def acks(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(request) for request in self.requests]


def test_a_background_saves_ack_reaches_an_older_agent_with_its_flush_seconds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = OlderAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5)
        ack = {"step": 7, "flush_seconds": 95.0, "stall_seconds": 2.0, "durable_seconds": 95.0}
        assert notices.ack("aws/i-1/spot", **ack, wait=True)
        first, again = agent.acks()
        assert first["stall_seconds"] == 2.0
        assert again == {
            "op": "ack",
            "client": notices.client_id,
            "outcome": "saved",
            "notice_id": "aws/i-1/spot",
            "step": 7,
            "flush_seconds": 95.0,
        }
        # The next one too, and the agent's age is said once.
        assert notices.ack("aws/i-1/spot", **ack, wait=True)
        said = [r.getMessage() for r in caplog.records if "older" in r.getMessage()]
        assert len(said) == 1 and "stall_seconds" in said[0], said
    finally:
        notices.close(ack_timeout=0.5)
        agent.close()


def test_an_ack_refused_for_another_reason_is_not_sent_again(tmp_path: Path) -> None:
    agent = OlderAgent(tmp_path)
    notices = Notices(agent.endpoint, agent.control)
    try:
        agent.subscribed()
        agent.beat()
        assert eventually(lambda: notices.alive, timeout=5)
        # A value the agent refuses is no field it does not know: nothing to leave out.
        assert not notices.ack("aws/i-1/spot", step=-1, wait=True)
        assert len(agent.acks()) == 1
    finally:
        notices.close(ack_timeout=0.5)
        agent.close()


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.sampled_from(["stall_seconds", "durable_seconds", "choice", "op", "client"]))
    | st.text(max_size=80).map(lambda text: [text]),
    st.text(max_size=40),
)
def test_only_fields_an_agent_named_as_unknown_are_left_out(named: list[str], prefix: str) -> None:
    from forewarn.clients.notices import fields_refused_as_unknown

    unknown = "; ".join(f"{key}: Extra inputs are not permitted" for key in named)
    error = f"{prefix}: {unknown}"  # as the agent writes it: `bad request: ...`
    payload = {"op": "ack", "client": "c", "stall_seconds": 1.0, "durable_seconds": 2.0}
    refused = fields_refused_as_unknown(error, payload)
    assert "op" not in refused and refused <= set(payload)
    assert refused <= set(named) | {key for key in payload if key in prefix}
    assert refused >= (set(named) & set(payload)) - {"op"}
