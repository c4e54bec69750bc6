"""The stale spot interruptions retired, kept in the state directory across restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from forewarn.providers.aws.retired import KEEP_RETIRED, load_retired, save_retired
from forewarn.providers.health import PollHealth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def test_saved_ids_load_back_newest_kept(tmp_path: Path) -> None:
    path = tmp_path / "aws-retired.json"
    ids = [f"aws/spot-itn/{n:012x}" for n in range(KEEP_RETIRED + 5)]
    assert save_retired(path, ids, PollHealth("aws"))
    assert load_retired(path) == ids[-KEEP_RETIRED:]
    assert load_retired(tmp_path / "missing.json") == []


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe", b"not json", b"[]", b'{"retired": {}}', b"[" * 100_000, b" " * 70_000],
)
def test_an_unreadable_file_is_no_retired_id(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "aws-retired.json"
    path.write_bytes(content)
    assert load_retired(path) == []


def test_a_state_directory_that_cannot_be_written_is_reported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    health = PollHealth("aws")
    assert not save_retired(tmp_path / "file" / "aws-retired.json", ["aws/spot-itn/1"], health)
    assert "state aws-retired.json" in health.conditions


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        st.binary(max_size=64),
        JSON.map(lambda value: json.dumps(value).encode()),
        JSON.map(lambda value: json.dumps({"retired": value}).encode()),
    )
)
def test_load_retired_never_raises_and_gives_distinct_ids(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "aws-retired.json"
    path.write_bytes(content)
    ids = load_retired(path)
    assert all(isinstance(item, str) for item in ids)
    assert len(ids) == len(set(ids)) <= KEEP_RETIRED
