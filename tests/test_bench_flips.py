"""`bench/gcp_detection.py` counts a flip undone before the agent's next answer as merged, not
missed, and fails a run only on a wrong state (`bench/_flips.py`). A count that called a real
loss a merge would hide the very thing the benchmark is there to catch, so it is held here:
every flip published is 0 merged, each flip-and-undo left out is 2 merged, and any single flip
left out (a state the agent never reached, or one it kept past its end) is a wrong state."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from types import ModuleType

from hypothesis import given
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _flips() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_flips", BENCH / "_flips.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Published = _flips().Published

# Flips 0.08-0.25 s apart, as the benchmark makes them; each seen within its gap.
gaps = st.lists(st.floats(min_value=0.08, max_value=0.25), min_size=2, max_size=60)
delays = st.floats(min_value=0.0, max_value=0.999)


def _run(gap_list: list[float]) -> list[float]:
    return list(itertools.accumulate(gap_list))


def _action(index: int) -> str:
    return "drain" if index % 2 == 0 else "clear"


def _each_seen(changes: list[float], delay: float) -> list[tuple[float, str]]:
    """A notice for every flip, `delay` of the way to the next flip (the last: to 1 s on)."""
    ends = [*changes[1:], changes[-1] + 1.0]
    return [
        (change + delay * (end - change), _action(i))
        for i, (change, end) in enumerate(zip(changes, ends, strict=True))
    ]


@given(gaps, delays)
def test_every_flip_published_is_none_merged(gap_list: list[float], delay: float) -> None:
    changes = _run(gap_list)
    notices = _each_seen(changes, delay)
    counted = Published(changes, notices)
    assert not counted.wrong
    assert counted.merged == 0 and len(counted.latencies) == len(changes)


@given(gaps.filter(lambda gap_list: len(gap_list) >= 3), delays, st.data())
def test_a_flip_and_its_undo_left_out_is_two_merged(
    gap_list: list[float], delay: float, data: st.DataObject
) -> None:
    changes = _run(gap_list)
    notices = _each_seen(changes, delay)
    # A pair that does not hold the last flip: the final state is still published.
    first = data.draw(st.integers(min_value=0, max_value=len(changes) - 3), "pair")
    kept = notices[:first] + notices[first + 2 :]
    counted = Published(changes, kept)
    assert not counted.wrong
    assert counted.merged == 2


@given(gaps, delays, st.data())
def test_any_single_flip_left_out_is_a_wrong_state(
    gap_list: list[float], delay: float, data: st.DataObject
) -> None:
    changes = _run(gap_list)
    notices = _each_seen(changes, delay)
    left_out = data.draw(st.integers(min_value=0, max_value=len(changes) - 1), "left out")
    assert Published(changes, notices[:left_out] + notices[left_out + 1 :]).wrong
