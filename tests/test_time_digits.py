"""RFC 3339 times in digits other than 0-9: `parse_time`'s pattern was `\\d`, which takes
Arabic-Indic and full-width digits, so every reader of a peer's time (the flag file, a control
request's deadline, a client reading the agent's events) read `٢٠٢٦-...` as a time, while a
duration or a whole number in the same digits was refused by name. Each time reader now refuses
them the same way."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from forewarn.agent.protocol import NotifyRequest
from forewarn.clients.event import Event
from forewarn.protocol.flagfile import unread_deadline
from forewarn.protocol.timefmt import format_time, parse_deadline, parse_time
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import wire_notice

SAID = "has digits other than 0-9"
# Decimal digits that are not 0-9: int() reads each, `\d` matched each.
ODD_DIGITS = st.characters(categories=("Nd",)).filter(lambda char: not char.isascii())
MOMENTS = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.just(timezone.utc),
)


@st.composite
def _odd_times(draw: st.DrawFn) -> str:
    """An RFC 3339 time with one or more of its digits written in another script's."""
    text = format_time(draw(MOMENTS))
    places = [index for index, char in enumerate(text) if char.isdigit()]
    chosen = draw(st.sets(st.sampled_from(places), min_size=1))
    return "".join(draw(ODD_DIGITS) if index in chosen else char for index, char in enumerate(text))


@pytest.mark.parametrize(
    "text",
    [
        "\u0662\u0660\u0662\u0666-\u0661\u0662-\u0660\u0666T08:00:00Z",  # Arabic-Indic
        "\uff12\uff10\uff12\uff16-12-06T08:00:00Z",  # full-width
        "2026-12-06T08:00:0\u0660Z",  # one digit of another script
    ],
)
def test_a_time_in_other_digits_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=SAID):
        parse_time(text)


@given(text=_odd_times())
def test_every_time_reader_refuses_other_digits_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=SAID):
        parse_time(text)
    with pytest.raises(ValueError, match=SAID):
        parse_deadline(text)
    # The flag file: a drain with its first line named as no deadline, and why.
    written = datetime.now(timezone.utc)
    assert SAID in str(unread_deadline(text, written, written))
    # A control request's deadline (`notify`).
    with pytest.raises(ValidationError, match=SAID):
        NotifyRequest.model_validate({"op": "notify", "action": "drain", "deadline": text})
    # A client reading the agent's events.
    with pytest.raises(ValueError, match=f"notice field 'deadline': .*{SAID}"):
        Event.from_json(json.dumps(wire_notice(deadline=text)))


@given(moment=MOMENTS, offset=st.integers(-23 * 60 - 59, 23 * 60 + 59))
def test_a_time_in_the_digits_0_9_still_reads(moment: datetime, offset: int) -> None:
    zone = timezone(timedelta(minutes=offset))
    text = moment.astimezone(zone).isoformat(timespec="milliseconds")
    assert parse_time(text) == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
