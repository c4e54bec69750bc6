"""A path written with a shell variable in it (`state_dir = "$HOME/forewarn"`,
`FOREWARN_STATE_DIR=${STATE_DIRECTORY}/fw` in an env file, which neither systemd nor Docker
expands) is refused, naming the key and the variable: nothing expands it, and the agent made
a directory named `$HOME` (beside the config file, or in its working directory) and kept its
state there, where no one looked."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from forewarn.agent.config import ConfigError, load_settings, settings_model
from forewarn.protocol.wire import ConfigFileError, read_client_config
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import examples


def _path_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    found: list[str] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += _path_keys(annotation, f"{prefix}{name}.")
        elif "Path" in str(annotation):
            found.append(prefix + name)
    return found


PATH_KEYS = _path_keys(settings_model())


def _load(source: str, key: str, text: str) -> Any:
    *section, leaf = key.split(".")
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN")}
    with tempfile.TemporaryDirectory() as directory, mock.patch.dict(os.environ, clean, clear=True):
        if source == "toml":
            config = Path(directory) / "f.toml"
            header = f"[{section[0]}]\n" if section else ""
            config.write_text(f'{header}{leaf} = "{text}"\n')
            return load_settings(config)
        if source == "env":
            os.environ["FOREWARN_" + key.replace(".", "_").upper()] = text
            return load_settings()
        return load_settings(**({section[0]: {leaf: text}} if section else {leaf: text}))


def test_the_path_keys_are_found() -> None:
    assert {"runtime_dir", "state_dir", "webhook.url_file", "kubernetes.kubeconfig"} <= set(
        PATH_KEYS
    )


@settings(max_examples=examples(60), deadline=None)
@given(
    key=st.sampled_from(PATH_KEYS),
    source=st.sampled_from(["toml", "env", "set"]),
    written=st.sampled_from(
        [
            ("$HOME/forewarn", "$HOME"),
            ("${HOME}/forewarn", "${HOME}"),
            ("/srv/$USER/fw", "$USER"),
            ("${STATE_DIRECTORY}", "${STATE_DIRECTORY}"),
            ("$XDG_RUNTIME_DIR/forewarn", "$XDG_RUNTIME_DIR"),
        ]
    ),
)
def test_a_path_with_a_shell_variable_is_refused_naming_it(
    key: str, source: str, written: tuple[str, str]
) -> None:
    text, variable = written
    with pytest.raises(ConfigError) as caught:
        _load(source, key, text)
    message = str(caught.value)
    assert f"config key {key}:" in message, message
    assert f"holds {variable}, which nothing expands here" in message, message


@pytest.mark.parametrize("text", ["/srv/price$5/fw", "/srv/a$/fw", "/srv/$-x", "~/fw"])
def test_a_dollar_that_names_no_variable_is_a_path_as_written(text: str) -> None:
    assert _load("env", "state_dir", text).state_dir is not None


def test_an_ipc_endpoint_with_a_shell_variable_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        _load("env", "events", "ipc://$XDG_RUNTIME_DIR/forewarn/events")
    assert "config key events:" in str(caught.value)
    assert "holds $XDG_RUNTIME_DIR, which nothing expands here" in str(caught.value)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('runtime_dir = "$HOME/run"', "runtime_dir"),
        ('events = "ipc://${XDG_RUNTIME_DIR}/events"', "events"),
        ('control = "ipc:///srv/$USER/control"', "control"),
    ],
)
def test_the_clients_refuse_the_file_as_the_agent_does(tmp_path: Path, line: str, key: str) -> None:
    """The clients read runtime_dir, events and control from the same file: they name it as
    the agent refuses it, rather than look in a directory named `$HOME`."""
    config = tmp_path / "forewarn.toml"
    config.write_text(line + "\n")
    with pytest.raises(ConfigFileError) as caught:
        read_client_config(config)
    assert str(caught.value).startswith(f"config file {config}: config key {key}: ")
    assert "which nothing expands here" in str(caught.value)
    with pytest.raises(ConfigError, match="which nothing expands here"):
        _load_file(config)


def _load_file(config: Path) -> Any:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN")}
    with mock.patch.dict(os.environ, clean, clear=True):
        return load_settings(config)
