"""`saved_manual_ids`: which manual notices the state file on disk holds, read without setting
a broken file aside, for the warning of a clear that could not be saved."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from forewarn.agent.state import AgentState, encode_state, saved_manual_ids
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples, local_notice

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def test_the_ids_of_the_manual_notices_an_agent_saved() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        assert saved_manual_ids(path) == set()  # no file: nothing a restart restores
        manual = [local_notice(1, "drain"), local_notice(2, "terminate")]
        path.write_bytes(encode_state(AgentState(seq=5, manual=manual)))
        assert saved_manual_ids(path) == {"local/1", "local/2"}
        assert path.exists()


@settings(max_examples=examples(200), deadline=None)
@given(
    content=st.one_of(
        st.binary(max_size=200),
        JSON.map(lambda value: json.dumps(value).encode()),
        st.lists(JSON, max_size=4).map(lambda items: json.dumps({"manual": items}).encode()),
    )
)
def test_any_file_gives_a_set_of_ids_or_none_and_is_left_where_it_is(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "state.json"
        path.write_bytes(content)
        found = saved_manual_ids(path)
        assert found is None or all(isinstance(notice_id, str) for notice_id in found)
        assert path.read_bytes() == content  # read only: not set aside as `.broken`
        try:
            raw: Any = json.loads(content)
        except ValueError:
            assert found is None
            return
        items = raw.get("manual") if isinstance(raw, dict) else None
        if isinstance(items, list):
            expected = {
                item["id"]
                for item in items
                if isinstance(item, dict) and isinstance(item.get("id"), str)
            }
            assert found == expected
        else:
            assert found is None
