"""The contract is defined once, in `forewarn.protocol`: the agent's pydantic models, the
watchers' `Report`, the client's `Event` and the checked-in JSON Schema all agree with it."""

from __future__ import annotations

import dataclasses
import json
import pkgutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, get_args

import forewarn.protocol as protocol
import pytest
from forewarn.agent.protocol import Heartbeat, Notice, NotifyRequest
from forewarn.clients.event import Event
from forewarn.protocol.timefmt import format_time, time_or_none
from forewarn.providers.report import Report
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import wire_heartbeat, wire_notice

SCHEMA = Path(__file__).resolve().parent.parent / "clients" / "schema" / "protocol-v1.json"


def test_agent_notice_has_exactly_the_protocol_fields_in_order() -> None:
    assert tuple(Notice.model_fields) == protocol.NOTICE_FIELDS


def test_heartbeat_has_exactly_the_protocol_fields() -> None:
    assert tuple(Heartbeat.model_fields) == protocol.HEARTBEAT_FIELDS


def test_client_event_carries_every_notice_field_but_the_version() -> None:
    names = tuple(field.name for field in dataclasses.fields(Event))
    assert names == tuple(name for name in protocol.NOTICE_FIELDS if name != "v")


def test_report_is_a_notice_without_what_the_agent_stamps() -> None:
    stamped = {"v", "seq", "sent_at"}
    expected = tuple(name for name in protocol.NOTICE_FIELDS if name not in stamped)
    # `until` (the end of the provider's window), `deadline_is_duration` (a flag file's
    # `5m`, kept on the boot clock) and `deadline_on_boot_clock` (a GCP stop, kept there by
    # its watcher) are for the agent's board alone: not sent.
    extra = ("until", "deadline_is_duration", "deadline_on_boot_clock")
    assert tuple(Report.model_fields) == (*expected, *extra)


def test_actions_and_reasons_are_the_ones_every_model_accepts() -> None:
    for model in (Notice, Report):
        assert get_args(model.model_fields["action"].annotation) == protocol.ACTIONS
        assert get_args(model.model_fields["reason"].annotation) == protocol.REASONS
    assert get_args(NotifyRequest.model_fields["reason"].annotation) == protocol.REASONS


def test_schema_names_the_same_fields_actions_and_reasons() -> None:
    schema = json.loads(SCHEMA.read_text())
    notice = schema["$defs"]["Notice"]
    # The schema is written with sorted keys, so the order is not compared here.
    assert set(notice["properties"]) == set(protocol.NOTICE_FIELDS)
    assert set(schema["$defs"]["Heartbeat"]["properties"]) == set(protocol.HEARTBEAT_FIELDS)
    assert tuple(notice["properties"]["action"]["enum"]) == protocol.ACTIONS
    assert tuple(notice["properties"]["reason"]["enum"]) == protocol.REASONS


def test_a_notice_round_trips_from_agent_to_client() -> None:
    notice = Notice(
        id="aws/spot-itn/1",
        seq=3,
        action="terminate",
        reason="spot-interruption",
        provider="aws",
        deadline=protocol.parse_time("2026-11-30T03:12:00Z"),
        noticed_at=protocol.parse_time("2026-11-30T03:10:00.120Z"),
        sent_at=protocol.parse_time("2026-11-30T03:10:00.121Z"),
        detail={"action": "terminate"},
    )
    event = Event.from_json(notice.model_dump_json())
    for name in protocol.NOTICE_FIELDS:
        if name != "v":
            assert getattr(event, name) == getattr(notice, name), name


def test_a_deadline_before_year_1000_reaches_the_client() -> None:
    # Go's zero time, which an IMDS stand-in or a provider's bug can send as the action time:
    # published as "1-01-01T00:00:00Z", every client dropped the terminate as malformed.
    zero = protocol.parse_time("0001-01-01T00:00:00Z")
    notice = Notice(
        id="aws/spot-itn/1",
        seq=3,
        action="terminate",
        reason="spot-interruption",
        provider="aws",
        deadline=zero,
        noticed_at=zero,
        sent_at=protocol.parse_time("0999-12-31T23:59:59.5Z"),
    )
    payload = json.loads(notice.model_dump_json())
    assert payload["deadline"] == "0001-01-01T00:00:00Z"
    assert payload["sent_at"] == "0999-12-31T23:59:59.500Z"
    event = Event.from_json(notice.model_dump_json())
    assert event.deadline == zero


NOTICE = wire_notice(seq=3)
HEARTBEAT = wire_heartbeat(
    seq=3, agent="node-1", version="0.0.0", sent_at="2026-11-30T03:10:00.121Z"
)
# Anything JSON holds but the integer 1: the values equal to 1 in Python (true, 1.0) most of all.
NOT_ONE = st.one_of(
    st.just(True),
    st.just(1.0),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
).filter(lambda value: not (type(value) is int and value == 1))


