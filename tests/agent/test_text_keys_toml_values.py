"""A provider's text key written in TOML as a bare number or a bare date, as people write a
number and a date, reads as its text: `droplet_id = 3164444` ("this droplet's numeric id") was
refused as "Input should be a valid string (got 3164444)", and `api_version = 2020-07-01` (a
TOML date) as "... (got datetime.date(2020, 7, 1))", each stopping the agent with exit 2."""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples


def _text_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    found: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _text_keys(annotation, f"{prefix}{name}.")
        elif annotation in (str, str | None):
            found.append(prefix + name)
    return found


# A provider section's text keys; the top-level ones (`events`, `control`) are read by the
# clients too, which take a string only (test_client_config_file.py).
TEXT_KEYS = [
    key
    for key in _text_keys(settings_model())
    if "." in key and key.split(".")[0] in settings_model().registry
]


def _load(key: str, written: str) -> tuple[str, Any]:
    """("ok", the value) or ("refused", the message less the file's name)."""
    *section, leaf = key.split(".")
    header = f"[{section[0]}]\n" if section else ""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN")}
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        config.write_text(f"{header}{leaf} = {written}\n")
        with mock.patch.dict(os.environ, clean, clear=True):
            try:
                loaded: Any = load_settings(config)
            except ConfigError as error:
                return "refused", str(error).split(": ", 1)[1]
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return "ok", loaded


def test_the_text_keys_are_found() -> None:
    assert {"digitalocean.droplet_id", "azure.api_version", "kubernetes.node_name"} <= set(
        TEXT_KEYS
    )


@pytest.mark.parametrize(
    ("key", "written", "meant"),
    [
        ("digitalocean.droplet_id", "3164444", "3164444"),
        ("azure.api_version", "2020-07-01", "2020-07-01"),
        ("azure.api_version", "2019-08-01", "2019-08-01"),
    ],
)
def test_a_bare_number_or_date_is_its_text(key: str, written: str, meant: str) -> None:
    assert _load(key, written) == ("ok", meant)


@settings(max_examples=examples(100), deadline=None)
@given(
    key=st.sampled_from(TEXT_KEYS),
    value=st.integers(-(10**12), 10**12) | st.dates(datetime.date(1, 1, 1)),
)
def test_a_bare_number_or_date_reads_as_the_same_text_quoted(key: str, value: Any) -> None:
    """Taken as the quoted text is taken, or refused as it is (naming the key)."""
    bare = value.isoformat() if isinstance(value, datetime.date) else str(value)
    quoted = f'"{bare}"'
    got, expected = _load(key, bare), _load(key, quoted)
    assert got[0] == expected[0], (got, expected)
    if got[0] == "ok":
        assert got == expected
    else:
        assert f"config key {key}:" in got[1], got


@pytest.mark.parametrize("written", ["true", "1.5", "1979-05-27T07:32:00Z", "07:32:00"])
def test_a_boolean_a_fraction_or_a_time_stays_refused(written: str) -> None:
    status, message = _load("digitalocean.droplet_id", written)
    assert status == "refused" and "config key digitalocean.droplet_id" in message, message


def test_a_top_level_endpoint_stays_a_string_as_the_clients_read_it() -> None:
    status, message = _load("events", "0")
    assert status == "refused" and "config key events" in message, message
