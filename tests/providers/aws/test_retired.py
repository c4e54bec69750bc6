"""What the spot tracker remembers of interruptions across restarts, in the state directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from forewarn.providers.aws.retired import (
    KEEP_IDS,
    SpotMemory,
    load_spot_memory,
    save_spot_memory,
)
from forewarn.providers.health import PollHealth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples


def test_saved_ids_load_back_newest_kept(tmp_path: Path) -> None:
    path = tmp_path / "aws-spot.json"
    ids = [f"aws/spot-itn/{n:012x}" for n in range(KEEP_IDS + 5)]
    memory = SpotMemory()
    for notice_id in ids:
        assert memory.add("retired", notice_id)
    assert not memory.add("retired", ids[-1])
    assert memory.add("in_time", ids[0])
    assert save_spot_memory(path, memory, PollHealth("aws"))
    assert load_spot_memory(path) == SpotMemory(ids[-KEEP_IDS:], [ids[0]])
    assert load_spot_memory(tmp_path / "missing.json") == SpotMemory()


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe", b"not json", b"[]", b'{"retired": {}}', b"[" * 100_000, b" " * 70_000],
)
def test_an_unreadable_file_remembers_nothing(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "aws-spot.json"
    path.write_bytes(content)
    assert load_spot_memory(path) == SpotMemory()


def test_a_state_directory_that_cannot_be_written_is_reported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    health = PollHealth("aws")
    memory = SpotMemory(["aws/spot-itn/1"])
    assert not save_spot_memory(tmp_path / "file" / "aws-spot.json", memory, health)
    assert "state aws-spot.json" in health.conditions


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.one_of(
        st.binary(max_size=64),
        JSON.map(lambda value: json.dumps(value).encode()),
        st.tuples(JSON, JSON, JSON, st.sampled_from(["a", "b"]) | JSON).map(
            lambda four: json.dumps(
                {"retired": four[0], "in_time": four[1], "before": four[2], "boot_id": four[3]}
            ).encode()
        ),
    )
)
def test_load_never_raises_and_gives_distinct_ids(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "aws-spot.json"
    path.write_bytes(content)
    memory = load_spot_memory(path, "a")
    assert memory.boot_id == "a"
    for ids in (memory.retired, memory.in_time, memory.before):
        assert all(isinstance(item, str) for item in ids)
        assert len(ids) == len(set(ids)) <= KEEP_IDS


def test_what_another_boot_saw_is_before(tmp_path: Path) -> None:
    """Written in one boot, read in another: every interruption is of a boot that ended."""
    path = tmp_path / "aws-spot.json"
    memory = SpotMemory(["aws/spot-itn/1"], ["aws/spot-itn/2"], boot_id="a")
    assert save_spot_memory(path, memory, PollHealth("aws"))
    assert load_spot_memory(path, "a") == memory
    later = load_spot_memory(path, "b")
    assert later == SpotMemory(before=["aws/spot-itn/1", "aws/spot-itn/2"], boot_id="b")
    assert save_spot_memory(path, later, PollHealth("aws"))
    assert load_spot_memory(path, "b") == later  # kept across restarts in the new boot
    assert load_spot_memory(path, None).before == later.before
