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
# The words the docs say a boolean reads, in any case: anything else is refused. pydantic's
# lax mode read `t`, `f`, `y` and `n` too, which no doc names (`FOREWARN_ALLOW_REMOTE=y`
# opened the sockets to the network).
READ = {"0", "off", "false", "no", "1", "on", "true", "yes"}


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
    false = {"0", "off", "false", "no"}
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


@pytest.mark.parametrize("letter", ["t", "f", "y", "n", "T", "Y"])
def test_a_letter_no_doc_names_is_refused_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, letter: str
) -> None:
    monkeypatch.setenv("FOREWARN_ALLOW_REMOTE", letter)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    said = str(caught.value)
    assert f"config key allow_remote: {letter!r} is not a boolean; it takes" in said, said


@settings(max_examples=examples(60), deadline=None)
@given(
    row=st.sampled_from(KEYS),
    number=st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
)
def test_a_toml_number_where_a_boolean_belongs_is_refused_naming_the_key(
    tmp_path_factory: pytest.TempPathFactory, row: tuple[str, bool], number: float
) -> None:
    """`allow_remote = 1` (and `1.0`) in the file read as true, pydantic's lax mode, while a
    TOML boolean where a number belongs (`exit_margin = false`) is refused, never read as 0 or
    1: a number is no boolean either, and the key that opens the sockets to the network
    should not be switched on by a stray digit. The text forms the docs name stay read."""
    key, _ = row
    written = repr(number) if isinstance(number, float) else str(number)
    config = _file(tmp_path_factory.mktemp("number"), key, written)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    said = str(caught.value)
    assert f"config key {key}: {written} is a number, not a boolean; write true or false" in (
        said
    ), said


def test_the_documented_words_are_read_quoted_in_the_file(tmp_path: Path) -> None:
    for written, read in (('"yes"', True), ('"1"', True), ('"Off"', False), ("true", True)):
        config = _file(tmp_path, "allow_remote", written)
        assert load_settings(config).allow_remote is read, written
