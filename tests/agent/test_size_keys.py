"""A size key written with its unit (`telemetry_max_bytes = "10MB"`, `FOREWARN_TELEMETRY_MAX_BYTES
=10MiB`), as `forewarn plan --checkpoint-size` takes one."""

from __future__ import annotations

from pathlib import Path

import pytest
from forewarn.agent.config import ConfigError, load_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import agent_env, examples, run_forewarn

# A gibibyte: the largest telemetry file the agent keeps before it rotates it.
MAX_TELEMETRY_BYTES = 2**30
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
    if size < 4096 or size > MAX_TELEMETRY_BYTES:
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


@pytest.mark.parametrize(
    "text", ["1GiB", "1_024MiB", "1073741824", "1_073_741_824", "0x40000000", "1.073741824e9"]
)
def test_a_gibibyte_of_telemetry_is_the_most(text: str) -> None:
    assert load_settings(telemetry_max_bytes=text).telemetry_max_bytes == MAX_TELEMETRY_BYTES


@pytest.mark.parametrize("text", ["1TB", "1073741825", "1e30", "0x" + "f" * 90, "1_000_000GB"])
def test_a_size_past_a_gibibyte_is_refused_naming_the_key(text: str) -> None:
    # No upper bound: `telemetry_max_bytes = 1e30` (or `1TB`) was taken, the file was never
    # rotated and `forewarn plan` read it whole, however large it grew.
    with pytest.raises(ConfigError, match=r"^config key telemetry_max_bytes: .*1073741824"):
        load_settings(telemetry_max_bytes=text)


def test_the_agent_refuses_a_telemetry_size_past_a_gibibyte(tmp_path: Path) -> None:
    run = run_forewarn(
        "agent",
        "--provider",
        "local",
        "--set",
        "telemetry_max_bytes=2GiB",
        env=agent_env(tmp_path),
    )
    assert run.returncode == 2, run.stderr
    assert "telemetry_max_bytes" in run.stderr and "2GiB" in run.stderr, run.stderr
