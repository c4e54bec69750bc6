"""The checked-in JSON Schema is what the protocol module says, and it validates real messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.protocol import schema_text
from hypothesis import example, given
from hypothesis import strategies as st
from support import wire_heartbeat, wire_notice

SCHEMA = Path(__file__).resolve().parent.parent / "clients" / "schema" / "protocol-v1.json"


def test_checked_in_schema_matches_the_protocol() -> None:
    assert SCHEMA.read_text() == schema_text(), (
        "clients/schema/protocol-v1.json is stale: run "
        "`forewarn schema > clients/schema/protocol-v1.json`"
    )


def test_forewarn_schema_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "forewarn.agent.cli", "schema"], capture_output=True, text=True
    )
    assert out.returncode == 0 and json.loads(out.stdout) == json.loads(SCHEMA.read_text())


def test_the_design_example_fits_the_notice_schema() -> None:
    from forewarn.agent.protocol import Notice

    example = {
        "v": 1,
        "id": "aws/spot-itn/1f3c9a",
        "seq": 17,
        "action": "terminate",
        "reason": "spot-interruption",
        "provider": "aws",
        "deadline": "2026-11-30T03:12:00Z",
        "noticed_at": "2026-11-30T03:10:00.120Z",
        "sent_at": "2026-11-30T03:10:00.121Z",
        "detail": {"action": "terminate", "time": "2026-11-30T03:12:00Z"},
    }
    notice = Notice.model_validate(example)
    assert json.loads(notice.model_dump_json()) == example


def test_every_message_of_a_tcp_agent_validates_against_the_checked_in_schema(
    tmp_path: Path,
) -> None:
    """A client in another language validates what it sends and gets against the published
    schema. On tcp:// control every request carries the token, which the request schemas
    forbade (`additionalProperties: false`), so no valid request there could pass."""
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.protocol.wire import TOKEN_FILE
    from support import AgentProcess, Subscriber, agent_env, control, free_port

    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)

    def check(message: dict[str, Any], kind: str) -> None:
        one = jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{kind}"})
        errors = [error.message for error in one.iter_errors(message)]
        assert not errors, (kind, message, errors)
        validator.validate(message)  # and exactly one of the protocol's messages

    endpoint = f"tcp://127.0.0.1:{free_port()}"
    env = agent_env(tmp_path, FOREWARN_CONTROL=endpoint)
    with (
        AgentProcess(tmp_path, env=env) as agent,
        Subscriber(agent.events, ("notice", "heartbeat")).ready() as sub,
    ):
        token = (tmp_path / "run" / TOKEN_FILE).read_text()  # as read: the newline too
        exchanges = [
            ({"op": "status"}, "StatusRequest", "StatusReply"),
            (
                {"op": "notify", "action": "drain", "id": "local/schema", "note": "n"},
                "NotifyRequest",
                "NotifyReply",
            ),
            (
                {
                    "op": "ack",
                    "notice_id": "local/schema",
                    "client": "schema-test",
                    "step": 1200,
                    "flush_seconds": 4.2,
                    "outcome": "saved",
                },
                "AckRequest",
                "AckReply",
            ),
            (
                {
                    "op": "hold",
                    "notice_id": "local/schema",
                    "client": "shell-job",
                    "pid": 1,
                    "pid_start": 0,
                    "pid_namespace": "pid:[4026531836]",
                    "pgid": 1,
                },
                "HoldRequest",
                "HoldReply",
            ),
            ({"op": "clear", "id": "local/schema"}, "ClearRequest", "ClearReply"),
        ]
        for request, request_kind, reply_kind in exchanges:
            sent = {**request, "token": token}
            check(sent, request_kind)
            check(control(endpoint, sent), reply_kind)
        check(control(endpoint, {"op": "status"}), "ErrorReply")  # no token
        seen: set[str] = set()
        while seen != {"notice", "heartbeat"}:
            topic, message = sub.recv(timeout=5.0)
            check(message, topic.capitalize())
            seen.add(topic)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)


@pytest.mark.parametrize(
    "field",
    ["step", "flush_seconds", "stall_seconds", "durable_seconds", "restore_seconds", "steps_lost"],
)
@given(value=JSON_VALUES)
@example(value=True)  # was taken as step 1
@example(value="12")  # was taken as 12
@example(value="4.2")
@example(value=12.0)  # an integer to JSON Schema too
def test_the_agent_takes_an_acks_number_exactly_when_the_schema_does(
    field: str, value: Any
) -> None:
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.agent.protocol import CONTROL_REQUEST
    from pydantic import ValidationError

    schema = json.loads(SCHEMA.read_text())
    ack = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/AckRequest"})
    request = json.loads(json.dumps({"op": "ack", field: value}))  # as it comes off the wire
    try:
        CONTROL_REQUEST.validate_python(request)
        taken = True
    except ValidationError as error:
        taken = False
        assert [problem["loc"] for problem in error.errors()] == [("ack", field)]
    assert taken == ack.is_valid(request), (field, value)


@given(value=JSON_VALUES | st.floats(min_value=0, max_value=4e7))
@example(value=True)
@example(value="900")
@example(value=0)
@example(value=366 * 86400)
@example(value=366 * 86400 + 0.5)
def test_the_agent_takes_a_notifys_deadline_in_exactly_when_the_schema_does(value: Any) -> None:
    """`deadline_in`, a notify's deadline as seconds from the request (`--deadline 15m`)."""
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.agent.protocol import CONTROL_REQUEST
    from pydantic import ValidationError

    schema = json.loads(SCHEMA.read_text())
    notify = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/NotifyRequest"})
    request = json.loads(
        json.dumps({"op": "notify", "action": "drain", "deadline_in": value})
    )  # as it comes off the wire
    try:
        CONTROL_REQUEST.validate_python(request)
        taken = True
    except ValidationError as error:
        taken = False
        assert [problem["loc"][:2] for problem in error.errors()] == [("notify", "deadline_in")]
    assert taken == notify.is_valid(request), value


