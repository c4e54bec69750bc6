"""Control requests whose text the agent writes into its log lines (an ack's notice id, client
and note; a clear's id) are one line: a newline would forge a log line."""

from __future__ import annotations

from typing import Any

import pytest
from forewarn.agent.protocol import CONTROL_REQUEST
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic import ValidationError

FIELDS = [
    ("ack", "notice_id", 200),
    ("ack", "client", 200),
    ("ack", "note", 500),
    ("clear", "id", 200),
]


def _accepted(request: dict[str, Any]) -> bool:
    try:
        CONTROL_REQUEST.validate_python(request)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("op", "field", "limit"), FIELDS)
@given(text=st.text(max_size=40))
@example(text="trainer-0\n2026-12-01 12:00:00 INFO forewarn.agent: forged")
@example(text="local/a\r")
@example(text="\x1b[2J")
@example(text="trainer-0 on gpu-node é")
def test_a_text_field_is_accepted_exactly_when_it_is_one_line(
    op: str, field: str, limit: int, text: str
) -> None:
    one_line = not any(ord(char) < 0x20 or ord(char) == 0x7F for char in text)
    assert _accepted({"op": op, field: text}) == (one_line and len(text) <= limit)


@pytest.mark.parametrize(("op", "field", "limit"), FIELDS)
def test_the_refusal_names_the_field_and_says_why(op: str, field: str, limit: int) -> None:
    with pytest.raises(ValidationError) as refused:
        CONTROL_REQUEST.validate_python({"op": op, field: "a\nb"})
    (problem,) = refused.value.errors()
    assert problem["loc"] == (op, field)
    assert "one line of text, without control characters" in problem["msg"]
