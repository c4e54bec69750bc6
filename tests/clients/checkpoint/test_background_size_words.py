"""The sizes the background saver's lines say (the refusal's copies held, an upload's bytes
sent): a small state said "holding 0.0 MiB of copies", which reads as nothing held."""

from __future__ import annotations

import re

import forewarn.clients.checkpoint.background as background_module
import pytest
from hypothesis import given
from hypothesis import strategies as st

_UNITS = {"bytes": 1, "byte": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


@pytest.mark.parametrize(
    ("count", "said"),
    [
        (0, "0 bytes"),
        (1, "1 byte"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (2 * 64 * 64 * 4, "32.0 KiB"),  # two stuck copies of a 64x64 float32 tensor
        (5 << 20, "5.0 MiB"),
        (200_000_000, "190.7 MiB"),
        (3 << 30, "3.0 GiB"),
    ],
)
def test_a_size_is_said_in_the_unit_that_fits(count: int, said: str) -> None:
    assert background_module._size(count) == said


@given(st.integers(min_value=0, max_value=1 << 50))
def test_a_size_is_never_said_as_zero_unless_it_is_and_reads_back_within_a_tenth(
    count: int,
) -> None:
    said = background_module._size(count)
    match = re.fullmatch(r"(\d+(?:\.\d)?) (bytes|byte|KiB|MiB|GiB|TiB)", said)
    assert match is not None, said
    number, unit = float(match.group(1)), match.group(2)
    assert (number == 0) == (count == 0), said
    # One decimal of the unit: off by at most half a tenth of it, and the unit is the
    # largest under the count (never "1024.0 KiB", never "0.5 MiB").
    assert abs(number * _UNITS[unit] - count) <= 0.05 * _UNITS[unit], said
    assert number < 1024 or unit == "TiB", said
    assert number >= 1 or count == 0, said
