"""`answered_notices`: the notices a generation's metadata says its save answered, read back by
a job resumed from it. Any manifest's metadata is taken without an error: what is not an id
with its `noticed_at` answers nothing (the job saves for that notice as it would have)."""

from __future__ import annotations

from typing import Any

from forewarn.clients.guard_notices import answered_notices
from forewarn.clients.guard_state import ANSWERED_NOTICES
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=examples(300))
@given(
    answered=st.dictionaries(st.text(max_size=20), JSON | st.text(max_size=30), max_size=5),
    other=st.dictionaries(st.text(max_size=8), JSON, max_size=3),
    shape=st.sampled_from(["dict", "other"]),
    instead=JSON,
)
def test_only_ids_with_a_written_time_are_taken(
    answered: dict[str, Any], other: dict[str, Any], shape: str, instead: Any
) -> None:
    metadata = {**other, ANSWERED_NOTICES: answered if shape == "dict" else instead}
    taken = answered_notices(metadata)
    value = metadata[ANSWERED_NOTICES]
    expected = (
        {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}
    )
    assert taken == expected


def test_a_generation_without_the_key_answers_nothing() -> None:
    assert answered_notices({"step": 3, "forewarn_exit_save": True}) == {}
