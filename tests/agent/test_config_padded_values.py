"""A value with space around it, as a Kubernetes ConfigMap leaves it (a YAML block, `key: |`,
or a key made with `--from-file`, ends the value with a newline): every key reads it as it
reads the value alone, in the environment, the config file and `--set`."""

from __future__ import annotations

import json
import os
import string
import tempfile
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from unittest import mock

from forewarn.agent.cli import apply_sets
from forewarn.agent.config import load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

MODEL = settings_model(REGISTRY)
# Every spelling of a boolean pydantic reads, in any case.
BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n")


def _keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, list[str]]]:
    """(dotted key, the words it takes) for every boolean and every choice key."""
    found: list[tuple[str, list[str]]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _keys(annotation, f"{prefix}{name}.")
        elif annotation is bool:
            found.append((prefix + name, [*BOOLEANS, *(word.upper() for word in BOOLEANS)]))
        elif get_origin(annotation) is Literal:
            found.append((prefix + name, [str(word) for word in get_args(annotation)]))
    return found


WORD_KEYS = _keys(MODEL)
SPACE = st.text(st.sampled_from(string.whitespace), max_size=3)


def test_every_section_has_its_boolean_keys_here() -> None:
    # The property below covers the boolean and choice keys of every section.
    assert {"allow_remote", "telemetry", "kubernetes.cordon", "aws.imdsv1"} <= dict(
        WORD_KEYS
    ).keys()
    assert "gcp.migrate" in dict(WORD_KEYS)


def _value(key: str, loaded: Any) -> Any:
    for part in key.split("."):
        loaded = getattr(loaded, part)
    return loaded


def _variable(key: str) -> str:
    return "FOREWARN_" + key.replace(".", "_").upper()


def _clean_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN_")}


def _from_environment(key: str, text: str) -> Any:
    with mock.patch.dict(os.environ, {**_clean_environment(), _variable(key): text}, clear=True):
        return _value(key, load_settings())


def _from_file(key: str, text: str) -> Any:
    *section, leaf = key.split(".")
    header = f"[{section[0]}]\n" if section else ""
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "forewarn.toml"
        # A JSON string is a TOML basic string: "\n", "\t" and "\u000b" escaped alike.
        config.write_text(f"{header}{leaf} = {json.dumps(text)}\n")
        with mock.patch.dict(os.environ, _clean_environment(), clear=True):
            return _value(key, load_settings(config))


def _from_set(key: str, text: str) -> Any:
    overrides: dict[str, Any] = {}
    apply_sets(overrides, [f"{key}={text}"])
    with mock.patch.dict(os.environ, _clean_environment(), clear=True):
        return _value(key, load_settings(**overrides))


@settings(max_examples=150, deadline=None)
@given(
    chosen=st.sampled_from(WORD_KEYS).flatmap(
        lambda item: st.tuples(st.just(item[0]), st.sampled_from(item[1]))
    ),
    before=SPACE,
    after=SPACE.filter(bool),
    source=st.sampled_from([_from_environment, _from_file, _from_set]),
)
def test_a_boolean_or_choice_with_space_around_it_reads_as_the_word_alone(
    chosen: tuple[str, str], before: str, after: str, source: Any
) -> None:
    """`FOREWARN_KUBERNETES_CORDON` from a ConfigMap block is `true\\n`: pydantic refused it,
    'Input should be a valid boolean', and the agent stopped with exit 2 at every start."""
    key, word = chosen
    assert source(key, before + word + after) == source(key, word)


def test_numbers_and_durations_with_space_around_them_read_as_alone() -> None:
    # Read stripped already; kept so that the boolean fix is not the only place that strips.
    for key, text in [
        ("exit_margin", "30s"),
        ("telemetry_max_bytes", "8192"),
        ("aws.token_ttl", "5m"),
    ]:
        for padded in (f"{text}\n", f" {text} ", f"\t{text}\r\n"):
            assert _from_environment(key, padded) == _from_environment(key, text)
            assert _from_file(key, padded) == _from_file(key, text)
