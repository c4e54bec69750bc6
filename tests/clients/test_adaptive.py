"""`AdaptiveInterval`: the interval the guard's every="auto" follows, stdlib only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from forewarn.clients import adaptive
from forewarn.clients.adaptive import AdaptiveInterval, daly_interval, young_interval


def test_before_any_flush_the_interval_is_the_minimum() -> None:
    auto = AdaptiveInterval(interruptions_per_day=1, min_seconds=120)
    assert auto.flush_seconds is None
    assert auto.seconds == 120
    assert auto.steps(3.5) == 420


def test_the_interval_follows_the_median_of_recent_flushes() -> None:
    auto = AdaptiveInterval(interruptions_per_day=1)
    for seconds in (10.0, 9.0, 11.0):
        auto.record_flush(seconds)
    assert auto.flush_seconds == 10.0
    assert auto.seconds == pytest.approx(daly_interval(10, 86400))
    assert auto.seconds == pytest.approx(1307.88, abs=0.01)
    # One slow upload barely moves it.
    auto.record_flush(300.0)
    assert auto.flush_seconds == 10.5
    # A lasting change does.
    slow = AdaptiveInterval(mtbi_seconds=86400, window=3)
    for seconds in (10.0, 40.0, 40.0, 40.0):
        slow.record_flush(seconds)
    assert slow.seconds == pytest.approx(daly_interval(40, 86400))


def test_steps_from_a_given_or_measured_speed() -> None:
    auto = AdaptiveInterval(interruptions_per_day=1, formula="young")
    auto.record_flush(10)
    assert auto.seconds == pytest.approx(young_interval(10, 86400))
    assert auto.steps() is None
    assert auto.steps(3.5) == round(young_interval(10, 86400) * 3.5)
    auto.record_progress(350, 100.0)
    auto.record_progress(0, 1.0)  # nothing learnt from an empty stretch
    assert auto.steps_per_second == 3.5
    assert auto.steps() == auto.steps(3.5)


def test_the_interval_is_clamped() -> None:
    auto = AdaptiveInterval(interruptions_per_day=1, min_seconds=60, max_seconds=600)
    auto.record_flush(10)
    assert auto.seconds == 600
    fast = AdaptiveInterval(interruptions_per_day=1000, min_seconds=60)
    fast.record_flush(0.01)
    assert fast.seconds == 60


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({}, "interruptions_per_day or mtbi_seconds"),
        ({"interruptions_per_day": 1, "mtbi_seconds": 60}, "exactly one"),
        ({"interruptions_per_day": 0}, "interruptions_per_day"),
        ({"mtbi_seconds": -5}, "mtbi_seconds"),
        ({"interruptions_per_day": 1, "formula": "guess"}, "formula"),
        ({"interruptions_per_day": 1, "window": 0}, "window"),
        ({"interruptions_per_day": 1, "min_seconds": 600, "max_seconds": 60}, "max_seconds"),
    ],
)
def test_bad_configuration_names_the_parameter(kwargs: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        AdaptiveInterval(**kwargs)  # type: ignore[arg-type]


def test_a_negative_flush_is_refused() -> None:
    with pytest.raises(ValueError, match="flush seconds"):
        AdaptiveInterval(interruptions_per_day=1).record_flush(-1)


def test_it_imports_the_standard_library_only() -> None:
    tree = ast.parse(Path(adaptive.__file__).read_text())
    imported = {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
