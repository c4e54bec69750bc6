"""A control request of protocol v1 with a field this agent does not know: a client newer than
the agent (a library upgraded in the job's image, the agent on the node left as it was) added
it. It is ignored and logged once, unless it is `v` (a later protocol's request) or looks like
a misspelling of a field the agent knows, which is refused as before."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import AgentProcess


def test_an_ack_with_a_field_from_a_newer_client_is_taken_with_what_the_agent_knows(
    tmp_path,
):
    """The ack of a background save from a newer library, refused whole: its flush_seconds
    never reached the agent, whose exit margin stayed at its floor."""
    with AgentProcess(tmp_path) as agent:
        notice = agent.control({"op": "notify", "action": "drain"})["notice"]
        ack = {
            "op": "ack",
            "notice_id": notice["id"],
            "client": "newer",
            "flush_seconds": 95,
            "upload_bytes_per_second": 1.5e9,  # a field of a later library
        }
        assert agent.control(ack) == {"ok": True}
        assert agent.control({**ack, "upload_bytes_per_second": 2}) == {"ok": True}
        status = agent.control({"op": "status"})
        assert status["acked_by"] == {notice["id"]: ["newer"]}
        for refused, said in (
            ({"op": "status", "v": 1}, "v: not a field of a status request"),
            (
                {**ack, "outcom": "failed"},
                "outcom: not a field of an ack request (did you mean outcome?)",
            ),
        ):
            reply = agent.control(refused)
            assert reply == {"ok": False, "error": f"bad request: {said}"}, reply
    log = agent.output()
    assert log.count("upload_bytes_per_second") == 1, log
    assert "ignored the field upload_bytes_per_second of an ack request" in log


def test_names_ignored_are_logged_up_to_a_bound(caplog: pytest.LogCaptureFixture):
    from forewarn.agent.requestfields import UnknownFields

    fields = UnknownFields()
    with caplog.at_level(logging.INFO):
        for index in range(200):
            assert fields.strip({"op": "status", f"x{index}\n": 1}) == {"op": "status"}
    assert len(caplog.records) == fields.LOGGED + 1
    assert all("\n" not in record.getMessage() for record in caplog.records)
    assert "further ones are not logged" in caplog.text


@given(st.dictionaries(st.text(max_size=12), st.integers() | st.text(max_size=4), max_size=6))
def test_what_is_stripped_is_unknown_and_what_is_kept_is_the_models_or_refused(raw: dict):
    from forewarn.agent.requestfields import UnknownFields

    fields = UnknownFields()
    for op in ("status", "notify", "clear", "ack", "hold", "other", None):
        request = {**raw, "op": op} if op is not None else raw
        kept = fields.strip(request)
        assert set(kept) <= set(request)
        for key in set(request) - set(kept):
            assert key not in fields.known(op) and key != "v"


def test_a_hold_is_read_as_the_other_requests_are(tmp_path):
    """`hold` (`forewarn wait --client`) came after the ops' tables: a hold with a field of a
    newer `forewarn wait` was refused whole (the loop's hold lost), a misspelled field got no
    hint, and a request with a bad op listed every op but `hold`."""
    with AgentProcess(tmp_path) as agent:
        notice = agent.control({"op": "notify", "action": "terminate", "deadline_in": 600})
        hold = {"op": "hold", "notice_id": notice["notice"]["id"], "client": "loop"}
        reply = agent.control({**hold, "later_field": 1})
        assert reply["ok"] and reply["held"] is True, reply
        reply = agent.control({**hold, "clent": "loop"})
        assert (
            reply["ok"] is False
            and "clent: not a field of a hold request (did you mean client?)" in reply["error"]
        ), reply
        reply = agent.control({"op": "HOLD"})
        assert reply == {
            "ok": False,
            "error": "bad request: op: expected one of 'status', 'notify', 'clear', 'ack', "
            "'hold', got \"HOLD\"",
        }, reply
    assert "ignored the field later_field of a hold request" in agent.output()


def test_every_op_the_agent_reads_is_named_in_its_refusal():
    from typing import get_args

    from forewarn.agent.protocol import ControlRequest
    from forewarn.agent.requesterrors import OPS

    models = get_args(get_args(ControlRequest)[0])
    ops = {get_args(model.model_fields["op"].annotation)[0] for model in models}
    assert set(OPS) == ops
