"""The syntax of notice ids: what a control client or a watcher may name a notice."""

from __future__ import annotations

import pytest
from forewarn.agent.limits import MAX_ID_LENGTH, id_problem
from hypothesis import example, given
from hypothesis import strategies as st

# Mostly near-valid ids (a provider, a slash, a name), with any character appended or inserted.
_NEAR_IDS = st.builds(
    lambda provider, name, extra, at_end: (
        f"{provider}/{name}{extra}" if at_end else f"{provider}/{extra}{name}"
    ),
    st.sampled_from(["local", "aws", "gcp"]),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20),
    st.text(min_size=0, max_size=3),
    st.booleans(),
)


@given(st.one_of(_NEAR_IDS, st.text(max_size=50)))
@example("local/a\n")
@example("local/a\r\n")
@example("local/a\n\n")
def test_no_accepted_id_holds_a_newline_a_control_character_or_a_space(notice_id: str) -> None:
    provider = notice_id.partition("/")[0]
    if id_problem(notice_id, provider) is None:
        assert all(0x21 <= ord(char) <= 0x7E for char in notice_id), repr(notice_id)
        assert len(notice_id) <= MAX_ID_LENGTH


@pytest.mark.parametrize("notice_id", ["local/a\n", "local/a\r", "local/a\x00", "local/a b"])
def test_an_id_with_a_trailing_newline_or_control_character_is_refused(notice_id: str) -> None:
    problem = id_problem(notice_id, "local")
    assert problem is not None and "printable ASCII" in problem


def test_a_plain_id_is_accepted() -> None:
    assert id_problem("local/a", "local") is None
    assert id_problem("aws/scheduled/instance-event-1", "aws") is None
