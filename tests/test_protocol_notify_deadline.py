"""A notify's deadline fields (`forewarn notify`, `forewarn.testing`, the reclaim drill), and
what is sent again to an agent older than `deadline_in`, whatever its reply holds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from forewarn.protocol.notifydeadline import (
    NO_DEADLINE_IN,
    deadline_fields,
    for_an_older_agent,
    seconds_fields,
)
from forewarn.protocol.timefmt import parse_time, utcnow
from hypothesis import given
from hypothesis import strategies as st

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=60),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
NOTIFY = {"op": "notify", "action": "drain", "id": "local/manual/1", "deadline": "x"}


@given(reply=st.dictionaries(st.sampled_from(["ok", "error", "notice"]), _JSON) | _JSON)
def test_only_an_older_agents_refusal_sends_the_notify_again(reply: Any) -> None:
    """Any reply: never an error; sent again, without `deadline_in` and otherwise the same,
    only for the older agent's refusal of the field."""
    payload = {**NOTIFY, "deadline_in": 900.0}
    if not isinstance(reply, dict):
        reply = {"ok": False, "error": reply}
    again = for_an_older_agent(payload, reply)
    refused = reply.get("ok") is not True and str(reply.get("error")).startswith(NO_DEADLINE_IN)
    assert (again is not None) == refused
    if again is not None:
        assert again == NOTIFY
    assert for_an_older_agent(NOTIFY, reply) is None  # nothing to drop


@given(text=st.text(max_size=30))
def test_deadline_fields_take_a_duration_or_a_time_and_refuse_the_rest_by_name(
    text: str,
) -> None:
    try:
        fields = deadline_fields(text)
    except ValueError as error:
        assert str(error)
        return
    assert set(fields) <= {"deadline", "deadline_in"}
    parse_time(fields["deadline"])
    if "deadline_in" in fields:
        assert isinstance(fields["deadline_in"], float)


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900.0), ("90s", 90.0), ("1h30m", 5400.0)])
def test_a_duration_goes_as_its_seconds_beside_the_time_it_comes_to(
    text: str, seconds: float
) -> None:
    now = utcnow().replace(microsecond=0)
    fields = deadline_fields(text, now)
    assert fields["deadline_in"] == seconds
    assert parse_time(fields["deadline"]) == now + timedelta(seconds=seconds)
    assert seconds_fields(seconds, now) == fields


def test_a_time_goes_as_that_time_alone() -> None:
    assert deadline_fields("2026-12-05T23:00:00Z") == {"deadline": "2026-12-05T23:00:00Z"}
