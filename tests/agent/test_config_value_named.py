"""Every config key refused names the key and the value as written, `(got ...)`: a webhook key
never showed its value (the whole path was matched against the secret words, and `webhook` is
one), and a duration out of its key's bounds showed the seconds it came to ("less than or equal
to 1.5 (got 300.0)" of `heartbeat_interval = "5m"`), a value nobody wrote."""

from __future__ import annotations

import string
from typing import Any

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples


def _keys(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found += _keys(kind, (*path, name))
        else:
            found.append((*path, name))
    return found


KEYS = _keys(settings_model(REGISTRY))
# Keys whose value may be a secret (a webhook URL, a proxy's password): never shown.
SECRET = {("webhook", "url"), ("webhook", "proxy")}
# Written the way people write values that are not the key's.
WRITTEN = ["5min", "2m30s", "1,000", "1e3", "-0", "١٢", "true", "-3", "0", "2h", "1.5", "x"]


def _given(key: tuple[str, ...], value: str) -> dict[str, Any]:
    return {key[0]: value} if len(key) == 1 else {key[0]: {key[1]: value}}


@settings(max_examples=examples(600), deadline=None)
@given(
    key=st.sampled_from(KEYS),
    value=st.sampled_from(WRITTEN)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs")), max_size=8),
)
@example(key=("webhook", "timeout"), value="0")
@example(key=("webhook", "retries"), value="1,000")
@example(key=("heartbeat_interval",), value="5min")
@example(key=("gcp", "timeout_sec"), value="2h")
@example(key=("aws", "token_ttl"), value="0")
@example(key=("log_level",), value="A")
@example(key=("log_format",), value="\u2028Json")
def test_a_refused_value_is_named_as_written(key: tuple[str, ...], value: str) -> None:
    if not value.strip():
        return  # blank is the key's default, or its own error (test_config_blank_values)
    try:
        load_settings(**_given(key, value))
    except ConfigError as error:
        message = str(error)
    else:
        return
    assert f"config key {'.'.join(key)}: " in message, message
    if key in SECRET:
        assert value not in message.split(": ", 1)[1] or value in "http://", message
    else:
        # A word (a choice, a boolean) too, in the case written, less the space around it.
        written = value.strip(string.whitespace)
        assert repr(written) in message or f" {written}" in message, message


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        (
            ("webhook", "timeout"),
            "0",
            "config key webhook.timeout: Input should be greater than 0 (got '0')",
        ),
        (
            ("heartbeat_interval",),
            "5min",
            "config key heartbeat_interval: Input should be less than or equal to 1.5 (got '5min')",
        ),
        (
            ("webhook", "queue"),
            "-3",
            "config key webhook.queue: Input should be greater than or equal to 1 (got '-3')",
        ),
        (
            ("aws", "token_ttl"),
            "0",
            "config key aws.token_ttl: Input should be greater than or equal to 1 (got '0')",
        ),
        (
            # Lowered for the choices before it was refused: "(got 'a')".
            ("log_level",),
            "A",
            "config key log_level: Input should be 'debug', 'info', 'warning' or 'error' (got 'A')",
        ),
        (
            # The space around a value is no part of it, for any key.
            ("log_format",),
            " JSONL\n",
            "config key log_format: Input should be 'text' or 'json' (got 'JSONL')",
        ),
    ],
)
def test_the_value_is_shown_as_written(key: tuple[str, ...], value: str, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(**_given(key, value))
    assert str(refused.value) == said


def test_a_webhook_url_is_still_never_shown() -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(webhook={"url": "ftp://u:hunter2@example.com/hook"})
    assert "hunter2" not in str(refused.value) and "webhook.url" in str(refused.value)
