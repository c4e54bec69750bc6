"""The ages a status reply gives, as the client and `forewarn wait` read them."""

from __future__ import annotations

from typing import Any

from forewarn.protocol.ages import status_ages
from hypothesis import given
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)


@given(
    st.dictionaries(st.sampled_from(["ok", "ages", "raised", "active"]) | st.text(max_size=6), JSON)
    | JSON
)
def test_any_reply_gives_ages_or_none_and_never_raises(reply: Any) -> None:
    ages = status_ages(reply)
    assert ages is None or all(
        isinstance(notice_id, str) and isinstance(age, float) and 0 <= age < float("inf")
        for notice_id, age in ages.items()
    )


def test_a_notice_raised_again_is_aged_from_its_noticed_at() -> None:
    """The agent ages a notice raised again after it expired from that raise, while it keeps
    its first `noticed_at`: read as is, an inherited terminate raised again after the job
    started looked raised after the start, and stopped a job an earlier one had acted on."""
    reply = {
        "ok": True,
        "ages": {"aws/a": 2.0, "aws/b": 2.0, "aws/c": 2.0, "aws/bad": -1, "aws/flag": True},
        "raised": {"aws/b": "2026-12-05T10:10:00Z", "aws/c": "not a time"},
        "active": [
            {"id": "aws/a", "noticed_at": "2026-12-05T10:09:58Z"},
            {"id": "aws/b", "noticed_at": "2026-12-05T10:00:00Z"},
            {"id": "aws/c", "noticed_at": "2026-12-05T10:00:00Z"},
        ],
    }
    assert status_ages(reply) == {"aws/a": 2.0, "aws/b": 602.0}
    assert status_ages({"ok": True, "active": []}) is None, "an agent older than `ages`"
    assert status_ages({"ok": False, "error": "x"}) is None
