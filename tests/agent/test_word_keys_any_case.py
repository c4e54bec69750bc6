"""A key of a few words (`azure.approve`, `gcp.migrate`, `digitalocean.imap_tls`,
`webhook.format`, ...) in the case people write it (`After-Ack`, `TLS`, `Slack`), as
`log_level` and `log_format` are read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples


def _literal_keys(
    model: type[BaseModel], prefix: str = ""
) -> Iterator[tuple[str, tuple[Any, ...]]]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _literal_keys(annotation, f"{prefix}{name}.")
        elif get_origin(annotation) is Literal:
            yield prefix + name, get_args(annotation)


WORD_KEYS = dict(_literal_keys(settings_model()))


def test_the_word_keys_are_found() -> None:
    assert {"azure.approve", "gcp.migrate", "digitalocean.imap_tls", "webhook.format"} <= set(
        WORD_KEYS
    )


def _overrides(key: str, value: str) -> dict[str, Any]:
    *section, leaf = key.split(".")
    return {section[0]: {leaf: value}} if section else {leaf: value}


@st.composite
def _written(draw: st.DrawFn) -> tuple[str, str, str]:
    key = draw(st.sampled_from(sorted(WORD_KEYS)))
    word = draw(st.sampled_from([w for w in WORD_KEYS[key] if isinstance(w, str)]))
    flags = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    typed = "".join(c.upper() if up else c.lower() for c, up in zip(word, flags, strict=True))
    return key, typed + draw(st.sampled_from(["", " ", "\n"])), word


@settings(max_examples=examples(150), deadline=None)
@given(_written())
def test_a_word_key_reads_in_any_case(drawn: tuple[str, str, str]) -> None:
    """`FOREWARN_AZURE_APPROVE=After-Ack`, `FOREWARN_DIGITALOCEAN_IMAP_TLS=TLS` and
    `webhook.format = "Slack"` stopped the agent with exit 2."""
    key, typed, word = drawn
    loaded: Any = load_settings(**_overrides(key, typed))
    for part in key.split("."):
        loaded = getattr(loaded, part)
    assert loaded == word


@pytest.mark.parametrize("key", sorted(WORD_KEYS))
def test_a_word_that_is_none_of_them_is_still_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"config key {key}: "):
        load_settings(**_overrides(key, "sometimes"))