NOTICE = wire_notice()
HEARTBEAT = wire_heartbeat()
MISSING = object()


@given(version=st.just(MISSING) | JSON_VALUES)
@example(version=MISSING)  # valid to the schema while every reader dropped it
@example(version=True)
@example(version="1")
@example(version=1)
@example(version=1.0)
def test_the_schema_takes_a_version_exactly_when_the_readers_do_but_for_1_0(
    version: Any,
) -> None:
    """`v` is required and the integer 1, for the schema as for the readers. JSON Schema has
    one number 1, of which `1.0` is a spelling, so the schema cannot refuse `1.0`; its
    description says that forewarn's readers do."""
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.clients.event import Event
    from forewarn.clients.notices import parse_heartbeat

    schema = json.loads(SCHEMA.read_text())
    for kind, message in (("Notice", NOTICE), ("Heartbeat", HEARTBEAT)):
        assert schema["$defs"][kind]["properties"]["v"]["type"] == "integer"
        assert schema["$defs"][kind]["properties"]["v"]["const"] == 1
        assert "`1.0` included" in schema["$defs"][kind]["properties"]["v"]["description"]
        one = jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{kind}"})
        sent = {name: value for name, value in message.items() if name != "v"}
        if version is not MISSING:
            sent["v"] = version
        text = json.dumps(sent)
        try:
            if kind == "Notice":
                Event.from_json(text)
            else:
                parse_heartbeat(text.encode())
            read = True
        except ValueError:
            read = False
        spelled_1_0 = type(version) is float and version == 1
        assert one.is_valid(json.loads(text)) == (read or spelled_1_0), (kind, text)


@given(
    notice_id=st.text(max_size=12)
    | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7F), max_size=210).map(
        lambda rest: "local/" + rest
    )
    | st.sampled_from(["aws/spot-itn/1f3c9a", "drill-1", "..."])
)
@example(notice_id="...")  # the README's placeholder: valid to the schema, refused
@example(notice_id="local/drill")
@example(notice_id="local/a b")
@example(notice_id="aws/x")
@example(notice_id="local/" + "x" * 194)
@example(notice_id="local/" + "x" * 195)
def test_the_schema_takes_a_notify_id_exactly_when_the_agent_does(notice_id: str) -> None:
    """The schema said any id of 1 to 200 characters; the agent takes `local/` and printable
    ASCII without spaces alone, so a request the schema passed was refused."""
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.agent.limits import id_problem

    schema = json.loads(SCHEMA.read_text())
    notify = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/NotifyRequest"})
    # JSON Schema's patterns are ECMA-262's, whose `$` is the end of the text; Python's `re`,
    # which this validator uses, also matches `$` before a final newline.
    if notice_id.endswith("\n"):
        return
    request = {"op": "notify", "action": "drain", "id": notice_id}
    assert notify.is_valid(request) == (id_problem(notice_id, "local") is None), notice_id


@given(name=st.text(min_size=1, max_size=20), value=JSON_VALUES)
@example(name="stall_seconds", value=12)  # an optional field a newer agent may add
def test_the_schema_takes_an_unknown_event_field_as_the_readers_do(name: str, value: Any) -> None:
    """Within v1 a newer agent may add an optional field to an event, and the readers ignore
    it. The schema said `additionalProperties: false` for Notice and Heartbeat: a client in
    another language validating against it dropped every message of such an agent. The
    agent's own models stay strict: it publishes no field this schema does not list."""
    import jsonschema  # installed with kubernetes-validate, a test extra
    from forewarn.agent.protocol import Heartbeat, Notice
    from forewarn.clients.event import Event
    from forewarn.clients.notices import parse_heartbeat
    from pydantic import ValidationError

    schema = json.loads(SCHEMA.read_text())
    for kind, message, model in (("Notice", NOTICE, Notice), ("Heartbeat", HEARTBEAT, Heartbeat)):
        if name in message or name in schema["$defs"][kind]["properties"]:
            continue
        one = jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{kind}"})
        sent = {**message, name: value}
        text = json.dumps(sent)
        if kind == "Notice":
            Event.from_json(text)
        else:
            parse_heartbeat(text.encode())
        assert one.is_valid(sent), (kind, text, [e.message for e in one.iter_errors(sent)])
        # Still the protocol's message: a required field missing is refused as before.
        assert not one.is_valid({key: item for key, item in sent.items() if key != "seq"})
        with pytest.raises(ValidationError):
            model.model_validate(sent)
