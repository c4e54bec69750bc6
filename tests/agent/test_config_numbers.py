"""A number in the configuration means the same from every source: the TOML file (as a TOML
number or as a string), a FOREWARN_* variable, `--set` and the agent's own flags. Last
session found `FOREWARN_EXIT_MARGIN=1_000` refused while `FOREWARN_TELEMETRY_MAX_BYTES=1_000_000`
was read, and `telemetry_max_bytes = 1e7` read from the file but refused from the environment.

The rule (README, "Numbers"): a bare number is written as TOML writes one, whatever the source
(`1_000`, `1e7`, `+5`, `0x10` for a whole number); a key of whole numbers takes one whose value
is whole (`1.0`, `1e7`); durations and sizes take their units too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.providers.registry import REGISTRY
from forewarn.providers.settings import _is_number, is_seconds
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples, forewarn_cmd, run_forewarn

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def _numeric_keys(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            found += _numeric_keys(kind, (*path, name))
        elif _is_number(kind) or is_seconds(kind):
            found.append((*path, name))
    return found


NUMERIC_KEYS = _numeric_keys(settings_model(REGISTRY))
# The agent's flags that set a numeric key.
FLAGS = {("exit_margin",): "--exit-margin", ("heartbeat_interval",): "--heartbeat-interval"}

# Numbers as people write them, and as they should not.
SPELLINGS = [
    "1_000",
    "10_000_000",
    "1e7",
    "1e3",
    "1.0",
    "+5",
    " 5 ",
    "0x10",
    "5s",
    "5 s",
    "500ms",
    "1MiB",
    "1 MB",
    "-1",
    "-0",
    "nan",
    "inf",
    "1e400",
    "9" * 30,
    "\u0661\u0662",
    "5",
    "1.5",
    "1,000",
    "4096",
    "1_0.5",
]


def _read(key: tuple[str, ...], how: str, text: str) -> str:
    """The key's value read from `how` (`env`, `set`, `toml`, `toml-string`), or `refused: `
    and the refusal, less where it came from and the value as that source shows it."""
    given: dict[str, Any] = {}
    config: Path | None = None
    variable = "FOREWARN_" + "_".join(key).upper()
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.upper().startswith("FOREWARN_"):
                patch.delenv(name)
        if how == "env":
            patch.setenv(variable, text)
        elif how == "set":
            given = {key[0]: text} if len(key) == 1 else {key[0]: {key[1]: text}}
        else:
            literal = text if how == "toml" else json.dumps(text)
            header = f"[{key[0]}]\n" if len(key) == 2 else ""
            config = Path(directory) / "f.toml"
            config.write_text(f"{header}{key[-1]} = {literal}\n", encoding="utf-8")
        try:
            loaded: Any = load_settings(config, **given)
        except ConfigError as error:
            return "refused: " + _reason(str(error), key, text)
        for part in key:
            loaded = getattr(loaded, part)
        return repr(loaded)


def _reason(message: str, key: tuple[str, ...], text: str) -> str:
    dotted = ".".join(key)
    assert f"config key {dotted}: " in message, message
    reason = message.split(f"config key {dotted}: ", 1)[1]
    # The value as the source shows it: the text written, or the TOML number read.
    shown = {repr(text.strip()), repr(text)}
    if _is_toml_number(text):
        number = tomllib.loads(f"n = {text}")["n"]
        shown |= {repr(number), str(number)}
    for value in sorted(shown, key=len, reverse=True):
        reason = reason.replace(value, "<V>")
    # The value shown last, as its source shows it (the file's `1e400` as written, its `1e3`
    # as 1000.0): the same refusal names what each source holds.
    return re.sub(r" \(got [^()]*\)$", "", reason)


def _is_toml_number(text: str) -> bool:
    try:
        return isinstance(tomllib.loads(f"n = {text}")["n"], (int, float))
    except tomllib.TOMLDecodeError:
        return False


def _sources(text: str) -> list[str]:
    return ["env", "set", "toml-string", *(["toml"] if _is_toml_number(text) else [])]


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        # The brief's two: the same underscores and exponent read alike for every key.
        (("exit_margin",), "1_000", "1000.0"),
        (("telemetry_max_bytes",), "1_000_000", "1000000"),
        (("telemetry_max_bytes",), "1e7", "10000000"),
        (("exit_margin",), "1e3", "1000.0"),
        (("webhook", "retries"), "1.0", "1"),
        (("digitalocean", "imap_port"), "1e3", "1000"),
        (("aws", "token_ttl"), "+5", "5"),
        (("telemetry_max_bytes",), "10MiB", "10485760"),
        (("heartbeat_interval",), "500ms", "0.5"),
    ],
)
def test_a_number_reads_the_same_from_every_source(
    key: tuple[str, ...], text: str, value: str
) -> None:
    for how in _sources(text):
        assert _read(key, how, text) == value, how


@pytest.mark.parametrize(
    ("key", "text", "said"),
    [
        (("webhook", "retries"), "1.5", "not a whole number"),
        (("telemetry_max_bytes",), "1.5", "not a whole number"),
        (("webhook", "queue"), "1,000", "not a whole number: <V> (write it without the commas)"),
        (("exit_margin",), "nan", "not a number"),
        (("digitalocean", "imap_port"), "nan", "not a number"),
        (("exit_margin",), "-1", "Input should be greater than or equal to 0"),
    ],
)
def test_a_refused_number_is_refused_alike_from_every_source(
    key: tuple[str, ...], text: str, said: str
) -> None:
    for how in _sources(text):
        assert _read(key, how, text) == f"refused: {said}", how


@settings(max_examples=examples(300), deadline=None)
@given(
    key=st.sampled_from(NUMERIC_KEYS),
    text=st.sampled_from(SPELLINGS)
    | st.from_regex(r"\A[+-]?[0-9](_?[0-9]){0,5}(\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?\Z")
    | st.from_regex(r"\A[0-9]{1,4}(\.[0-9])? ?(ms|s|m|h|KB|MiB|MB)\Z"),
)
@example(key=("exit_margin",), text="1_000")
@example(key=("telemetry_max_bytes",), text="1e7")
def test_the_same_text_gives_the_same_value_or_refusal_from_every_source(
    key: tuple[str, ...], text: str
) -> None:
    read = {how: _read(key, how, text) for how in _sources(text)}
    assert len(set(read.values())) == 1, read


@pytest.mark.parametrize("text", ["1_000", "1e3", "+5", "0x10", "30s"])
@pytest.mark.parametrize("key", list(FLAGS))
def test_the_agents_flag_reads_a_number_as_its_key_does(key: tuple[str, ...], text: str) -> None:
    from forewarn.agent.cli import build_parser

    parsed = build_parser().parse_args(["agent", FLAGS[key], text])
    flag = getattr(parsed, key[0])
    from_flag = _read(key, "set", flag) if isinstance(flag, str) else repr(float(flag))
    assert from_flag == _read(key, "env", text)


@pytest.mark.parametrize(
    ("how", "shown"),
    [("env", "1.5"), ("set", "1.5"), ("toml", "1.5"), ("flag", "-5")],
)
def test_a_bad_number_exits_2_naming_key_and_value_before_any_socket(
    tmp_path: Path,
    env: dict[str, str],
    how: str,
    shown: str,
    run_forewarn_forked: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    runtime = tmp_path / "run"
    args = ["agent", "--provider", "local", "--runtime-dir", str(runtime)]
    if how == "env":
        env["FOREWARN_WEBHOOK_RETRIES"] = shown
        key = "webhook.retries"
    elif how == "set":
        args += ["--set", f"webhook.retries={shown}"]
        key = "webhook.retries"
    elif how == "toml":
        config = tmp_path / "f.toml"
        config.write_text(f"[webhook]\nretries = {shown}\n")
        args += ["--config", str(config)]
        key = "webhook.retries"
    else:
        args += ["--exit-margin", shown]
        key = "exit_margin"
    # The first case as a fresh interpreter, the others forked from a process that loaded the
    # command line once (~0.02 CPU-s each instead of ~0.2; tests/conftest.py): the same
    # command, environment, exit code and stderr.
    run = run_forewarn if how == "env" else run_forewarn_forked
    done = run(*args, env=env, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"config key {key}: " in done.stderr and shown in done.stderr, done.stderr
    assert not runtime.exists() or not any(runtime.iterdir())


@settings(max_examples=examples(300), deadline=None)
@given(text=st.text(alphabet="0123456789_.eE+-xobinfa \t", max_size=12) | st.text(max_size=12))
@example(text="9" * 101)
@example(text="+0x10")
@example(text="1__0")
def test_a_bare_number_is_toml_s_or_none_never_an_exception(text: str) -> None:
    from forewarn.protocol.wholenumber import toml_number

    number = toml_number(text)
    if number is None:
        return
    written = text.strip()
    assert isinstance(number, (int, float)) and not isinstance(number, bool)
    read = tomllib.loads(f"n = {written}")["n"]
    assert number == read or (number != number and read != read)


@pytest.mark.parametrize("flag", list(FLAGS.values()))
def test_a_blank_number_flag_is_refused_naming_it(
    tmp_path: Path, env: dict[str, str], flag: str
) -> None:
    # docs/operations.md: the flags other than the text ones refuse a blank value. Read as
    # text for the configuration to read, `--exit-margin " "` set nothing at all. Its own
    # directories, and a bad `--set` besides, so that no agent starts whatever the flag does.
    args = ["agent", "--provider", "local", "--runtime-dir", str(tmp_path / "run")]
    args += ["--state-dir", str(tmp_path / "state"), "--set", "control_probe_interval=x"]
    done = subprocess.run(
        forewarn_cmd(*args, flag, " "), env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and f"{flag}: " in done.stderr, done.stderr
    assert "blank" in done.stderr, done.stderr
