"""FOREWARN_CONFIG written with space around it, read by the agent and its clients alike.

Every other path variable loses the space around it (a ConfigMap's `|` block ends its value
with a newline; a hand-edited env file keeps a trailing blank), and a blank one sets nothing.
FOREWARN_CONFIG kept both: the agent exited 2 at each start on 'config file /etc/x.toml :
not found' (the blank hard to see), and the clients (the training job, `forewarn status`,
the image's HEALTHCHECK) read no file at all and looked for the agent at the default place.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from forewarn.agent.config import load_settings
from forewarn.protocol import wire
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PADDING = st.text(alphabet=" \t\n\r", max_size=3)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("forewarn.agent.config.DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    monkeypatch.setattr(wire, "DEFAULT_CONFIG_FILE", tmp_path / "absent.toml")
    for name in ("FOREWARN_RUNTIME_DIR", "FOREWARN_EVENTS", "FOREWARN_CONTROL"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "site.toml"
    path.write_text(f'exit_margin = 77\nruntime_dir = "{tmp_path / "run"}"\n')
    return path


# The fixture's file is the same for every example; only the variable changes.
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=PADDING, after=PADDING)
def test_a_padded_config_variable_names_the_same_file_for_agent_and_clients(
    config: Path, before: str, after: str
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOREWARN_CONFIG", f"{before}{config}{after}")
        agent = load_settings()
        assert agent.exit_margin == 77
        assert wire.config_file() == config
        assert wire.runtime_dir() == agent.resolved_runtime_dir() == config.parent / "run"


@pytest.mark.parametrize("blank", [" ", "\n", " \t "])
def test_a_blank_config_variable_names_no_file(
    config: Path, monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    assert not blank.strip(string.whitespace)
    monkeypatch.setenv("FOREWARN_CONFIG", blank)
    assert load_settings().exit_margin == 30
    assert wire.config_file() is None
