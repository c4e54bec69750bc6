"""A provider's section set while `providers` names other watchers (and not `auto`) is named
in a warning at start: `providers = ["local"]` with an `[aws]` table started the agent with
no AWS watcher and not a word that the table was unused. A warning, not a refusal: one file
(or one ConfigMap) may serve machines whose FOREWARN_PROVIDERS differs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forewarn.agent.config import load_settings
from support import AgentProcess


def _settings(tmp_path: Path, text: str) -> list[str]:
    config = tmp_path / "forewarn.toml"
    config.write_text(text)
    return load_settings(config).unused_sections


@pytest.fixture(autouse=True)
def _no_forewarn_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("FOREWARN_"):
            monkeypatch.delenv(name)


def test_a_section_of_a_provider_not_run_is_named(tmp_path: Path) -> None:
    notes = _settings(tmp_path, 'providers = ["local"]\n[aws]\nurl = "http://127.0.0.1:1/"\n')
    assert notes == [
        "config section [aws] is set, but providers (local) does not name aws: its watcher "
        "does not run, and these settings are not used"
    ]


def test_a_section_set_by_a_variable_is_named_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOREWARN_PROVIDERS", "local,aws")
    monkeypatch.setenv("FOREWARN_GCP_MIGRATE", "ignore")
    assert _settings(tmp_path, "") == [
        "config section [gcp] is set, but providers (local, aws) does not name gcp: its "
        "watcher does not run, and these settings are not used"
    ]


@pytest.mark.parametrize(
    "text",
    [
        '[aws]\nurl = "http://127.0.0.1:1/"\n',  # auto, the default
        'providers = ["auto"]\n[gcp]\nmigrate = "ignore"\n',
        'providers = ["local", "aws"]\n[aws]\nurl = "http://127.0.0.1:1/"\n',
        'providers = ["local"]\n[local]\nflag_interval = "1s"\n[webhook]\ntimeout = "2s"\n',
        'providers = ["aws"]\n',
    ],
)
def test_a_section_that_is_used_or_may_be_is_not_named(tmp_path: Path, text: str) -> None:
    assert _settings(tmp_path, text) == []


def test_the_agent_logs_the_unused_section_at_start(tmp_path: Path) -> None:
    config = tmp_path / "forewarn.toml"
    config.write_text('providers = ["local"]\n[azure]\ninterval = "2s"\n')
    with AgentProcess(tmp_path, providers=(), args=("--config", str(config))) as agent:
        output = agent.output()
    assert "WARNING" in output and "config section [azure] is set, but providers" in output