def _refused_naming_v(model: Any, payload: str) -> None:
    with pytest.raises(ValidationError) as raised:
        model.model_validate_json(payload)
    assert [error["loc"] for error in raised.value.errors()] == [("v",)]


@given(NOT_ONE)
@example(True)
@example(1.0)
def test_a_version_other_than_the_integer_1_is_refused_naming_v(version: Any) -> None:
    notice = json.dumps({**NOTICE, "v": version})
    with pytest.raises(ValueError, match="field 'v' must be the integer 1"):
        Event.from_json(notice)
    _refused_naming_v(Notice, notice)
    _refused_naming_v(Heartbeat, json.dumps({**HEARTBEAT, "v": version}))
    # A state file's notices are read as Python objects, not JSON.
    with pytest.raises(ValidationError):
        Notice.model_validate({**NOTICE, "v": version})


def test_the_integer_1_is_protocol_v1_on_both_sides() -> None:
    assert Event.from_json(json.dumps(NOTICE)).id == NOTICE["id"]
    assert Notice.model_validate_json(json.dumps(NOTICE)).v == 1
    assert Heartbeat.model_validate_json(json.dumps(HEARTBEAT)).v == 1
    with pytest.raises(ValueError, match="field 'v' must be the integer 1, got missing"):
        Event.from_json(json.dumps({name: NOTICE[name] for name in NOTICE if name != "v"}))


def test_importing_the_protocol_loads_no_third_party_module() -> None:
    code = (
        "import sys, forewarn.protocol\n"
        "heavy = [m for m in ('pydantic', 'zmq', 'httpx') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_is_pinned() -> None:
    assert protocol.__all__ == sorted(protocol.__all__, key=lambda n: (not n.isupper(), n))
    exported = {name for name in dir(protocol) if not name.startswith("_")}
    modules = {module.name for module in pkgutil.iter_modules(protocol.__path__)}
    assert exported - modules == set(protocol.__all__)


@given(st.text(max_size=260))
@example("")
@example("x" * 200)
@example("x" * 201)
@example("job\x7f")
@example("job\ud800")
@example("host/4242/ab12cd")
def test_a_client_id_is_taken_by_the_client_exactly_when_the_agent_takes_it(client: str) -> None:
    """A client cannot import the agent, so it checks its `client_id` with the contract's
    rule; the agent checks an ack's `client` with its models. Apart, a client took an id the
    agent refused (every ack) or a subscription ZeroMQ drops (the client reconnected in a loop).
    A lone surrogate the agent's model would take, but the client cannot send it."""
    from forewarn.agent.protocol import client_id_problem as agent_problem
    from forewarn.protocol.wire import client_id_problem as wire_problem

    taken = wire_problem(client) is None
    if taken:
        assert agent_problem(client) is None, client
        assert len(b"\x01client/" + client.encode()) <= 1024  # the agent's subscription cap
    elif agent_problem(client) is None:
        assert "surrogate" in str(wire_problem(client)), client


_WRITTEN_TIMES = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(timezone.utc)
).map(lambda moment: moment.replace(microsecond=moment.microsecond // 1000 * 1000))


@given(
    st.one_of(
        st.text(max_size=60),
        st.integers(),
        st.none(),
        st.floats(),
        st.lists(st.text(max_size=5), max_size=3),
        _WRITTEN_TIMES.map(format_time),
    )
)
def test_a_peer_time_field_reads_as_a_time_or_none_never_an_error(value: object) -> None:
    """A heartbeat's `sent_at` in any shape is a time or None, never an exception in the
    client's reader thread."""
    read = time_or_none(value)
    assert read is None or read.tzinfo is not None


@given(_WRITTEN_TIMES)
def test_a_time_written_by_the_agent_reads_back_as_itself(moment: datetime) -> None:
    assert time_or_none(format_time(moment)) == moment


@pytest.mark.parametrize("offset", ["+01:75", "+0175", "-00:60", "+24:00", "+25:00", "-99:99"])
def test_a_time_whose_offset_is_out_of_range_is_refused_naming_it(offset: str) -> None:
    # `+01:75` was read as +02:15 (a deadline 75 minutes off), `+25:00` refused in
    # timedelta's repr.
    text = f"2026-12-06T10:00:00{offset}"
    with pytest.raises(ValueError, match="UTC offset") as refused:
        protocol.parse_time(text)
    assert text in str(refused.value) and "timedelta" not in str(refused.value)


@given(st.integers(0, 99), st.integers(0, 99), st.sampled_from(["+", "-"]), st.booleans())
def test_an_offset_is_read_as_written_or_refused(
    hours: int, minutes: int, sign: str, colon: bool
) -> None:
    offset = f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"
    try:
        moment = protocol.parse_time(f"2026-06-15T12:00:00{offset}")
    except ValueError as error:
        assert hours > 23 or minutes > 59, error
        return
    assert hours <= 23 and minutes <= 59
    east = (hours * 60 + minutes) * (1 if sign == "+" else -1)
    assert moment == datetime(2026, 6, 15, 12, tzinfo=timezone.utc) - timedelta(minutes=east)
