"""A provider named as people call it (`k8s`, `do`, `ec2`, `gce`) is refused with the name
the agent knows it by: `providers = ["k8s"]`, `--provider k8s` and a `[k8s]` table were
refused with no suggestion at all, as difflib finds no close match of `k8s` in `kubernetes`."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
from forewarn.agent.config import ConfigError, load_settings
from support import run_forewarn_here

ALIASES = [("k8s", "kubernetes"), ("do", "digitalocean"), ("ec2", "aws"), ("gce", "gcp")]


def _load(config: Path) -> None:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN")}
    with mock.patch.dict(os.environ, clean, clear=True):
        load_settings(config)


@pytest.mark.parametrize(("alias", "name"), ALIASES)
def test_an_alias_in_providers_names_the_provider(tmp_path: Path, alias: str, name: str) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text(f'providers = ["local", "{alias.upper()}"]\n')
    with pytest.raises(ConfigError) as caught:
        _load(config)
    assert f"unknown provider {alias!r} (did you mean {name!r}?)" in str(caught.value)


@pytest.mark.parametrize(("alias", "name"), ALIASES)
def test_an_alias_as_a_section_names_the_section(tmp_path: Path, alias: str, name: str) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text(f'[{alias}]\nurl = "http://127.0.0.1:1"\n')
    with pytest.raises(ConfigError) as caught:
        _load(config)
    assert f"config key {alias}: unknown key (did you mean {name}?)" in str(caught.value)


@pytest.mark.parametrize(("alias", "name"), ALIASES)
def test_the_command_line_names_the_provider_too(alias: str, name: str) -> None:
    result = run_forewarn_here("agent", "--provider", f"local,{alias}")
    assert result.returncode == 2, result.stderr
    assert f"invalid choice {alias!r} (did you mean {name!r}?)" in result.stderr


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("FOREWARN_K8S_NODE_NAME", "FOREWARN_KUBERNETES_NODE_NAME"),
        ("FOREWARN_DO_IMAP_HOST", "FOREWARN_DIGITALOCEAN_IMAP_HOST"),
        ("forewarn_ec2_url", "FOREWARN_AWS_URL"),
    ],
)
def test_a_variable_of_a_section_by_its_alias_names_the_variable_meant(
    variable: str, meant: str
) -> None:
    """FOREWARN_K8S_NODE_NAME was ignored in silence: the watcher took the NODE_NAME
    variable, or no node at all."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("FOREWARN")}
    with (
        mock.patch.dict(os.environ, {**clean, variable: "x"}, clear=True),
        pytest.raises(ConfigError) as caught,
    ):
        load_settings()
    assert str(caught.value) == f"environment {variable}: not a setting (did you mean {meant}?)"
