"""A boolean key written blank in the config file (`telemetry = ""`, a template's `{{ value }}`
left empty) or as a word no boolean reads (`cordon = "maybe"`) was refused in pydantic's
words, `Input should be a valid boolean, unable to interpret input (got '')`: it named the
key but not what the key takes. The refusal now says it: true or false (the words pydantic
also reads, yes/no, on/off, 1/0, in any case), and, for a blank one, that leaving the key
out gives its default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import agent_env, examples, run_agent_on

MODEL = settings_model(REGISTRY)


def _boolean_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, bool]]:
    """(dotted key, default) of every boolean key of the agent's settings."""
    found = []
    for name, field in model.model_fields.items():
        annotation: Any = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _boolean_keys(annotation, f"{prefix}{name}.")
        elif annotation is bool:
            found.append((f"{prefix}{name}", bool(field.default)))
    return found


KEYS = _boolean_keys(MODEL)
# Words pydantic reads as a boolean, in any case: anything else is refused.
READ = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}


def _file(tmp_path: Path, key: str, written: str) -> Path:
    section, _, leaf = key.rpartition(".")
    config = tmp_path / "forewarn.toml"
    header = f"[{section}]\n" if section else ""
    config.write_text(f"{header}{leaf} = {written}\n")
    return config


def test_there_are_boolean_keys_in_sections_and_at_the_top() -> None:
    assert {"allow_remote", "telemetry", "kubernetes.cordon", "azure.freeze"} <= dict(KEYS).keys()


@settings(max_examples=examples(60), deadline=None)
@given(
    row=st.sampled_from(KEYS),
    blank=st.text(alphabet=" \t\n", max_size=3),
)
def test_a_blank_boolean_in_the_file_names_the_key_and_what_it_takes(
    tmp_path_factory: pytest.TempPathFactory, row: tuple[str, bool], blank: str
) -> None:
    key, default = row
    written = '"' + blank.replace("\n", "\\n").replace("\t", "\\t") + '"'
    config = _file(tmp_path_factory.mktemp("blank"), key, written)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    said = str(caught.value)
    assert f"config key {key}: blank" in said, said
    assert "true or false" in said and f"its default, {str(default).lower()}" in said, said
    assert "unable to interpret" not in said


@settings(max_examples=examples(60), deadline=None)
@given(
    row=st.sampled_from(KEYS),
    word=st.text(alphabet=st.characters(codec="ascii", categories=["L", "N"]), min_size=1).filter(
        lambda word: word.lower() not in READ
    ),
)
def test_a_word_no_boolean_reads_names_the_key_and_what_it_takes(
    tmp_path_factory: pytest.TempPathFactory, row: tuple[str, bool], word: str
) -> None:
    key, _ = row
    config = _file(tmp_path_factory.mktemp("word"), key, f'"{word}"')
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    said = str(caught.value)
    assert f"config key {key}: {word!r} is not a boolean; it takes" in said, said
    assert "true or false" in said and "unable to interpret" not in said, said


def test_the_words_a_boolean_reads_are_read() -> None:
    false = {"0", "off", "f", "false", "n", "no"}
    for word in READ:
        for written in (word, word.upper()):
            assert load_settings(telemetry=written).telemetry is (word not in false)


def test_the_agent_says_it_in_one_line_and_exits_2(tmp_path: Path) -> None:
    env = agent_env(tmp_path)
    config = _file(tmp_path, "kubernetes.cordon", '""')
    done = run_agent_on(config, env)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"forewarn: config file {config}: config key kubernetes.cordon: blank; it takes true or "
        "false (yes/no, on/off, 1/0 are read too, in any case), or leave the key out for its "
        "default, false\n"
    )
