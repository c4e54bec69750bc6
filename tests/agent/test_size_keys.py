"""A size key written with its unit (`telemetry_max_bytes = "10MB"`, `FOREWARN_TELEMETRY_MAX_BYTES
=10MiB`), as `forewarn plan --checkpoint-size` takes one."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import examples

_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


@settings(max_examples=examples(150), deadline=None)
@given(
    count=st.integers(1, 10**4),
    unit=st.sampled_from(sorted(_UNITS)),
    gap=st.sampled_from(["", " "]),
    lower=st.booleans(),
)
@example(count=10, unit="MB", gap="", lower=False)
@example(count=10, unit="MiB", gap="", lower=False)
def test_a_size_with_its_unit_is_its_bytes(count: int, unit: str, gap: str, lower: bool) -> None:
    """`FOREWARN_TELEMETRY_MAX_BYTES=10MB` was 'unable to parse string as an integer'."""
    text = f"{count}{gap}{unit.lower() if lower else unit}"
    size = count * _UNITS[unit]
    if size < 4096:
        with pytest.raises(ConfigError, match="telemetry_max_bytes"):
            load_settings(telemetry_max_bytes=text)
        return
    assert load_settings(telemetry_max_bytes=text).telemetry_max_bytes == size


def test_the_config_file_and_a_bare_number_read_as_before(tmp_path: Path) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text('telemetry_max_bytes = "10MiB"\n')
    assert load_settings(config).telemetry_max_bytes == 10 * 2**20
    assert load_settings(telemetry_max_bytes="65536").telemetry_max_bytes == 65536
    assert load_settings(telemetry_max_bytes=65536).telemetry_max_bytes == 65536


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10Mb", "unit of bits"),
        ("1.0001KiB", "whole number of bytes"),
        ("10 parsecs", "not a size"),
        ("-10MB", "not a size"),
    ],
)
def test_a_size_that_is_not_whole_bytes_is_refused_naming_the_key(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=f"config key telemetry_max_bytes: .*{says}"):
        load_settings(telemetry_max_bytes=text)
