"""The drills read their jobs' stdout as JSON lines: a line that is not an event object is
passed over, and never stops the reading."""

from __future__ import annotations

import io
import json
import os
import sys

from forewarn.agent.drill_local import Demo, json_objects
from hypothesis import given
from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)
LINES = st.lists(
    st.one_of(JSON_VALUES.map(json.dumps), st.text(max_size=20).filter(lambda s: "\n" not in s)),
    max_size=8,
)


@given(LINES)
def test_json_objects_yields_exactly_the_lines_that_are_json_objects(lines: list[str]) -> None:
    expected = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            expected.append(value)
    assert list(json_objects(io.StringIO("".join(line + "\n" for line in lines)))) == expected


def test_a_demo_line_that_is_json_but_not_an_object_does_not_stop_the_reading() -> None:
    # A loop that prints a bare number (valid JSON, not an event) before its first event.
    script = 'import json; print(5); print(json.dumps({"event": "started", "step": 1}))'
    demo = Demo([sys.executable, "-c", script], dict(os.environ))
    try:
        event = demo.next(timeout=20)
    finally:
        demo.stop()
    assert event == {"event": "started", "step": 1}
