"""A refusal of a provider's or a request's value quotes the start of it, on one line: the
whole value (`got {value!r}`) made a 1 MiB field (an answer's, within the 1 MiB body cap) a
1 MiB warning at every poll (found: adversarial pass of H235)."""

from __future__ import annotations

import json

import pytest
from forewarn.protocol.oneline import QUOTED_CHARS, quoted
from forewarn.protocol.timefmt import parse_deadline, parse_duration, parse_time
from forewarn.providers.base import ParseError
from forewarn.providers.gcp.watch import parse_notice_duration, parse_upcoming
from forewarn.providers.kubernetes.nodes import node_reports, parse_event, parse_list
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

# A refusal's own words and the quote: far under a megabyte, a line a person reads.
REFUSAL_CHARS = 600
BIG = "\x00\u202e9" * (1 << 18)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.integers(0, 20_000).map(lambda n: "\x1b[2J\u202e" * n),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=8,
)


@settings(max_examples=examples(300), deadline=None)
@given(json_values, st.integers(min_value=20, max_value=400))
def test_a_quote_is_bounded_and_one_printable_line(value: object, limit: int) -> None:
    shown = quoted(value, limit)
    assert len(shown) <= limit
    assert shown.isprintable()


def test_a_short_value_is_quoted_whole() -> None:
    assert quoted("5m") == "'5m'"
    assert quoted([1, "a"]) == "[1, 'a']"
    assert len(quoted(BIG)) <= QUOTED_CHARS


def _refusal(parse: object, *args: object) -> str:
    with pytest.raises((ValueError, ParseError)) as caught:
        parse(*args)  # type: ignore[operator]
    return str(caught.value)


@pytest.mark.parametrize(
    ("parse", "value"),
    [
        (parse_time, BIG),
        (parse_time, "2026-12-07T10:00:00" + BIG),
        (parse_duration, BIG),
        (parse_duration, "5" + "m" * (1 << 20)),
        (parse_duration, "-" + BIG),
        (parse_duration, "1h" * (1 << 19)),
        (parse_deadline, BIG),
        (parse_notice_duration, json.dumps({"preemption_notice_duration": BIG})),
        (parse_notice_duration, json.dumps({"preemption_notice_duration": [BIG]})),
        (parse_upcoming, json.dumps({"maintenance_status": "PENDING", "window_start_time": BIG})),
        (parse_upcoming, json.dumps({"maintenance_status": "PENDING", "window_start_time": [BIG]})),
        (parse_event, json.dumps({"type": BIG, "object": {}})),
        (parse_list, {"kind": BIG}),
    ],
)
def test_a_megabyte_value_is_refused_in_a_bounded_line(parse: object, value: object) -> None:
    refusal = _refusal(parse, value)
    assert len(refusal) <= REFUSAL_CHARS, f"{len(refusal)} characters: {refusal[:100]!r}"
    assert refusal.isprintable()


@pytest.mark.parametrize(
    "node",
    [
        {"metadata": {"name": BIG, "resourceVersion": "1"}},
        {"metadata": {"name": "gpu-0", "resourceVersion": "1"}, "spec": {"unschedulable": BIG}},
        {"metadata": {"name": "gpu-0", "resourceVersion": "1", "uid": [BIG]}},
    ],
)
def test_a_megabyte_node_field_is_refused_in_a_bounded_line(node: dict[str, object]) -> None:
    refusal = _refusal(node_reports, node, "gpu-0", ())
    assert len(refusal) <= REFUSAL_CHARS, f"{len(refusal)} characters: {refusal[:100]!r}"
    assert refusal.isprintable()
