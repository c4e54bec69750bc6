"""`Event.from_json`: whatever arrives on the notice topic, a valid Event or ValueError."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
from forewarn.clients.event import Event
from hypothesis import given
from hypothesis import strategies as st
from support import wire_notice

VALID = wire_notice(deadline="2026-11-30T03:12:00Z", detail={"action": "terminate"})

# Any JSON value, NaN and the infinities included (Python's json writes and reads them).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
# Strings shaped like RFC 3339 times, with impossible dates and offsets among them.
TIMES = st.from_regex(r"\A\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})\Z")


def check(payload: bytes | str) -> None:
    """ValueError, or an Event every field of which has its declared type."""
    try:
        event = Event.from_json(payload)
    except ValueError:
        return
    for name in ("id", "action", "reason", "provider"):
        assert isinstance(getattr(event, name), str), name
    assert isinstance(event.seq, int) and not isinstance(event.seq, bool)
    for moment in (event.noticed_at, event.sent_at, event.deadline):
        if moment is not None:
            assert isinstance(moment, datetime) and moment.tzinfo == timezone.utc
    assert isinstance(event.detail, dict)
    event.seconds_left  # noqa: B018 - computing it must not raise either


FIELDS = sorted(VALID)


@given(
    st.dictionaries(st.sampled_from(FIELDS), JSON | TIMES, max_size=3),
    st.sets(st.sampled_from(FIELDS), max_size=2),
)
def test_any_json_in_any_field_gives_an_event_or_value_error(
    changed: dict[str, Any], missing: set[str]
) -> None:
    fields = {**VALID, **changed}
    check(json.dumps({name: value for name, value in fields.items() if name not in missing}))


@given(JSON)
def test_any_json_document_gives_an_event_or_value_error(document: Any) -> None:
    check(json.dumps(document))


@given(st.binary())
def test_any_bytes_give_an_event_or_value_error(payload: bytes) -> None:
    check(payload)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (json.dumps({**VALID, "deadline": 5}), "deadline"),
        (json.dumps({**VALID, "noticed_at": None}), "noticed_at"),
        (json.dumps(VALID).replace('"seq": 17', '"seq": 1e400'), "seq"),
        (json.dumps({**VALID, "seq": 1.5}), "seq"),
        (json.dumps({**VALID, "id": ["a"]}), "id"),
        (json.dumps({**VALID, "detail": [1, 2]}), "detail"),
        (json.dumps({**VALID, "sent_at": "9999-12-31T23:59:59-23:59"}), "sent_at"),
        ("[" * 100_000 + "]" * 100_000, "nested"),
        (b"\x80{}", "not JSON"),
    ],
    ids=[
        "int-deadline",
        "null-time",
        "seq-1e400",
        "float-seq",
        "list-id",
        "list-detail",
        "time-past-9999",
        "nested",
        "not-utf8",
    ],
)
def test_a_malformed_notice_raises_value_error_naming_what(
    payload: str | bytes, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        Event.from_json(payload)


def test_a_valid_notice_parses() -> None:
    event = Event.from_json(json.dumps(VALID))
    assert (event.id, event.seq, event.action) == ("aws/spot-itn/1", 17, "terminate")
    assert event.deadline == datetime(2026, 11, 30, 3, 12, tzinfo=timezone.utc)
    assert Event.from_json(json.dumps({**VALID, "deadline": None, "detail": None})).detail == {}
